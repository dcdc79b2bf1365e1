"""Every trial of a study as compact columns (one list per field) for the study page's plots: history, memory,
phase timings, parameters, the heat maps and failure counts; loaded after the page's first view, computed once per
version of the study whoever asks.
"""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

import pandas as pd
from sqlalchemy import select

from autotune import units
from autotune.candidate import Candidate
from autotune.dashboard.data import (
    _TABLE_COLS,
    PHASES,
    REASON_CHARS,
    _r,
    capacity_gib,
    failure_class,
    layout,
    reference,
    study_cache,
    version,
)
from autotune.store.schema import StudyRow, TrialRow
from autotune.store.store import Store


def _ms(t: Any) -> float | None:
    if t is None or (isinstance(t, float) and math.isnan(t)) or t is pd.NaT:
        return None
    return round(t.replace(tzinfo=dt.UTC).timestamp() * 1000)



def trials_frame(store: Store, study: str) -> pd.DataFrame:
    """Every trial of a study, one row each, without the large per-trial columns."""
    q = select(*_TABLE_COLS).where(TrialRow.study == study).order_by(TrialRow.number)
    with store.session() as s:
        rows = s.execute(q).all()
    return pd.DataFrame(rows, columns=[c.key for c in _TABLE_COLS])



def _col(series: pd.Series, nd: int = units.THROUGHPUT_DECIMALS) -> list[Any]:
    """A numeric column as a JSON list: rounded as the CLI rounds (Python's round, not numpy's), NaN as null."""
    return [units.rounded(v, nd) for v in pd.to_numeric(series, errors="coerce").tolist()]


_DATA_CACHE: dict[tuple[str, str], tuple[str, dict[str, Any]]] = study_cache()



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
