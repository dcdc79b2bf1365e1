"""The torch layers the worker swaps into Megatron's local GPT layer spec (no Transformer Engine, no apex).

``SDPAttention`` replaces the core attention with ``torch.nn.functional.scaled_dot_product_attention`` (flash /
memory-efficient kernels, no [s, s] score matrix; GQA through ``enable_gqa``, K/V never expanded to all heads) and
implements context parallelism (``cp_attention``: all-gather of K/V over the CP group at kv-head width, Megatron's
load-balanced 2*cp chunking, lower-right causal masks, flash kernel only). ``SPRMSNorm`` is a torch RMSNorm that
supports sequence parallelism (marks its weight ``sequence_parallel`` so Megatron all-reduces its gradient over
TP). torch and megatron-core are imported inside the functions, so importing this module needs neither.
"""

from __future__ import annotations

import math


def attention_functions():
    """SDPA context-parallel attention pieces (need torch only; also used by the CPU test)."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    class _AllGatherSeq(torch.autograd.Function):
        """All-gather along dim 0 over a group; backward reduce-scatters (sums) the gradient."""

        @staticmethod
        def forward(ctx, x, group):
            ctx.group = group
            ws = dist.get_world_size(group)
            x = x.contiguous()
            if dist.get_backend(group) == "gloo":  # CPU tests
                parts = [torch.empty_like(x) for _ in range(ws)]
                dist.all_gather(parts, x, group=group)
                return torch.cat(parts, dim=0)
            out = x.new_empty((ws * x.shape[0],) + tuple(x.shape[1:]))
            dist.all_gather_into_tensor(out, x, group=group)
            return out

        @staticmethod
        def backward(ctx, grad):
            ws = dist.get_world_size(ctx.group)
            grad = grad.contiguous()
            if dist.get_backend(ctx.group) == "gloo":
                grad = grad.clone()
                dist.all_reduce(grad, group=ctx.group)
                n = grad.shape[0] // ws
                r = dist.get_rank(ctx.group)
                return grad[r * n : (r + 1) * n].contiguous(), None
            out = grad.new_empty((grad.shape[0] // ws,) + tuple(grad.shape[1:]))
            dist.reduce_scatter_tensor(out, grad, group=ctx.group)
            return out, None

    def _flash_only(t):
        """On CUDA, allow only the flash kernel: GQA with a lower-right causal mask must never fall back to the
        math kernel (which would expand K/V to all heads and materialise [c, klen] scores). CPU: no constraint."""
        import contextlib

        if not t.is_cuda:
            return contextlib.nullcontext()
        from torch.nn.attention import SDPBackend, sdpa_kernel

        return sdpa_kernel([SDPBackend.FLASH_ATTENTION])

    def cp_attention(query, key, value, cp_group, scale):
        """Causal attention of this CP rank's queries against all keys.

        query [sq, b, np, hn], key/value [sk, b, ng, hn] hold the rank's two chunks (r, 2cp-1-r) of the
        packed sequence (Megatron's load-balanced layout, as its RoPE assumes). Returns [sq, b, np, hn].
        """
        from torch.nn.attention.bias import causal_lower_right

        cp = dist.get_world_size(cp_group)
        r = dist.get_rank(cp_group)
        c = query.shape[0] // 2
        kg = _AllGatherSeq.apply(key, cp_group)  # [cp*2c, b, ng, hn]: rank j holds chunks j, 2cp-1-j
        vg = _AllGatherSeq.apply(value, cp_group)

        def to_global(t):
            t = t.view(cp, 2, c, *t.shape[1:])
            first = t[:, 0].reshape(cp * c, *t.shape[3:])
            second = t[:, 1].flip(0).reshape(cp * c, *t.shape[3:])
            return torch.cat([first, second], dim=0)  # [2cp*c, b, ng, hn], global order

        # K/V stay at kv-head width (no GQA repeat): SDPA's enable_gqa lets the flash kernel read each kv head
        # for its query-head group, so autograd saves only the gathered [S, b, ng, hn] K/V (as TE's CP does).
        kf = to_global(kg).permute(1, 2, 0, 3)  # [b, ng, S, hn]
        vf = to_global(vg).permute(1, 2, 0, 3)
        gqa = query.shape[2] != key.shape[2]
        outs = []
        for half, gi in ((0, r), (1, 2 * cp - 1 - r)):
            q = query[half * c : (half + 1) * c].permute(1, 2, 0, 3)  # [b, np, c, hn]
            klen = (gi + 1) * c
            k = kf[:, :, :klen]
            v = vf[:, :, :klen]
            with _flash_only(q):
                if klen == c:
                    o = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, enable_gqa=gqa)
                else:
                    o = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(c, klen), scale=scale,
                                                       enable_gqa=gqa)
            outs.append(o)
        out = torch.cat(outs, dim=2)  # [b, np, sq, hn]
        return out.permute(2, 0, 1, 3)

    return {"AllGatherSeq": _AllGatherSeq, "cp_attention": cp_attention, "flash_only": _flash_only}


def build_modules():
    """Define the torch/megatron classes (needs torch and megatron-core)."""
    import torch
    import torch.nn.functional as F
    from megatron.core.transformer.module import MegatronModule

    fns = attention_functions()
    cp_attention = fns["cp_attention"]

    class SDPAttention(MegatronModule):
        """Drop-in for Megatron's local DotProductAttention using SDPA (flash/efficient), with CP."""

        def __init__(self, config, layer_number, attn_mask_type, attention_type, attention_dropout=None,
                     softmax_scale=None, cp_comm_type=None, pg_collection=None):
            super().__init__(config=config)
            from megatron.core.process_groups_config import ProcessGroupCollection

            if pg_collection is None:
                pg_collection = ProcessGroupCollection.use_mpu_process_groups(required_pgs=["tp", "cp"])
            self.pg_collection = pg_collection
            self.tp_group = pg_collection.tp
            self.cp_group = getattr(pg_collection, "cp", None)
            self.layer_number = max(1, layer_number)
            self.attn_mask_type = attn_mask_type
            tp = self.tp_group.size()
            self.heads = config.num_attention_heads // tp
            self.groups = max(1, config.num_query_groups // tp)
            self.head_dim = config.kv_channels
            self.softmax_scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(self.head_dim)
            self.softmax_offset = None
            self.current_max_attn_logits = None

        def forward(self, query, key, value, attention_mask, attn_mask_type=None, attention_bias=None,
                    packed_seq_params=None):
            assert packed_seq_params is None and attention_bias is None
            sq, b, nh, hd = query.shape
            if key.shape[2] != nh and nh % key.shape[2]:
                raise RuntimeError(f"heads {nh} not a multiple of kv heads {key.shape[2]}")
            cp = self.cp_group.size() if self.cp_group is not None else 1
            if cp > 1:
                out = cp_attention(query, key, value, self.cp_group, self.softmax_scale)
            else:
                q = query.permute(1, 2, 0, 3)
                k = key.permute(1, 2, 0, 3)
                v = value.permute(1, 2, 0, 3)
                gqa = k.shape[1] != q.shape[1]
                out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.softmax_scale,
                                                     enable_gqa=gqa)
                out = out.permute(2, 0, 1, 3)
            return out.reshape(sq, b, nh * hd)

    class SPRMSNorm(torch.nn.RMSNorm):
        """torch RMSNorm with Megatron's constructor; marks the weight for SP gradient all-reduce."""

        def __init__(self, config, hidden_size, eps=1e-6, persist_layer_norm=False, zero_centered_gamma=False,
                     normalization="RMSNorm"):
            super().__init__(hidden_size, eps=eps, dtype=config.params_dtype)
            self.weight.sequence_parallel = bool(config.sequence_parallel)

    class QKRMSNorm(torch.nn.RMSNorm):
        def __init__(self, config, hidden_size, eps=1e-6, persist_layer_norm=False, zero_centered_gamma=False,
                     normalization="RMSNorm"):
            super().__init__(hidden_size, eps=eps, dtype=config.params_dtype)

    return {"SDPAttention": SDPAttention, "SPRMSNorm": SPRMSNorm, "QKRMSNorm": QKRMSNorm,
            "cp_attention": cp_attention}
