"""What every view of the dashboard shares, read from the study database: failure classes, trial labels,
the study's version (the key the views cache on) and JSON-safe numbers.

Each view is one SQL query, aggregated with pandas, in a sibling module: the studies list and the study page's head
(studies.py), the optimisation history (history.py), the trials table a page at a time (table.py), every trial for
the plots (plots.py), failures and log tails (failures.py), parameter importance (importance.py). Only the columns a
view needs are selected (the per-trial memory breakdown and log excerpts are large and are read for one trial, or for
failed trials only), so a study of 10,000 trials stays fast to load. The study page's first view (history() and
table_page()) is small whatever the study's size: a sampled history and one page of the table; study_data(), every
trial for the plots further down, is loaded by the page after that.
"""

from __future__ import annotations

import datetime as dt
import functools
import math
import re
from typing import Any

from sqlalchemy import case, func, select

from autotune.candidate import Candidate
from autotune.labels import label, study_reference
from autotune.store import Store, StudyRow, TrialRow

PHASES = ("gen", "old_log_prob", "ref", "adv", "update_actor", "update_weights")
LAUNCHED_FAILURES = ("oom", "failed", "timeout", "config_error", "interrupted")
REASON_CHARS = 300  # per distinct reason in the compact trial data; the trial page has the whole text

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



_STUDY_CACHES: list[dict[tuple[str, str], Any]] = []


def study_cache() -> dict[tuple[str, str], Any]:
    """A view's cache of a study's data, keyed by (storage URL, study): registered here so that forget() reaches
    every view without this module importing them (they import it)."""
    cache: dict[tuple[str, str], Any] = {}
    _STUDY_CACHES.append(cache)
    return cache


def forget(store: Store, study: str) -> None:
    """Drop the cached data of a study after a change its version does not show (a note)."""
    for cache in _STUDY_CACHES:
        cache.pop((store.url, study), None)
