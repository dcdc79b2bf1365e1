"""The trials table, served a page at a time: the page holds 50 rows whatever the study's size. The first page in
trial order (what the study page opens with) is one SQL query with LIMIT; another order, a filter or a search works
on the study's rows held in memory (read once per version of the study). The filter syntax and the ordering are
those the page documents: a value (substring, or equal for a number), or `>3000`, `<=4`, `!=ok`, `=x`; empty
cells last in either direction, ties in trial order.
"""

from __future__ import annotations

import datetime as dt
import math
import re
import threading
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import case, func, select

from autotune.candidate import Candidate
from autotune.dashboard.data import (
    _TABLE_COLS,
    PHASES,
    REASON_CHARS,
    _r,
    failure_class,
    layout,
    reference,
    study_cache,
    version,
)
from autotune.executors import placement_text
from autotune.store.schema import StudyRow, TrialRow
from autotune.store.store import Store

TABLE_PAGE = 50
OPTIONS_MAX = 15  # a column with at most this many distinct values is filtered with a drop-down
_TABLE_CACHE: dict[tuple[str, str], tuple[str, list[dict[str, Any]]]] = study_cache()
_META_CACHE: dict[tuple[str, str], tuple[str, dict[str, Any]]] = study_cache()
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
