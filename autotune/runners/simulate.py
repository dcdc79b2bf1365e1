"""The simulate runner: answers a trial with the memory and throughput models. Nothing is measured.

Every result it returns is marked simulated; the CLI, the database, the dashboard and the export say so.
"""

from __future__ import annotations

from autotune import verl
from autotune.runners.base import Runner, TrialResult, TrialSpec, TrialStatus


class SimulateRunner(Runner):
    name = "simulate"
    simulated = True

    def run(self, spec: TrialSpec) -> TrialResult:
        mem, pred = spec.memory, spec.prediction
        if not mem.fits:
            return TrialResult(TrialStatus.OOM, "simulated: " + "; ".join(mem.reasons()), simulated=True)
        phases = dict(pred.phases)
        step_metrics = {
            verl.M_THROUGHPUT: pred.throughput,
            verl.M_TIME_PER_STEP: pred.step_time,
            verl.M_TOTAL_TOKENS: pred.tokens_per_step,
            verl.PHASE_TIMINGS["step"]: pred.step_time,
            **{verl.PHASE_TIMINGS[k]: v for k, v in phases.items() if k in verl.PHASE_TIMINGS},
        }
        steps = tuple({"step": n, **step_metrics} for n in range(1, spec.measure_step + 1))
        return TrialResult(
            TrialStatus.OK,
            "simulated: model estimate, not a measurement",
            throughput=pred.throughput,
            steps=steps,
            phase_timings=phases,
            simulated=True,
        )
