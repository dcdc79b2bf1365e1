"""Per-GPU peak memory at the moments that run out of memory in verl's hybrid engine.

Formulas and sources: ../shared/reference/MEMORY.md. All sizes in bytes; pure functions of
(model, cluster, job, candidate). The constants in `Calibration` are the model's only free numbers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from autotune import units, verl
from autotune.candidate import Candidate
from autotune.cluster import GIB, Cluster
from autotune.estimate.batching import BatchingPlan, plan_batching
from autotune.estimate.host import HostEstimate, estimate_host
from autotune.estimate.lengths import Lengths, worst_case
from autotune.estimate.offload import cpu_fraction, cpu_optimizer_bytes, gpu_optimizer
from autotune.job import Job
from autotune.model import ModelArch


@dataclass(frozen=True)
class Calibration:
    """Free constants of the memory model (bytes per token per layer are multiples of widths).

    The defaults are for verl 0.9.1 as it runs Megatron: Transformer Engine's layers (RMSNorm fused into the
    linear layers) but SwiGLU in plain PyTorch (verl leaves `bias_activation_fusion` off, so megatron's mlp.py
    `glu` runs: see `act_f`). The logits, CUDA context, NCCL and pipeline structure were fitted on Megatron-core
    probes measured on H200s (benchmarks/results/mcore_*.csv; errors in benchmarks/results/memory_accuracy.md):
    6 B per logit there (Megatron's cross entropy), 10 under verl (`logits_bytes`). The widths and
    the allocator slack were checked against verl's own `perf/max_memory_allocated_gb` / `_reserved_gb` and the
    OOM messages of the real trials (tests/data/real_verl_gpu/; benchmarks/results/calibration.md). The probes run
    Megatron's local layer spec (unfused norms and RoPE too): for them `PROBE_CALIBRATION` (12h + 8q + 4kv + 8f,
    fitted, and their own allocator slack) replaces these widths.
    """

    act_h: float = 8.0  # norm inputs and residual stream (bytes per element of h)
    act_q: float = 6.0  # query-sized tensors: q, attention output, the projection's input
    act_kv: float = 4.0
    # SwiGLU as megatron's mlp.py `glu` runs it (bias_activation_fusion off, verl's default), bf16: fc1's output
    # (2f, kept by silu through x_glu), silu's output (f), `x_linear + glu_linear_offset` (f: the add makes a new
    # tensor) and their product, fc2's saved input (f). MEMORY.md's 6f assumed the fused bias_swiglu kernel.
    # Checked: the 7B OOM (134.06 GiB allocated in glu, layer ~27 of 28) and verl's max_memory_allocated_gb of
    # the 1.5B and 3B trials, which 6f missed by 11-14 GiB.
    act_f: float = 10.0
    # The update's logits without fused kernels, per [token, vocab/TP] element: verl's bf16 logits, their fp32 copy
    # and the fp32 log-softmax its backward keeps (MEMORY.md's 10). The offloaded 0.5B updates at dyn16k (lease 4,
    # 24, 28: nothing of the log-prob pass's cache left under them) measured 9-10 once their micro-batches were
    # verl's partitions; Megatron's own cross entropy (the probes) keeps 6 (`PROBE_CALIBRATION`).
    logits_bytes: float = 10.0
    # Forward-only logits (no fused kernels): the bf16 logits and the fp32 tensors verl's log-prob and entropy hold
    # with them. Measured, not derived: 51.6 GiB allocated beyond the states and one layer's activations at a
    # ~31k-token log-prob micro-batch of Qwen2.5-0.5B (c-0.5b #1 and #2 alike), 11.6-11.9 B per element.
    logprob_logits_bytes: float = 12.0
    fused_logits_bytes_per_h: float = 8.0  # fused kernels: O(T*h)
    fused_logits: bool = True  # verl's use_fused_kernels avoids full logits; the probes never fuse them
    cuda_context: float = 1.5 * GIB  # per process (the actor and the vLLM server each hold one), cuBLAS workspace
    nccl: float = 1.2 * GIB  # communicator buffers of the actor's process groups
    cudagraph_pool: float = 1.0 * GIB  # vLLM CUDA graphs (outside its memory budget; none with enforce_eager)
    # Allocator reserve over what tensors hold, share of torch-managed memory. Under verl it is small: its peak
    # reserved - peak allocated was 0.05-0.44 GiB (at most 0.6%) in every trial with fused kernels; the probes'
    # 8% (PROBE_CALIBRATION) came from the local spec's many unfused temporaries.
    fragmentation: float = 0.0
    # Materialized logits (no fused kernels) are the blocks that stay reserved once freed and re-split: peak
    # reserved - allocated was 1.6-16 GiB in those trials, 10-29% of the log-prob logits.
    logits_slack: float = 0.1
    # With full recompute the freed logits blocks are split by the recomputed layers' tensors and stay reserved.
    recompute_logits_slack: float = 0.2
    vllm_nontorch: float = 0.3 * GIB
    # Unfused attention (`attention_backend=unfused`, what `autotune doctor` picks where cuDNN's fused attention
    # fails) materializes each sequence's [heads, s, s] scores, padded to the micro-batch's longest sequence
    # (Transformer Engine's UnfusedDotProductAttention): per element the fp32 softmax output its backward keeps
    # plus the bf16 probabilities the value product keeps. Transformer Engine source; checked against the H100
    # OOM of 2026-11-24 (benchmarks/results/real_verl_gpu.md), not fitted.
    unfused_attn_bytes: float = 6.0


DEFAULT_CALIBRATION = Calibration()
# verl 0.4-era runs on Megatron-core 0.13 (the verl_megatron_practice tables): its mlp.py `glu` was
# `silu(x[0]) * x[1]`, without today's `x_linear + glu_linear_offset` copy, so SwiGLU kept 8f, not 10f.
MCORE_013_CALIBRATION = Calibration(act_f=8.0)
DEFAULT_BUCKET_MB = 2048  # verl's update_weights_bucket_megabytes default
# Megatron-core's local layer spec (unfused norm, SwiGLU, RoPE), as the mcore probes run it; fitted on them.
PROBE_CALIBRATION = Calibration(act_h=12.0, act_q=8.0, act_kv=4.0, act_f=8.0, fused_logits=False, logits_bytes=6.0,
                                logprob_logits_bytes=10.0, fragmentation=0.08, logits_slack=0.0)


@dataclass(frozen=True)
class Moment:
    """One moment's per-GPU memory as named terms (bytes) against the card's capacity."""

    name: str
    terms: tuple[tuple[str, float], ...]
    capacity: float
    what: str = ""

    @property
    def peak(self) -> float:
        return sum(v for _, v in self.terms)

    @property
    def fits(self) -> bool:
        return self.peak <= self.capacity

    def as_dict(self) -> dict:
        return {
            "peak_gib": round(self.peak / GIB, 3),
            "capacity_gib": round(self.capacity / GIB, 3),
            "fits": self.fits,
            "what": self.what,
            "terms_gib": {k: round(v / GIB, 3) for k, v in self.terms},
        }


@dataclass(frozen=True)
class MemoryEstimate:
    moments: tuple[Moment, ...]
    kv_cache_bytes: float  # per GPU, what vLLM can give the KV cache
    kv_needed_bytes: float  # one request of max_model_len
    kv_bytes_per_token: float  # per GPU of a rollout replica
    notes: tuple[str, ...] = field(default=())
    lengths: Lengths | None = None  # the sequence lengths assumed
    batching: BatchingPlan | None = None  # the micro-batches at those lengths
    host: HostEstimate | None = None  # the node's host memory (offload, CPU optimizer): its check is a static rule

    @property
    def bound(self) -> str:
        """What bounds a micro-batch, in words."""
        return self.batching.bound if self.batching else ""

    @property
    def peak(self) -> float:
        return max(m.peak for m in self.moments)

    @property
    def binding(self) -> Moment:
        return max(self.moments, key=lambda m: m.peak / m.capacity)

    @property
    def kv_fits(self) -> bool:
        return self.kv_cache_bytes >= self.kv_needed_bytes

    @property
    def fits(self) -> bool:
        return all(m.fits for m in self.moments) and self.kv_fits  # the host's memory is a rule (constraints.py)

    def reasons(self) -> list[str]:
        """Why it does not fit, in words (empty when it fits)."""
        out = [
            f"{m.name}: predicted {units.gib(m.peak / GIB)} GiB > {units.gib(m.capacity / GIB)} GiB "
            f"(largest: {max(m.terms, key=lambda t: t[1])[0]})"
            for m in self.moments
            if not m.fits
        ]
        if not self.kv_fits:
            out.append(
                f"vllm_kv_cache: {self.kv_cache_bytes / GIB:.2f} GiB of KV cache cannot hold one request of "
                f"max_model_len ({self.kv_needed_bytes / GIB:.2f} GiB needed)"
            )
        return out

    def moment(self, name: str) -> Moment:
        return next(m for m in self.moments if m.name == name)

    def as_dict(self) -> dict:
        return {
            "fits": self.fits,
            "peak_gib": round(self.peak / GIB, 3),
            "binding_moment": self.binding.name,
            "moments": {m.name: m.as_dict() for m in self.moments},
            "kv_cache_gib": round(self.kv_cache_bytes / GIB, 3),
            "kv_needed_gib": round(self.kv_needed_bytes / GIB, 3),
            "reasons": self.reasons(),
            "notes": list(self.notes),
            "lengths": self.lengths.as_dict() if self.lengths else None,
            "micro_batch_bound": self.bound,
            "host": self.host.as_dict() if self.host else None,
        }


@dataclass(frozen=True)
class ParamCounts:
    """Parameters held by the most loaded GPU (first or last pipeline stage)."""

    dense: float  # sharded by TP/PP, replicated over DP*CP
    expert: float  # sharded by EP*ETP/PP, replicated over expert DP

    @property
    def total(self) -> float:
        return self.dense + self.expert


def params_per_gpu(m: ModelArch, c: Candidate) -> ParamCounts:
    t, p = c.tp, c.pp
    h = m.hidden_size
    dense_layers = m.num_dense_layers / p
    moe_layers = m.num_moe_layers / p
    layer = m.attention_params_per_layer() / t + 2 * h
    body = (m.num_layers / p) * layer + dense_layers * m.dense_mlp_params_per_layer(False) / t
    body += moe_layers * (m.dense_mlp_params_per_layer(True) / t + h * m.num_experts)
    emb = m.vocab_size * h / t
    if p == 1:
        dense = body + emb * (1 if m.tie_word_embeddings else 2)
    else:
        dense = body + emb  # first stage: embedding; last stage: output layer (a copy when tied)
    expert = moe_layers * m.expert_params_per_layer() / (c.ep * c.etp_or_tp) if m.is_moe else 0.0
    return ParamCounts(dense, expert)


def model_state_bytes(m: ModelArch, cl: Cluster, c: Candidate) -> dict[str, float]:
    """bf16 params, fp32 grads, and the distributed optimizer's fp32 master + Adam moments (sharded)."""
    pc = params_per_gpu(m, c)
    d_dense = cl.world_size / (c.tp * c.pp)
    d_expert = cl.world_size / (c.pp * c.ep * c.etp_or_tp)
    return {
        "params": 2 * pc.total,
        "grads": 4 * pc.total,
        "optimizer_master": 4 * (pc.dense / d_dense + pc.expert / d_expert),
        "optimizer_adam": 8 * (pc.dense / d_dense + pc.expert / d_expert),
    }


def unfused_scores_bytes_per_token(m: ModelArch, c: Candidate, cal: Calibration, seq_len: float) -> float:
    """Unfused attention's score matrices per token of one layer on one GPU: heads/TP x the padded length."""
    return cal.unfused_attn_bytes * m.num_attention_heads / c.tp * seq_len


def recomputes(c: Candidate, module: str) -> bool:
    """Whether selective recompute names `module` (core_attn, mlp, ...)."""
    return c.recompute == "selective" and module in (c.recompute_modules or "").split(",")


def sp_split(c: Candidate) -> int:
    """How many ways sequence parallelism splits the tokens of what it covers (norms, residual stream)."""
    return c.tp if c.sequence_parallel and c.tp > 1 else 1


def act_bytes_per_token_layer(m: ModelArch, c: Candidate, cal: Calibration, moe_layer: bool,
                              unfused_seq_len: float = 0.0) -> float:
    """Saved activations of one layer per token on one GPU (before recompute and pipelining).

    `unfused_seq_len`: with unfused attention, the longest sequence of a micro-batch (its scores are saved too).
    A log-prob pass holds less (`forward_peak_bytes`).
    """
    t = c.tp
    attn = cal.act_q * m.q_size + cal.act_kv * m.kv_size
    if m.qk_norm:
        attn += 2 * (m.q_size + m.kv_size)
    if recomputes(c, "core_attn"):
        attn -= 2 * m.q_size  # the attention output is recomputed; with flash attention that is all it saves
    elif unfused_seq_len:
        attn += unfused_scores_bytes_per_token(m, c, cal, unfused_seq_len) * t  # divided by t below
    if moe_layer:
        # Per GPU, a layer sees its own (sequence-parallel) tokens' top-k expert slots, whatever ETP is: with
        # ETP=TP tokens are gathered and each rank computes 1/TP of every expert, with ETP=1 they stay split.
        mlp = cal.act_f * (m.moe_top_k * m.moe_ffn_hidden_size + m.shared_expert_ffn_hidden_size)
        mlp += 4 * m.num_experts  # fp32 router logits
        # The permuted tokens the experts read: gathered over TP when ETP = TP, split when ETP = 1.
        mlp += 2 * m.moe_top_k * m.hidden_size * (t if c.etp_or_tp == t else 1)
    else:
        mlp = cal.act_f * m.ffn_hidden_size
    if recomputes(c, "mlp"):
        mlp = 0.0
    return (attn + mlp) / t + cal.act_h * m.hidden_size / sp_split(c)


def mlp_width(m: ModelArch) -> float:
    """The widest MLP a token passes through: the dense FFN, or its top-k experts and the shared expert."""
    return max(m.ffn_hidden_size or 0,
               m.moe_top_k * m.moe_ffn_hidden_size + m.shared_expert_ffn_hidden_size if m.is_moe else 0)


def recomputed_mlp_bytes(m: ModelArch, c: Candidate, cal: Calibration) -> float:
    """Per token on one GPU, what the backward of a selectively recomputed MLP holds at once: its forward's tensors
    again (`act_f` a width) and fc1's output gradient (bf16, two widths: 4 bytes). Lease 40's partitions put the
    7B's `core_attn,mlp` updates 8-12 % under NVML without it (benchmarks/results/memory_moments.md)."""
    return (cal.act_f + 4.0) * mlp_width(m) / c.tp if recomputes(c, "mlp") else 0.0


def forward_peak_bytes(m: ModelArch, c: Candidate, cal: Calibration) -> float:
    """Per token on one GPU, the peak of a forward without grad (a log-prob pass): one layer's tensors at a time, the
    largest being the MLP's (fc1's output and SwiGLU's temporaries, `act_f` a width) over the residual stream
    (`act_h`); recompute changes nothing there. At verl's partitions this puts the 0.5B-7B old_log_prob moments
    within +1 to +7 % of NVML, where a training layer's saved tensors and the budget put them +13 to +24 %
    (benchmarks/results/real_verl_gpu.md, leases 38 and 39)."""
    return cal.act_f * mlp_width(m) / c.tp + cal.act_h * m.hidden_size / sp_split(c)


def unfused_seq_len(job: Job, lengths: Lengths) -> float:
    """The padded length unfused attention's scores take (0.0 when the job's attention backend is fused)."""
    return float(lengths.seq_max) if job.attention_backend == "unfused" else 0.0


def activation_bytes(m: ModelArch, cl: Cluster, job: Job, c: Candidate, cal: Calibration,
                     lengths: Lengths | None = None) -> float:
    """Activations held on the first pipeline stage at the peak of the 1F1B (or interleaved) schedule."""
    ln = lengths or worst_case(job)
    return stage_activation_bytes(m, c, cal, plan_batching(job, cl, c, ln), unfused_seq_len(job, ln))[0]


def stage_activation_bytes(m: ModelArch, c: Candidate, cal: Calibration, plan: BatchingPlan,
                           unfused_len: float = 0.0) -> tuple[float, float]:
    """(first stage: PP micro-batches in flight; last stage: one micro-batch, where the logits also live)."""
    s = plan.update_tokens
    a_dense = act_bytes_per_token_layer(m, c, cal, False, unfused_len)
    a_moe = act_bytes_per_token_layer(m, c, cal, True, unfused_len)
    layers_chunk = m.num_layers / (c.pp * c.vpp_or_1)
    a_layer = (m.num_dense_layers * a_dense + m.num_moe_layers * a_moe) / m.num_layers
    layer_input = 2 * m.hidden_size / sp_split(c)
    if c.recompute == "full":
        n = c.recompute_num_layers or 1
        if c.recompute_method == "block":
            kept = min(n, layers_chunk) * layer_input + max(0.0, layers_chunk - n) * a_layer
        else:
            kept = layers_chunk / n * layer_input
        per_chunk = kept
        transient = n * a_layer if c.recompute_method != "block" else a_layer
    else:
        per_chunk = layers_chunk * a_layer
        # unfused scores of the one layer whose core attention is being recomputed (selective core_attn), and the
        # one layer whose MLP is (selective mlp)
        transient = unfused_scores_bytes_per_token(m, c, cal, unfused_len) if recomputes(c, "core_attn") else 0.0
        transient += recomputed_mlp_bytes(m, c, cal)
    if c.pp > 1:
        in_flight = min(c.pp, plan.update_micro_batches) * c.vpp_or_1
        if c.vpp_or_1 > 1:
            in_flight *= 1 + (c.pp - 1) / (c.pp * c.vpp_or_1)
    else:
        in_flight = 1
    first = s * (per_chunk * in_flight + transient)
    return first, (s * (per_chunk * c.vpp_or_1 + transient) if c.pp > 1 else first)


def logits_bytes(m: ModelArch, c: Candidate, tokens: float, per_element: float, cal: Calibration) -> float:
    if c.use_fused_kernels and cal.fused_logits:
        return tokens * m.hidden_size * cal.fused_logits_bytes_per_h
    return tokens * m.vocab_size / c.tp * per_element


def kv_bytes_per_token(m: ModelArch, rollout_tp: int) -> float:
    """vLLM KV cache per token on one GPU of a replica (KV heads replicate past their count; MLA keeps a latent)."""
    if m.is_mla:
        return m.num_layers * (m.kv_lora_rank + m.qk_rope_head_dim) * 2
    return 2 * m.num_layers * max(1.0, m.num_kv_heads / rollout_tp) * m.head_dim * 2


def vllm_weight_bytes(m: ModelArch, rollout_tp: int) -> float:
    return 2 * m.total_params() / rollout_tp


def vllm_activation_bytes(m: ModelArch, job: Job, c: Candidate) -> float:
    """vLLM's profiling run at max_num_batched_tokens (its forward keeps only a few tensors alive)."""
    tokens = c.max_num_batched_tokens
    width = 3 * (m.ffn_hidden_size or m.moe_top_k * m.moe_ffn_hidden_size) + 4 * m.hidden_size + m.q_size
    return tokens * 2 * width / c.rollout_tp + job.max_num_seqs * m.vocab_size * 4


def reshard_buffer_bytes(m: ModelArch, job: Job) -> float:
    """Weight resharding's transient: one GPU bucket of the sender plus the largest tensor gathered whole (HF form).

    verl/workers/rollout/vllm_rollout/bucketed_weight_transfer.py allocates a `bucket_size` uint8 buffer on the
    GPU (update_weights_bucket_megabytes, 2048 MiB by default); the bridge gathers each tensor over TP/PP first,
    the largest being the embedding or the output layer (vocab x hidden, bf16).
    """
    bucket_mb = float(job.get(verl.UPDATE_WEIGHTS_BUCKET_MB, DEFAULT_BUCKET_MB) or DEFAULT_BUCKET_MB)
    return bucket_mb * 2**20 + 2.0 * m.vocab_size * m.hidden_size


def ref_param_bytes(m: ModelArch, c: Candidate) -> float:
    """The reference model: a bf16 copy of the weights sharded like the actor, forward only (no grads, no optimizer)."""
    return 2 * params_per_gpu(m, c).total


def as_nvml_sees(peaks: Mapping[str, float], param_offload: bool) -> dict[str, float]:
    """Each moment's peak as NVML reads it (any unit): the update runs on what the log-prob passes left in PyTorch's
    cache, since verl 0.9.1 empties the cache only around the weight sync and when it moves an offloaded actor
    (workers/engine_workers.py, utils/megatron_utils.py `empty_cache`), never between the log-prob pass and the
    update. The verdicts need none of this (the allocator frees its cache and retries before it runs out of
    memory): it is what a trial's trace shows (autotune/results/memory_trace.py)."""
    out = dict(peaks)
    if "update" in out and not param_offload:
        out["update"] = max([out["update"]] + [out[m] for m in ("old_log_prob", "ref_log_prob") if m in out])
    return out


def estimate_memory(
    m: ModelArch, cl: Cluster, job: Job, c: Candidate, cal: Calibration = DEFAULT_CALIBRATION,
    lengths: Lengths | None = None,
) -> MemoryEstimate:
    """Per-GPU memory at each moment of a GRPO step, at the given sequence lengths (default: the worst case).

    What is on the GPU at each moment, and the verl/vLLM source line of each term: docs/memory_model.md.
    """
    ln = lengths or worst_case(job)
    plan = plan_batching(job, cl, c, ln)
    has_ref, sleeps = job.has_ref_model, job.free_cache_engine  # read once: a job lookup is not free
    total = cl.gpu.memory_bytes
    states = model_state_bytes(m, cl, c)
    master, adam = gpu_optimizer(states, c)  # what Megatron's CPU optimizer leaves on the GPU
    optimizer = master + adam
    ref = ref_param_bytes(m, c) if has_ref else 0.0
    ref_resident = 0.0 if c.ref_offloaded else ref

    def refs(value: float) -> tuple[tuple[str, float], ...]:
        return (("ref_params", value),) if has_ref else ()  # no reference model: no such term
    # What the actor keeps on the GPU between its own passes: the offload flags decide (engine/base.py).
    kept_params = 0.0 if c.param_offload else states["params"]
    kept_grads = 0.0 if c.param_offload else states["grads"]
    kept_opt = 0.0 if c.optimizer_offload else optimizer
    budget = total * c.gpu_memory_utilization
    graphs = 0.0 if job.enforce_eager else cal.cudagraph_pool
    vllm_weights = vllm_weight_bytes(m, c.rollout_tp)
    # vLLM asleep (level 2 in verl's hybrid engine): weights and KV cache freed; the CUDA-graph pool and its
    # non-torch memory stay. Without free_cache_engine vLLM never sleeps and keeps its whole share.
    asleep = ("vllm_asleep", graphs + cal.vllm_nontorch) if sleeps else ("vllm_budget", budget)
    fixed = (("cuda_contexts", 2 * cal.cuda_context), ("nccl", cal.nccl))

    # 1. vLLM start: the actor is built (Adam moments are created lazily at the first step) and the reference too;
    # vLLM then needs gpu_memory_utilization x total free.
    vllm_start = Moment("vllm_start", (
        ("params", kept_params), ("grads", kept_grads),
        ("optimizer", 0.0 if c.optimizer_offload else master),
        *refs(ref_resident), *fixed, ("vllm_budget", budget),
    ), total, "vLLM needs gpu_memory_utilization x total GPU memory free when it starts")

    # 2. Resharding (update_weights): vLLM's weights woken, the actor's weights loaded to export, bucket in flight.
    reshard = Moment("reshard", (
        ("params", states["params"]), ("grads", kept_grads), ("optimizer", kept_opt), *refs(ref_resident),
        ("reshard_buffers", reshard_buffer_bytes(m, job)),
        ("vllm_weights", vllm_weights if sleeps else 0.0), asleep, *fixed,
    ), total, "update_weights: vLLM weights woken, actor weights loaded and sent in buckets")

    # 3. Rollout: the actor offloaded what its flags say, the KV cache woken: vLLM holds its whole share.
    rollout = Moment("rollout", (
        ("params", kept_params), ("grads", kept_grads), ("optimizer", kept_opt), *refs(ref_resident),
        ("vllm_budget", budget), *fixed,
    ), total, "KV cache woken and generation: actor residue + gpu_memory_utilization x total (weights, KV cache, "
              "activations and CUDA graphs are all inside that share in vLLM 0.24)")

    # 4-5. Log-prob passes (forward only; vLLM asleep).
    s_lp = plan.log_prob_tokens
    unfused_len = unfused_seq_len(job, ln)
    lp_acts = s_lp * (forward_peak_bytes(m, c, cal) + unfused_scores_bytes_per_token(m, c, cal, unfused_len))
    lp_logits = logits_bytes(m, c, s_lp, cal.logprob_logits_bytes, cal)

    def forward_pass(name: str, states_terms: tuple[tuple[str, float], ...], what: str) -> Moment:
        torch_managed = sum(v for _, v in states_terms) + lp_acts + lp_logits
        return Moment(name, (*states_terms, ("activations", lp_acts), ("logits", lp_logits),
                             ("fragmentation", cal.fragmentation * torch_managed + cal.logits_slack * lp_logits),
                             *fixed, asleep), total, what)

    # eval mode loads the actor's params, not its grads or optimizer (engine/base.py BaseEngineCtx).
    old_lp = forward_pass("old_log_prob", (("params", states["params"]), ("grads", kept_grads),
                                           ("optimizer", kept_opt), *refs(ref_resident)),
                          "actor forward over log_prob micro-batches (old policy); vLLM asleep")
    moments = [vllm_start, reshard, rollout, old_lp]
    if has_ref:
        moments.append(forward_pass("ref_log_prob", (("params", kept_params), ("grads", kept_grads),
                                                     ("optimizer", kept_opt), *refs(ref)),
                                    "reference forward (KL): reference weights loaded; actor as its flags leave it"))

    # 6. Update: the actor fully loaded (offload does not lower this peak), activations in flight, logits.
    s = plan.update_tokens
    first, last = stage_activation_bytes(m, c, cal, plan, unfused_len)
    logit = logits_bytes(m, c, s, cal.logits_bytes, cal)
    # With PP the in-flight activations (first stage) and the logits (last stage) are on different GPUs.
    acts, logit = (first, 0.0) if c.pp > 1 and first > last + logit else (last, logit)
    torch_managed = states["params"] + states["grads"] + optimizer + acts + logit
    moments.append(Moment("update", (
        ("params", states["params"]), ("grads", states["grads"]), ("optimizer", optimizer),
        *refs(ref_resident), ("activations", acts), ("logits", logit),
        ("fragmentation", cal.fragmentation * torch_managed + cal.logits_slack * logit
         + (cal.recompute_logits_slack * logit if c.recompute == "full" else 0.0)),
        *fixed, asleep,
    ), total, "update_actor: weights, fp32 grads, distributed optimizer, in-flight activations, logits"))

    kv_per_token = kv_bytes_per_token(m, c.rollout_tp)
    kv_cache = (budget - vllm_weights - vllm_activation_bytes(m, job, c) - cal.vllm_nontorch
                - graphs)  # vLLM 0.24 subtracts its CUDA-graph estimate from the share (gpu_worker.py)
    kv_needed = math.ceil(job.max_model_len / 16) * 16 * kv_per_token
    notes = []
    if c.param_offload or c.optimizer_offload:
        notes.append("offload lowers what stays on the GPU during rollout, not the update peak")
    if cpu_fraction(c):
        notes.append(f"CPU optimizer: {cpu_fraction(c):.0%} of the fp32 master and Adam moments on the CPU "
                     f"({cpu_optimizer_bytes(states, c) / GIB:.0f} GiB of host memory per GPU)")
    if has_ref:
        notes.append("reference model (KL) on the GPU " + ("only in its log-prob pass" if c.ref_offloaded
                                                            else "through the whole step (ref param_offload off)"))
    host = estimate_host(cl, c, states, ref)
    return MemoryEstimate(tuple(moments), kv_cache, kv_needed, kv_per_token, tuple(notes), ln, plan, host)
