"""Safer near-equals: among configurations within the model's error of each other, one that may run out of memory
(a late OOM once responses grow, or a peak at the limit of the memory model's error) goes behind one that will not.

The ranking orders what to launch by it; `Store.best` (hence `best`, `export`, the run's report and the dashboard)
hands the user the winner by it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

# Predicted throughputs this close are equals: the model cannot tell them apart (its step-time error is larger).
SAFE_TOLERANCE = 0.02
# Until a study has measured a trial (ok or out of memory) nothing has checked the memory model on this model, GPU
# and job: its first launch is a safe setting whenever one exists, however much slower the model thinks it is. A
# first launch that runs out of memory costs the user a trial and the study its first measurement (the 7B study of
# 2026-11-25 launched an at-limit pick first and it ran out of memory in update_actor).
FIRST_LAUNCH_TOLERANCE = 1.0

T = TypeVar("T")


def near_equal(value: float, top: float, tolerance: float = SAFE_TOLERANCE) -> bool:
    """`value` is within `tolerance` below `top`: the model cannot call `top` faster."""
    return value >= top * (1 - tolerance)


def prefer_safe(items: Sequence[T], throughput: Callable[[T], float], safe: Callable[[T], bool],
                tolerance: float = SAFE_TOLERANCE) -> list[T]:
    """`items` (best first by throughput) with each one that is not safe put behind the first safe one within
    `tolerance` of it."""
    out = list(items)
    for i in range(len(out)):
        if safe(out[i]):
            continue
        top = throughput(out[i])
        for j in range(i + 1, len(out)):
            if not near_equal(throughput(out[j]), top, tolerance):
                break
            if safe(out[j]):
                out.insert(i, out.pop(j))
                break
    return out


def verdict_safe(memory: Mapping[str, Any] | None) -> bool:
    """A trial's recorded memory verdict (estimate.memory_record) is safe: it fits at the longest sequences the job
    allows and is not at the limit of the memory model's error. No verdict (an imported run): nothing says not."""
    mem = memory or {}
    return mem.get("worst_case_fits") is not False and not mem.get("at_limit", False)
