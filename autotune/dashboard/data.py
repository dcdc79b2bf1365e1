"""What the dashboard shows, read from the study database: one SQL query per view, aggregated with pandas.

Only the columns a view needs are selected (the per-trial memory breakdown and log excerpts are large and are read
for one trial, or for failed trials only), so a study of 10,000 trials stays fast to load.
"""

from __future__ import annotations

import datetime as dt
import functools
import math
import multiprocessing
import re
import threading
import warnings
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from sqlalchemy import case, func, select

from autotune.candidate import Candidate
from autotune.store import Store, StudyRow, TrialRow

PHASES = ("gen", "old_log_prob", "ref", "adv", "update_actor", "update_weights")
LAUNCHED_FAILURES = ("oom", "failed", "timeout", "config_error", "interrupted")
REASON_CHARS = 300  # per distinct reason in the compact trial data; the trial page has the whole text
LOG_TAIL_BYTES = 64 * 1024
FAILURES_LISTED = 200

_TABLE_COLS = (
    TrialRow.id, TrialRow.number, TrialRow.status, TrialRow.reason, TrialRow.origin, TrialRow.launched,
    TrialRow.simulated, TrialRow.params, TrialRow.throughput, TrialRow.predicted_throughput,
    TrialRow.predicted_peak_gib, TrialRow.peak_memory_gib, TrialRow.phase_timings, TrialRow.started_at,
    TrialRow.finished_at, TrialRow.duration_s, TrialRow.note,
)


@functools.lru_cache(maxsize=4096)
def failure_class(status: str, reason: str) -> str:
    """A short class for a trial that did not give a throughput: what the failure views group by."""
    if status in ("ok", "running"):
        return status
    if status == "pruned":
        if reason.startswith("predicted OOM"):
            m = re.match(r"predicted OOM: (\w+)", reason)
            return f"predicted OOM ({m.group(1)})" if m else "predicted OOM"
        if reason.startswith("constraint"):
            m = re.match(r"constraint (\w+)", reason)
            return f"constraint {m.group(1)}" if m else "constraint"
        if reason.startswith("duplicate"):
            return "duplicate"
        return "pruned"
    return {"oom": "OOM", "config_error": "config error"}.get(status, status)


def _r(x: Any, nd: int = 2) -> float | None:
    """A JSON-safe rounded float (NaN and None become null)."""
    if x is None:
        return None
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) or math.isinf(f) else round(f, nd)


def _jsonable(v: Any) -> Any:
    if isinstance(v, float):
        return _r(v, 4)
    return v


def _iso(t: dt.datetime | None) -> str | None:
    return t.isoformat(sep=" ", timespec="seconds") if t else None


def _ms(t: Any) -> float | None:
    if t is None or (isinstance(t, float) and math.isnan(t)) or t is pd.NaT:
        return None
    return round(t.replace(tzinfo=dt.UTC).timestamp() * 1000)


def layout(params: dict[str, Any]) -> str:
    try:
        return _layout(tuple(sorted(params.items())))
    except TypeError:  # an unhashable value
        return _layout.__wrapped__(tuple(sorted(params.items())))


@functools.lru_cache(maxsize=4096)
def _layout(items: tuple[tuple[str, Any], ...]) -> str:
    try:
        return Candidate(**dict(items)).layout()
    except TypeError:
        return "?"


# Studies list
def studies_overview(store: Store) -> list[dict[str, Any]]:
    """Every study with its counts, best throughput and last update: one grouped query for all of them."""
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
        out.append({
            "name": st.name, "model": st.model_name, "cluster": cluster_text(st.cluster),
            "job": st.job_source or "default job", "backend": st.backend, "simulated": bool(st.simulated),
            "trials": n or 0, "launched": launched or 0, "ok": ok or 0, "running": running or 0,
            "failed": failed or 0, "pruned": pruned or 0, "best": best, "last_update": _iso(last),
            "created": _iso(st.created_at),
        })
    return out


def cluster_text(cluster: dict[str, Any]) -> str:
    gpu = cluster.get("gpu", {})
    return f"{cluster.get('nodes', 1)}x{cluster.get('gpus_per_node', '?')}x{gpu.get('name', '?')}"


def capacity_gib(study: StudyRow) -> float | None:
    return _r((study.cluster.get("gpu") or {}).get("memory_gib"))


def version(store: Store, study: str) -> str:
    """Changes whenever a trial is added, finishes or changes status: the page refetches its data then."""
    t = TrialRow
    q = select(
        func.count(), func.sum(case((t.status == "running", 1), else_=0)),
        func.sum(case((t.status == "ok", 1), else_=0)), func.max(t.finished_at), func.max(t.id),
    ).where(t.study == study)
    with store.session() as s:
        n, running, ok, last, max_id = s.execute(q).one()
    return f"{n}-{running or 0}-{ok or 0}-{max_id or 0}-{_iso(last) or ''}"


# One study
def trials_frame(store: Store, study: str) -> pd.DataFrame:
    """Every trial of a study, one row each, without the large per-trial columns."""
    q = select(*_TABLE_COLS).where(TrialRow.study == study).order_by(TrialRow.number)
    with store.session() as s:
        rows = s.execute(q).all()
    return pd.DataFrame(rows, columns=[c.key for c in _TABLE_COLS])


@dataclass(frozen=True)
class Reference:
    """A trial the best is compared with (verl's stock configuration, the first trial, the user's baseline)."""

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
    with store.session() as s:
        counts = dict(s.execute(select(t.status, func.count()).where(t.study == study.name).group_by(t.status)).all())
        launched = s.scalar(select(func.count()).where(t.study == study.name, t.launched.is_(True))) or 0
        last_start, last_finish = s.execute(
            select(func.max(t.started_at), func.max(t.finished_at)).where(t.study == study.name)).one()

        def first(*where: Any) -> Any:
            return s.execute(select(*cols).where(t.study == study.name, *where).order_by(t.number).limit(1)).first()

        refs_rows = [("verl's stock configuration", first(t.origin == "stock")),
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
        "running": int(counts.get("running", 0)),
        "best": best_row,
        "best_layout": layout(best_row.params) if best_row else None,
        "refs": [r.as_dict(best) for r in refs],
        "last_update": _iso(last),
    }


def _col(series: pd.Series, nd: int = 2) -> list[Any]:
    """A numeric column as a JSON list: rounded, NaN as null."""
    x = pd.to_numeric(series, errors="coerce").round(nd)
    return x.astype(object).where(x.notna(), None).tolist()


_DATA_CACHE: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {}


def forget(store: Store, study: str) -> None:
    """Drop the cached data of a study after a change its version does not show (a note)."""
    _DATA_CACHE.pop((store.url, study), None)


def study_data(store: Store, study: StudyRow) -> dict[str, Any]:
    """Everything the study page's plots and table need, as compact columns (one list per field).

    Computed once per change of the study (its version), whoever asks.
    """
    ver = version(store, study.name)
    key = (store.url, study.name)
    hit = _DATA_CACHE.get(key)
    if hit and hit[0] == ver:
        return hit[1]
    df = trials_frame(store, study.name)
    n = len(df)
    plist = [p or {} for p in df.params]
    seen = set().union(*plist) if plist else set()
    param_names = [p for p in Candidate.param_names() if p in seen]
    phases = pd.DataFrame([p or {} for p in df.phase_timings], index=df.index) if n else pd.DataFrame()
    phase_names = [p for p in PHASES if p in phases.columns] + [
        p for p in phases.columns if p not in PHASES and p != "step"]
    reasons_short = df.reason.fillna("").str.slice(0, REASON_CHARS) if n else pd.Series(dtype=str)
    rcodes, reasons = pd.factorize(reasons_short) if n else ([], [])
    layouts_all = [layout(p) for p in plist]
    lcodes, layouts = pd.factorize(pd.Series(layouts_all, dtype=object)) if n else ([], [])
    classes = [failure_class(st, r) for st, r in zip(df.status, reasons_short, strict=True)]
    ok = (df.status == "ok") & df.throughput.notna() if n else pd.Series(dtype=bool)
    thr_ok = df.throughput.where(ok) if n else pd.Series(dtype=float)
    t0 = df.started_at.min() if n else None
    t0_ms = _ms(t0) if t0 is not None and not pd.isna(t0) else 0

    def offsets(col: pd.Series) -> list[Any]:
        if not n:
            return []
        secs = (col - t0).dt.total_seconds()
        return _col(secs, 1)

    param_values = {p: [d.get(p) for d in plist] for p in param_names}
    trials = {
        "number": df.number.astype(int).tolist(),
        "status": df.status.tolist(),
        "cls": classes,
        "origin": df.origin.tolist(),
        "launched": df.launched.astype(bool).tolist(),
        "layout": [int(c) for c in lcodes],
        "throughput": _col(thr_ok),
        "predicted": _col(df.predicted_throughput),
        "pred_mem": _col(df.predicted_peak_gib),
        "mem": _col(df.peak_memory_gib),
        "duration": _col(df.duration_s, 1),
        "start": offsets(df.started_at),
        "end": offsets(df.finished_at),
        "reason": [int(c) for c in rcodes],
        "note": (df.note.fillna("") != "").tolist() if n else [],
        "params": param_values,
        "phases": {p: _col(phases[p]) for p in phase_names},
    }
    res = {
        "study": study.name,
        "simulated": bool(study.simulated),
        "version": ver,
        "capacity_gib": capacity_gib(study),
        "t0_ms": t0_ms,
        "param_names": param_names,
        "varying": [p for p in param_names if len({repr(v) for v in param_values[p]}) > 1],
        "phase_names": phase_names,
        "reasons": list(reasons),
        "layouts": list(layouts),
        "trials": trials,
        "best_so_far": _col(thr_ok.cummax().ffill()) if n else [],
        "heat_tp_pp": _heat(df, param_values, ok, "tp", "pp"),
        "heat_rollout": _heat(df, param_values, ok, "rollout_tp", "gpu_memory_utilization"),
        "failure_counts": _failure_counts(classes),
    }
    _DATA_CACHE[key] = (ver, res)
    return res


def _heat(df: pd.DataFrame, params: dict[str, list[Any]], ok: pd.Series, x: str, y: str) -> dict[str, Any] | None:
    """Best throughput per (x, y) cell, with how many trials were tried and ran there."""
    if not len(df) or x not in params or y not in params:
        return None
    d = pd.DataFrame({"x": [str(v) for v in params[x]], "y": [str(v) for v in params[y]],
                      "thr": df.throughput.where(ok).to_numpy(), "ok": ok.astype(int).to_numpy()})
    g = d.groupby(["x", "y"]).agg(best=("thr", "max"), n=("thr", "size"), ok=("ok", "sum")).reset_index()

    def order(vals: pd.Series) -> list[str]:
        def key(v: str) -> tuple[int, float, str]:
            try:
                return (0, float(v), v)
            except ValueError:
                return (1, 0.0, v)
        return sorted(set(vals), key=key)

    xs, ys = order(g.x), order(g.y)
    z = [[None] * len(xs) for _ in ys]
    text = [[""] * len(xs) for _ in ys]
    for r in g.itertuples():
        i, j = ys.index(r.y), xs.index(r.x)
        z[i][j] = _r(r.best, 1)
        text[i][j] = f"{r.ok}/{r.n} ran"
    return {"x": xs, "y": ys, "z": z, "text": text, "xname": x, "yname": y}


def _failure_counts(classes: list[str]) -> list[list[Any]]:
    s = pd.Series(classes, dtype=object)
    s = s[~s.isin(["ok", "running"])]
    return [[k, int(v)] for k, v in s.value_counts().items()]


def failures(store: Store, study: str) -> dict[str, Any]:
    """Failure classes with counts and an example each, and the launched trials that failed with their log excerpts
    (latest first). Grouped in SQL by (status, reason): a study holds few distinct reasons."""
    t = TrialRow
    with store.session() as s:
        groups = s.execute(
            select(t.status, t.reason, func.count(), func.max(t.number))
            .where(t.study == study, t.status.not_in(("ok", "running"))).group_by(t.status, t.reason)).all()
        q = (select(t.number, t.status, t.reason, t.log_excerpt, t.log_path, t.peak_memory_gib,
                    t.predicted_peak_gib, t.params)
             .where(t.study == study, t.status.in_(LAUNCHED_FAILURES)).order_by(t.number.desc()))
        rows = s.execute(q.limit(FAILURES_LISTED)).all()
    counts: dict[str, int] = {}
    examples: dict[str, tuple[int, str]] = {}
    for status, reason, n, last in groups:
        cls = failure_class(status, reason or "")
        counts[cls] = counts.get(cls, 0) + n
        if cls not in examples or last > examples[cls][0]:
            examples[cls] = (last, reason or "")
    listed = [{
        "number": r.number, "status": r.status, "cls": failure_class(r.status, r.reason or ""),
        "reason": r.reason, "excerpt": (r.log_excerpt or "")[-4000:], "log_path": r.log_path,
        "mem": r.peak_memory_gib, "pred_mem": r.predicted_peak_gib, "layout": layout(r.params),
    } for r in rows]
    n_failed = sum(n for status, _, n, _ in groups if status in LAUNCHED_FAILURES)
    return {"counts": sorted(counts.items(), key=lambda kv: -kv[1]), "listed": listed, "n_failed": n_failed,
            "examples": examples}


def log_tail(row: TrialRow) -> tuple[str, str]:
    """(text, source): the end of the trial's log file when it is still there, else the excerpt kept in the DB."""
    if row.log_path:
        p = Path(row.log_path)
        try:
            if p.is_file():
                with p.open("rb") as f:
                    f.seek(0, 2)
                    size = f.tell()
                    f.seek(max(0, size - LOG_TAIL_BYTES))
                    text = f.read().decode("utf-8", "replace")
                cut = " (last 64 KiB)" if size > LOG_TAIL_BYTES else ""
                return text, f"{row.log_path}{cut}"
        except OSError:
            pass
    return row.log_excerpt or "", "log excerpt kept in the database" + (
        f" ({row.log_path} is gone)" if row.log_path else "")


# Parameter importance (Optuna's evaluators): computed in a worker process, so that a long computation over a large
# study does not hold the server's interpreter (and every page load) while it runs; cached per study and evaluator,
# recomputed once the completed trials have grown by 5% (or by any amount while there are few of them).
EVALUATORS = ("default", "fanova", "ped_anova", "mdi")
MIN_COMPLETE = 3
REFRESH_GROWTH = 0.05
_IMPORTANCE_CACHE: dict[tuple[str, str, str], dict[str, Any]] = {}
_IMPORTANCE_RUNNING: dict[tuple[str, str, str], Future] = {}
_IMPORTANCE_LOCK = threading.Lock()
_POOL: ProcessPoolExecutor | None = None


def _pool() -> ProcessPoolExecutor:
    global _POOL
    if _POOL is None:
        _POOL = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
    return _POOL


def n_ok(store: Store, study: str) -> int:
    with store.session() as s:
        return int(s.scalar(select(func.count()).where(TrialRow.study == study, TrialRow.status == "ok")) or 0)


def importance(url: str, study: str, evaluator: str, completed: int) -> dict[str, Any]:
    """optuna.importance.get_param_importances on the study; a message instead when it cannot be computed yet."""
    if evaluator not in EVALUATORS:
        return {"ok": False, "message": f"unknown evaluator {evaluator!r}; choose one of {', '.join(EVALUATORS)}"}
    if completed < MIN_COMPLETE:
        return {"ok": False, "message": f"{completed} completed trial(s): parameter importance needs at least "
                                        f"{MIN_COMPLETE}; it appears once more trials have run."}
    key = (url, study, evaluator)
    with _IMPORTANCE_LOCK:
        cached = _IMPORTANCE_CACHE.get(key)
        if cached and (cached["completed"] == completed or (
                completed > 100 and completed < cached["completed"] * (1 + REFRESH_GROWTH))):
            return cached
        fut = _IMPORTANCE_RUNNING.get(key)
        if fut is None:
            try:
                fut = _pool().submit(compute_importance, url, study, evaluator)
            except Exception:  # no worker process here (a restricted sandbox): compute in this one
                fut = Future()
                fut.set_result(compute_importance(url, study, evaluator))
            _IMPORTANCE_RUNNING[key] = fut
    try:
        res = {**fut.result(), "completed": completed}
    except Exception as e:
        res = {"ok": False, "message": f"parameter importance could not be computed: {type(e).__name__}: {e}",
               "completed": completed}
    with _IMPORTANCE_LOCK:
        _IMPORTANCE_RUNNING.pop(key, None)
        _IMPORTANCE_CACHE[key] = res
    return res


def compute_importance(url: str, study: str, evaluator: str) -> dict[str, Any]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        storage = optuna.storages.RDBStorage(url, skip_table_creation=True)
        ostudy = optuna.load_study(study_name=study, storage=storage)
    except Exception as e:  # no Optuna study of that name (a database written by autotune's tables only)
        return {"ok": False, "message": f"no Optuna study {study!r} in this database ({type(e).__name__})"}
    complete = ostudy.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    if len(complete) < MIN_COMPLETE:
        return {"ok": False, "message": f"{len(complete)} completed Optuna trial(s): parameter importance needs at "
                                        f"least {MIN_COMPLETE}."}
    ev = {
        "default": None,
        "fanova": lambda: optuna.importance.FanovaImportanceEvaluator(seed=0),
        "ped_anova": lambda: optuna.importance.PedAnovaImportanceEvaluator(),
        "mdi": lambda: optuna.importance.MeanDecreaseImpurityImportanceEvaluator(seed=0),
    }[evaluator]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            imp = optuna.importance.get_param_importances(ostudy, evaluator=ev() if ev else None)
    except Exception as e:  # too few distinct values, a missing optional dependency (scikit-learn for mdi)...
        return {"ok": False, "message": f"parameter importance could not be computed: {type(e).__name__}: {e}"}
    if not imp:
        return {"ok": False, "message": "no parameter varies over the completed trials yet"}
    name = type(ev()).__name__ if ev else "Optuna's default evaluator"
    return {"ok": True, "evaluator": name, "n_complete": len(complete),
            "importances": [[k, _r(v, 4)] for k, v in imp.items()]}
