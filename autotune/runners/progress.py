"""Where a running trial is: its phase, the step reached, elapsed time, time left and GPU memory peak so far.

A runner hands a `TrialProgress` to `TrialSpec.progress` while a trial runs (the CLI's live line shows it). verl
prints no line when a phase starts, so within a step the phase is worked out from the previous step's measured
phase timings (or the model's prediction before the first step) and marked as estimated.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from autotune import verl

# verl's phases in the order a GRPO step runs them, as the user reads them.
PHASE_ORDER: tuple[tuple[str, str], ...] = (
    ("gen", "rollout"),
    ("old_log_prob", "log-prob"),
    ("ref", "ref log-prob"),
    ("adv", "advantages"),
    ("update_actor", "update"),
    ("update_weights", "weight sync"),
)
STARTUP = "start-up (Ray, model load, vLLM start)"


@dataclass(frozen=True)
class TrialProgress:
    """One look at a running trial."""

    trial: int
    phase: str
    step: int  # last step completed (0: none yet)
    steps: int  # the measured step: where the trial stops
    elapsed_s: float
    eta_s: float | None  # time left to the measured step; None when unknown
    eta_is_lower_bound: bool = False  # before the first step: start-up time is not known
    gpu_peak_gib: float | None = None
    gpu_peak_source: str = ""  # "NVML" (every process on the GPUs) or "torch" (verl's actor counter)
    phase_estimated: bool = False
    attempt: int = 1

    def line(self, label: str = "") -> str:
        """`trial #3 tp2 rtp2 | rollout~ | step 1/3 | 2m05s elapsed, ~3m10s left | GPU peak 61.2 GiB (NVML)`."""
        head = f"trial #{self.trial}" + (f" {label}" if label else "")
        if self.attempt > 1:
            head += f" (attempt {self.attempt})"
        phase = self.phase + ("~" if self.phase_estimated else "")
        left = "time left unknown" if self.eta_s is None else (
            f"{'>' if self.eta_is_lower_bound else '~'}{duration(self.eta_s)} left")
        mem = "GPU peak -" if self.gpu_peak_gib is None else \
            f"GPU peak {self.gpu_peak_gib:.1f} GiB ({self.gpu_peak_source})"
        return f"{head} | {phase} | step {self.step}/{self.steps} | {duration(self.elapsed_s)} elapsed, {left} | {mem}"


def duration(s: float) -> str:
    s = max(0, int(round(s)))
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def phase_at(into_step_s: float, phases: Mapping[str, float]) -> str:
    """The phase a step is in `into_step_s` seconds after it began, given phase durations (verl's names)."""
    t = 0.0
    last = PHASE_ORDER[0][1]
    for name, shown in PHASE_ORDER:
        d = phases.get(name)
        if not d:
            continue
        t += d
        last = shown
        if into_step_s < t:
            return shown
    return last


def step_phases(metrics: Mapping[str, float]) -> dict[str, float]:
    """Phase durations of one step from its metrics (verl's timing_s/* keys)."""
    return {p: metrics[m] for p, m in verl.PHASE_TIMINGS.items() if m in metrics and p != "step"}


def estimate(trial: int, steps: int, elapsed_s: float, done: Sequence[tuple[int, float, Mapping[str, float]]],
             predicted_step_s: float | None, predicted_phases: Mapping[str, float] | None,
             gpu_peak_gib: float | None = None, gpu_peak_source: str = "", attempt: int = 1) -> TrialProgress:
    """Progress of a trial from its completed steps: (step, seconds since launch it was seen, its metrics)."""
    if not done:
        eta = predicted_step_s * steps if predicted_step_s else None
        return TrialProgress(trial, STARTUP, 0, steps, elapsed_s, eta, True, gpu_peak_gib, gpu_peak_source,
                             False, attempt)
    step, seen_at, metrics = done[-1]
    phases = step_phases(metrics) or dict(predicted_phases or {})
    # The wall time between the last two steps (what the user waits for), else verl's own step time, else the model's
    step_s = (seen_at - done[-2][1] if len(done) > 1 and seen_at > done[-2][1] else None) \
        or metrics.get(verl.PHASE_TIMINGS["step"]) or metrics.get(verl.M_TIME_PER_STEP) or predicted_step_s
    if step_s and phases:  # phases in proportion to the step as the wall clock sees it
        scale = step_s / sum(phases.values())
        phases = {k: v * scale for k, v in phases.items()}
    into = max(0.0, elapsed_s - seen_at)
    eta = None
    if step_s:
        eta = max(0.0, (steps - step) * step_s - into)
    if step >= steps:
        return TrialProgress(trial, "measured; stopping", step, steps, elapsed_s, 0.0, False, gpu_peak_gib,
                             gpu_peak_source, False, attempt)
    return TrialProgress(trial, phase_at(into, phases) if phases else "training", step, steps, elapsed_s, eta,
                         False, gpu_peak_gib, gpu_peak_source, bool(phases), attempt)
