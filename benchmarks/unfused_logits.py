"""What a log-prob pass pays for its logits without verl's fused kernels, by micro-batch size and by how full the GPU
is (issue 23.3; the price the model charges per logit is `unfused_logit_ps`).

Lease 67's 0.5B paid 14 ps a logit at micro-batches of 16k tokens and 32 ps at 32k (its peak 78.0 GiB of 79.6) on one
host. Either the size of the materialised [tokens, vocab] logits sets the price, or the memory they fill (the caching
allocator freeing and mapping again near the limit). This times, on one GPU, the head of one log-prob micro-batch both
ways at 8k, 16k and 32k tokens of the Qwen2.5-0.5B's head (hidden 896, vocab 151,936):

- unfused: verl 0.9.1's path without fused kernels at TP 1 (`_lm_head_logits_processor` then megatron-core's
  `vocab_parallel_cross_entropy`), written out in torch: the bf16 logits divided by the temperature in place, kept by
  a clone while verl's entropy consumes them (old_log_prob asks for it; `--no-entropy` leaves it out), then as float32,
  less their max, the label's logit, exp in place, the sum, log;
- fused: verl 0.9.1's own `linear_cross_entropy` Triton kernel (`verl/utils/kernel/`, loaded from the directory
  `--verl-kernel`, `verl.utils.device` standing in by the few calls the kernel makes of it), which never holds the
  logits;

each with the GPU free (`free`: the allocator's cache warm), free with the cache emptied before each micro-batch
(`cold`: every micro-batch maps its memory anew), and with all but `--headroom` GiB above the micro-batch's own peak
held by a filler tensor, the cache emptied too (`full`: as near the limit).

    pip download --no-deps verl==0.9.1 && unzip -j verl-0.9.1-*.whl 'verl/utils/kernel/*' -d kern   # here
    python -m benchmarks.unfused_logits --verl-kernel kern --out OUT.json   # on a GPU (torch and triton only)
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import sys
import types
from pathlib import Path

HIDDEN, VOCAB = 896, 151_936
TOKENS = (8192, 16384, 32768)


def _load_fused(kernel_dir: Path):  # noqa: ANN202 - torch is imported on the GPU machine only
    """verl's linear_cross_entropy from a copy of verl/utils/kernel/ (kernels.py, linear_cross_entropy.py)."""
    import torch

    device = types.ModuleType("verl.utils.device")
    device.get_device_capability = lambda device_id=0: torch.cuda.get_device_capability(device_id)
    device.get_device_name = lambda: "cuda"
    device.is_cuda_available = torch.cuda.is_available()
    device.get_torch_device = lambda: torch.cuda
    for name in ("verl", "verl.utils"):
        sys.modules.setdefault(name, types.ModuleType(name))
    sys.modules["verl.utils.device"] = device
    pkg = types.ModuleType("verl.utils.kernel")
    pkg.__path__ = [str(kernel_dir)]
    sys.modules["verl.utils.kernel"] = pkg
    return importlib.import_module("verl.utils.kernel.linear_cross_entropy").linear_cross_entropy


def unfused(hidden, weight, labels, entropy: bool):  # noqa: ANN001, ANN201
    """verl's head without fused kernels at TP 1, as verl 0.9.1 runs old_log_prob (calculate_entropy=True): the
    logits kept by a clone while `_VocabParallelEntropy` consumes them, then megatron-core's cross entropy in
    float32."""
    import torch

    logits = hidden @ weight.t()
    logits.div_(torch.tensor(1.0, device=logits.device, dtype=logits.dtype))
    ent = None
    if entropy:
        kept = logits.clone()
        top = logits.max(dim=-1, keepdim=True).values
        exp = (logits - top).exp_()
        total = exp.sum(dim=-1, keepdim=True)
        soft = exp.div_(total)
        ent = (top + total.log() - (soft * logits).sum(dim=-1, keepdim=True)).squeeze(-1)
        del exp, soft
        logits = kept
    f = logits.float()
    f.sub_(f.max(dim=-1, keepdim=True).values)
    predicted = f.gather(1, labels[:, None]).squeeze(1)
    f.exp_()
    return predicted - f.sum(-1).log(), ent


def timed(fn, repeat: int, cold: bool) -> tuple[float, float]:  # noqa: ANN001
    """Median seconds of `repeat` calls (after two), and the peak GiB allocated by one."""
    import torch

    times = []
    for i in range(repeat + 2):
        if cold:
            torch.cuda.empty_cache()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        out = fn()
        end.record()
        torch.cuda.synchronize()
        del out
        if i >= 2:
            times.append(start.elapsed_time(end) / 1e3)
        peak = (torch.cuda.max_memory_allocated() - base) / 2**30
    return statistics.median(times), peak


def run(kernel_dir: Path, repeat: int, headroom_gib: float, entropy: bool) -> dict:
    import torch

    try:
        linear_cross_entropy, fused_error = _load_fused(kernel_dir), None
    except Exception as e:  # noqa: BLE001 - the unfused times still answer half the question
        linear_cross_entropy, fused_error = None, f"{type(e).__name__}: {e}"
        print(f"fused kernel not loaded: {fused_error}", flush=True)
    torch.manual_seed(0)
    weight = (torch.randn(VOCAB, HIDDEN, device="cuda", dtype=torch.bfloat16) * 0.02).contiguous()
    rows = []
    for tokens in TOKENS:
        hidden = torch.randn(tokens, HIDDEN, device="cuda", dtype=torch.bfloat16)
        labels = torch.randint(0, VOCAB, (tokens,), device="cuda")
        ways = {"unfused": lambda h=hidden, y=labels: unfused(h, weight, y, entropy)}
        if linear_cross_entropy is not None:
            ways["fused"] = lambda h=hidden, y=labels: linear_cross_entropy(h, weight, y, 1.0, "none", None)
        states: dict[str, dict[str, tuple[float, float]]] = {}
        with torch.no_grad():
            states["free"] = {way: timed(fn, repeat, cold=False) for way, fn in ways.items()}
            states["cold"] = {way: timed(fn, repeat, cold=True) for way, fn in ways.items()}
            states["full"] = {}
            for way, fn in ways.items():
                torch.cuda.empty_cache()
                left, _ = torch.cuda.mem_get_info()
                hold = int(left - (states["free"][way][1] + headroom_gib) * 2**30)
                filler = torch.empty(max(hold, 0), dtype=torch.uint8, device="cuda")
                try:
                    states["full"][way] = timed(fn, repeat, cold=True)
                finally:
                    del filler
                    torch.cuda.empty_cache()
        logits = tokens * VOCAB
        row = {"tokens": tokens, "logits": logits}
        for state, got in states.items():
            for way, (sec, peak) in got.items():
                row[f"{way}_{state}_s"], row[f"{way}_{state}_peak_gib"] = round(sec, 5), round(peak, 2)
            if "fused" in got:
                row[f"price_{state}_ps"] = round((got["unfused"][0] - got["fused"][0]) / logits * 1e12, 2)
        rows.append(row)
        print(json.dumps(row), flush=True)
    return {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "hidden": HIDDEN, "vocab": VOCAB,
            "entropy": entropy, "fused_error": fused_error, "repeat": repeat, "headroom_gib": headroom_gib,
            "rows": rows}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--verl-kernel", type=Path, required=True, help="a copy of verl 0.9.1's verl/utils/kernel/")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--headroom", type=float, default=1.0, help="GiB left free above a micro-batch's peak")
    ap.add_argument("--no-entropy", dest="entropy", action="store_false",
                    help="the log-probs only (verl's old_log_prob computes the entropy too)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    result = run(args.verl_kernel, args.repeat, args.headroom, args.entropy)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
