"""The CPU optimizer's rate, as the time model prices it (estimate/offload.py `cpu_adam_params_per_s`):
torch.optim.AdamW(fused=True) on fp32 CPU tensors, the class Megatron's hybrid optimizer steps its CPU share with, on
one thread (Ray starts verl's workers with OMP_NUM_THREADS=1).

    python -m benchmarks.cpu_adam_rate [--params 770e6] [--tensors 40] [--steps 3] [--out FILE.json]

Prints (and writes) parameters stepped per second, the median of the timed steps after one warm-up step, with the
host's CPU model: the number depends on the host, so run it where the trials run.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def measure(params: int, tensors: int, steps: int) -> dict:
    import torch

    torch.set_num_threads(1)
    per = params // tensors
    ps = [torch.nn.Parameter(torch.zeros(per, dtype=torch.float32)) for _ in range(tensors)]
    for p in ps:
        p.grad = torch.randn(per, dtype=torch.float32) * 1e-3
    opt = torch.optim.AdamW(ps, lr=1e-5, fused=True)
    opt.step()  # the moments' allocation and first touch: not what a training step pays
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        opt.step()
        times.append(time.perf_counter() - t0)
    s = statistics.median(times)
    return {"params": per * tensors, "tensors": tensors, "threads": 1, "step_s": times,
            "params_per_s": per * tensors / s, "cpu": cpu_model(), "torch": torch.__version__}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--params", type=float, default=770e6)
    ap.add_argument("--tensors", type=int, default=40)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    r = measure(int(a.params), a.tensors, a.steps)
    print(json.dumps(r))
    if a.out:
        a.out.write_text(json.dumps(r, indent=2) + "\n")


if __name__ == "__main__":
    main()
