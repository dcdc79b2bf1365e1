"""The kept Ray head's start under CPU load: autotune's `ray start` (runners/node/ray_cli.py: the raylet told its
dashboard agent's port, a live raylet waited for past Ray's fixed 30 s, no Ray Client server) against Ray's CLI as is,
alternately in the same run.

    python -m benchmarks.ray_head_start [--rounds 5] [--load 4]

`--load` busy loops run throughout (on this 2-core machine: the test suite's other worker and more). Each round
starts one head of each kind, one attempt (`KeptRay._start`, not the retries of `ensure`), and times it to the
cluster's address written; a start whose raylet aborted or missed its registration exits by itself and counts as
exited.
Results: benchmarks/results/ray_head_start.md.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from autotune.runners.node import ray_head  # noqa: E402

OURS = "autotune's ray_cli.py"
KINDS = {OURS: ray_head._RAY_START, "Ray's CLI as is": ray_head._RAY_CLI}


def _spin() -> None:
    while True:
        pass


def start_once(argv0: tuple[str, ...]) -> tuple[float, bool]:
    """Seconds to the head's address (or to its exit), and whether it came up."""
    ray_head._RAY_START = argv0
    ray = ray_head.KeptRay(grace_s=5.0)
    t0 = time.monotonic()
    try:
        with tempfile.TemporaryDirectory() as study:
            try:
                ray._start(dict(os.environ), 1, 2, Path(study), "bench")
                return time.monotonic() - t0, True
            except ray_head.HeadError:
                return time.monotonic() - t0, False
            finally:
                ray.stop()
    finally:
        ray_head._RAY_START = KINDS[OURS]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--load", type=int, default=4)
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks/results/ray_head_start.md")
    args = ap.parse_args()
    spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(args.load)]
    for p in spinners:
        p.start()
    runs: dict[str, list[tuple[float, bool]]] = {k: [] for k in KINDS}
    try:
        for r in range(args.rounds):
            for kind, argv0 in KINDS.items():
                runs[kind].append(start_once(argv0))
                print(r, kind, *runs[kind][-1], flush=True)
    finally:
        for p in spinners:
            p.kill()
    rows = []
    for kind, got in runs.items():
        up = [s for s, ok in got if ok]
        med = f"{statistics.median(up):.1f}" if up else "-"
        each = ", ".join(f"{s:.1f}" + ("" if ok else " (exited)") for s, ok in got)
        rows.append(f"| {kind} | {len(up)} of {len(got)} | {med} | {each} |")
    ours = [s for s, ok in runs[OURS] if ok]
    theirs = [s for s, ok in runs["Ray's CLI as is"] if ok]
    ratio = f"{statistics.median(theirs) / statistics.median(ours):.2f}x" if ours and theirs else "-"
    exits = {k: sum(not ok for _, ok in got) for k, got in runs.items()}
    text = "\n".join([
        "# The kept Ray head's start under CPU load",
        "",
        f"`python -m benchmarks.ray_head_start --rounds {args.rounds} --load {args.load}`, {os.cpu_count()} cores, "
        f"{args.load} busy loops throughout, the two kinds alternately, one attempt each (a start whose "
        "raylet has not registered in time exits: Ray's CLI gives it a fixed 30 s, ray_cli.py "
        f"{ray_head.START_TIMEOUT_S - 30:g} s; Ray's raylet aborts where its dashboard agent has not written its port "
        "within 15 s, ray_cli.py tells it the port).",
        "",
        "| `ray start` | came up | median s | each start, s |",
        "|---|---|---|---|",
        *rows,
        "",
        f"Median start of those that came up, Ray's CLI as is over autotune's: **{ratio}**. Exits: "
        + ", ".join(f"{k} {n} of {args.rounds}" for k, n in exits.items()) + ".",
        "",
    ])
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
