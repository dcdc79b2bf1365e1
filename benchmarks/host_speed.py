"""How fast a lent host's CPU drives its GPU: the per-host speed that real trials of one configuration differ by.

Real verl trials of the same configuration differ by host up to 1.4x in every phase at once (calibration.md: the
per-lease median of measured / predicted is 0.70-0.75 on leases 62, 66 and 68 and 1.1-1.3 on others), and the
doctor's import times follow it (r = 0.56 on the H100s). A small model's step is bound by the host's Python and
kernel launches, so this times what such a step is made of, on one thread as Ray's workers run:

- python_loop_s: a fixed pure-Python loop (the interpreter's speed),
- torch_cpu_op_us: one small CPU tensor op through torch's dispatcher,
- cuda_launch_us: one tiny kernel launched and queued (the host's launch path), with the GPU's queue kept busy,
- cuda_sync_us: one tiny kernel launched and waited for (launch plus the round trip).

    python -m benchmarks.host_speed [--out FILE.json]

Each is the median of 5 repeats after a warm-up; about 10 s in all.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks.cpu_adam_rate import cpu_model


def _median_s(work: Callable[[], None], repeats: int = 5) -> float:
    work()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        work()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _python_loop() -> None:
    total = 0
    for i in range(2_000_000):
        total += i % 7
    if total < 0:
        raise AssertionError


def probe() -> dict:
    import torch

    torch.set_num_threads(1)
    out: dict = {"cpu": cpu_model(), "cpus": os.cpu_count(), "python_loop_s": _median_s(_python_loop)}
    a = torch.ones(64)
    n = 20_000

    def cpu_ops() -> None:
        for _ in range(n):
            a.add_(1.0)

    out["torch_cpu_op_us"] = 1e6 * _median_s(cpu_ops) / n
    if torch.cuda.is_available():
        g = torch.ones(64, device="cuda")

        def launches() -> None:
            for _ in range(n):
                g.add_(1.0)
            torch.cuda.synchronize()

        def round_trips() -> None:
            for _ in range(n // 10):
                g.add_(1.0)
                torch.cuda.synchronize()

        out["gpu"] = torch.cuda.get_device_name(0)
        out["cuda_launch_us"] = 1e6 * _median_s(launches) / n
        out["cuda_sync_us"] = 1e6 * _median_s(round_trips) / (n // 10)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="also write the result as JSON here")
    args = ap.parse_args(argv)
    result = probe()
    text = json.dumps(result, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
