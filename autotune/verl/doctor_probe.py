"""The doctor's child process: imports the heavy parts of a verl trial's stack one by one and prints one JSON line
per check as soon as it is done, so that a hang or a crash (a C extension that aborts) is pinned to its check.

Run as `python -m autotune.verl.doctor_probe HEAD_DIM`; stdlib-only at import time (the parent reads its lines, with a
timeout, in autotune/verl/doctor.py). Nothing here decides what is wrong: it reports what it found.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from typing import Any


def emit(check: str, ok: bool, **info: Any) -> None:
    print(json.dumps({"check": check, "ok": ok, **info}, default=str), flush=True)


def error_text(e: BaseException) -> str:
    """The exception's last line, as the user would see it at the bottom of a traceback."""
    text = "".join(traceback.format_exception_only(type(e), e)).strip().splitlines()
    return (text[-1] if text else type(e).__name__)[:500]


def timed_import(check: str, module: str, **extra: Any) -> Any:
    emit("start", True, what=check)
    t0 = time.monotonic()
    try:
        import importlib

        mod = importlib.import_module(module)
    except BaseException as e:  # noqa: BLE001 - an import may raise anything (OSError from a .so, SystemExit)
        emit(check, False, error=error_text(e), seconds=round(time.monotonic() - t0, 1), **extra)
        return None
    emit(check, True, version=getattr(mod, "__version__", None), seconds=round(time.monotonic() - t0, 1), **extra)
    return mod


def nvml() -> None:
    emit("start", True, what="nvml")
    try:
        import pynvml

        from autotune.cluster import visible_nvml_indices  # stdlib-only

        pynvml.nvmlInit()
        gpus = []
        for i in visible_nvml_indices(pynvml):  # the GPUs this study may use (CUDA_VISIBLE_DEVICES)
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(h)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            gpus.append({"name": name.decode() if isinstance(name, bytes) else str(name),
                         "total_gib": round(mem.total / 2**30, 1), "used_gib": round(mem.used / 2**30, 2)})
        driver = pynvml.nvmlSystemGetDriverVersion()
        emit("nvml", True, driver=driver.decode() if isinstance(driver, bytes) else str(driver), gpus=gpus)
    except BaseException as e:  # noqa: BLE001
        emit("nvml", False, error=error_text(e))


def torch_cuda() -> Any:
    torch = timed_import("torch", "torch")
    if torch is None:
        return None
    try:
        ok = bool(torch.cuda.is_available())
        info: dict[str, Any] = {"cuda": getattr(torch.version, "cuda", None), "devices": 0}
        if ok:
            info["devices"] = torch.cuda.device_count()
            info["capability"] = list(torch.cuda.get_device_capability(0))
            info["name"] = torch.cuda.get_device_name(0)
        cudnn = getattr(getattr(torch, "backends", None), "cudnn", None)
        info["cudnn"] = cudnn.version() if cudnn is not None and cudnn.is_available() else None
        emit("cuda", ok, **info)
    except BaseException as e:  # noqa: BLE001
        emit("cuda", False, error=error_text(e))
    return torch


def attention(head_dim: int, te: Any, torch: Any) -> None:
    """Which of Transformer Engine's attention backends serve this head size, in bf16, causal, on GPU 0.

    Asked of TE itself (its get_attention_backend) where its API allows; otherwise the documented limits: flash
    needs the flash-attn package, fused (cuDNN) needs sm80+, cuDNN and a head size that is a multiple of 8 up to
    256. Unfused (TE's own PyTorch attention) always works, slowly.
    """
    emit("start", True, what="attention")
    found: dict[str, Any] = {"head_dim": head_dim, "how": "documented limits"}
    try:
        import importlib.util

        found["flash"] = importlib.util.find_spec("flash_attn") is not None or \
            importlib.util.find_spec("flash_attn_interface") is not None
        cap = tuple(torch.cuda.get_device_capability(0)) if torch is not None and torch.cuda.is_available() else (0, 0)
        cudnn = torch.backends.cudnn.version() if torch is not None and torch.backends.cudnn.is_available() else None
        found["fused"] = bool(te is not None and cap >= (8, 0) and cudnn and head_dim % 8 == 0 and head_dim <= 256)
        found["unfused"] = te is not None
        if te is not None and cap >= (8, 0):
            try:
                from transformer_engine.pytorch.attention.dot_product_attention import utils as te_utils

                params = te_utils.AttentionParams(
                    qkv_dtype=torch.bfloat16, qkv_layout="thd_thd_thd", batch_size=1, num_heads=8,
                    num_gqa_groups=8, max_seqlen_q=4096, max_seqlen_kv=4096, head_dim_qk=head_dim,
                    head_dim_v=head_dim, attn_mask_type="padding_causal", is_training=True)
                got = te_utils.get_attention_backend(params)
                found.update(flash=bool(got[0]), fused=bool(got[2]), unfused=bool(got[4]), how="transformer_engine")
            except BaseException as e:  # noqa: BLE001 - another TE version: the documented limits stand
                found["te_query"] = error_text(e)
        emit("attention", any(found.get(k) for k in ("flash", "fused", "unfused")), **found)
    except BaseException as e:  # noqa: BLE001
        emit("attention", False, error=error_text(e), **found)


_FORCE_FUSED = {"NVTE_FLASH_ATTN": "0", "NVTE_FUSED_ATTN": "1", "NVTE_UNFUSED_ATTN": "0"}


def fused_attention_run(head_dim: int, te: Any, torch: Any) -> None:
    """Run TE's fused (cuDNN) attention once (`te`: transformer_engine.pytorch), forward and backward, packed
    causal (thd) as verl's Megatron actor calls it: the backend query can say yes where cuDNN then fails (H100,
    cuDNN 9.19 + TE 2.12, 2026-11-24: `CUDNN_BACKEND_TENSOR_DESCRIPTOR cudnnFinalize failed` at verl's step 1, after
    a 5-minute launch)."""
    emit("start", True, what="fused_attention_run")
    saved = {k: os.environ.get(k) for k in _FORCE_FUSED}
    os.environ.update(_FORCE_FUSED)
    try:
        heads, seqs = 8, (300, 212)  # two packed sequences of odd lengths
        total = sum(seqs)
        dpa = te.DotProductAttention(heads, head_dim, num_gqa_groups=heads, qkv_format="thd",
                                             attn_mask_type="padding_causal").cuda()
        q, k, v = (torch.randn(total, heads, head_dim, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                   for _ in range(3))
        cu = torch.tensor([0, seqs[0], total], device="cuda", dtype=torch.int32)
        out = dpa(q, k, v, cu_seqlens_q=cu, cu_seqlens_kv=cu, max_seqlen_q=max(seqs), max_seqlen_kv=max(seqs))
        out.float().sum().backward()
        torch.cuda.synchronize()
        emit("fused_attention_run", True, head_dim=head_dim)
    except (TypeError, AttributeError, ImportError) as e:  # another TE API: not a verdict on cuDNN
        emit("fused_attention_run", True, head_dim=head_dim, untested=error_text(e))
    except BaseException as e:  # noqa: BLE001 - cuDNN's failure is what this check is for
        emit("fused_attention_run", False, head_dim=head_dim, error=error_text(e))
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def versions() -> None:
    """Installed versions of the pinned stack (package metadata: nothing is imported)."""
    from importlib import metadata

    from autotune import verl  # stdlib only

    found: dict[str, str | None] = {}
    for dist in verl.GPU_STACK:
        try:
            found[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            found[dist] = None
    emit("versions", True, versions=found)


def main(argv: list[str]) -> None:
    head_dim = int(argv[0]) if argv else 128
    emit("python", True, version=".".join(map(str, sys.version_info[:3])), executable=sys.executable)
    versions()
    nvml()
    torch = torch_cuda()
    te = timed_import("transformer_engine", "transformer_engine.pytorch")
    attention(head_dim, te, torch)
    if te is not None and torch is not None and torch.cuda.is_available():
        fused_attention_run(head_dim, te, torch)
    megatron = timed_import("megatron_core", "megatron.core")
    if megatron is not None:
        try:
            from megatron.core.enums import ModelType

            emit("megatron_model_type", True, encoder_and_decoder=hasattr(ModelType, "encoder_and_decoder"))
        except BaseException as e:  # noqa: BLE001
            emit("megatron_model_type", False, error=error_text(e))
    emit("start", True, what="megatron_bridge")
    import importlib.util

    try:
        has_bridge = importlib.util.find_spec("megatron.bridge") is not None
    except BaseException:  # noqa: BLE001 - megatron itself missing
        has_bridge = False
    emit("megatron_bridge", has_bridge)
    from autotune.verl import shims  # stdlib only: the same shim verl's workers get

    shims.install()
    timed_import("mbridge", "mbridge.core.util")
    timed_import("vllm", "vllm")
    timed_import("verl", "verl.trainer.main_ppo")
    timed_import("verl_megatron", "verl.workers.engine.megatron.transformer_impl")
    emit("done", True)


if __name__ == "__main__":
    main(sys.argv[1:])
