"""A two-stage runner: a Megatron-core probe of the training step first, the full trial only if the probe fits.

A probe takes a minute where a verl trial takes tens: a candidate whose training step runs out of memory in the
probe is pruned before the full trial starts. The probe's numbers are stored beside the trial either way.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from autotune.candidate import Candidate
from autotune.job import Job
from autotune.model import ModelArch
from autotune.runners.base import Runner, TrialResult, TrialSpec, TrialStatus

_PROBE_FIELDS = ("status", "throughput_train", "nvml_used_gib_max", "peak_alloc_gib_max", "num_layers",
                 "full_num_layers", "scaled", "error")


def probe_summary(result: TrialResult) -> dict[str, Any]:
    raw = result.extra.get("probe") or {}
    return {"status": result.status.value, "reason": result.reason, "throughput_train": result.throughput,
            "peak_memory_gib": result.peak_memory_gib, **{k: raw.get(k) for k in _PROBE_FIELDS if k in raw}}


class ProbedRunner(Runner):
    def __init__(self, prober: Runner, runner: Runner):
        self.prober, self.runner = prober, runner
        self.name, self.simulated = runner.name, runner.simulated

    def describe(self) -> str:
        return f"{self.runner.describe()} after a {self.prober.describe()} probe"

    def refuse(self, candidate: Candidate, job: Job) -> str | None:
        return self.runner.refuse(candidate, job)

    def domain(self, job: Job) -> list[Candidate] | None:
        return self.runner.domain(job)

    def node_defaults(self, model: ModelArch) -> dict[str, Any]:
        return self.runner.node_defaults(model)  # the full trial's node checks, before anything is written

    def run(self, spec: TrialSpec) -> TrialResult:
        probe = self.prober.run(dataclasses.replace(spec, workdir=spec.workdir / "probe"))
        summary = probe_summary(probe)
        if probe.status == TrialStatus.OOM:
            return TrialResult(TrialStatus.PRUNED, f"probe OOM, full trial not launched: {probe.reason}",
                               log_path=probe.log_path, log_excerpt=probe.log_excerpt,
                               simulated=self.simulated, extra={"probe": summary}, launched=False)
        result = self.runner.run(spec)
        return dataclasses.replace(result, extra={**result.extra, "probe": summary})

    def close(self) -> None:
        self.prober.close()
        self.runner.close()
