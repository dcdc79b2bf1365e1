"""How late NVML's utilization tells that a GPU went idle: the precision of a rollout's wait for verl's poll.

autotune/results/rollout_wait.py reads a step's wait from the trace the runner samples every 0.5 s: the GPU idle
from the last sample that saw a kernel run to vLLM's sleep. NVML's utilization is the share of a past sample period
(1/6 s to 1 s, by product) in which a kernel ran, so a reading stays above 0 for up to one period after the last
kernel. This runs bursts of matrix products of known lengths on the GPU with idle gaps between them and polls NVML
(`nvidia-smi -lms`, so that it needs only torch and the driver) to time, per burst, how long after its last kernel
the utilization first reads 0 and how long after its first kernel it first reads above 0.

    python -m benchmarks.nvml_utilization_lag --out benchmarks/results/nvml_utilization_lag_h100.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

BURSTS_S = (3.0, 1.2, 0.4)  # busy lengths, each followed by GAP_S idle
GAP_S = 3.0


def lags(samples: Sequence[tuple[float, float]],
         bursts: Sequence[tuple[float, float]]) -> list[dict[str, float | None]]:
    """Per burst (start, end: monotonic seconds), from polled (time, utilization %) samples: seconds from its first
    kernel to the first reading above 0, and from its last kernel to the first reading of 0 after it."""
    out: list[dict[str, float | None]] = []
    for start, end in bursts:
        up = next((t for t, u in samples if t >= start and u > 0), None)
        down = next((t for t, u in samples if t >= end and u == 0), None)
        out.append({"busy_s": round(end - start, 3), "rise_s": None if up is None else round(up - start, 3),
                    "fall_s": None if down is None else round(down - end, 3)})
    return out


def measure(poll_ms: int = 50) -> dict[str, object]:
    import torch

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits",
                            f"-lms={poll_ms}", "-i", "0"], stdout=subprocess.PIPE, text=True, bufsize=1)
    samples: list[tuple[float, float]] = []

    import threading

    def read() -> None:
        assert smi.stdout is not None
        for line in smi.stdout:
            try:
                samples.append((time.monotonic(), float(line.strip())))
            except ValueError:
                continue
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    time.sleep(GAP_S)
    bursts = []
    for busy in BURSTS_S:
        start = time.monotonic()
        while time.monotonic() - start < busy:
            for _ in range(4):
                a @ a  # noqa: B018
            torch.cuda.synchronize()
        bursts.append((start, time.monotonic()))
        time.sleep(GAP_S)
    smi.terminate()
    reader.join(timeout=5)
    gpu = torch.cuda.get_device_name(0)
    return {"gpu": gpu, "poll_ms": poll_ms, "bursts": lags(samples, bursts), "samples": len(samples)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--poll-ms", type=int, default=50)
    args = ap.parse_args(argv)
    doc = measure(args.poll_ms)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
