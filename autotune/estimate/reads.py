"""What each piece of an estimate reads of a candidate: the knobs a phase time, a memory moment, the tokens of a
step and each static rule depend on (everything else of the candidate leaves it unchanged).

The ranking (autotune/search/ranking.py) splits a space along these facts so that it can find the model's best setting
exactly without evaluating millions of settings: parts of the space that no estimate reads together are searched
independently. A fact here that is wrong (a phase reading a knob not listed) would make that search inexact;
tests/test_reads.py changes every unlisted knob of random candidates and checks that nothing listed moves, for
dense and MoE models, both objectives, with and without a reference model and vLLM sleeping or not. Listing a knob
that is not read costs only time. A rule added to constraints.py without an entry here reads every knob (exact,
slower) until it is listed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from autotune.candidate import Candidate
from autotune.job import Job

ALL = frozenset(Candidate.param_names())
_STATES = frozenset({"tp", "pp", "ep", "etp"})  # what decides the parameters, gradients and optimizer held per GPU
_LAYOUT = frozenset({"tp", "pp", "vpp", "cp", "ep", "etp", "sequence_parallel"})
_OFFLOAD = frozenset({"param_offload", "optimizer_offload"})
_REF = frozenset({"param_offload", "ref_param_offload"})  # where the reference model's weights live
CPU_OPTIMIZER_KEYS = frozenset({"optimizer_cpu_offload", "optimizer_offload_fraction"})  # Megatron's CPU optimizer
_TRAIN_MB = frozenset({"use_dynamic_bsz", "ppo_max_token_len_per_gpu", "ppo_micro_batch_size_per_gpu"})
_LP_MB = frozenset({"use_dynamic_bsz", "log_prob_max_token_len_per_gpu", "log_prob_micro_batch_size_per_gpu"})
RECOMPUTE_KEYS = frozenset({"recompute", "recompute_method", "recompute_num_layers", "recompute_modules"})
_VLLM = frozenset({"rollout_tp", "gpu_memory_utilization", "max_num_batched_tokens"})
_UTIL = frozenset({"gpu_memory_utilization"})

# What Candidate.normalized() derives from what: sequence parallel off with TP 1, no VPP without PP, the recompute
# details from the recompute granularity, the micro-batch settings with or without dynamic batching.
DERIVED: dict[str, frozenset[str]] = {
    "sequence_parallel": frozenset({"tp"}),
    "vpp": frozenset({"pp"}),
    "recompute_method": frozenset({"recompute"}),
    "recompute_num_layers": frozenset({"recompute", "recompute_method"}),
    "recompute_modules": frozenset({"recompute"}),
    "ppo_max_token_len_per_gpu": frozenset({"use_dynamic_bsz"}),
    "log_prob_max_token_len_per_gpu": frozenset({"use_dynamic_bsz"}),
    "ppo_micro_batch_size_per_gpu": frozenset({"use_dynamic_bsz"}),
    "log_prob_micro_batch_size_per_gpu": frozenset({"use_dynamic_bsz"}),
    "optimizer_offload_fraction": frozenset({"optimizer_cpu_offload"}),
}
NORMALIZATION_READS = frozenset().union(*DERIVED.values())
NORMALIZED_FIELDS = frozenset(DERIVED)

# Static rules (autotune/estimate/constraints.py RULES).
RULE_READS: dict[str, frozenset[str]] = {
    "world_size": frozenset({"tp", "pp", "cp"}),
    "tp_fits_node": frozenset({"tp"}),
    "heads_per_tp": frozenset({"tp"}),
    "layers_per_stage": frozenset({"pp", "vpp"}),
    "expert_parallel": frozenset({"tp", "pp", "ep", "etp", "sequence_parallel"}),
    "rollout_tp": frozenset({"rollout_tp"}),
    "token_budget": frozenset({"cp", "use_dynamic_bsz", "ppo_max_token_len_per_gpu",
                               "log_prob_max_token_len_per_gpu"}),
    "batch_divisibility": frozenset({"tp", "pp", "cp", "use_dynamic_bsz", "ppo_micro_batch_size_per_gpu",
                                     "log_prob_micro_batch_size_per_gpu"}),
    "recompute": frozenset({"recompute", "recompute_method", "recompute_num_layers", "pp", "vpp"}),
    "host_memory": _STATES | _OFFLOAD | CPU_OPTIMIZER_KEYS | _REF,
}


# Pieces that are a sum of a part reading the offload flags (with the parameter layout) and a part reading the rest:
# the weights, gradients and optimizer states kept on the GPU in a log-prob pass, and the host<->device copies of
# offload in a phase's time. piece -> (the offload knobs, what else their part reads). The ranking then evaluates
# the rest once for every offload setting. tests/test_reads.py checks the sums on random candidates.
OFFLOAD_REFERENCE = {"param_offload": False, "optimizer_offload": False, "ref_param_offload": None,
                     "optimizer_cpu_offload": False, "optimizer_offload_fraction": None}
_ADD_STATES = (frozenset(OFFLOAD_REFERENCE), _STATES)
_ADD_COPIES = (frozenset({"param_offload", "optimizer_offload"}), _STATES | {"cp"})
# The update's copies and the CPU optimizer's step (what stays on the GPU decides what verl's offload moves).
_ADD_UPDATE = (_OFFLOAD | CPU_OPTIMIZER_KEYS, _STATES | {"cp"})


@dataclass(frozen=True)
class Reads:
    """The knobs each piece of one study's estimate reads (they depend on the objective and on the job)."""

    phases: dict[str, frozenset[str]]  # verl phase -> knobs its time reads
    moments: dict[str, frozenset[str]]  # memory moment -> knobs its peak reads ("vllm_kv_cache": the KV check)
    tokens: frozenset[str]  # knobs the tokens per step read (none for a whole step: the job fixes them)
    rules: dict[str, frozenset[str]]
    additive: dict[tuple[str, str], tuple[frozenset[str], frozenset[str]]] = field(default_factory=dict)


def reads_for(objective: str, job: Job) -> Reads:
    """The reads of a study's estimates: `objective` as estimate.evaluate takes it, `job` for what it switches on
    (a reference model, vLLM sleeping between rollouts)."""
    from autotune.estimate import constraints

    rules = {name: RULE_READS.get(name, ALL) for name in constraints.RULES}
    ref = _REF if job.has_ref_model else frozenset()  # without a reference model nothing of it is on the GPU
    update = _LAYOUT | _TRAIN_MB | RECOMPUTE_KEYS | ref | CPU_OPTIMIZER_KEYS | {"use_fused_kernels"}
    update_time = ((_LAYOUT - {"sequence_parallel"}) | _TRAIN_MB | {"recompute", "recompute_modules"} | _OFFLOAD
                   | CPU_OPTIMIZER_KEYS)
    if objective == "train":
        rules.pop("rollout_tp", None)
        return Reads({"update_actor": update_time}, {"update": update}, frozenset({"cp"}) | _TRAIN_MB, rules,
                     {("phase", "update_actor"): _ADD_UPDATE})
    # Without free_cache_engine vLLM never sleeps: its whole share (gpu_memory_utilization) is in every moment.
    asleep = frozenset() if job.free_cache_engine else _UTIL
    # vpp: with it verl makes the micro-batches a multiple of PP (estimate/batching.py partition_tokens)
    log_prob = (_LAYOUT | _LP_MB | {"recompute", "recompute_modules", "use_fused_kernels"} | _OFFLOAD
                | CPU_OPTIMIZER_KEYS | ref | asleep)
    lp_time = (_LAYOUT - {"sequence_parallel", "vpp"}) | _LP_MB | {"use_fused_kernels"}  # unfused logits
    phases = {
        "gen": _VLLM,
        "old_log_prob": lp_time | _OFFLOAD,
        "update_actor": update_time | {"use_fused_kernels"},
        "update_weights": _STATES | {"rollout_tp", "param_offload"},
        "adv": frozenset(),
    }
    moments = {
        "vllm_start": _STATES | _OFFLOAD | CPU_OPTIMIZER_KEYS | ref | _UTIL,
        "reshard": _STATES | _OFFLOAD | CPU_OPTIMIZER_KEYS | ref | {"rollout_tp"} | _UTIL,
        "rollout": _STATES | _OFFLOAD | CPU_OPTIMIZER_KEYS | ref | _UTIL,
        "old_log_prob": log_prob,
        "update": update | asleep,
        "vllm_kv_cache": _VLLM,
    }
    additive = {("phase", "update_actor"): _ADD_UPDATE, ("phase", "old_log_prob"): _ADD_COPIES,
                ("phase", "update_weights"): (frozenset({"param_offload"}), _STATES),
                ("moment", "old_log_prob"): _ADD_STATES}
    if job.has_ref_model:
        phases["ref"] = lp_time | _REF
        additive[("phase", "ref")] = (_REF, _STATES)
        moments["ref_log_prob"] = log_prob
        additive[("moment", "ref_log_prob")] = _ADD_STATES
        additive[("moment", "update")] = (frozenset({"param_offload", "ref_param_offload"}), _STATES)
    return Reads(phases, moments, frozenset(), rules, additive)
