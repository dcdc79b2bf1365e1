"""Why trials failed: failure classes with counts and an example each, the launched trials that failed with their
log excerpts, and the end of one trial's log for its page. An interrupted trial (stopped and re-queued, or never
launched) is a class of its own, not a failure of its configuration.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from autotune.dashboard.data import LAUNCHED_FAILURES, failure_class, layout, reference
from autotune.store.schema import TrialRow
from autotune.store.store import Store

LOG_TAIL_BYTES = 64 * 1024
FAILURES_LISTED = 200


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
             .where(t.study == study, t.status.in_(LAUNCHED_FAILURES), t.launched.is_(True))
             .order_by(t.number.desc()))
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
    with store.session() as s:
        n_failed = s.scalar(select(func.count()).select_from(t).where(
            t.study == study, t.status.in_(LAUNCHED_FAILURES), t.launched.is_(True))) or 0
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
