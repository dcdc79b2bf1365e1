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
import re
from typing import Any

from sqlalchemy import case, func, select
from sqlalchemy.exc import SQLAlchemyError

from autotune import units
from autotune.candidate import Candidate
from autotune.results.labels import label, study_reference
from autotune.store.schema import StudyRow, TrialRow
from autotune.store.store import Store, StoreError
from autotune.store.tuners import GRACE_PERIOD_S, TunerRow

PHASES = ("gen", "old_log_prob", "ref", "adv", "update_actor", "update_weights")
LAUNCHED_FAILURES = ("oom", "failed", "timeout", "config_error")
# Stopped (Ctrl-C, a dead tuner, a runner that could not go on) and re-queued, or never launched: not a failure of
# its configuration, counted and listed apart.
INTERRUPTED = "interrupted"
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


def _r(x: Any, nd: int = units.THROUGHPUT_DECIMALS) -> float | None:
    """A JSON-safe float at the precision the views print (autotune.units: throughput, GiB and seconds alike), so
    that the page shows the CLI's digits (NaN and None become null)."""
    return units.rounded(x, nd)


def _jsonable(v: Any) -> Any:
    if isinstance(v, float):
        return _r(v, 4)
    return v


def _iso(t: dt.datetime | None) -> str | None:
    return t.isoformat(sep=" ", timespec="seconds") if t else None



def layout(params: dict[str, Any], ref: Candidate | None = None) -> str:
    """The trial's label (autotune.results.labels): layout, rollout TP and what differs from the study's reference."""
    try:
        return _layout(tuple(sorted(params.items())), ref)
    except TypeError:  # an unhashable value
        return _layout.__wrapped__(tuple(sorted(params.items())), ref)


@functools.lru_cache(maxsize=4096)
def _layout(items: tuple[tuple[str, Any], ...], ref: Candidate | None) -> str:
    return label(dict(items), ref)


_REFS: dict[tuple[str, str], Candidate | None] = {}


def reference(store: Store, study: StudyRow | str) -> Candidate | None:
    """The reference of a study's labels (verl's example configuration for its job and space), read once."""
    name = study if isinstance(study, str) else study.name
    key = (store.url, name)
    if key not in _REFS:
        _REFS[key] = study_reference(store.get_study(name) if isinstance(study, str) else study)
    return _REFS[key]

def capacity_gib(study: StudyRow) -> float | None:
    return _r((study.cluster.get("gpu") or {}).get("memory_gib"))


def version(store: Store, study: str) -> str:
    """Changes whenever a trial is added, finishes or changes status: the page refetches its data then."""
    return liveness(store, study)["version"]


# Where no tuner ever registered on a study (tuners_at_work: an older autotune, an import), the writes tell: a tuner
# writes at least this often while it works (a trial's heartbeat, a launch claim, a pruned candidate), so a study
# written to more recently is taken as being tuned.
ACTIVE_WITHIN_S = 90.0


def liveness(store: Store, study: str) -> dict[str, Any]:
    """The study's version, its running trials, and whether a tuner wrote to it within ACTIVE_WITHIN_S."""
    t = TrialRow
    q = select(
        func.count(), func.sum(case((t.status == "running", 1), else_=0)),
        func.sum(case((t.status == "ok", 1), else_=0)), func.max(t.finished_at), func.max(t.id),
        func.max(t.started_at), func.max(t.heartbeat_at),
    ).where(t.study == study)
    with store.session() as s:
        n, running, ok, last, max_id, started, beat = s.execute(q).one()
        touched = s.scalar(select(StudyRow.updated_at).where(StudyRow.name == study))
    wrote = max((x for x in (last, started, beat, touched) if x is not None), default=None)
    ago = (dt.datetime.now(dt.UTC).replace(tzinfo=None) - wrote).total_seconds() if wrote else None
    tuning = tuners_at_work(store, study)
    return {"version": f"{n}-{running or 0}-{ok or 0}-{max_id or 0}-{_iso(last) or ''}",
            "running": int(running or 0), "last_write_s": None if ago is None else round(max(ago, 0.0), 1),
            "active": (ago is not None and ago < ACTIVE_WITHIN_S) if tuning is None else tuning}


def tuners_at_work(store: Store, study: str) -> bool | None:
    """Whether a tuner registered on the study is alive (not stopped, beating within the grace period); None when
    none ever registered (an older autotune, an import), where only the writes can tell. A study whose tuners all
    ended is not being tuned, however recently they wrote."""
    try:
        with store.session() as s:
            now = s.scalar(select(func.now()))  # the clock the beats are stamped in (autotune.store.tuners)
            rows = s.execute(select(TunerRow.heartbeat_at, TunerRow.stopped_at).where(TunerRow.study == study)).all()
    except (StoreError, SQLAlchemyError):  # no registry table: nothing ever tuned this database with one
        return None
    if not rows:
        return None
    now = now.replace(tzinfo=None) if isinstance(now, dt.datetime) else now
    return any(stopped is None and (now - beat).total_seconds() < GRACE_PERIOD_S for beat, stopped in rows)



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
