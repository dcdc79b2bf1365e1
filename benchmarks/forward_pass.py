"""How long a GPU takes for each catalog size's whole transformer layer, not only its GEMMs: whether what a verl
log-prob pass (or update) leaves above the time model's FLOP time is the GPU's work or verl's own, by size.

    python -m benchmarks.forward_pass [--models qwen2.5-0.5b,qwen2.5-7b] [--tokens 8192,32768] [--out FILE.json]

The real verl 0.9.1 trials leave 2.2-2.4 s a log-prob pass above the model's FLOP time for the 0.5B-3B and 1.0 s for
the 7B (calibration.md, "What a pass leaves above its FLOPs"): either the GPU's non-GEMM work (norms, RoPE,
attention, SwiGLU, residuals, the log-softmax over the vocabulary) weighs less in a larger layer than the model's
one efficiency says, or verl's fixed cost is not fixed. This times, for each model and micro-batch (sequences of
`--seq` tokens, causal attention, as Megatron packs them), bf16, with CUDA events after warm-up:

- a stack of `--layers` distinct Qwen2 layers forward (RMSNorm, QKV with bias, RoPE, grouped-query flash attention
  through torch's SDPA, the output projection, SwiGLU, residual adds), per layer, and forward + backward;
- the same layer's four GEMMs alone, and its attention alone (the rest is the elementwise work);
- the output layer, the log-softmax and gather of each token's log-prob in fp32, and the entropy, as verl computes
  them without fused kernels;
- the host's time to issue one layer's forward (eager PyTorch: where it exceeds the GPU's, the pass is host-bound).

Eager PyTorch is not Megatron with Transformer Engine (which fuses the norm into the GEMM and RoPE into one kernel),
so the elementwise part here is an upper bound of Megatron's; the GEMMs and flash attention are the same libraries'.
Needs a CUDA GPU (the lent machine's own torch will do); prints one JSON line per row.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from autotune.model import get_model
from benchmarks.gpu_timing import timed


def dtype(dev):
    """bf16 on the GPU, as verl runs; fp32 for a CPU smoke of the script (CPU bf16 attention crawls)."""
    import torch

    return torch.bfloat16 if dev.type == "cuda" else torch.float32


class Layer:
    """One Qwen2 decoder layer's weights and its forward, as plain tensor operations."""

    def __init__(self, name: str, dev, grad: bool = False):
        import torch

        m = get_model(name)
        self.m = m
        dt = dtype(dev)
        h, q, kv, f = m.hidden_size, m.q_size, m.kv_size, m.ffn_hidden_size

        def w(*shape):
            return (torch.randn(*shape, device=dev, dtype=dt) * 0.02).requires_grad_(grad)

        self.ln1, self.ln2 = w(h), w(h)
        self.wqkv, self.bqkv, self.wo = w(h, q + 2 * kv), w(q + 2 * kv), w(q, h)
        self.wfc1, self.wfc2 = w(h, 2 * f), w(f, h)

    def rope(self, x, cos, sin):  # x [b, s, heads, d]
        import torch

        x1, x2 = x.chunk(2, dim=-1)
        return x * cos + torch.cat((-x2, x1), dim=-1) * sin

    def attention(self, q, k, v):
        import torch.nn.functional as F

        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    def forward(self, x, seq: int, cos, sin):
        import torch.nn.functional as F

        m = self.m
        t, h = x.shape
        b, d = t // seq, m.head_dim
        y = F.rms_norm(x, (h,), self.ln1, 1e-6)
        qkv = y @ self.wqkv + self.bqkv
        q, k, v = qkv.split([m.q_size, m.kv_size, m.kv_size], dim=-1)
        q = self.rope(q.view(b, seq, -1, d), cos, sin).transpose(1, 2)
        k = self.rope(k.view(b, seq, -1, d), cos, sin).transpose(1, 2)
        v = v.view(b, seq, -1, d).transpose(1, 2)
        a = self.attention(q, k, v).transpose(1, 2).reshape(t, m.q_size)
        x = x + a @ self.wo
        y = F.rms_norm(x, (h,), self.ln2, 1e-6)
        g, u = (y @ self.wfc1).chunk(2, dim=-1)
        return x + (F.silu(g) * u) @ self.wfc2


def layer_flops(name: str, tokens: int, seq: int) -> tuple[float, float]:
    """Forward FLOPs of one layer's GEMMs and of its causal attention at `tokens` in sequences of `seq`."""
    m = get_model(name)
    h, q, kv, f = m.hidden_size, m.q_size, m.kv_size, m.ffn_hidden_size
    gemm = 2.0 * tokens * (h * (q + 2 * kv) + q * h + h * 2 * f + f * h)
    attn = 2.0 * 2 * tokens * seq / 2 * q  # QK^T and PV, half of each under the causal mask
    return gemm, attn


def priced_flops(name: str, tokens: int, seq: int) -> float:
    """Forward FLOPs of one layer as the time model counts them: its GEMMs and `attention_flops` (half of the causal
    attention the GPU runs), which the fitted share prices."""
    from autotune.estimate.throughput import attention_flops

    m = get_model(name)
    return layer_flops(name, tokens, seq)[0] + attention_flops(m, tokens, seq) / (3 * m.num_layers)


def measure(name: str, tokens: int, seq: int, layers: int, head_tokens: int, dev) -> dict:
    import torch

    m = get_model(name)
    dt = dtype(dev)
    h, d = m.hidden_size, m.head_dim
    b = tokens // seq
    tokens = b * seq
    stack = [Layer(name, dev) for _ in range(layers)]
    pos = torch.arange(seq, device=dev, dtype=torch.float32)
    inv = 1.0 / (1e6 ** (torch.arange(0, d, 2, device=dev, dtype=torch.float32) / d))
    ang = torch.outer(pos, inv)
    cos = torch.cat((ang.cos(), ang.cos()), -1).to(dt)[None, :, None, :]
    sin = torch.cat((ang.sin(), ang.sin()), -1).to(dt)[None, :, None, :]
    x = torch.randn(tokens, h, device=dev, dtype=dt)
    out: dict = {"model": name, "tokens": tokens, "seq": seq, "layers_timed": layers,
                 "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
                 "torch": torch.__version__}

    def fwd():
        y = x
        for layer in stack:
            y = layer.forward(y, seq, cos, sin)
        return y

    with torch.no_grad():
        out["layer_fwd_s"] = timed(fwd) / layers
        one = stack[0]
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(5):
            one.forward(x, seq, cos, sin)
        out["layer_fwd_host_s"] = (time.perf_counter() - t0) / 5  # issue time; the GPU runs behind it
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        xs = {"qkv": (x, one.wqkv), "proj": (torch.randn(tokens, m.q_size, device=dev, dtype=dt), one.wo),
              "fc1": (x, one.wfc1),
              "fc2": (torch.randn(tokens, m.ffn_hidden_size, device=dev, dtype=dt), one.wfc2)}
        out["layer_gemm_fwd_s"] = sum(timed(lambda a=a, w=w: a @ w) for a, w in xs.values())
        q = torch.randn(b, m.num_attention_heads, seq, d, device=dev, dtype=dt)
        kv = torch.randn(b, m.num_kv_heads, seq, d, device=dev, dtype=dt)
        out["attn_fwd_s"] = timed(lambda: one.attention(q, kv, kv))
    gemm_f, attn_f = layer_flops(name, tokens, seq)
    out["layer_gemm_tflops"] = gemm_f / out["layer_gemm_fwd_s"] / 1e12
    out["attn_fwd_tflops"] = attn_f / out["attn_fwd_s"] / 1e12
    out["layer_other_fwd_s"] = out["layer_fwd_s"] - out["layer_gemm_fwd_s"] - out["attn_fwd_s"]
    out["layer_fwd_tflops"] = (gemm_f + attn_f) / out["layer_fwd_s"] / 1e12

    # forward and backward of one layer (weights and input needing gradients), as an update's micro-batch runs it
    train = Layer(name, dev, grad=True)
    xg = x.clone().requires_grad_(True)
    dy = torch.randn_like(x)

    def fwd_bwd():
        train.forward(xg, seq, cos, sin).backward(dy)

    out["layer_fwd_bwd_s"] = timed(fwd_bwd, repeats=5)
    out["layer_fwd_bwd_tflops"] = 3 * (gemm_f + attn_f) / out["layer_fwd_bwd_s"] / 1e12

    # the output layer and verl's log-prob and entropy from its logits (fp32), on at most head_tokens tokens
    ht = min(tokens, head_tokens)
    with torch.no_grad():
        y = x[:ht]
        w = torch.randn(h, m.vocab_size, device=dev, dtype=dt) * 0.02
        labels = torch.randint(0, m.vocab_size, (ht, 1), device=dev)
        out["head_tokens"] = ht
        out["lm_head_s"] = timed(lambda: y @ w)
        logits = y @ w

        def logprob():
            return logits.float().log_softmax(-1).gather(-1, labels)

        def entropy():
            lf = logits.float()
            p = lf.softmax(-1)
            return torch.logsumexp(lf, -1) - (p * lf).sum(-1)

        out["logprob_s"] = timed(logprob)
        out["entropy_s"] = timed(entropy)
    if torch.cuda.is_available():
        out["peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    return out


def measure_attention(name: str, tokens: int, seq: int, dev) -> dict:
    """Causal flash attention alone (SDPA, the model's heads), forward and forward + backward, at sequences of `seq`
    tokens: how its rate grows with the sequence (a job's long responses), which one layer's rows at one length do
    not say."""
    import torch

    m = get_model(name)
    dt = dtype(dev)
    b = max(1, tokens // seq)
    q = torch.randn(b, m.num_attention_heads, seq, m.head_dim, device=dev, dtype=dt, requires_grad=True)
    k = torch.randn(b, m.num_kv_heads, seq, m.head_dim, device=dev, dtype=dt, requires_grad=True)
    v = torch.randn(b, m.num_kv_heads, seq, m.head_dim, device=dev, dtype=dt, requires_grad=True)
    do = torch.randn_like(q)
    layer = Layer.attention

    def fwd_bwd():
        layer(None, q, k, v).backward(do)

    with torch.no_grad():
        fwd_s = timed(lambda: layer(None, q, k, v))
    _, f = layer_flops(name, b * seq, seq)
    out = {"model": name, "tokens": b * seq, "seq": seq, "attention_only": True,
           "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu", "torch": torch.__version__,
           "attn_fwd_s": fwd_s, "attn_fwd_bwd_s": timed(fwd_bwd, repeats=5)}
    out["attn_fwd_tflops"] = f / out["attn_fwd_s"] / 1e12
    out["attn_fwd_bwd_tflops"] = 3 * f / out["attn_fwd_bwd_s"] / 1e12
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return out


HBM_BYTES_S = 4.8e12  # the lent H200's bandwidth as the catalog has it (autotune/cluster.py), which the rows ran on
PEAK_FLOPS = 989e12  # and its bf16 peak


def layer_rows(rows: list[dict]) -> list[dict]:
    """The whole-layer rows (not the attention-only ones)."""
    return [r for r in rows if not r.get("attention_only")]


def fit_attention(rows: list[dict], train: bool) -> tuple[float, float]:
    """(share of the bf16 peak, sequence length at half of it) of PyTorch's causal flash attention, forward (or forward
    and backward): rate(s) = share * peak * s / (s + s_half), least squares in relative error over the attention-only
    rows (1k-16k-token sequences). One curve for every head size: the 0.5B's 64-wide heads run 25-30 % under it. Not
    the time model's: priced at this rate, attention put the Megatron-core probes' 4k budget ahead of their 8k one (the
    1.5B on one H200), where Transformer Engine's cuDNN attention measured the other way."""
    import numpy as np

    key = "attn_fwd_bwd_tflops" if train else "attn_fwd_tflops"
    att = [r for r in rows if r.get("attention_only")]
    y = np.array([1 / r[key] for r in att])
    x = np.c_[np.ones(len(att)), [1 / r["seq"] for r in att]]
    inv, slope = np.linalg.lstsq(x / y[:, None], np.ones(len(att)), rcond=None)[0]
    return float(1 / inv * 1e12 / PEAK_FLOPS), float(slope / inv)


def fit_layer_form(rows: list[dict], train: bool) -> tuple[float, float, float]:
    """(share of the peak of the GEMM and attention FLOPs, bytes a token per hidden unit, per FFN unit) of a layer's
    forward (or forward and backward), least squares in relative error over the whole-layer rows at 1k-token sequences:
    a layer's time is its FLOPs at the share plus its elementwise traffic at the HBM bandwidth (the time model's
    forward_gemm / train_gemm and layer_bytes_forward / layer_bytes_train), the FLOPs counted as the model counts them
    (`priced_flops`). The rows at longer sequences are left to check it."""
    import numpy as np

    passes = 3 if train else 1
    a, y, w = [], [], []
    for r in (r for r in layer_rows(rows) if r["seq"] == 1024):
        m = get_model(r["model"])
        measured = r["layer_fwd_bwd_s" if train else "layer_fwd_s"]
        a.append([passes * priced_flops(r["model"], r["tokens"], r["seq"]) / PEAK_FLOPS,
                  r["tokens"] * m.hidden_size / HBM_BYTES_S, r["tokens"] * m.ffn_hidden_size / HBM_BYTES_S])
        y.append(measured)
        w.append(1 / measured)
    sol = np.linalg.lstsq(np.array(a) * np.array(w)[:, None], np.array(y) * np.array(w), rcond=None)[0]
    return 1 / float(sol[0]), float(sol[1]), float(sol[2])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="qwen2.5-0.5b,qwen2.5-1.5b,qwen2.5-3b,qwen2.5-7b,qwen2.5-14b,qwen2.5-32b")
    ap.add_argument("--tokens", default="8192,24576,73728")
    ap.add_argument("--seq", default="1024", help="tokens a sequence, comma-separated (1,024: the smoke job's)")
    ap.add_argument("--attention-only", action="store_true", help="time causal attention alone at each --seq")
    ap.add_argument("--layers", type=int, default=4, help="distinct layers in the timed stack (weights not cached)")
    ap.add_argument("--head-tokens", type=int, default=16384, help="tokens the output layer and log-prob are timed at")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    import torch

    dev = torch.device(a.device)
    rows = []
    for name in a.models.split(","):
        for tokens, seq in ((int(t), int(q)) for t in a.tokens.split(",") for q in a.seq.split(",")):
            r = (measure_attention(name, tokens, seq, dev) if a.attention_only
                 else measure(name, tokens, seq, a.layers, a.head_tokens, dev))
            print(json.dumps({k: (round(v, 6) if isinstance(v, float) else v) for k, v in r.items()}), flush=True)
            rows.append(r)
            if a.out:  # after every row: a call cut off keeps what it measured
                a.out.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
