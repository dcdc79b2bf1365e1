"""One launch of verl and the trial result made of it: the verl runner (runners/verl.py) runs attempts (a crash or
an NCCL error is tried once more) and records the last one's result: the measured window's throughput and phases, the
noise over the extra steps, NVML's peaks and trace, verl's own memory counters, the timeline and the node's notes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune import verl
from autotune.results import memory_trace, noise, rollout_wait, timeline
from autotune.runners.base import TrialResult, TrialSpec, TrialStatus
from autotune.runners.node.gpu_monitor import GpuUsage
from autotune.verl.caches import BYTECODE_EXTRA
from autotune.verl.log import RunLog


@dataclass
class Attempt:
    """What one launch of verl left: its verdict, its log read back, the GPUs' and the node's records."""

    status: TrialStatus
    reason: str
    log: RunLog
    log_path: Path
    returncode: int | None
    excerpt: str = ""
    failure: str = ""
    gpu: GpuUsage = field(default_factory=lambda: GpuUsage(False, "not sampled"))
    cleanup: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    ray_tmp: str = ""
    ray: str = ""  # the trial's Ray: node/ray_head.py's modes ("kept", "fresh", "private", "cluster", "verl")
    ray_note: str = ""  # why it is private where a kept head was asked for
    caches: str = ""  # the shared caches at launch: "warm", "cold", "" (off)
    missed: str = ""  # why the extra steps after the measured one are missing (the run ended first)
    trace: Path | None = None  # NVML's samples of the attempt (memory per moment)
    bytecode_cache: bool = False  # its processes kept their bytecode under the shared caches
    stopped_by: KeyboardInterrupt | None = None  # a stop that came after the measured step: run() re-raises it


def trial_result(spec: TrialSpec, att: Attempt, first: int, extra_steps: int, extra: dict[str, Any]) -> TrialResult:
    """The trial's result from its last attempt: the measured window's throughput and phases, its noise over the
    extra steps, and what the GPUs, verl's counters and the node recorded (into `extra`, which the caller started)."""
    steps = tuple({"step": s, **m} for s, m in sorted(att.log.steps.items()))
    window = [att.log.steps[s] for s in range(first, spec.measure_step + 1) if s in att.log.steps]
    thr = None
    phases: dict[str, float] = {}
    if att.status == TrialStatus.OK:
        thr = sum(m[verl.M_THROUGHPUT] for m in window) / len(window)
        for phase, metric in verl.PHASE_TIMINGS.items():
            vals = [m[metric] for m in window if metric in m]
            if vals:
                phases[phase] = sum(vals) / len(vals)
        where = f"step {first}" if first == spec.measure_step else f"mean of steps {first}-{spec.measure_step}"
        att.reason = f"measured {thr:.1f} tokens/s/GPU ({where})"
        extra["noise"] = noise.measure(att.log.steps, first, spec.measure_step, extra_steps, att.missed,
                                       att.log.recompiled_steps())
        att.reason += f"; {noise.Noise.from_extra(extra).words()}"  # type: ignore[union-attr]
    alloc = [m[verl.M_MAX_MEM_ALLOCATED] for m in att.log.steps.values() if verl.M_MAX_MEM_ALLOCATED in m]
    reserved = [m[verl.M_MAX_MEM_RESERVED] for m in att.log.steps.values() if verl.M_MAX_MEM_RESERVED in m]
    gpu = att.gpu
    extra.update({
        "failure": att.failure or None,
        "returncode": att.returncode,
        "gpu": gpu.as_dict(),
        "memory": {
            "nvml_peak_gib": gpu.peak_max_gib,
            "nvml_peak_per_gpu_gib": list(gpu.peak_gib) or None,
            "nvml_note": "" if gpu.available else f"GPU memory not measured: {gpu.reason}",
            "verl_max_memory_allocated_gib": max(alloc) if alloc else None,
            "verl_max_memory_reserved_gib": max(reserved) if reserved else None,
            "predicted_peak_gib": spec.memory.peak / 2**30 if spec.memory else None,
        },
        "cleanup": att.cleanup,
        "timings": att.timings,
        timeline.SPANS: timeline.step_spans(att.log.step_at, att.log.steps),
    })
    if att.status == TrialStatus.OK and att.trace is not None:
        samples = memory_trace.read_samples(att.trace)
        extra[memory_trace.EXTRA] = memory_trace.from_trial(samples, att.log.steps, att.log.step_at,
                                                            spec.measure_step, att.timings)
        if idle := rollout_wait.from_trial(samples, att.log.steps, att.log.step_at):
            extra[rollout_wait.EXTRA] = idle
    if att.caches:
        extra["caches"] = att.caches
    if att.bytecode_cache:
        extra[BYTECODE_EXTRA] = True
    if att.ray_tmp:
        extra["ray_tmp"] = att.ray_tmp
    extra["ray"] = att.ray
    if att.ray_note:
        extra["ray_note"] = att.ray_note
    if len(extra["attempts"]) > 1:
        first_try = extra["attempts"][0]
        att.reason += f" (attempt {len(extra['attempts'])}; attempt 1: {first_try['failure']}: " \
                      f"{first_try['reason'][:200]})"
    return TrialResult(status=att.status, reason=att.reason, throughput=thr, steps=steps, phase_timings=phases,
                       peak_memory_gib=gpu.peak_max_gib, peak_memory_per_gpu_gib=gpu.peak_gib,
                       framework_memory_gib=max(alloc) if alloc else None, log_path=str(att.log_path),
                       log_excerpt=att.excerpt, simulated=False, extra=extra)
