"""Megatron-core probe worker: measure training throughput and GPU memory of parallel layouts.

Run under torchrun on a GPU machine:

    torchrun --nproc_per_node N -m autotune.runners.mcore_worker --specs specs.json --out results.jsonl

``specs.json`` is a JSON list of probe specs (see ``validate_spec``); the worker runs them one after another in
one process group and appends one JSON line per spec to ``--out`` (rank 0 writes). It also writes
``<out>.progress`` lines (``{"started": id}``) so a supervisor can tell which spec hung.

This module imports nothing from ``autotune`` (only the standard library at import time; torch and
megatron-core are imported inside ``main``) so it can run on a machine holding just this file's package.

Model: megatron-core ``GPTModel`` from ``get_gpt_layer_local_spec`` (no Transformer Engine, no apex), with
the core attention replaced by ``SDPAttention`` (``torch.nn.functional.scaled_dot_product_attention``: flash /
memory-efficient kernels, no [s, s] score matrix; GQA through ``enable_gqa``, K/V never expanded to all heads)
which also implements context parallelism (all-gather of K/V over the CP group at kv-head width, Megatron's
load-balanced 2*cp chunking, lower-right causal masks, flash kernel only), and the RMSNorm
replaced by a torch RMSNorm that supports sequence parallelism (marks its weight ``sequence_parallel`` so
Megatron all-reduces its gradient over TP).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import gc
import json
import math
import os
import sys
import threading
import time
import traceback

LAYOUT_DEFAULTS = {
    "tp": 1,
    "pp": 1,
    "vpp": None,
    "cp": 1,
    "ep": 1,
    "etp": None,
    "sequence_parallel": False,
    "recompute_granularity": None,
    "recompute_method": None,
    "recompute_num_layers": None,
    "recompute_modules": None,
}

SPEC_DEFAULTS = {
    "num_microbatches": 1,
    "steps": 3,
    "warmup_steps": 1,
    "measure_forward_only": False,
    "forward_steps": 2,
    "world_size": None,
    "lr": 1e-5,
    "seed": 1234,
}

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


class SpecError(ValueError):
    """A probe spec that cannot run (bad layout for the model or world size)."""


# --------------------------------------------------------------------------------------------------
# Pure logic (stdlib only; unit-tested on CPU)
# --------------------------------------------------------------------------------------------------


def validate_spec(spec: dict, world_size: int | None = None) -> dict:
    """Fill defaults and check a probe spec. Returns a new dict; raises SpecError."""
    if not isinstance(spec, dict):
        raise SpecError(f"spec must be an object, got {type(spec).__name__}")
    out = dict(SPEC_DEFAULTS)
    out.update(spec)
    for key in ("id", "model", "layout", "tokens_per_microbatch"):
        if key not in spec:
            raise SpecError(f"spec {spec.get('id', '?')}: missing {key!r}")
    layout = dict(LAYOUT_DEFAULTS)
    unknown = set(spec["layout"]) - set(LAYOUT_DEFAULTS)
    if unknown:
        raise SpecError(f"spec {spec['id']}: unknown layout keys {sorted(unknown)}")
    layout.update(spec["layout"])
    out["layout"] = layout
    m = spec["model"]
    for key in ("hidden_size", "num_layers", "num_attention_heads", "num_kv_heads", "head_dim", "vocab_size"):
        if key not in m:
            raise SpecError(f"spec {spec['id']}: model lacks {key!r}")
    tp, pp, cp, ep = (int(layout[k]) for k in ("tp", "pp", "cp", "ep"))
    vpp = layout["vpp"]
    etp = tp if layout["etp"] is None else int(layout["etp"])
    layout["etp"] = etp
    if min(tp, pp, cp, ep, etp) < 1:
        raise SpecError("tp, pp, cp, ep, etp must be >= 1")
    sid = spec["id"]
    heads, kv = m["num_attention_heads"], m["num_kv_heads"]
    if heads % tp or kv % tp:
        raise SpecError(f"spec {sid}: tp={tp} must divide heads={heads} and kv_heads={kv}")
    L = m["num_layers"]
    chunks = pp * (vpp or 1)
    if vpp is not None:
        vpp = int(vpp)
        layout["vpp"] = vpp
        if pp < 2 or vpp < 2:
            raise SpecError(f"spec {sid}: vpp needs pp >= 2 and vpp >= 2 (got pp={pp}, vpp={vpp})")
        if out["num_microbatches"] % pp:
            raise SpecError(f"spec {sid}: interleaved schedule needs num_microbatches % pp == 0")
    if L % chunks:
        raise SpecError(f"spec {sid}: num_layers={L} not divisible by pp*vpp={chunks}")
    if layout["sequence_parallel"] and tp == 1:
        layout["sequence_parallel"] = False
    tokens = int(out["tokens_per_microbatch"])
    if tokens <= 0:
        raise SpecError(f"spec {sid}: tokens_per_microbatch must be > 0")
    if cp > 1 and tokens % 2:
        raise SpecError(f"spec {sid}: with cp>1 tokens_per_microbatch must be even (2*cp chunking)")
    if layout["sequence_parallel"] and tokens % tp:
        raise SpecError(f"spec {sid}: sequence parallel needs tokens_per_microbatch % tp == 0")
    if m["vocab_size"] % tp:
        raise SpecError(f"spec {sid}: vocab_size not divisible by tp")
    rg = layout["recompute_granularity"]
    if rg not in (None, "full", "selective"):
        raise SpecError(f"spec {sid}: recompute_granularity must be null, 'full' or 'selective'")
    if rg == "full":
        if layout["recompute_method"] not in ("uniform", "block"):
            raise SpecError(f"spec {sid}: full recompute needs recompute_method uniform|block")
        if not layout["recompute_num_layers"]:
            layout["recompute_num_layers"] = 1
    elif rg == "selective":
        if not layout["recompute_modules"]:
            layout["recompute_modules"] = ["core_attn"]
        layout["recompute_method"] = None
        layout["recompute_num_layers"] = None
    else:
        layout["recompute_method"] = None
        layout["recompute_num_layers"] = None
        layout["recompute_modules"] = None
    if m.get("num_experts", 0):
        ne = m["num_experts"]
        if ne % ep:
            raise SpecError(f"spec {sid}: ep={ep} must divide num_experts={ne}")
    elif ep != 1:
        raise SpecError(f"spec {sid}: ep > 1 on a dense model")
    model_parallel = tp * pp * cp
    ws = world_size if world_size is not None else out.get("world_size")
    if ws is not None:
        ws = int(ws)
        if out.get("world_size") is not None and world_size is not None and int(out["world_size"]) != world_size:
            raise SpecError(f"spec {sid}: written for world_size={out['world_size']}, running on {world_size}")
        if ws % model_parallel:
            raise SpecError(f"spec {sid}: world size {ws} not divisible by tp*pp*cp={model_parallel}")
        if m.get("num_experts", 0) and ws % (etp * ep * pp):
            raise SpecError(f"spec {sid}: world size {ws} not divisible by etp*ep*pp={etp * ep * pp}")
        out["world_size"] = ws
    if int(out["steps"]) < 1 or int(out["warmup_steps"]) < 0:
        raise SpecError(f"spec {sid}: steps >= 1 and warmup_steps >= 0 needed")
    out.setdefault("full_num_layers", L)
    if out["full_num_layers"] is None:
        out["full_num_layers"] = L
    return out


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


def classify_error(exc_text: str) -> str:
    low = exc_text.lower()
    if "out of memory" in low or "outofmemoryerror" in low or "cuda_error_out_of_memory" in low:
        return "oom"
    return "error"


def short_error(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    lines = [ln for ln in text.splitlines() if ln.strip()]
    for ln in lines:
        if "out of memory" in ln.lower():
            return ln.strip()[:400]
    return (lines[0] if lines else text)[:400]


# --------------------------------------------------------------------------------------------------
# GPU part (torch + megatron-core imported lazily)
# --------------------------------------------------------------------------------------------------


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


def _build_modules():
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


class _MemSampler:
    """Background sampler of device memory used (NVML, else cudaMemGetInfo), for one GPU."""

    def __init__(self, device_index: int, interval: float = 0.02):
        import torch

        self.torch = torch
        self.dev = device_index
        self.interval = interval
        self.peak = 0
        self._gen = 0
        self._stop = threading.Event()
        self._read = None
        try:  # torch maps the CUDA index to the NVML one (CUDA_VISIBLE_DEVICES aware)
            torch.cuda.device_memory_used(device_index)
            self._read = lambda: int(torch.cuda.device_memory_used(self.dev))
            self.source = "nvml (torch.cuda.device_memory_used: device memory used incl. context/NCCL)"
        except Exception:
            try:
                import pynvml  # nvidia-ml-py

                pynvml.nvmlInit()
                vis = os.environ.get("CUDA_VISIBLE_DEVICES")
                idx = int(vis.split(",")[device_index]) if vis else device_index
                h = pynvml.nvmlDeviceGetHandleByIndex(idx)
                self._read = lambda: int(pynvml.nvmlDeviceGetMemoryInfo(h).used)
                self.source = "nvml (nvidia-ml-py, device memory used incl. context/NCCL)"
            except Exception:
                self._read = None
        if self._read is None:
            self.source = "torch.cuda.mem_get_info (total - free)"
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def read(self) -> int:
        if self._read is not None:
            return self._read()
        free, total = self.torch.cuda.mem_get_info(self.dev)
        return int(total - free)

    def _run(self):
        while not self._stop.is_set():
            gen = self._gen
            try:
                v = self.read()
                if gen == self._gen:  # drop a reading that started before a reset
                    self.peak = max(self.peak, v)
            except Exception:
                pass
            time.sleep(self.interval)

    def reset(self):
        self._gen += 1
        try:
            self.peak = self.read()
        except Exception:
            self.peak = 0

    def stop(self):
        self._stop.set()


class Worker:
    def __init__(self, args):
        import torch
        import torch.distributed as dist

        self.torch = torch
        self.dist = dist
        self.args = args
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(self.local_rank)
        dist.init_process_group("nccl", timeout=_dt.timedelta(seconds=args.nccl_timeout))
        self.rank = dist.get_rank()
        self.world = dist.get_world_size()
        self.mods = _build_modules()
        self.sampler = _MemSampler(self.local_rank)
        import megatron.core

        self.mcore_version = getattr(megatron.core, "__version__", None)
        if self.mcore_version is None:
            try:
                from megatron.core import package_info

                self.mcore_version = package_info.__version__
            except Exception:
                self.mcore_version = "?"
        self.gpu_name = torch.cuda.get_device_name(self.local_rank)
        # Record the process groups Megatron creates for a spec, to destroy them afterwards.
        self._created_groups = []
        orig_new_group = dist.new_group

        def _new_group(*a, **kw):
            g = orig_new_group(*a, **kw)
            self._created_groups.append(g)
            return g

        dist.new_group = _new_group

    # ------------------------------------------------------------------------------------------
    def _agree(self, code: int) -> int:
        t = self.torch.tensor([code], dtype=self.torch.int32, device="cuda")
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX)
        return int(t.item())

    def _gather_floats(self, values: list[float]) -> list[list[float]]:
        torch = self.torch
        t = torch.tensor(values, dtype=torch.float64, device="cuda")
        out = [torch.zeros_like(t) for _ in range(self.world)]
        self.dist.all_gather(out, t)
        return [o.tolist() for o in out]

    def build(self, spec):
        torch = self.torch
        import megatron.core.transformer.transformer_block as tblock
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
        sub.input_layernorm = self.mods["SPRMSNorm"]
        sub.pre_mlp_layernorm = self.mods["SPRMSNorm"]
        attn_sub = sub.self_attention.submodules
        attn_sub.core_attention = self.mods["SDPAttention"]
        if m.get("qk_norm"):
            attn_sub.q_layernorm = self.mods["QKRMSNorm"]
            attn_sub.k_layernorm = self.mods["QKRMSNorm"]
        tblock.LayerNormImpl = self.mods["SPRMSNorm"]  # final layernorm of the block

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

    def _batches(self, spec, vocab, n):
        """n micro-batches of this rank's CP chunks of random packed sequences."""
        torch = self.torch
        from megatron.core import parallel_state as ps

        lay = spec["layout"]
        cp = lay["cp"]
        S = spec["tokens_per_microbatch"] * cp
        g = torch.Generator(device="cuda")
        g.manual_seed(spec["seed"] + 7919 * ps.get_data_parallel_rank())
        out = []
        r = ps.get_context_parallel_rank()
        for _ in range(n):
            tok = torch.randint(0, vocab, (1, S + 1), device="cuda", generator=g)
            ids, labels = tok[:, :-1], tok[:, 1:]
            if cp > 1:
                c = S // (2 * cp)
                sel = torch.cat([torch.arange(r * c, (r + 1) * c),
                                 torch.arange((2 * cp - 1 - r) * c, (2 * cp - r) * c)]).cuda()
                ids, labels = ids.index_select(1, sel), labels.index_select(1, sel)
            out.append((ids.contiguous(), labels.contiguous()))
        return out

    def _step(self, spec, model, optimizer, batches, forward_only):
        torch = self.torch
        from megatron.core.pipeline_parallel import get_forward_backward_func

        lay = spec["layout"]
        S = spec["tokens_per_microbatch"] * lay["cp"]
        nmb = spec["num_microbatches"]

        def loss_func(output_tensor):
            loss = output_tensor.float().mean()
            return loss, {"loss": loss.detach()}

        def forward_step(data_iterator, mdl):
            ids, labels = next(data_iterator)
            pos = torch.arange(ids.shape[1], device=ids.device).unsqueeze(0)
            out = mdl(ids, pos, None, labels=labels)
            return out, loss_func

        if lay["vpp"]:
            data_iter = [iter(list(batches)) for _ in model]
        else:
            data_iter = iter(list(batches))
        if not forward_only:
            for c in model:
                c.zero_grad_buffer()
            optimizer.zero_grad()
        fb = get_forward_backward_func()
        fb(
            forward_step_func=forward_step,
            data_iterator=data_iter,
            model=model if len(model) > 1 else model[0],
            num_microbatches=nmb,
            seq_length=S,
            micro_batch_size=1,
            forward_only=forward_only,
        )
        if not forward_only:
            optimizer.step()

    def _timed(self, spec, model, optimizer, batches, forward_only, warmup, steps):
        torch = self.torch
        for _ in range(warmup):
            self._step(spec, model, optimizer, batches, forward_only)
        torch.cuda.synchronize()
        self.dist.barrier()
        times = []
        for _ in range(steps):
            t0 = time.perf_counter()
            self._step(spec, model, optimizer, batches, forward_only)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        return sum(times) / len(times)

    def run_spec(self, raw):
        torch = self.torch
        from megatron.core import parallel_state as ps

        started = time.time()
        res = {"id": raw.get("id") if isinstance(raw, dict) else None, "status": "error", "error": None}
        try:
            spec = validate_spec(raw, self.world)
        except SpecError as e:
            res["error"] = f"SpecError: {e}"
            return res
        m, lay = spec["model"], spec["layout"]
        res.update(
            world_size=self.world, gpu_name=self.gpu_name, torch_version=torch.__version__,
            mcore_version=self.mcore_version, num_layers=m["num_layers"], full_num_layers=spec["full_num_layers"],
            scaled=spec["full_num_layers"] != m["num_layers"], model=m.get("name"), layout=lay,
            tokens_per_microbatch=spec["tokens_per_microbatch"], num_microbatches=spec["num_microbatches"],
            nvml_source=self.sampler.source,
        )
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        self.sampler.reset()
        res["nvml_baseline_gib"] = self.sampler.read() / 2**30
        state = {}
        stats = [0.0] * 8
        code = 0
        err = None
        try:
            config, model, optimizer, n_params = self.build(spec)
            state.update(model=model, optimizer=optimizer, config=config)
            res["params_on_rank0"] = n_params
            dp = ps.get_data_parallel_world_size()
            res["dp"] = dp
            batches = self._batches(spec, m["vocab_size"], spec["num_microbatches"])
            state["batches"] = batches
            step_s = self._timed(spec, model, optimizer, batches, False, spec["warmup_steps"], spec["steps"])
            torch.cuda.synchronize()
            stats[0] = step_s
            stats[1] = torch.cuda.max_memory_allocated() / 2**30
            stats[2] = torch.cuda.max_memory_reserved() / 2**30
            stats[3] = self.sampler.peak / 2**30
            if spec["measure_forward_only"]:
                torch.cuda.reset_peak_memory_stats()
                with torch.no_grad():
                    f_s = self._timed(spec, model, optimizer, batches, True, 1, spec["forward_steps"])
                torch.cuda.synchronize()
                stats[4] = f_s
                stats[5] = torch.cuda.max_memory_allocated() / 2**30
                stats[6] = torch.cuda.max_memory_reserved() / 2**30
        except Exception as e:  # noqa: BLE001 - OOM and anything else is recorded, then the next spec runs
            text = "".join(traceback.format_exception_only(type(e), e))
            kind = "oom" if isinstance(e, torch.OutOfMemoryError) else classify_error(text)
            err = short_error(e)
            code = 2 if kind == "oom" else 1
            if self.args.verbose or kind != "oom":
                sys.stderr.write(f"[rank {self.rank}] spec {res['id']}: {traceback.format_exc()[-3000:]}\n")
            del e
        state.clear()
        config = model = optimizer = batches = None  # noqa: F841 - drop this frame's references too
        gc.collect()
        torch.cuda.synchronize()
        agreed = self._agree(code)
        # gather the per-rank numbers and errors
        stats[7] = float(code)
        rows = self._gather_floats(stats)
        errs = [None] * self.world
        self.dist.all_gather_object(errs, err)
        self._teardown()
        res["leftover_alloc_gib_rank0"] = round(torch.cuda.memory_allocated() / 2**30, 3)
        res["per_rank"] = {
            "step_time_s": [r[0] for r in rows],
            "peak_alloc_gib": [round(r[1], 3) for r in rows],
            "peak_reserved_gib": [round(r[2], 3) for r in rows],
            "nvml_used_gib": [round(r[3], 3) for r in rows],
            "fwd_peak_alloc_gib": [round(r[5], 3) for r in rows],
            "fwd_peak_reserved_gib": [round(r[6], 3) for r in rows],
            "status_code": [int(r[7]) for r in rows],
        }
        if agreed == 0:
            res["status"] = "ok"
            step = max(r[0] for r in rows)
            S = spec["tokens_per_microbatch"] * lay["cp"]
            dp = res.get("dp", self.world // (lay["tp"] * lay["pp"] * lay["cp"]))
            tokens_per_step = S * spec["num_microbatches"] * dp
            res["tokens_per_step"] = tokens_per_step
            res["step_time_s"] = step
            res["throughput_train"] = tokens_per_step / step / self.world
            if spec["measure_forward_only"]:
                fstep = max(r[4] for r in rows)
                res["fwd_step_time_s"] = fstep
                res["throughput_fwd"] = tokens_per_step / fstep / self.world
                res["fwd_peak_alloc_gib_max"] = max(r[5] for r in rows)
            res["peak_alloc_gib_max"] = max(r[1] for r in rows)
            res["peak_reserved_gib_max"] = max(r[2] for r in rows)
            res["nvml_used_gib_max"] = max(r[3] for r in rows)
            res.update(scale_result(res, spec))
        else:
            res["status"] = "oom" if agreed == 2 else "error"
            first = next((e for e in errs if e and ("out of memory" in e.lower()) == (agreed == 2)), None)
            res["error"] = first or next((e for e in errs if e), None)
            res["failed_ranks"] = [i for i, r in enumerate(rows) if int(r[7])]
            # peaks up to the failure are still informative
            res["peak_alloc_gib_max"] = max(r[1] for r in rows) or None
        res["wall_s"] = round(time.time() - started, 2)
        res["timestamp"] = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
        return res

    def _teardown(self):
        torch = self.torch
        from megatron.core import parallel_state as ps

        try:
            ps.destroy_model_parallel()
        except Exception:
            pass
        try:
            from megatron.core.models.common.embeddings.rotary_pos_embedding import RotaryEmbedding

            RotaryEmbedding.forward.cache_clear()  # its lru_cache keeps modules and tables alive
        except Exception:
            pass
        try:
            ps._GLOBAL_MEMORY_BUFFER = None
        except Exception:
            pass
        torch.cuda.synchronize()
        self.dist.barrier()
        if self.args.destroy_groups:
            for g in self._created_groups:
                try:
                    self.dist.destroy_process_group(g)
                except Exception:
                    pass
        self._created_groups.clear()
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def load_specs(path: str) -> list:
    with open(path) as f:
        specs = json.load(f)
    if not isinstance(specs, list):
        raise SpecError("specs file must hold a JSON list")
    return specs


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--specs", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--nccl-timeout", type=int, default=600)
    p.add_argument("--destroy-groups", type=int, default=1)
    p.add_argument("--verbose", action="store_true")
    p.add_argument("--exit-after-failure", type=int, default=1,
                   help="stop after an oom/error spec (memory can stay held after an OOM; a supervisor such as "
                        "benchmarks/mcore_grid.py restarts the worker on the remaining specs)")
    args = p.parse_args(argv)
    specs = load_specs(args.specs)
    w = Worker(args)
    progress = args.out + ".progress"
    for raw in specs:
        sid = raw.get("id") if isinstance(raw, dict) else None
        if w.rank == 0:
            with open(progress, "a") as f:
                f.write(json.dumps({"started": sid, "t": time.time()}) + "\n")
        res = w.run_spec(raw)
        if w.rank == 0:
            with open(args.out, "a") as f:
                f.write(json.dumps(res) + "\n")
            print(f"[mcore_worker] {sid}: {res['status']} "
                  f"{res.get('throughput_train') or ''} {res.get('error') or ''}", flush=True)
        if args.exit_after_failure and res["status"] != "ok":
            break
    w.sampler.stop()
    w.dist.barrier()
    w.dist.destroy_process_group()


if __name__ == "__main__":
    main()
