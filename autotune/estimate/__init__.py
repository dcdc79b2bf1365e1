"""Estimates of a candidate: static constraints, then memory, then throughput. Pure functions."""

from __future__ import annotations

from dataclasses import dataclass, replace

from autotune import constraints
from autotune.candidate import Candidate
from autotune.cluster import Cluster
from autotune.estimate.memory import DEFAULT_CALIBRATION, PROBE_CALIBRATION, MemoryEstimate, estimate_memory
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


# What a study's objective measures:
# - "step": a whole verl GRPO step (rollout, log-prob passes, update), tokens/s/GPU as verl's perf/throughput;
# - "train": the training phase alone as a Megatron-core training probe measures it (autotune/runners/
#   mcore_worker.py): each micro-batch is ONE sequence of ppo_max_token_len_per_gpu * CP tokens, the job's batch
#   is the number of those sequences per optimizer step; no rollout, no vLLM.
OBJECTIVES = ("step", "train")
_ROLLOUT_ONLY_RULES = ("rollout_tp",)  # rules about vLLM, which a training-only measurement never starts
_NO_VLLM_TERMS = ("vllm_cudagraphs",)


def evaluate(model: ModelArch, cluster: Cluster, job: Job, cand: Candidate, objective: str = "step") -> Evaluation:
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown objective {objective!r}; choose one of {', '.join(OBJECTIVES)}")
    violations = tuple(constraints.check(model, cluster, job, cand))
    if objective == "train":
        violations = tuple(v for v in violations if v.rule not in _ROLLOUT_ONLY_RULES)
    if violations:
        return Evaluation(cand, violations, None, None)
    # The training-only objective is what Megatron-core probes measure: their local layer spec's activations.
    mem = estimate_memory(model, cluster, job, cand, PROBE_CALIBRATION if objective == "train" else DEFAULT_CALIBRATION)
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
    """The update phase alone, each micro-batch one sequence as long as the token budget: tokens/s/GPU of training.

    The sequence length matters: causal attention costs FLOPs per token in proportion to it, so a longer
    micro-batch that is one sequence is slower per token than the same tokens as several job-length samples.
    """
    seq = cand.ppo_max_token_len_per_gpu * cand.cp if cand.use_dynamic_bsz else job.max_seq_len
    share = seq / job.max_seq_len
    full = estimate_throughput(model, cluster, job, cand, mem, wl=Workload(share, share))
    update = dict(full.phases)["update_actor"]
    return replace(full, phases=(("update_actor", update),))
