"""The studies list and the head of a study's page: counts, best trial, and its speed-up over the reference
configurations (verl's example configuration, the first trial, the user's baseline), one grouped query each.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import case, func, select

from autotune.candidate import STOCK_NAME
from autotune.dashboard.data import INTERRUPTED, LAUNCHED_FAILURES, _iso, _r, layout, reference
from autotune.results.labels import provenance
from autotune.results.noise import hidden_by_a_recompile, hidden_words, leaders_tie, noise_words
from autotune.results.timeline import study_time
from autotune.store.schema import StudyRow, TrialRow
from autotune.store.store import Store
from autotune.store.tuners import unrecorded


def studies_overview(store: Store) -> list[dict[str, Any]]:
    """Every study with its counts, best throughput (the winner `best` names) and last update: one grouped query for
    all of them, then the winner of each study that has an ok trial."""
    t = TrialRow
    q = select(
        t.study,
        func.count(),
        func.sum(case((t.launched.is_(True), 1), else_=0)),
        func.sum(case((t.status == "ok", 1), else_=0)),
        func.sum(case((t.status == "running", 1), else_=0)),
        func.sum(case((t.status.in_(LAUNCHED_FAILURES), 1), else_=0)),
        func.sum(case((t.status == "pruned", 1), else_=0)),
        func.max(case((t.status == "ok", t.throughput), else_=None)),
        func.max(t.started_at),
        func.max(t.finished_at),
    ).group_by(t.study)
    with store.session() as s:
        agg = {r[0]: r[1:] for r in s.execute(q)}
        studies = list(s.scalars(select(StudyRow).order_by(StudyRow.created_at.desc())))
    out = []
    for st in studies:
        n, launched, ok, running, failed, pruned, best, last_start, last_finish = agg.get(
            st.name, (0, 0, 0, 0, 0, 0, None, None, None))
        last = max([x for x in (st.updated_at, last_start, last_finish) if x is not None], default=None)
        if best is not None:  # the fastest, unless a safe one within the model's error wins (Store.best)
            winner = store.best(st.name)
            best = winner.throughput if winner is not None else best
        out.append({
            "name": st.name, "model": st.model_name, "cluster": cluster_text(st.cluster),
            "job": st.job_source or "default job", "backend": st.backend, "simulated": bool(st.simulated),
            "provenance": provenance(bool(st.simulated), st.backend),  # the badge: SIMULATED, REPLAYED or none
            "trials": n or 0, "launched": launched or 0, "ok": ok or 0, "running": running or 0,
            "failed": failed or 0, "pruned": pruned or 0, "best": best, "last_update": _iso(last),
            "created": _iso(st.created_at),
        })
    return out


def cluster_text(cluster: dict[str, Any]) -> str:
    gpu = cluster.get("gpu", {})
    return f"{cluster.get('nodes', 1)}x{cluster.get('gpus_per_node', '?')}x{gpu.get('name', '?')}"




@dataclass(frozen=True)
class Reference:
    """A trial the best is compared with (verl's example configuration, the first trial, the user's baseline)."""

    label: str
    number: int | None
    status: str | None
    throughput: float | None
    reason: str = ""

    def speedup(self, best: float | None) -> float | None:
        if best is None or not self.throughput:
            return None
        return best / self.throughput

    def as_dict(self, best: float | None) -> dict[str, Any]:
        return {"label": self.label, "number": self.number, "status": self.status,
                "throughput": _r(self.throughput), "reason": self.reason, "speedup": _r(self.speedup(best), 3)}


def summary(store: Store, study: StudyRow) -> dict[str, Any]:
    """The head of the study page: counts, best trial, and its speed-up over the reference configurations."""
    t = TrialRow
    cols = (t.number, t.status, t.throughput, t.reason)
    with store.session() as s:  # one pass over the study's rows for the counts and the times
        groups = s.execute(select(t.status, func.count(), func.sum(case((t.launched.is_(True), 1), else_=0)),
                                  func.max(t.started_at), func.max(t.finished_at))
                           .where(t.study == study.name).group_by(t.status)).all()
        counts = {g[0]: g[1] for g in groups}
        launched = sum(g[2] or 0 for g in groups)
        last_start = max((g[3] for g in groups if g[3] is not None), default=None)
        last_finish = max((g[4] for g in groups if g[4] is not None), default=None)

        def first(*where: Any) -> Any:
            return s.execute(select(*cols).where(t.study == study.name, *where).order_by(t.number).limit(1)).first()

        refs_rows = [(STOCK_NAME, first(t.origin == "stock")),
                     ("the first trial", first(t.launched.is_(True)))]
        baseline = first(t.origin == "baseline")
        if baseline is not None:
            refs_rows.append(("your job's configuration", baseline))
    best_row = store.best(study.name)
    best = best_row.throughput if best_row else None
    refs = [Reference(label, None, None, None) if r is None else Reference(
        label, r.number, r.status, r.throughput if r.status == "ok" else None, r.reason or "")
        for label, r in refs_rows] if sum(counts.values()) else []
    last = max([x for x in (study.updated_at, last_start, last_finish) if x is not None], default=None)
    return {
        "counts": {k: int(v) for k, v in counts.items()},
        "n": int(sum(counts.values())),
        "launched": int(launched),
        "failed": int(sum(v for k, v in counts.items() if k in LAUNCHED_FAILURES)),
        "interrupted": int(counts.get(INTERRUPTED, 0)),
        "running": int(counts.get("running", 0)),
        "best": best_row,
        "best_layout": layout(best_row.params, reference(store, study)) if best_row else None,
        "best_noise": noise_words(best_row) if best_row else "",
        **measured_time(store, study),
        "refs": [r.as_dict(best) for r in refs],
        "last_update": _iso(last),
        "model": model_note(store, study),
        "unrecorded": unrecorded(store, study.name),  # Optuna trials without a row of ours: shown, not hidden
    }


def measured_time(store: Store, study: StudyRow) -> dict[str, Any]:
    """The leaders' tie within the measured noise and the trials a compile at their measured step may hide ahead of
    the best (autotune/results/noise.py), and where the study's real runs spent their time: start-up vs steps
    (autotune/results/timeline.py; none for simulated or replayed studies)."""
    t = TrialRow
    with store.session() as s:
        rows = list(s.execute(select(t.number, t.status, t.throughput, t.launched, t.simulated, t.backend, t.extra)
                              .where(t.study == study.name, t.launched.is_(True))))
    ok = [r for r in rows if r.status == "ok"]
    tie = leaders_tie(ok)
    spent = study_time(rows)
    gpus = int((study.cluster or {}).get("nodes", 1) or 1) * int((study.cluster or {}).get("gpus_per_node", 1) or 1)
    return {"tie": tie.as_dict() if tie else None, "time": spent.words(gpus) if spent else "",
            "hidden": [hidden_words(r.number, v) for r, v in hidden_by_a_recompile(ok, 1)]}


def model_note(store: Store, study: StudyRow) -> str:
    """What the study learned of the model's errors ("model corrected on 3 measured trials: update_actor x0.82"),
    for the study page; simulated studies say that nothing was measured."""
    from autotune.search.learning import saved_correction

    return saved_correction(store, study.name).summary()
