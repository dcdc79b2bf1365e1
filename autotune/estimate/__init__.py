"""Estimates of a candidate: static constraints, then memory, then throughput. Pure functions."""

from __future__ import annotations

from dataclasses import dataclass

from autotune import constraints
from autotune.candidate import Candidate
from autotune.cluster import Cluster
from autotune.estimate.memory import MemoryEstimate, estimate_memory
from autotune.estimate.throughput import ThroughputEstimate, estimate_throughput
from autotune.job import Job
from autotune.model import ModelArch


@dataclass(frozen=True)
class Evaluation:
    candidate: Candidate
    violations: tuple[constraints.Violation, ...]
    memory: MemoryEstimate | None  # None when a static constraint already rules it out
    throughput: ThroughputEstimate | None

    @property
    def feasible(self) -> bool:
        return not self.violations and self.memory is not None and self.memory.fits

    @property
    def predicted_throughput(self) -> float:
        return self.throughput.throughput if self.throughput and self.feasible else 0.0

    def prune_reason(self) -> str:
        if self.violations:
            return "constraint " + "; ".join(str(v) for v in self.violations)
        if self.memory is not None and not self.memory.fits:
            return "predicted OOM: " + "; ".join(self.memory.reasons())
        return ""


def evaluate(model: ModelArch, cluster: Cluster, job: Job, cand: Candidate) -> Evaluation:
    violations = tuple(constraints.check(model, cluster, job, cand))
    if violations:
        return Evaluation(cand, violations, None, None)
    mem = estimate_memory(model, cluster, job, cand)
    return Evaluation(cand, (), mem, estimate_throughput(model, cluster, job, cand, mem))
