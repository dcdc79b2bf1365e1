"""A real trial's GPU memory per moment of its measured step, read from NVML's trace of the trial.

The memory model predicts each moment of a GRPO step (vLLM's start, the rollout, the log-prob pass, the update, the
weight sync: autotune/estimate/memory.py); a peak says only which one binds. The verl runner samples NVML every 0.5 s
from launch (`gpu.csv` beside the trial's log) and verl times each phase, so each moment has a window: inside the
measured step, verl 0.9.1's order (ray_trainer.py fit: gen, reward, old_log_prob, ref, adv, update_actor,
update_weights) places gen and old_log_prob from the step's start and update_weights and update_actor back from its
end (its line's arrival); vLLM's start is the start-up from "weights loaded" to "ready to fit". A moment's memory is
the largest sample inside its window narrowed by a sample and a half at each end (no neighbour read into it); a
window with no sample left (a weight sync under 1.5 s) is not measured. The runner stores the result in a trial's
`extra` (EXTRA); `status --trial` and the dashboard set it beside the model's prediction.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune import units, verl
from autotune.estimate.lengths import responses_guessed
from autotune.estimate.memory import as_nvml_sees
from autotune.store.schema import NVML_MOMENTS

MOMENTS = ("vllm_start", "rollout", "old_log_prob", "update", "reshard")  # in the order a step meets them
EXTRA = NVML_MOMENTS  # the key of a trial's extra: {moment: GiB NVML saw}
MOMENT_PHASES = {"rollout": "gen", "old_log_prob": "old_log_prob", "update": "update_actor",
                 "reshard": "update_weights"}  # a moment of estimate/memory.py -> the phase it happens in
MARGIN_S = 0.75  # a sample and a half (the runner samples every 0.5 s)


def read_samples(path: Path) -> list[tuple[float, float, float | None]]:
    """(seconds after launch, GiB used on the busiest GPU, the largest utilization %) of every sample of a trial's
    gpu.csv, its columns read by name (`*_used_gib`, `*_util_pct`); utilization None where the trace has none (a
    runner older than it, a reading NVML could not give, a row cut by the trial's end); [] if the trace is missing or
    unreadable."""
    try:
        with path.open() as f:
            rows = list(csv.reader(f))
        head = rows[0]
        used = [i for i, name in enumerate(head) if name.endswith("_used_gib")]
        util = [i for i, name in enumerate(head) if name.endswith("_util_pct")]
        out = []
        for r in rows[1:]:
            if len(r) <= max(used):
                continue
            busy = [float(r[i]) for i in util if r[i] != ""] if len(r) == len(head) else []
            out.append((float(r[0]), max(float(r[i]) for i in used), max(busy) if busy else None))
        return out
    except (OSError, ValueError, IndexError):
        return []


def read_trace(path: Path) -> list[tuple[float, float]]:
    """(seconds after launch, GiB used on the busiest GPU) of every sample of a trial's gpu.csv; [] if it is missing
    or unreadable. Its utilization is autotune/results/rollout_wait.py's."""
    return [(t, used) for t, used, _ in read_samples(path)]


def step_windows(start: float, end: float, phases: Mapping[str, float]) -> dict[str, tuple[float, float]]:
    """Each phase's window (seconds after launch) inside one step from `start` to `end`, by verl 0.9.1's order:
    gen and old_log_prob from the start, update_weights and update_actor back from the end. (verl 0.9.1 computes
    the reward inside the rollout's agent loop: the trials log no reward time between gen and old_log_prob.)"""
    out: dict[str, tuple[float, float]] = {}
    t = start
    for phase in ("gen", "old_log_prob"):
        took = phases.get(phase)
        if took is None:
            continue
        out[phase] = (t, t + took)
        t += took
    t = end
    for phase in ("update_weights", "update_actor"):
        took = phases.get(phase)
        if took is None:
            continue
        out[phase] = (t - took, t)
        t -= took
    return out


def window_max(trace: Sequence[tuple[float, float]], window: tuple[float, float],
               margin: float | None = None) -> float | None:
    """The largest sample inside the window narrowed by `margin` (default MARGIN_S) at each end (None: no sample
    there)."""
    m = MARGIN_S if margin is None else margin
    inside = [used for t, used in trace if window[0] + m <= t <= window[1] - m]
    return max(inside) if inside else None


def measured_moments(trace: Sequence[tuple[float, float]], step_end_s: float | None,
                     step_metrics: Mapping[str, Any], timings: Mapping[str, Any]) -> dict[str, float]:
    """{moment: GiB} NVML saw at each moment of one step (the measured one): `step_end_s` when its line showed (seconds
    after launch), `step_metrics` verl's metrics of that step, `timings` the runner's start-up milestones."""
    windows: dict[str, tuple[float, float]] = {}
    took = step_metrics.get(verl.PHASE_TIMINGS["step"])
    if step_end_s is not None and took is not None:
        phases = {p: float(step_metrics[k]) for p, k in verl.PHASE_TIMINGS.items() if step_metrics.get(k) is not None}
        by_phase = step_windows(float(step_end_s) - float(took), float(step_end_s), phases)
        windows = {m: by_phase[p] for m, p in MOMENT_PHASES.items() if p in by_phase}
    loaded, ready = timings.get("weights_loaded_s"), timings.get("vllm_ready_s")
    if loaded is not None and ready is not None:
        windows["vllm_start"] = (float(loaded), float(ready))
    out = {m: window_max(trace, w) for m, w in windows.items()}
    return {m: round(v, 3) for m, v in out.items() if v is not None}


def from_trial(samples: Sequence[tuple[float, float, float | None]], steps: Mapping[int, Mapping[str, Any]],
               step_at: Mapping[int, float], measure_step: int, timings: Mapping[str, Any]) -> dict[str, float]:
    """What the runner stores for a finished trial: the measured step's moments from its trace's samples
    (`read_samples`, read once for this and rollout_wait.from_trial; empty when the trace or the step is missing)."""
    trace = [(t, used) for t, used, _ in samples]
    if not trace or measure_step not in steps:
        return {}
    return measured_moments(trace, step_at.get(measure_step), steps[measure_step], timings)


@dataclass(frozen=True)
class MomentMemory:
    """One moment of one trial: the model's prediction at launch (as NVML would read it) and what NVML saw."""

    moment: str
    predicted_gib: float | None
    nvml_gib: float | None

    @property
    def error(self) -> float | None:
        """predicted / measured - 1 (None where either is missing)."""
        if self.predicted_gib is None or not self.nvml_gib:
            return None
        return self.predicted_gib / self.nvml_gib - 1


def per_moment(row: Any) -> list[MomentMemory]:
    """A trial row's moments, predicted at launch beside NVML's reading; [] where its runner measured none."""
    seen = (row.extra or {}).get(EXTRA) or {}
    if not seen:
        return []
    peaks = (row.predicted_memory or {}).get("moment_peaks_gib") or {}
    predicted = as_nvml_sees(peaks, bool((row.params or {}).get("param_offload")))
    return [MomentMemory(m, predicted.get(m), seen.get(m)) for m in MOMENTS if m in predicted or m in seen]


def per_moment_words(row: Any, measure_step: int) -> str:
    """One line for `status --trial`: each moment predicted at launch / NVML, GiB, and how far off."""
    rows = per_moment(row)
    if not rows:
        return ""
    cells = []
    for r in rows:
        pred = units.gib(r.predicted_gib) if r.predicted_gib is not None else "-"
        seen = units.gib(r.nvml_gib) if r.nvml_gib is not None else "-"
        cells.append(f"{r.moment} {pred} / {seen}" + (f" ({r.error:+.0%})" if r.error is not None else ""))
    guessed = " (predicted at guessed lengths)" if responses_guessed(row.predicted_memory or {}) else ""
    return (f"memory per moment, GiB predicted at launch{guessed} / NVML at step {measure_step}: " + ", ".join(cells))
