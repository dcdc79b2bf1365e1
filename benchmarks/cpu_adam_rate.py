"""The CPU optimizer's rate, as the time model prices it (estimate/offload.py `cpu_adam_params_per_s`):
torch.optim.AdamW(fused=True) on fp32 CPU tensors, the class Megatron's hybrid optimizer steps its CPU share with, on
one thread (Ray starts verl's workers with OMP_NUM_THREADS=1).

    python -m benchmarks.cpu_adam_rate [--params 770e6] [--tensors 40] [--steps 3] [--hybrid] [--out FILE.json]

Prints (and writes) parameters stepped per second, the median of the timed steps after one warm-up step, with the
host's CPU model: the number depends on the host, so run it where the trials run.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _rate(step: Callable[[], None], params: int, tensors: int, steps: int) -> dict:
    """Time `step` (an optimizer's step over `params` parameters in `tensors` tensors) `steps` times after one warm-up
    step (the moments' allocation and first touch: not what a training step pays): parameters a second at the median."""
    import torch

    step()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return {"params": params, "tensors": tensors, "threads": 1, "step_s": times,
            "params_per_s": params / statistics.median(times), "cpu": cpu_model(), "torch": torch.__version__}


def measure(params: int, tensors: int, steps: int) -> dict:
    import torch

    torch.set_num_threads(1)
    per = params // tensors
    ps = [torch.nn.Parameter(torch.zeros(per, dtype=torch.float32)) for _ in range(tensors)]
    for p in ps:
        p.grad = torch.randn(per, dtype=torch.float32) * 1e-3
    opt = torch.optim.AdamW(ps, lr=1e-5, fused=True)
    return _rate(opt.step, per * tensors, tensors, steps)


def measure_hybrid(params: int, tensors: int, steps: int) -> dict:
    """Megatron's HybridDeviceOptimizer itself, built as megatron.core.optimizer builds it for
    `optimizer_cpu_offload` (torch's AdamW on the CPU, fp32 updates, pinned grads, the copies overlapped) over bf16
    parameters on the GPU, all of them on the CPU (`offload_fraction` 1): what its step costs a parameter beyond
    AdamW's arithmetic (the grads down, the fp32 copy's update converted back to bf16 and sent up). Needs a GPU and
    megatron-core."""
    import torch
    from megatron.core.optimizer.cpu_offloading.hybrid_optimizer import HybridDeviceOptimizer

    torch.set_num_threads(1)
    per = params // tensors
    ps = [torch.nn.Parameter(torch.zeros(per, dtype=torch.bfloat16, device="cuda")) for _ in range(tensors)]
    for p in ps:
        p.grad = (torch.randn(per, device="cuda") * 1e-3).to(torch.bfloat16)
    opt = HybridDeviceOptimizer([{"params": ps}], offload_fraction=1.0, cpu_optimizer_cls=torch.optim.AdamW,
                                gpu_optimizer_cls=torch.optim.AdamW, overlap_cpu_optimizer_d2h_h2d=True,
                                pin_cpu_grads=True, pin_cpu_params=True, param_update_in_fp32=True, lr=1e-5,
                                weight_decay=0.01, betas=(0.9, 0.999), eps=1e-8, fused=True)

    def step() -> None:  # its copies back to the GPU run on their own stream: the step ends when they do
        opt.step()
        torch.cuda.synchronize()

    return _rate(step, per * tensors, tensors, steps) | {"gpu": torch.cuda.get_device_name()}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--params", type=float, default=770e6)
    ap.add_argument("--tensors", type=int, default=40)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--hybrid", action="store_true", help="also Megatron's HybridDeviceOptimizer (a GPU)")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    r = measure(int(a.params), a.tensors, a.steps)
    if a.hybrid:
        try:
            r["hybrid"] = measure_hybrid(int(a.params), a.tensors, a.steps)
        except Exception as e:  # noqa: BLE001 - a lease's one run: keep AdamW's number and say what failed
            r["hybrid"] = {"error": f"{type(e).__name__}: {e}"}
    print(json.dumps(r))
    if a.out:
        a.out.write_text(json.dumps(r, indent=2) + "\n")


if __name__ == "__main__":
    main()
