"""Makes one real verl trial hang, so that the GPU smoke shows the runner's watchdog catching a hang for real.

It waits for vLLM's engine-core process (process title `VLLM::EngineCore`) of the next trial to appear, then stops
it with SIGSTOP: the rollout server waits on it forever, as it would on a deadlocked NCCL init or a wedged GPU. The
verl runner's --startup-timeout must end the trial (status timeout, class stall) and clean up every process,
stopped ones included. Used by benchmarks/gpu_verl/plans/*.sh only; never by autotune itself.

Usage: python inject_hang.py [--timeout 900]   (exits after one injection, or after --timeout seconds)
"""

from __future__ import annotations

import argparse
import os
import signal
import time
from pathlib import Path


def engine_cores() -> list[int]:
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            title = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "EngineCore" in title:
            pids.append(int(d.name))
    return pids


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--timeout", type=float, default=900.0)
    args = ap.parse_args()
    t0 = time.monotonic()
    while time.monotonic() - t0 < args.timeout:
        pids = engine_cores()
        if pids:
            time.sleep(5.0)  # let it start loading the model: the hang is then mid-start-up
            for pid in engine_cores():
                os.kill(pid, signal.SIGSTOP)
                print(f"{time.strftime('%H:%M:%S')} SIGSTOP -> {pid}", flush=True)
            return
        time.sleep(0.5)
    print("no vLLM engine core appeared", flush=True)


if __name__ == "__main__":
    main()
