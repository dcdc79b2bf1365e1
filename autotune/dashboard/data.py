"""What the dashboard shows, read from the study database: one SQL query per view, aggregated with pandas.

Only the columns a view needs are selected (the per-trial memory breakdown and log excerpts are large and are read
for one trial, or for failed trials only), so a study of 10,000 trials stays fast to load. The study page's first
view (history() and table_page()) is small whatever the study's size: a sampled history and one page of the table;
study_data(), every trial for the plots further down, is loaded by the page after that.
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from sqlalchemy import case, func, select

from autotune.candidate import Candidate
from autotune.executors import placement_text
from autotune.labels import label, study_reference
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
    TrialRow.finished_at, TrialRow.duration_s, TrialRow.note, TrialRow.placement,
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


def layout(params: dict[str, Any], ref: Candidate | None = None) -> str:
    """The trial's label (autotune.labels): layout, rollout TP and what differs from the study's reference."""
    try:
        return _layout(tuple(sorted(params.items())), ref)
    except TypeError:  # an unhashable value
        return _layout.__wrapped__(tuple(sorted(params.items())), ref)


@functools.lru_cache(maxsize=4096)
def _layout(items: tuple[tuple[str, Any], ...], ref: Candidate | None) -> str:
    return label(dict(items), ref)


_REFS: dict[tuple[str, str], Candidate | None] = {}


def reference(store: Store, study: StudyRow | str) -> Candidate | None:
    """The reference of a study's labels (verl's stock configuration for its job and space), read once."""
    name = study if isinstance(study, str) else study.name
    key = (store.url, name)
    if key not in _REFS:
        _REFS[key] = study_reference(store.get_study(name) if isinstance(study, str) else study)
    return _REFS[key]


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
        "best_layout": layout(best_row.params, reference(store, study)) if best_row else None,
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
    for cache in (_DATA_CACHE, _TABLE_CACHE, _META_CACHE, _HISTORY_CACHE):
        cache.pop((store.url, study), None)


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
    ref = reference(store, study)
    layouts_all = [layout(p, ref) for p in plist]
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
    ref = reference(store, study)
    for status, reason, n, last in groups:
        cls = failure_class(status, reason or "")
        counts[cls] = counts.get(cls, 0) + n
        if cls not in examples or last > examples[cls][0]:
            examples[cls] = (last, reason or "")
    listed = [{
        "number": r.number, "status": r.status, "cls": failure_class(r.status, r.reason or ""),
        "reason": r.reason, "excerpt": (r.log_excerpt or "")[-4000:], "log_path": r.log_path,
        "mem": r.peak_memory_gib, "pred_mem": r.predicted_peak_gib, "layout": layout(r.params, ref),
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


# The trials table, served a page at a time: the page holds 50 rows whatever the study's size. The first page in
# trial order (what the study page opens with) is one SQL query with LIMIT; another order, a filter or a search works
# on the study's rows held in memory (read once per version of the study). The filter syntax and the ordering are
# those the page documents: a value (substring, or equal for a number), or `>3000`, `<=4`, `!=ok`, `=x`; empty
# cells last in either direction, ties in trial order.
TABLE_PAGE = 50
OPTIONS_MAX = 15  # a column with at most this many distinct values is filtered with a drop-down
_TABLE_CACHE: dict[tuple[str, str], tuple[str, list[dict[str, Any]]]] = {}
_META_CACHE: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {}
_NUM_COLS = (("number", "#"), ("throughput", "tokens/s/GPU"), ("predicted", "predicted"),
             ("pred_mem", "mem pred GiB"), ("mem", "mem meas GiB"), ("duration", "duration s"))


def js_str(v: Any) -> str:
    """A value as the page's JavaScript String() writes it (what a filter compares with, what a cell shows)."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        if math.isnan(v):
            return "NaN"
        return str(int(v)) if v.is_integer() and abs(v) < 1e21 else repr(v)
    if isinstance(v, (list, tuple)):
        return ",".join("" if x is None else js_str(x) for x in v)
    if isinstance(v, dict):
        return "[object Object]"
    return str(v)


def _table_row(r: Any, lay: bool = True, ref: Candidate | None = None) -> dict[str, Any]:
    """One trial as the table's columns (keys as the page names them)."""
    reason = (r.reason or "")[:REASON_CHARS]
    ok = r.status == "ok" and r.throughput is not None
    row = {
        "number": int(r.number), "status": r.status, "cls": failure_class(r.status, reason), "origin": r.origin,
        "layout": layout(r.params or {}, ref) if lay else None, "throughput": _r(r.throughput) if ok else None,
        "predicted": _r(r.predicted_throughput), "pred_mem": _r(r.predicted_peak_gib), "mem": _r(r.peak_memory_gib),
        "duration": _r(r.duration_s, 1), "reason": reason, "note": "yes" if r.note else "",
        "launched": bool(r.launched), "_params": r.params or {}, "placement": placement_text(r.placement),
    }
    for k, v in (r.phase_timings or {}).items():
        row["ph:" + k] = _r(v)
    for k, v in (r.params or {}).items():
        row["p:" + k] = v
    return row


@dataclass
class _Seen:
    """What the study's rows hold in their JSON columns, read incrementally: parameters are written when a trial is
    added (so rows past `max_id`), phase timings when it finishes (so rows finished since `last_finished`)."""

    max_id: int = 0
    last_finished: dt.datetime | None = None
    values: dict[str, set[Any]] = field(default_factory=dict)  # parameter -> (type, value), up to OPTIONS_MAX + 1
    has: dict[str, int] = field(default_factory=dict)  # parameter -> rows that have it
    phases: set[str] = field(default_factory=set)


_SEEN: dict[tuple[str, str], _Seen] = {}
_SEEN_LOCK = threading.Lock()


def _seen(store: Store, study: str) -> _Seen:
    t = TrialRow
    with _SEEN_LOCK:
        seen = _SEEN.setdefault((store.url, study), _Seen())
        q = select(t.id, t.params, t.phase_timings, t.finished_at).where(t.study == study)
        if seen.max_id:
            new = t.id > seen.max_id
            q = q.where(new | (t.finished_at >= seen.last_finished) if seen.last_finished else new)
        with store.session() as s:
            rows = s.execute(q).all()
        for rid, params, phases, finished in rows:
            if rid > seen.max_id or not seen.max_id:
                for k, v in (params or {}).items():
                    seen.has[k] = seen.has.get(k, 0) + 1
                    vals = seen.values.get(k)
                    if vals is None:
                        vals = seen.values[k] = set()
                    if len(vals) <= OPTIONS_MAX:  # (type, value): True and 1 are different cells
                        vals.add((v.__class__, tuple(v) if isinstance(v, list) else v))
            if phases:
                seen.phases.update(phases)
            if finished is not None and (seen.last_finished is None or finished > seen.last_finished):
                seen.last_finished = finished
        seen.max_id = max([seen.max_id, *(r[0] for r in rows)])
        return seen


def table_meta(store: Store, study: StudyRow, ver: str) -> dict[str, Any]:
    """The table's columns (with a drop-down's values where a column has few) and the study's size, per version.

    One grouped query over the small columns, and the JSON columns of the rows added or finished since last time."""
    key = (store.url, study.name)
    hit = _META_CACHE.get(key)
    if hit and hit[0] == ver:
        return hit[1]
    t = TrialRow
    has_note = case((func.coalesce(t.note, "") != "", 1), else_=0)
    with store.session() as s:
        groups = s.execute(select(t.status, t.reason, t.origin, t.launched, has_note, func.count())
                           .where(t.study == study.name).group_by(t.status, t.reason, t.origin, t.launched,
                                                                  has_note)).all()
        placed = s.scalar(select(t.id).where(t.study == study.name, t.placement.is_not(None)).limit(1)) is not None
    seen = _seen(store, study.name)
    total = sum(g[5] for g in groups)
    opts: dict[str, set[str]] = {
        "status": {g[0] for g in groups}, "cls": {failure_class(g[0], (g[1] or "")[:REASON_CHARS]) for g in groups},
        "origin": {g[2] for g in groups}, "note": {"yes" if g[4] else "" for g in groups}}
    launched = sum(g[5] for g in groups if g[3])
    seen_p = {k: {js_str(list(v) if c is list else v) for c, v in vals} for k, vals in seen.values.items()}
    for k, n in seen.has.items():
        if n < total:  # a trial without the parameter shows null there
            seen_p[k].add("null")
    param_names = [p for p in Candidate.param_names() if p in seen_p]
    phase_names = [p for p in PHASES if p in seen.phases] + sorted(
        p for p in seen.phases if p not in PHASES and p != "step")
    sim = " (sim)" if study.simulated else ""
    cols: list[dict[str, Any]] = [{"key": "sel", "label": "", "nofilter": True, "nosort": True}]
    cols += [{"key": k, "label": label, "num": True} for k, label in _NUM_COLS[:1]]
    cols += [{"key": k, "label": k if k != "cls" else "class"} for k in ("status", "cls", "origin", "layout")]
    if placed:  # only where an executor placed trials
        cols += [{"key": "placement", "label": "placement"}]
    cols += [{"key": k, "label": label + (sim if k == "throughput" else ""), "num": True} for k, label in _NUM_COLS[1:]]
    cols += [{"key": "ph:" + p, "label": p + " s", "num": True} for p in phase_names]
    cols += [{"key": "p:" + p, "label": p, "param": True} for p in param_names]
    cols += [{"key": "reason", "label": "reason", "wide": True}, {"key": "note", "label": "note"}]
    for c in cols:
        vals = seen_p.get(c["key"][2:]) if c["key"].startswith("p:") else opts.get(c["key"])
        if vals is not None and len(vals) <= OPTIONS_MAX:
            c["options"] = sorted(vals, key=_option_key)
    meta = {"columns": cols, "total": total, "launched": launched, "param_names": param_names,
            "phase_names": phase_names}
    _META_CACHE[key] = (ver, meta)
    return meta


def _option_key(v: str) -> tuple[int, float, str]:
    try:
        return (0, float(v), "")
    except ValueError:
        return (1, 0.0, v)


_TABLE_LOCK = threading.Lock()


def _table_rows(store: Store, study: str, ver: str) -> list[dict[str, Any]]:
    """Every trial as table rows, in trial order: read once per version of the study (another order or a filter)."""
    key = (store.url, study)
    with _TABLE_LOCK:  # one reader at a time: a request waits for the one reading in the background
        hit = _TABLE_CACHE.get(key)
        if hit and hit[0] == ver:
            return hit[1]
        with store.session() as s:
            rows = [_table_row(r, lay=False) for r in s.execute(select(*_TABLE_COLS).where(TrialRow.study == study)
                                                                .order_by(TrialRow.number))]
        _TABLE_CACHE[key] = (ver, rows)
        return rows


def _read_table_soon(store: Store, study: str, ver: str) -> None:
    """Read the study's rows in the background after its first page went out, so that a click on a header does
    not wait for them."""
    hit = _TABLE_CACHE.get((store.url, study))
    if hit and hit[0] == ver:
        return

    def read() -> None:
        try:
            _table_rows(store, study, ver)
        except Exception:  # the database went away (a test's temporary one): the next request reads it again
            pass
    timer = threading.Timer(0.5, read)
    timer.daemon = True
    timer.start()


def _fill_layouts(rows: list[dict[str, Any]], ref: Candidate | None) -> None:
    for r in rows:
        if r["layout"] is None:
            r["layout"] = layout(r["_params"], ref)


_FILTER = re.compile(r"^(>=|<=|!=|>|<|=)\s*(.*)$", re.S)


def _num(v: Any) -> float:
    """JavaScript's Number() of a cell value (NaN where it is no number)."""
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)):
        return float(v)
    if v is None or v == "":
        return math.nan
    try:
        return float(str(v).strip())
    except ValueError:
        return math.nan


def matcher(expr: str) -> Any:
    """The predicate a column's filter box means (the page's syntax, as its help text says)."""
    f = expr.strip()
    m = _FILTER.match(f)
    op, rhs = (m.group(1), m.group(2)) if m else (None, f)
    nr = _num(rhs) if rhs.strip() else math.nan
    low = rhs.lower()

    def test(v: Any) -> bool:
        if not f:
            return True
        sv = js_str(v)
        nv = _num(v) if not isinstance(v, str) or v != "" else math.nan
        if op in ("=", "!="):
            eq = sv.lower() == low or (not math.isnan(nv) and rhs != "" and not math.isnan(nr) and nv == nr)
            return eq if op == "=" else not eq
        if op:
            if math.isnan(nv) or math.isnan(nr):
                return False
            return {">": nv > nr, "<": nv < nr, ">=": nv >= nr, "<=": nv <= nr}[op]
        if isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(nr):
            return v == nr
        return low in sv.lower()
    return test


def _natural(s: str) -> tuple[Any, ...]:
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p.casefold()) for p in re.split(r"(\d+)", s) if p)


def table_page(store: Store, study: StudyRow, sort: str = "number", desc: bool = False, page: int = 0,
               size: int = TABLE_PAGE, filters: dict[str, str] | None = None, search: str = "",
               launched_only: bool = False) -> dict[str, Any]:
    """One page of the trials table in the order and with the filters asked for, with the table's columns."""
    ver = version(store, study.name)
    meta = table_meta(store, study, ver)
    size = max(1, min(int(size), 500))
    filters = {k: v for k, v in (filters or {}).items() if v and v.strip()}
    q = search.strip().lower()
    if sort == "number" and not filters and not q and not launched_only:  # the page's first view: one query
        matched = meta["total"]
        pages = max(1, math.ceil(matched / size))
        page = max(0, min(int(page), pages - 1))
        order = TrialRow.number.desc() if desc else TrialRow.number
        with store.session() as s:
            rows = [_table_row(r, ref=reference(store, study)) for r in s.execute(
                select(*_TABLE_COLS).where(TrialRow.study == study.name).order_by(order)
                .limit(size).offset(page * size))]
        _read_table_soon(store, study.name, ver)
    else:
        rows = _table_rows(store, study.name, ver)
        if sort == "layout" or "layout" in filters or q:  # layouts are worked out when first asked for
            _fill_layouts(rows, reference(store, study))
        if launched_only:
            rows = [r for r in rows if r["launched"]]
        for k, expr in filters.items():
            test = matcher(expr)
            rows = [r for r in rows if test(r.get(k))]
        if q:
            rows = [r for r in rows if q in (r["layout"] or "").lower() or q in r["reason"].lower()
                    or q in r["origin"] or q in r["status"] or str(r["number"]) == q]
        empty = [r for r in rows if r.get(sort) is None]
        full = [r for r in rows if r.get(sort) is not None]
        if all(isinstance(r[sort], (int, float)) and not isinstance(r[sort], bool) for r in full):
            full.sort(key=lambda r: r[sort], reverse=desc)  # stable: ties stay in trial order either way
        else:
            full.sort(key=lambda r: _natural(js_str(r[sort])), reverse=desc)
        rows = full + empty
        matched = len(rows)
        pages = max(1, math.ceil(matched / size))
        page = max(0, min(int(page), pages - 1))
        rows = rows[page * size:(page + 1) * size]
        _fill_layouts(rows, reference(store, study))
    keys = [c["key"] for c in meta["columns"]]
    return {"version": ver, "total": meta["total"], "matched": matched, "page": page, "pages": pages,
            "columns": meta["columns"], "rows": [[r.get(k) for k in keys] for r in rows],
            "sort": sort, "desc": desc}


# The optimisation history as the study page first draws it. A long study's history is a sample: every trial that
# set a new best (so the best-so-far line is exact), every launched trial that failed, and per slice of the trial
# numbers the slowest and the fastest trial and one trial per class of pruning. The page loads every point on request.
HISTORY_POINTS = 2000
HISTORY_BUCKETS = 150
_HISTORY_CACHE: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {}


def history(store: Store, study: StudyRow) -> dict[str, Any]:
    """The history plot's traces as compact columns: one query over the small columns, one for the shown layouts."""
    ver = version(store, study.name)
    key = (store.url, study.name)
    hit = _HISTORY_CACHE.get(key)
    if hit and hit[0] == ver:
        return hit[1]
    t = TrialRow
    with store.session() as s:
        rows = s.execute(select(t.number, t.status, t.reason, t.throughput, t.launched, t.predicted_throughput)
                         .where(t.study == study.name).order_by(t.number)).all()
    ok = [(r.number, r.throughput) for r in rows if r.status == "ok" and r.throughput is not None]
    best_x: list[int] = []
    best_y: list[float | None] = []
    best = -math.inf
    setters: set[int] = set()
    for num, thr in ok:
        if thr > best:
            best = thr
            setters.add(num)
            best_x.append(num)
            best_y.append(_r(thr))
    if best_x and rows[-1].number != best_x[-1]:
        best_x.append(rows[-1].number)
        best_y.append(best_y[-1])
    pred = [(r.number, r.predicted_throughput) for r in rows if r.launched and r.predicted_throughput is not None]
    bad = [r for r in rows if r.status not in ("ok", "running")]
    sampled = len(ok) + len(bad) > HISTORY_POINTS
    lo, hi = (rows[0].number, rows[-1].number) if rows else (0, 0)

    def bucket(num: int) -> int:
        return (num - lo) * HISTORY_BUCKETS // (hi - lo + 1)

    def envelope(points: list[tuple[int, float]], keep: set[int]) -> list[tuple[int, float]]:
        """The slowest and the fastest point per slice, and the points in `keep`."""
        if not sampled:
            return points
        ext: dict[int, list[tuple[int, float]]] = {}
        for p in points:
            b = ext.setdefault(bucket(p[0]), [p, p])
            if p[1] < b[0][1]:
                b[0] = p
            if p[1] > b[1][1]:
                b[1] = p
        nums = keep | {p[0] for b in ext.values() for p in b}
        return [p for p in points if p[0] in nums]

    ok_shown = envelope(ok, setters)
    pred_shown = envelope(pred, set())
    seen: set[tuple[str, int]] = set()
    by_status: dict[str, dict[str, list[Any]]] = {}
    reasons: dict[str, int] = {}
    for r in bad:
        reason = (r.reason or "")[:160]
        cls = failure_class(r.status, (r.reason or "")[:REASON_CHARS])
        if sampled and r.status == "pruned":  # launched failures are all shown
            k = (cls, bucket(r.number))
            if k in seen:
                continue
            seen.add(k)
        g = by_status.setdefault(r.status, {"x": [], "y": [], "reason": []})
        g["x"].append(r.number)
        g["y"].append(cls)
        g["reason"].append(reasons.setdefault(reason, len(reasons)))
    shown = [n for n, _ in ok_shown]
    params: dict[int, Any] = {}
    with store.session() as s:
        for i in range(0, len(shown), 500):
            params.update(s.execute(select(t.number, t.params).where(
                t.study == study.name, t.number.in_(shown[i:i + 500]))).all())
    res = {
        "version": ver, "simulated": bool(study.simulated), "n": len(rows), "sampled": sampled,
        "n_points": len(ok) + len(bad) + len(pred),
        "ok": {"x": shown, "y": [_r(v) for _, v in ok_shown],
               "layout": [layout(params.get(n) or {}, reference(store, study)) for n in shown]},
        "best": {"x": best_x, "y": best_y},
        "predicted": {"x": [n for n, _ in pred_shown], "y": [_r(v) for _, v in pred_shown]},
        "bad": by_status, "reasons": list(reasons),
    }
    _HISTORY_CACHE[key] = (ver, res)
    return res
