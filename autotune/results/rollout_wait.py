"""How long a step's rollout left the GPU idle before vLLM slept, read from NVML's trace of the trial.

verl 0.9.1's V1 trainer sees a finished rollout at its next poll (`verl.SAMPLE_POLL_S`, 2 s), so `timing_s/gen` is
the rollout rounded up to whole polls (2k s + 0.1-0.3 s in every committed real trial), and a step's time moves by
up to one poll with where the rollout ends: noise no configuration causes. The runner samples NVML's utilization
beside the memory (`gpu.csv`, every 0.5 s). A rollout ends in the trace where vLLM sleeps (its KV cache freed: the
memory falls); the GPU sat idle from the last sample that saw a kernel run before it. That tail holds verl's host
work after the last token (the agent loop's reward and hand-over of the batch) and then the trainer's wait for its
poll: lease 61's H100 1.5B steps (the first traces with the utilization) sat idle 2.0-4.0 s, more than a poll can
wait, so 0.9-1.9 s of host work by the poll grid; the trace cannot tell the two apart in one step, only bound the
host's share (`host_work_at_least`). To about one sample: NVML reads the GPU idle 0.24-0.27 s after its last kernel
on an H100 (benchmarks/results/nvml_utilization_lag_h100.json). The runner stores the tail per step in a trial's
`extra` (EXTRA); `status --trial` shows the measured step's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import pairwise
from typing import Any

from autotune import verl
from autotune.job import Job
from autotune.results.memory_trace import MARGIN_S, step_windows

EXTRA = "rollout_idle_s"  # the key of a trial's extra: {step: seconds the GPU sat idle at the end of the rollout}
SLEEP_DROP_GIB = 2.0  # vLLM's sleep frees its KV cache: at least this much (a 0.5B at util 0.3 frees ~15 GiB)
REACH_S = 2.5  # how far past gen's window (placed by the console's step line) the sleep is looked for
SAMPLE_S = 0.5  # the runner's NVML sampling period: a tail is read to about this
HANDOVER_S = 0.3  # gen past its whole polls: the trainer's hand-over after the poll that saw the rollout (0.06-0.28 s)


def idle_before_sleep(samples: Sequence[tuple[float, float, float | None]],
                      window: tuple[float, float]) -> float | None:
    """Seconds the GPU sat idle at the end of the rollout in `window` (gen's, seconds after launch): from the last
    sample with a kernel running to the first with vLLM asleep (the first fall of SLEEP_DROP_GIB or more from one
    sample to the next after the window's start: vLLM wakes at the rollout's start, a rise, and sleeps at its end).
    None where the trace cannot tell: no utilization, no sleep found, or no busy sample before it."""
    inside = [s for s in samples if window[0] + MARGIN_S <= s[0] <= window[1] + REACH_S]
    if any(u is None for _, _, u in inside):
        return None
    asleep = next((b[0] for a, b in pairwise(inside) if b[1] <= a[1] - SLEEP_DROP_GIB), None)
    busy = [t for t, _, u in inside if u and asleep is not None and t < asleep]
    if asleep is None or not busy:
        return None
    return round(asleep - max(busy), 2)


def from_trial(samples: Sequence[tuple[float, float, float | None]], steps: Mapping[int, Mapping[str, Any]],
               step_at: Mapping[int, float]) -> dict[str, float]:
    """What the runner stores for a finished trial: each logged step's idle tail, where its trace's samples
    (memory_trace.read_samples) tell it."""
    if all(u is None for _, _, u in samples):  # no utilization in the trace (or no trace)
        return {}
    out: dict[str, float] = {}
    for step, metrics in steps.items():
        took, gen, end = metrics.get(verl.PHASE_TIMINGS["step"]), metrics.get(verl.PHASE_TIMINGS["gen"]), \
            step_at.get(step)
        if took is None or gen is None or end is None:
            continue
        window = step_windows(float(end) - float(took), float(end), {"gen": float(gen)})["gen"]
        idle = idle_before_sleep(samples, window)
        if idle is not None:
            out[str(step)] = idle
    return out


def study_poll_s(study: Any) -> float:
    """The poll of a stored study's job (`verl.SAMPLE_POLL_S` under verl's V1 trainer, 0.0 without it)."""
    return Job(tuple(map(tuple, study.job or ()))).sample_poll_s


def host_work_at_least(idle_s: float, poll_s: float) -> float:
    """The least of a step's idle tail that was verl's host work after the last token, not the wait for the poll:
    the wait is under one poll interval, the sleep follows the hand-over, and the tail is read to a sample (0.0: the
    tail could all be the wait, as it is all host work without a poll)."""
    if not poll_s:
        return round(idle_s, 2)
    return round(max(0.0, idle_s - poll_s - HANDOVER_S - SAMPLE_S), 2)


def words(extra: Mapping[str, Any] | None, step: int, poll_s: float) -> str:
    """One line for `status --trial`: the measured step's idle tail, beside verl's poll ('' where not measured)."""
    idle = ((extra or {}).get(EXTRA) or {}).get(str(step))
    if idle is None:
        return ""
    line = (f"rollout: the GPU sat idle {idle:.1f} s at the end of step {step}'s gen, by NVML's utilization: verl's "
            "host work after the last token (reward, hand-over)")
    if not poll_s:
        return line
    line += (f", then the trainer's wait for its next poll (every {poll_s:g} s: the step would be up to that much "
             "shorter or longer as the rollout ends just before or after a poll)")
    if least := host_work_at_least(idle, poll_s):
        line += f"; at least {least:.1f} s of it the host's work, more than a poll can wait"
    return line
