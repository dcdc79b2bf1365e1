"""Building the probe's model from a spec's architecture and layout with megatron-core.

Initialises Megatron's parallel state for the layout, builds ``GPTModel`` from ``get_gpt_layer_local_spec`` with
the worker's torch layers (``mcore_layers``) in place of the core attention and norms, one chunk per virtual
pipeline stage, wraps the chunks in bf16 and DDP, and makes the distributed Adam optimizer. torch and
megatron-core are imported inside ``build_model``.
"""

from __future__ import annotations


def build_model(spec: dict, mods: dict):
    """Megatron's parallel state, GPT model chunks (DDP, bf16), distributed optimizer for one spec.

    Returns (config, model chunks, optimizer, parameters on this rank); the caller tears the state down.
    """
    import megatron.core.transformer.transformer_block as tblock
    import torch
    import torch.nn.functional as F
    from megatron.core import parallel_state as ps
    from megatron.core import tensor_parallel
    from megatron.core.distributed import DistributedDataParallel as DDP
    from megatron.core.distributed import DistributedDataParallelConfig, finalize_model_grads
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.transformer import TransformerConfig
    from megatron.core.transformer.module import Float16Module

    m, lay = spec["model"], spec["layout"]
    moe = bool(m.get("num_experts", 0))
    # The same names in parallel_state and TransformerConfig.
    parallel = dict(
        tensor_model_parallel_size=lay["tp"],
        pipeline_model_parallel_size=lay["pp"],
        virtual_pipeline_model_parallel_size=lay["vpp"],
        context_parallel_size=lay["cp"],
        expert_model_parallel_size=lay["ep"],
        expert_tensor_parallel_size=lay["etp"],
    )
    ps.initialize_model_parallel(**parallel, create_gloo_process_groups=False)
    tensor_parallel.model_parallel_cuda_manual_seed(spec["seed"])
    kw = dict(
        num_layers=m["num_layers"],
        hidden_size=m["hidden_size"],
        num_attention_heads=m["num_attention_heads"],
        num_query_groups=m["num_kv_heads"],
        kv_channels=m["head_dim"],
        ffn_hidden_size=m.get("ffn_hidden_size") or m.get("moe_ffn_hidden_size"),
        add_bias_linear=False,
        add_qkv_bias=bool(m.get("qkv_bias")),
        qk_layernorm=bool(m.get("qk_norm")),
        gated_linear_unit=True,
        activation_func=F.silu,
        normalization="RMSNorm",
        layernorm_epsilon=1e-6,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        bf16=True,
        params_dtype=torch.bfloat16,
        pipeline_dtype=torch.bfloat16,
        autocast_dtype=torch.bfloat16,
        **parallel,
        sequence_parallel=bool(lay["sequence_parallel"]),
        recompute_granularity=lay["recompute_granularity"],
        recompute_method=lay["recompute_method"],
        recompute_num_layers=lay["recompute_num_layers"],
        bias_activation_fusion=False,
        masked_softmax_fusion=False,
        bias_dropout_fusion=False,
        apply_rope_fusion=False,
        gradient_accumulation_fusion=False,
        persist_layer_norm=False,
        cross_entropy_loss_fusion=False,
        deallocate_pipeline_outputs=True,
        variable_seq_lengths=False,
        init_method_std=0.02,
    )
    if lay["recompute_modules"]:
        kw["recompute_modules"] = list(lay["recompute_modules"])
    if moe:
        kw.update(
            num_moe_experts=m["num_experts"],
            moe_router_topk=m["moe_top_k"],
            moe_ffn_hidden_size=m["moe_ffn_hidden_size"],
            moe_grouped_gemm=False,
            moe_token_dispatcher_type="alltoall",
            moe_router_load_balancing_type="aux_loss",
            moe_aux_loss_coeff=0.001,
            moe_router_dtype="fp32",
        )
        if m.get("shared_expert_ffn_hidden_size"):
            kw["moe_shared_expert_intermediate_size"] = m["shared_expert_ffn_hidden_size"]
    config = TransformerConfig(**kw)
    layer_spec = get_gpt_layer_local_spec(
        num_experts=m.get("num_experts") or None,
        moe_grouped_gemm=False,
        qk_layernorm=bool(m.get("qk_norm")),
        normalization="RMSNorm",
    )
    sub = layer_spec.submodules
    sub.input_layernorm = mods["SPRMSNorm"]
    sub.pre_mlp_layernorm = mods["SPRMSNorm"]
    attn_sub = sub.self_attention.submodules
    attn_sub.core_attention = mods["SDPAttention"]
    if m.get("qk_norm"):
        attn_sub.q_layernorm = mods["QKRMSNorm"]
        attn_sub.k_layernorm = mods["QKRMSNorm"]
    tblock.LayerNormImpl = mods["SPRMSNorm"]  # final layernorm of the block

    S = spec["tokens_per_microbatch"] * lay["cp"]
    vpp = lay["vpp"]
    chunks = []
    for i in range(vpp or 1):
        vp_stage = i if vpp else None
        pre = ps.is_pipeline_first_stage(ignore_virtual=False, vp_stage=vp_stage)
        post = ps.is_pipeline_last_stage(ignore_virtual=False, vp_stage=vp_stage)
        gm = GPTModel(
            config=config,
            transformer_layer_spec=layer_spec,
            vocab_size=m["vocab_size"],
            max_sequence_length=max(S, m.get("max_position_embeddings") or S),
            pre_process=pre,
            post_process=post,
            share_embeddings_and_output_weights=bool(m.get("tie_word_embeddings")),
            position_embedding_type="rope",
            rotary_base=1000000,
            vp_stage=vp_stage,
        )
        gm.cuda(torch.cuda.current_device())
        gm = Float16Module(config, gm)
        chunks.append(gm)
    ddp_config = DistributedDataParallelConfig(
        grad_reduce_in_fp32=True, overlap_grad_reduce=False, use_distributed_optimizer=True
    )
    model = [
        DDP(config=config, ddp_config=ddp_config, module=c, disable_bucketing=(i > 0))
        for i, c in enumerate(chunks)
    ]
    for c in model:
        c.broadcast_params()
    opt_config = OptimizerConfig(
        optimizer="adam", lr=spec["lr"], bf16=True, use_distributed_optimizer=True, weight_decay=0.0,
        clip_grad=1.0,
    )
    optimizer = get_megatron_optimizer(opt_config, model, use_gloo_process_groups=False)
    config.finalize_model_grads_func = finalize_model_grads
    config.grad_scale_func = optimizer.scale_loss
    n_params = sum(p.numel() for c in model for p in c.parameters())
    return config, model, optimizer, n_params
