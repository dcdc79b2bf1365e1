"""The optimisation history as the study page first draws it. A long study's history is a sample: every trial that
set a new best (so the best-so-far line is exact), every launched trial that failed, and per slice of the trial
numbers the slowest and the fastest trial and one trial per class of pruning. The page loads every point on request.
"""

from __future__ import annotations

import math
from typing import Any

from sqlalchemy import select

from autotune.dashboard.data import REASON_CHARS, _r, failure_class, layout, reference, study_cache, version
from autotune.store.schema import StudyRow, TrialRow
from autotune.store.store import Store

HISTORY_POINTS = 2000
HISTORY_BUCKETS = 150
_HISTORY_CACHE: dict[tuple[str, str], tuple[str, dict[str, Any]]] = study_cache()


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
