"""Static constraints: what Megatron, vLLM and verl refuse, checked before anything is estimated or launched.

Each rule is a pure function of (model, cluster, job, candidate) returning the broken rule in words, or None.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from autotune.candidate import Candidate
from autotune.cluster import Cluster
from autotune.estimate.host import estimate_host
from autotune.estimate.memory import model_state_bytes, ref_param_bytes
from autotune.job import Job
from autotune.model import ModelArch


@dataclass(frozen=True)
class Violation:
    rule: str
    message: str

    def __str__(self) -> str:
        return f"{self.rule}: {self.message}"


Rule = Callable[[ModelArch, Cluster, Job, Candidate], "str | None"]
RULES: dict[str, Rule] = {}


def rule(name: str) -> Callable[[Rule], Rule]:
    def register(fn: Rule) -> Rule:
        RULES[name] = fn
        return fn

    return register


def data_parallel(cluster: Cluster, c: Candidate) -> int:
    return cluster.world_size // (c.tp * c.pp * c.cp)


@rule("world_size")
def _world(m: ModelArch, cl: Cluster, j: Job, c: Candidate) -> str | None:
    mp = c.tp * c.pp * c.cp
    if cl.world_size % mp:
        return f"{cl.world_size} GPUs are not divisible by TP*PP*CP = {c.tp}*{c.pp}*{c.cp} = {mp}"
    return None


@rule("tp_fits_node")
def _tp_node(m: ModelArch, cl: Cluster, j: Job, c: Candidate) -> str | None:
    if cl.gpus_per_node % c.tp:
        return f"TP={c.tp} must divide the {cl.gpus_per_node} GPUs of a node (TP runs over NVLink)"
    return None


@rule("heads_per_tp")
def _heads(m: ModelArch, cl: Cluster, j: Job, c: Candidate) -> str | None:
    if m.num_attention_heads % c.tp:
        return f"{m.num_attention_heads} attention heads are not divisible by TP={c.tp}"
    if not m.is_mla and m.num_kv_heads % c.tp:
        return f"{m.num_kv_heads} KV heads are not divisible by TP={c.tp} (Megatron shards KV heads over TP)"
    return None


@rule("layers_per_stage")
def _layers(m: ModelArch, cl: Cluster, j: Job, c: Candidate) -> str | None:
    chunks = c.pp * c.vpp_or_1
    if c.vpp is not None and c.pp == 1:
        return "VPP needs PP > 1"
    if m.num_layers % chunks:
        what = f"PP*VPP = {c.pp}*{c.vpp}" if c.vpp else f"PP={c.pp}"
        return f"{m.num_layers} layers are not divisible by {what}"
    return None


@rule("expert_parallel")
def _experts(m: ModelArch, cl: Cluster, j: Job, c: Candidate) -> str | None:
    if not m.is_moe:
        if c.ep != 1 or c.etp not in (None, c.tp):
            return f"EP={c.ep}/ETP={c.etp} apply only to MoE models; {m.name} is dense"
        return None
    if m.num_experts % c.ep:
        return f"{m.num_experts} experts are not divisible by EP={c.ep}"
    expert_mp = c.ep * c.etp_or_tp * c.pp
    if cl.world_size % expert_mp:
        return f"{cl.world_size} GPUs are not divisible by EP*ETP*PP = {c.ep}*{c.etp_or_tp}*{c.pp} = {expert_mp}"
    if c.tp > 1 and c.ep > 1 and not c.sequence_parallel:
        return "Megatron needs sequence parallel for MoE with TP>1 and EP>1"
    return None


@rule("rollout_tp")
def _rollout(m: ModelArch, cl: Cluster, j: Job, c: Candidate) -> str | None:
    if cl.gpus_per_node % c.rollout_tp:
        return f"rollout TP={c.rollout_tp} must divide the {cl.gpus_per_node} GPUs of a node"
    if m.num_attention_heads % c.rollout_tp:
        return f"{m.num_attention_heads} attention heads are not divisible by rollout TP={c.rollout_tp} (vLLM)"
    return None


@rule("token_budget")
def _budget(m: ModelArch, cl: Cluster, j: Job, c: Candidate) -> str | None:
    if not c.use_dynamic_bsz:
        return None
    need = j.max_seq_len
    for name, budget in (("ppo_max_token_len_per_gpu", c.ppo_max_token_len_per_gpu),
                         ("log_prob_max_token_len_per_gpu", c.log_prob_max_token_len_per_gpu)):
        if budget * c.cp < need:
            return (f"{name}={budget} * CP={c.cp} = {budget * c.cp} cannot hold one sequence of "
                    f"prompt+response = {need} tokens")
    return None


@rule("batch_divisibility")
def _batch(m: ModelArch, cl: Cluster, j: Job, c: Candidate) -> str | None:
    if cl.world_size % (c.tp * c.pp * c.cp):
        return None  # reported by world_size
    dp = data_parallel(cl, c)
    samples = j.train_batch_size * j.rollout_n
    if samples % dp:
        return f"train_batch_size*n = {samples} samples are not divisible by DP={dp}"
    mini = j.ppo_mini_batch_size * j.rollout_n
    if mini % dp:
        return f"ppo_mini_batch_size*n = {mini} samples are not divisible by DP={dp}"
    if c.use_dynamic_bsz:
        return None
    per_gpu = mini // dp
    if c.ppo_micro_batch_size_per_gpu is None or c.log_prob_micro_batch_size_per_gpu is None:
        return ("without dynamic batching verl needs ppo_micro_batch_size_per_gpu and "
                f"log_prob_micro_batch_size_per_gpu: set both (ppo's dividing the mini-batch per GPU, {mini}/{dp} = "
                f"{per_gpu} samples), or use_dynamic_bsz=true")
    if per_gpu % c.ppo_micro_batch_size_per_gpu:
        return (f"the mini-batch per GPU ({mini}/{dp} = {per_gpu} samples) is not divisible by "
                f"ppo_micro_batch_size_per_gpu={c.ppo_micro_batch_size_per_gpu}")
    return None


@rule("recompute")
def _recompute(m: ModelArch, cl: Cluster, j: Job, c: Candidate) -> str | None:
    if c.recompute != "full":
        return None
    per_chunk = m.num_layers // (c.pp * c.vpp_or_1) or m.num_layers
    n = c.recompute_num_layers or 1
    if c.recompute_method == "block" and n > per_chunk:
        return f"block recompute of {n} layers exceeds the {per_chunk} layers of a pipeline chunk"
    if c.recompute_method == "uniform" and per_chunk % n:
        return f"uniform recompute groups of {n} layers do not divide the {per_chunk} layers of a pipeline chunk"
    return None


@rule("host_memory")
def _host_memory(m: ModelArch, cl: Cluster, j: Job, c: Candidate) -> str | None:
    """What offload and the CPU optimizer keep on the host, where the node's memory is known (estimate/host.py):
    a rule, not a GPU memory moment, because no sequence length or GPU memory correction changes it."""
    if not cl.host_memory_gib:
        return None
    ref = ref_param_bytes(m, c) if j.has_ref_model else 0.0
    return estimate_host(cl, c, model_state_bytes(m, cl, c), ref).reason() or None


def check(model: ModelArch, cluster: Cluster, job: Job, cand: Candidate) -> list[Violation]:
    """Every rule the candidate breaks (empty when it can be launched)."""
    out = []
    for name, fn in RULES.items():
        msg = fn(model, cluster, job, cand)
        if msg:
            out.append(Violation(name, msg))
    return out
