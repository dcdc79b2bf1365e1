"""Estimates of a candidate: static constraints, then memory, then throughput. Pure functions.

Owns the static rules (`constraints`), the memory and time models and their parts, the Bayesian correction and
the safer near-equals (`safer`: within the model's error, what may run out of memory goes behind what will not).

May import: the flat values, verl, candidate and job.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from autotune.candidate import Candidate
from autotune.cluster import Cluster
from autotune.estimate import constraints
from autotune.estimate.lengths import Lengths, worst_case
from autotune.estimate.memory import (
    DEFAULT_CALIBRATION,
    PROBE_CALIBRATION,
    Calibration,
    MemoryEstimate,
    estimate_memory,
)
from autotune.estimate.throughput import (
    DEFAULT_EFFICIENCY,
    Efficiency,
    ThroughputEstimate,
    Workload,
    estimate_throughput,
)
from autotune.job import Job
from autotune.model import ModelArch

# The memory model's expected error: the mean absolute error of its predicted peak against 94 Megatron-core probes
# (benchmarks/results/memory_accuracy.md, 6.0%). A candidate predicted within this share of the capacity is "at the
# limit": it may fit or not, and the study prefers a safer one among near-equals.
MEMORY_MARGIN = 0.06


@dataclass(frozen=True)
class Evaluation:
    candidate: Candidate
    violations: tuple[constraints.Violation, ...]
    memory: MemoryEstimate | None  # at the lengths of the measured step; None when a constraint rules it out
    throughput: ThroughputEstimate | None
    worst: MemoryEstimate | None = None  # at the worst case the job allows (None: the same as `memory`)

    @property
    def feasible(self) -> bool:
        """Launchable: it fits at the measured step (a late OOM at longer responses is reported, not pruned)."""
        return not self.violations and self.memory is not None and self.memory.fits

    @property
    def predicted_oom(self) -> bool:
        """The rules allow it and the memory model says it does not fit: pruned, launched only on request."""
        return not self.violations and self.memory is not None and not self.memory.fits

    @property
    def worst_memory(self) -> MemoryEstimate | None:
        return self.worst if self.worst is not None else self.memory

    @property
    def worst_fits(self) -> bool:
        """Fits even when every sequence is as long as the job allows."""
        return self.feasible and self.worst_memory is not None and self.worst_memory.fits

    @property
    def at_limit(self) -> bool:
        """Predicted to fit, but so close to the capacity that the memory model's expected error could tip it."""
        if self.memory is None or not self.feasible:
            return False
        return any(m.peak > m.capacity * (1 - MEMORY_MARGIN) for m in self.memory.moments)

    @property
    def headroom(self) -> float | None:
        """Bytes between the tightest moment's predicted peak and the capacity (at the measured step's lengths)."""
        if self.memory is None:
            return None
        return min(m.capacity - m.peak for m in self.memory.moments)

    @property
    def safe(self) -> bool:
        """Fits at the worst case the job allows and not at the limit: what the study prefers among near-equals."""
        return self.worst_fits and not self.at_limit

    @property
    def predicted_throughput(self) -> float:
        return self.throughput.throughput if self.throughput and self.feasible else 0.0

    def prune_reason(self) -> str:
        if self.violations:
            return "constraint " + "; ".join(str(v) for v in self.violations)
        if self.memory is not None and not self.memory.fits:
            return PREDICTED_OOM + "; ".join(self.memory.reasons())
        return ""


PREDICTED_OOM = "predicted OOM: "  # how a prune by the memory model begins (report.PRUNE_KINDS reads it)

# What a study's objective measures:
# - "step": a whole verl GRPO step (rollout, log-prob passes, update), tokens/s/GPU as verl's perf/throughput;
# - "train": the training phase alone as a Megatron-core training probe measures it (autotune/runners/
#   mcore/worker.py): each micro-batch is ONE sequence of ppo_max_token_len_per_gpu * CP tokens, the job's batch
#   is the number of those sequences per optimizer step; no rollout, no vLLM.
OBJECTIVES = ("step", "train")
_ROLLOUT_ONLY_RULES = ("rollout_tp",)  # rules about vLLM, which a training-only measurement never starts
_NO_VLLM_TERMS = ("vllm_asleep", "vllm_budget", "ref_params")  # not in a training-only process


@dataclass(frozen=True)
class ModelConstants:
    """The models' free constants: the time model's efficiencies and the memory model's calibrations (verl's, and
    the Megatron-core probes' for the training-only objective). A study uses the defaults; the search benchmarks
    perturb them to see how the search copes with a model that is wrong."""

    efficiency: Efficiency = DEFAULT_EFFICIENCY
    calibration: Calibration = DEFAULT_CALIBRATION
    probe_calibration: Calibration = PROBE_CALIBRATION


DEFAULT_CONSTANTS = ModelConstants()


def evaluate(model: ModelArch, cluster: Cluster, job: Job, cand: Candidate, objective: str = "step",
             lengths: Lengths | None = None, constants: ModelConstants = DEFAULT_CONSTANTS) -> Evaluation:
    """Constraints, then memory at the step's lengths and at the worst case (default: both the worst case)."""
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown objective {objective!r}; choose one of {', '.join(OBJECTIVES)}")
    violations = tuple(constraints.check(model, cluster, job, cand))
    if objective == "train":
        violations = tuple(v for v in violations if v.rule not in _ROLLOUT_ONLY_RULES)
    if violations:
        return Evaluation(cand, violations, None, None)
    return estimate_unchecked(model, cluster, job, cand, objective, lengths, constants)


def estimate_unchecked(model: ModelArch, cluster: Cluster, job: Job, cand: Candidate, objective: str = "step",
                       lengths: Lengths | None = None, constants: ModelConstants = DEFAULT_CONSTANTS) -> Evaluation:
    """Memory and time of a candidate without the static rules (the ranking checks those rule by rule, and needs
    the estimates of candidates that break a rule elsewhere)."""
    mem, worst = estimate_memories(model, cluster, job, cand, objective, lengths, constants)
    eff = constants.efficiency
    if objective == "step":
        return Evaluation(cand, (), mem, estimate_throughput(model, cluster, job, cand, mem, eff=eff, lengths=lengths),
                          None if mem is worst else worst)
    return Evaluation(cand, (), mem, _training_throughput(model, cluster, job, cand, mem, eff),
                      None if mem is worst else worst)


def estimate_memories(model: ModelArch, cluster: Cluster, job: Job, cand: Candidate, objective: str = "step",
                      lengths: Lengths | None = None, constants: ModelConstants = DEFAULT_CONSTANTS
                      ) -> tuple[MemoryEstimate, MemoryEstimate]:
    """(memory at the step's lengths, at the worst case the job allows) as the objective sees it; the same object
    twice when the step's lengths are the worst case."""
    # The training-only objective is what Megatron-core probes measure: their local layer spec's activations.
    cal = constants.probe_calibration if objective == "train" else constants.calibration
    worst = estimate_memory(model, cluster, job, cand, cal)
    mem = worst if lengths is None or lengths.worst_case else estimate_memory(model, cluster, job, cand, cal, lengths)
    if objective == "train":
        return (_training_memory(mem), _training_memory(worst)) if mem is not worst else (_training_memory(mem),) * 2
    return mem, worst


def oom_response_length(model: ModelArch, cluster: Cluster, job: Job, cand: Candidate,
                        lengths: Lengths | None) -> tuple[int, str] | None:
    """(response tokens, moment) at which a candidate that fits at `lengths` stops fitting; None if it never does.

    Responses grow from the step's longest to the job's maximum, every sequence that long (prompts at their
    maximum): the late OOM a short trial cannot see. Bisection to 64 tokens.
    """
    ln = lengths or worst_case(job)
    pmax = float(job.max_prompt_length)

    def at(r: float) -> MemoryEstimate:  # a micro-batch at its budget: any mix of such sequences can reach it
        return estimate_memory(model, cluster, job, cand, lengths=Lengths(pmax, pmax, r, r, worst_case=True))

    hi_mem = at(job.max_response_length)
    if hi_mem.fits:
        return None
    lo, hi = float(min(ln.response_max, job.max_response_length)), float(job.max_response_length)
    if not at(lo).fits:
        return int(lo), _first_oom(at(lo))
    while hi - lo > 64:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if at(mid).fits else (lo, mid)
    return int(hi), _first_oom(at(hi))


# A moment in the words users read: verl's own phase names (its timing_s/* metrics) where they differ.
MOMENT_WORDS = {"update": "update_actor", "reshard": "update_weights"}


def _first_oom(mem: MemoryEstimate) -> str:
    bad = [m.name for m in mem.moments if not m.fits]
    if bad:
        return bad[0]
    return "vllm_kv_cache" if not mem.kv_fits else mem.binding.name


def memory_verdict(model: ModelArch, cluster: Cluster, job: Job, ev: Evaluation, measure_step: int,
                   lengths: Lengths | None = None, objective: str = "step") -> dict:
    """Both verdicts in words and as data: at the measured step's lengths and at the worst case the job allows.

    "fits at step 3; OOM in update_actor once responses reach 6144 tokens" for a launchable candidate with a
    late OOM.
    """
    if ev.memory is None:
        return {"fits": False, "worst_case_fits": False, "oom_response_length": None, "oom_moment": None,
                "verdict": "breaks a constraint: " + ev.prune_reason()}
    if not ev.feasible:
        return {"fits": False, "worst_case_fits": False, "oom_response_length": None,
                "oom_moment": ev.memory.binding.name, "verdict": f"OOM at step {measure_step}: " + ev.prune_reason()}
    limit = _limit_words(ev)
    extra = {"at_limit": ev.at_limit, "headroom_gib": round(ev.headroom / 2**30, 2)}
    if ev.worst_fits:
        return {"fits": True, "worst_case_fits": True, "oom_response_length": None, "oom_moment": None, **extra,
                "verdict": f"fits at step {measure_step} and at the longest sequences the job allows{limit}"}
    late = oom_response_length(model, cluster, job, ev.candidate, lengths) if objective == "step" else None
    n, moment = late if late else (job.max_response_length, _first_oom(ev.worst_memory))
    return {"fits": True, "worst_case_fits": False, "oom_response_length": n, "oom_moment": moment, **extra,
            "verdict": f"fits at step {measure_step}; OOM in {MOMENT_WORDS.get(moment, moment)} once responses "
                       f"reach {n} tokens{limit}"}


def _limit_words(ev: Evaluation) -> str:
    """"; at the limit: ..." when the predicted peak is within the memory model's expected error of the capacity."""
    if not ev.at_limit:
        return ""
    m = min(ev.memory.moments, key=lambda x: x.capacity - x.peak)
    return (f"; at the limit: predicted {m.peak / 2**30:.1f} of {m.capacity / 2**30:.1f} GiB in "
            f"{MOMENT_WORDS.get(m.name, m.name)}, within the memory model's expected error "
            f"({MEMORY_MARGIN:.0%}): it may run out of memory")


def _training_memory(mem: MemoryEstimate) -> MemoryEstimate:
    """Only the update moment, without vLLM's share: a training-only process holds one CUDA context, no KV cache."""
    upd = mem.moment("update")
    terms = tuple((k, v / 2 if k == "cuda_contexts" else v) for k, v in upd.terms if k not in _NO_VLLM_TERMS)
    moment = replace(upd, terms=terms, what="training step only: " + upd.what)
    return replace(mem, moments=(moment,), kv_cache_bytes=0.0, kv_needed_bytes=0.0)


def _training_throughput(model: ModelArch, cluster: Cluster, job: Job, cand: Candidate,
                         mem: MemoryEstimate, eff: Efficiency = DEFAULT_EFFICIENCY) -> ThroughputEstimate:
    """The update phase alone, each micro-batch one sequence as long as the token budget: tokens/s/GPU of training.

    The sequence length matters: causal attention costs FLOPs per token in proportion to it, so a longer
    micro-batch that is one sequence is slower per token than the same tokens as several job-length samples.
    """
    seq = cand.ppo_max_token_len_per_gpu * cand.cp if cand.use_dynamic_bsz else job.max_seq_len
    share = seq / job.max_seq_len
    # A Megatron-core probe, not verl: without verl's engine costs per pass (full recompute's second forward pays a
    # log-prob pass's) or per micro-batch of one sequence or of a few small ones, nor its log-prob and entropy over
    # unfused logits.
    full = estimate_throughput(model, cluster, job, cand, mem, wl=Workload(share, share),
                               eff=replace(eff, update_pass_s=0.0, logprob_pass_s=0.0, micro_batch_of_one_s=0.0,
                                           small_micro_batch_layer_s=0.0, small_budget_micro_batch_layer_s=0.0,
                                           unfused_logit_ps=0.0))
    update = dict(full.phases)["update_actor"]
    # The Workload's shares of the caps only carry `seq` to the time model: they are not lengths to show.
    return replace(full, phases=(("update_actor", update),), lengths=None, micro_batch_tokens=int(seq))


def memory_record(model: ModelArch, cluster: Cluster, job: Job, ev: Evaluation, measure_step: int,
                  lengths: Lengths | None = None, objective: str = "step") -> dict | None:
    """The memory estimate as stored with a trial and printed by `estimate --json`: the breakdown at the measured
    step, per-moment peaks at the step and at the worst case, both verdicts in words, the lengths assumed."""
    if ev.memory is None:
        return None
    v = memory_verdict(model, cluster, job, ev, measure_step, lengths, objective)
    worst = ev.worst_memory
    doc = ev.memory.as_dict()
    doc.update(
        verdict=v["verdict"], worst_case_fits=v["worst_case_fits"], oom_response_length=v["oom_response_length"],
        oom_moment=v["oom_moment"], at_limit=v.get("at_limit", False), headroom_gib=v.get("headroom_gib"),
        moment_peaks_gib={m.name: round(m.peak / 2**30, 3) for m in ev.memory.moments},
        worst_case={
            "fits": worst.fits, "peak_gib": round(worst.peak / 2**30, 3), "binding_moment": worst.binding.name,
            "moment_peaks_gib": {m.name: round(m.peak / 2**30, 3) for m in worst.moments},
            "reasons": worst.reasons(), "lengths": worst.lengths.as_dict() if worst.lengths else None,
        },
    )
    return doc
