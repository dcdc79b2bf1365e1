"""Timing GPU work the way the device README asks: CUDA events around each call after warm-up, the median."""

from __future__ import annotations

import time


def timed(fn, repeats: int = 7) -> float:
    """Seconds per call on the GPU: the median of `repeats` event-timed calls after two warm-ups (without CUDA, the
    host's wall clock: a CPU smoke of a script, no measurement)."""
    import torch

    for _ in range(2):
        fn()
    if not torch.cuda.is_available():
        t0 = time.perf_counter()
        for _ in range(repeats):
            fn()
        return (time.perf_counter() - t0) / repeats
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
    for s, e in zip(starts, ends, strict=True):
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return sorted(s.elapsed_time(e) for s, e in zip(starts, ends, strict=True))[repeats // 2] / 1e3
