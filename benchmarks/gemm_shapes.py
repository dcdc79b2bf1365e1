"""The GPU's bf16 GEMM rate at each catalog model's layer shapes: whether a larger model's GEMMs run nearer the GPU's
peak than a smaller one's (at 16k tokens they do not: one training and one forward efficiency for every size), and at
how many tokens each size's reach their rate (a larger layer's at fewer: `tokens_half`, which the time model's
tokens_half_layer_params is fitted from).

    python -m benchmarks.gemm_shapes [--models qwen2.5-0.5b,qwen2.5-7b] [--tokens 4096,16384] [--out FILE.json]

For each model and token count, one transformer layer's GEMMs (QKV, the attention output, gate+up, down) and the
output layer, each forward (x W), input gradient and weight gradient, timed with CUDA events after warm-up: the
achieved TFLOP/s of the layer's forward and of its forward and backward, and the output layer's. Needs a CUDA GPU
(on a lease, the lent machine's own torch will do: /opt/torch/.venv/bin/python -m benchmarks.gemm_shapes); prints
one JSON line per row.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

from autotune.model import get_model
from benchmarks import gpu_timing


def layer_gemms(name: str, tp: int = 1) -> dict[str, tuple[int, int]]:
    """(in, out) of each GEMM a token passes through on one of `tp` GPUs: one layer's, and the output layer's
    ("lm_head"). Megatron splits QKV, gate+up and the output layer by their outputs, the attention output and down
    projections by their inputs."""
    m = get_model(name)
    h = m.hidden_size
    return {"qkv": (h, (m.q_size + 2 * m.kv_size) // tp), "proj": (m.q_size // tp, h),
            "fc1": (h, 2 * m.ffn_hidden_size // tp), "fc2": (m.ffn_hidden_size // tp, h),
            "lm_head": (h, m.vocab_size // tp)}


def measure(name: str, tokens: int, repeats: int = 10, tp: int = 1) -> dict:
    import torch

    dev = torch.device("cuda")

    def timed(fn) -> float:  # seconds per call, the median of `repeats` after two warm-ups
        return gpu_timing.timed(fn, repeats)

    out: dict = {"model": name, "tokens": tokens, "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__}
    if tp > 1:
        out["tp"] = tp
    layer_fwd = layer_all = flops_fwd = 0.0
    for gemm, (k, n) in layer_gemms(name, tp).items():
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


LARGE_TOKENS = 8192  # from here on every size's GEMMs run at their full rate (gemm_shapes_h200_fine.json)


def tokens_half(rows: list[dict]) -> dict[tuple[str, int], float]:
    """Per model and tensor-parallel size, the micro-batch (tokens) at which a GPU's share of its layer's GEMMs,
    forward and backward, runs at half its rate at LARGE_TOKENS and over: the least-squares th of
    rate(t) = full * t / (t + th) over the smaller token counts."""
    out = {}
    for key in sorted({(r["model"], r.get("tp", 1)) for r in rows}):
        mine = {r["tokens"]: r["layer_fwd_bwd_tflops"] for r in rows if (r["model"], r.get("tp", 1)) == key}
        full = statistics.median(v for t, v in mine.items() if t >= LARGE_TOKENS)
        small = [(1 / t, full / v - 1) for t, v in mine.items() if t < LARGE_TOKENS]
        out[key] = sum(x * y for x, y in small) / sum(x * x for x, _ in small)
    return out


def layer_weights(model: str, tp: int) -> float:
    """A GPU's share of one layer's GEMM weights, as the time model counts them."""
    # imported here: the timing runs in a lent machine's bare torch environment, without autotune's dependencies
    from autotune.candidate import Candidate
    from autotune.estimate.throughput import layer_gemm_params

    return layer_gemm_params(get_model(model), Candidate(tp=tp))


def tokens_half_layer_params(rows: list[dict], at_tokens: float) -> float:
    """The layer GEMM weights at which the efficiency halves at `at_tokens` (the time model's tokens_half), if a
    GEMM's fixed latency is what small micro-batches pay (th * weights constant): the geometric mean over the rows'
    models and TP sizes of th * weights / at_tokens."""
    logs = [math.log(th * layer_weights(m, tp) / at_tokens) for (m, tp), th in tokens_half(rows).items()]
    return math.exp(sum(logs) / len(logs))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="qwen2.5-0.5b,qwen2.5-1.5b,qwen2.5-3b,qwen2.5-7b")
    ap.add_argument("--tokens", default="4096,16384")
    ap.add_argument("--tp", default="1", help="comma-separated: each GPU's shard at these tensor-parallel sizes")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    rows = []
    for name in a.models.split(","):
        for tokens in (int(t) for t in a.tokens.split(",")):
            for tp in (int(t) for t in a.tp.split(",")):
                r = measure(name, tokens, tp=tp)
                print(json.dumps({k: (round(v, 1) if isinstance(v, float) else v) for k, v in r.items()
                                  if not isinstance(v, dict)}), flush=True)
                rows.append(r)
    if a.out:
        a.out.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
