"""Scaling a probe of a cut model (fewer layers) to the full model, with the rules written into each result.

A probe may run ``num_layers`` < ``full_num_layers`` to fit the machine; throughput scales by training FLOPs per
token and memory by the layer count above the part that does not grow with depth (embedding/output state,
logits, CUDA context). Pure functions of the spec and the measured result; standard library only.
"""

from __future__ import annotations

MEMORY_SCALING_RULE = (
    "mem_full = fixed + (mem_cut - fixed) * full_num_layers / num_layers, where fixed = bytes of the "
    "embedding/output weights held by the rank (bf16 param 2 B + fp32 grad 4 B + 12 B/dp_shard of "
    "distributed-optimizer state per parameter), the logits of one micro-batch without PP (6 B per "
    "[token, vocab/TP] element) and, for NVML readings, the memory in use before the model was built (CUDA "
    "context); everything else (layer weights, optimizer state, activations, allocator slack) is scaled "
    "with the layer count"
)
THROUGHPUT_SCALING_RULE = (
    "tokens_per_s_full = tokens_per_s_cut * F(num_layers) / F(full_num_layers), F(L) = training FLOPs per "
    "token = 6*[L*(h*(q+2kv) + q*h + 3*h*f_mlp) + 2*V*h] + 6*L*heads*head_dim*S (verl's flops_counter, causal "
    "attention halved, S = packed sequence length)"
)



def flops_per_token(model: dict, num_layers: int, seq_len: int) -> float:
    """Training FLOPs per token (verl's flops_counter form; causal attention halved)."""
    h = model["hidden_size"]
    q = model["num_attention_heads"] * model["head_dim"]
    kv = model["num_kv_heads"] * model["head_dim"]
    if model.get("num_experts", 0):
        mlp = 3 * h * model["moe_ffn_hidden_size"] * model["moe_top_k"] + h * model["num_experts"]
    else:
        mlp = 3 * h * model["ffn_hidden_size"]
    dense = num_layers * (h * (q + 2 * kv) + q * h + mlp) + 2 * model["vocab_size"] * h
    return 6.0 * dense + 6.0 * num_layers * model["num_attention_heads"] * model["head_dim"] * seq_len


def embedding_state_bytes(model: dict, layout: dict, world_size: int, stage_first: bool, stage_last: bool) -> float:
    """Bytes of embedding/output weights + grads + distributed-optimizer state on one rank."""
    tp, pp = layout["tp"], layout["pp"]
    d = max(1, world_size // (tp * pp))  # dp*cp ranks shard the distributed optimizer
    per_param = 2 + 4 + 12.0 / d
    emb = model["vocab_size"] * model["hidden_size"] / tp
    n = 0.0
    if stage_first:
        n += emb
    if stage_last and (not model.get("tie_word_embeddings") or pp > 1):
        n += emb
    return n * per_param


def scale_result(result: dict, spec: dict) -> dict:
    """Per-layer-scaled estimates for a spec whose model was cut to fewer layers."""
    m = spec["model"]
    L = m["num_layers"]
    Lf = spec["full_num_layers"]
    if Lf == L:
        return {}
    lay = spec["layout"]
    S = spec["tokens_per_microbatch"] * lay["cp"]
    ratio = flops_per_token(m, L, S) / flops_per_token(m, Lf, S)
    out = {"throughput_scaling_rule": THROUGHPUT_SCALING_RULE, "memory_scaling_rule": MEMORY_SCALING_RULE}
    for key in ("throughput_train", "throughput_fwd"):
        if result.get(key):
            out[key + "_scaled"] = result[key] * ratio
    if result.get("step_time_s"):
        out["step_time_s_scaled"] = result["step_time_s"] / ratio
    ws = result.get("world_size") or spec.get("world_size") or 1
    fixed = embedding_state_bytes(m, lay, ws, True, lay["pp"] == 1) / 2**30
    if lay["pp"] == 1:  # the logits of one micro-batch live on the same rank and do not grow with depth
        fixed += logits_bytes(m, lay, spec["tokens_per_microbatch"]) / 2**30
    for key in ("peak_alloc_gib_max", "peak_reserved_gib_max", "nvml_used_gib_max", "fwd_peak_alloc_gib_max"):
        v = result.get(key)
        if v:
            # NVML also counts the CUDA context, which does not grow with depth either.
            context = (result.get("nvml_baseline_gib") or 0.0) if key == "nvml_used_gib_max" else 0.0
            base = fixed + context
            out[key + "_scaled"] = base + max(0.0, v - base) * Lf / L
    return out


def logits_bytes(model: dict, layout: dict, tokens: int) -> float:
    """bf16 logits plus the fp32 softmax cross entropy keeps: about 6 B per [token, vocab/TP] element (measured)."""
    return 6.0 * tokens * model["vocab_size"] / layout["tp"]

