"""What a torch.compile recompile costs inside a training step, on compile caches cold and warm (issue 24.3).

    python -m benchmarks.recompile_cost [--hidden 8960] [--tokens 8192,6144,9216] [--out FILE.json]

The real trials' longest updates are steps in which a verl worker recompiled (benchmarks/results/trial_cost.md,
"Steps that recompiled"), far more often in a study's first trial, whose compile caches (Inductor's, Triton's) are
empty, than in later ones. Megatron-core compiles its fused elementwise functions (`jit_fuser` is torch.compile on
torch 2.x); a micro-batch of a new token count recompiles them, once, as dynamic. This times one such function, the
SwiGLU with its backward as an update runs it, over micro-batches of `--tokens` tokens (each new count a new shape),
in a fresh process per run: first on empty caches, then on the caches the first run left (as a study's later trials
find them). Each call's seconds (the GPU synchronised), and the Dynamo recompiles the process logged. Needs a CUDA
GPU for Inductor's Triton kernels (the lent machine's own torch will do); on a CPU it runs with `--backend aot_eager`
as a smoke of the script.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = """
import json, sys, time, torch
import torch.nn.functional as F
hidden, tokens, backend = int(sys.argv[1]), [int(t) for t in sys.argv[2].split(",")], sys.argv[3]
dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
dt = torch.bfloat16 if dev.type == "cuda" else torch.float32

@torch.compile(backend=backend)
def swiglu(y):
    a, b = torch.chunk(y, 2, -1)
    return F.silu(a) * b

def sync():
    if dev.type == "cuda":
        torch.cuda.synchronize()

out = []
for n in tokens:
    y = torch.randn(n, 2 * hidden, device=dev, dtype=dt, requires_grad=True)
    sync()
    t = time.perf_counter()
    swiglu(y).sum().backward()
    sync()
    out.append({"tokens": n, "s": round(time.perf_counter() - t, 4)})
print("RESULT " + json.dumps(out))
"""


def run(hidden: int, tokens: list[int], backend: str, cache: Path) -> dict:
    """One process on `cache`: each call's seconds and the recompiles Dynamo logged."""
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor"), "TRITON_CACHE_DIR": str(cache / "triton"),
           "TORCH_LOGS": "recompiles"}
    t = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", CHILD, str(hidden), ",".join(map(str, tokens)), backend],
                          env=env, capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - t
    if done.returncode != 0:
        raise SystemExit(f"recompile_cost: the child failed:\n{done.stderr[-3000:]}")
    calls = json.loads(next(ln for ln in done.stdout.splitlines() if ln.startswith("RESULT "))[7:])
    recompiles = sum("Recompiling function" in ln for ln in done.stderr.splitlines())
    return {"calls": calls, "recompiles": recompiles, "process_s": round(wall, 2)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hidden", type=int, default=8960, help="the MLP's width (the 1.5B's 8960)")
    ap.add_argument("--tokens", default="8192,6144,9216", help="each micro-batch's tokens, in order")
    ap.add_argument("--backend", default="inductor", help="torch.compile backend (aot_eager: a CPU smoke)")
    ap.add_argument("--out", type=Path, default=None, help="write the result as JSON here too")
    args = ap.parse_args(argv)
    tokens = [int(t) for t in args.tokens.split(",")]
    import torch

    with tempfile.TemporaryDirectory(prefix="recompile_cost-") as tmp:
        cache = Path(tmp)
        doc = {"device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
               "torch": torch.__version__, "backend": args.backend, "hidden": args.hidden, "tokens": tokens,
               "cold": run(args.hidden, tokens, args.backend, cache),
               "warm": run(args.hidden, tokens, args.backend, cache)}
    print(json.dumps(doc))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
