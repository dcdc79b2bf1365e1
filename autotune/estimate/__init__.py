"""Estimates of a candidate: static constraints, then memory, then throughput. Pure functions."""

from __future__ import annotations

from dataclasses import dataclass, replace

from autotune import constraints
from autotune.candidate import Candidate
from autotune.cluster import Cluster
from autotune.estimate.memory import MemoryEstimate, estimate_memory
from autotune.estimate.throughput import ThroughputEstimate, Workload, estimate_throughput
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


# What a study's objective measures: a whole verl GRPO step (rollout, log-prob passes, update), or only the
# training phase (forward-backward-optimizer of the actor at its token budget, as Megatron-core probes measure).
OBJECTIVES = ("step", "train")
_ROLLOUT_ONLY_RULES = ("rollout_tp",)  # rules about vLLM, which a training-only measurement never starts
_NO_VLLM_TERMS = ("vllm_cudagraphs",)
FULL_PACKING = Workload(prompt_fraction=1.0, response_fraction=1.0)  # probes pack every micro-batch full


def evaluate(model: ModelArch, cluster: Cluster, job: Job, cand: Candidate, objective: str = "step") -> Evaluation:
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown objective {objective!r}; choose one of {', '.join(OBJECTIVES)}")
    violations = tuple(constraints.check(model, cluster, job, cand))
    if objective == "train":
        violations = tuple(v for v in violations if v.rule not in _ROLLOUT_ONLY_RULES)
    if violations:
        return Evaluation(cand, violations, None, None)
    mem = estimate_memory(model, cluster, job, cand)
    if objective == "step":
        return Evaluation(cand, (), mem, estimate_throughput(model, cluster, job, cand, mem))
    return Evaluation(cand, (), _training_memory(mem), _training_throughput(model, cluster, job, cand, mem))


def _training_memory(mem: MemoryEstimate) -> MemoryEstimate:
    """Only the update moment, without vLLM's share: a training-only process holds one CUDA context, no KV cache."""
    upd = mem.moment("update")
    terms = tuple((k, v / 2 if k == "cuda_contexts" else v) for k, v in upd.terms if k not in _NO_VLLM_TERMS)
    moment = replace(upd, terms=terms, what="training step only: " + upd.what)
    return replace(mem, moments=(moment,), kv_cache_bytes=0.0, kv_needed_bytes=0.0)


def _training_throughput(model: ModelArch, cluster: Cluster, job: Job, cand: Candidate,
                         mem: MemoryEstimate) -> ThroughputEstimate:
    """The update phase alone, over the job's tokens packed to the budget: tokens/s/GPU of training."""
    full = estimate_throughput(model, cluster, job, cand, mem, wl=FULL_PACKING)
    update = dict(full.phases)["update_actor"]
    return replace(full, phases=(("update_actor", update),))
