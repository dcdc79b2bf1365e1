"""A trial's profiles (autotune profile) for its page: the latest in full, how many there are.

The analysis and advice are stored as JSON by autotune/profile (analysis.ProfileAnalysis.as_dict, advice.Advice
.as_dict); this view only reads them back, nothing is computed here.
"""

from __future__ import annotations

from typing import Any

from autotune.store.store import Store

KINDS = ("gemm", "attention", "other", "communication", "memory", "idle")


def trial_profile(store: Store, study: str, number: int) -> dict[str, Any] | None:
    rows = store.profiles(study, number)
    if not rows:
        return None
    row = rows[0]
    analysis = row.analysis or {}
    advice = row.advice or []
    return {
        "id": row.id, "count": len(rows), "created_at": row.created_at.isoformat(timespec="seconds"),
        "backend": row.backend, "step": row.step, "status": row.status, "reason": row.reason,
        "trace_dir": row.trace_dir, "device": analysis.get("device"), "kinds": list(KINDS),
        "phases": analysis.get("phases") or [], "notes": analysis.get("notes") or [],
        "unprofiled": analysis.get("unprofiled") or {}, "hta": analysis.get("hta") or {},
        "advised": [a for a in advice if a.get("advised")], "considered": [a for a in advice if not a.get("advised")],
        "run": row.run or {},
    }
