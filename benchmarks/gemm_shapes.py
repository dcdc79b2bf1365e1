"""The GPU's bf16 GEMM rate at each catalog model's layer shapes: whether a larger model's GEMMs run nearer the GPU's
peak than a smaller one's, which the time model does not price (one training and one forward efficiency for every
size, benchmarks/calibration.py "What a pass leaves above its FLOPs, by size": the 7B's passes leave less than the
0.5B-3B's).

    python -m benchmarks.gemm_shapes [--models qwen2.5-0.5b,qwen2.5-7b] [--tokens 4096,16384] [--out FILE.json]

For each model and token count, one transformer layer's GEMMs (QKV, the attention output, gate+up, down) and the
output layer, each forward (x W), input gradient and weight gradient, timed with CUDA events after warm-up: the
achieved TFLOP/s of the layer's forward and of its forward and backward, and the output layer's. Needs a CUDA GPU
(run it on a lease: plans/gemm.sh); prints one JSON line per row.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from autotune.model import get_model


def layer_gemms(name: str) -> dict[str, tuple[int, int]]:
    """(in, out) of each GEMM a token passes through: one layer's, and the output layer's ("lm_head")."""
    m = get_model(name)
    h = m.hidden_size
    return {"qkv": (h, m.q_size + 2 * m.kv_size), "proj": (m.q_size, h), "fc1": (h, 2 * m.ffn_hidden_size),
            "fc2": (m.ffn_hidden_size, h), "lm_head": (h, m.vocab_size)}


def measure(name: str, tokens: int, repeats: int = 10) -> dict:
    import torch

    dev = torch.device("cuda")

    def timed(fn) -> float:  # seconds per call, the median of `repeats` after two warm-ups
        for _ in range(2):
            fn()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
        for s, e in zip(starts, ends, strict=True):
            s.record()
            fn()
            e.record()
        torch.cuda.synchronize()
        return sorted(s.elapsed_time(e) for s, e in zip(starts, ends, strict=True))[repeats // 2] / 1e3

    out: dict = {"model": name, "tokens": tokens, "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__}
    layer_fwd = layer_all = flops_fwd = 0.0
    for gemm, (k, n) in layer_gemms(name).items():
        x = torch.randn(tokens, k, device=dev, dtype=torch.bfloat16)
        w = torch.randn(k, n, device=dev, dtype=torch.bfloat16)
        dy = torch.randn(tokens, n, device=dev, dtype=torch.bfloat16)
        fwd = timed(lambda x=x, w=w: x @ w)
        dgrad = timed(lambda dy=dy, w=w: dy @ w.t())
        wgrad = timed(lambda x=x, dy=dy: x.t() @ dy)
        f = 2.0 * tokens * k * n
        out[gemm] = {"in": k, "out": n, "fwd_tflops": f / fwd / 1e12, "bwd_tflops": 2 * f / (dgrad + wgrad) / 1e12}
        if gemm != "lm_head":
            layer_fwd += fwd
            layer_all += fwd + dgrad + wgrad
            flops_fwd += f
    out["layer_fwd_tflops"] = flops_fwd / layer_fwd / 1e12
    out["layer_fwd_bwd_tflops"] = 3 * flops_fwd / layer_all / 1e12
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="qwen2.5-0.5b,qwen2.5-1.5b,qwen2.5-3b,qwen2.5-7b")
    ap.add_argument("--tokens", default="4096,16384")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    rows = []
    for name in a.models.split(","):
        for tokens in (int(t) for t in a.tokens.split(",")):
            r = measure(name, tokens)
            print(json.dumps({k: (round(v, 1) if isinstance(v, float) else v) for k, v in r.items()
                              if not isinstance(v, dict)}), flush=True)
            rows.append(r)
    if a.out:
        a.out.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
