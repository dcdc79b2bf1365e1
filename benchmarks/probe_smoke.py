"""GPU smoke test of the whole mcore path: candidate -> McoreRunner -> torchrun worker -> TrialResult.

Run on a machine with NVIDIA GPUs and megatron-core importable; prints one JSON line per candidate and writes them
to the file given as the first argument (default: probe_smoke.jsonl). Imports no optuna (runs on a bare GPU image).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from autotune.candidate import Candidate
from autotune.cluster import make_cluster
from autotune.estimate import evaluate
from autotune.job import Job
from autotune.model import get_model
from autotune.runners.base import TrialSpec
from autotune.runners.mcore import McoreRunner

CASES = [
    ("qwen2.5-1.5b", {"tp": 1, "use_dynamic_bsz": True, "ppo_max_token_len_per_gpu": 16384}),
    ("qwen2.5-72b", {"tp": 1, "use_dynamic_bsz": True, "ppo_max_token_len_per_gpu": 12288}),  # cut to fit one GPU
]


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "probe_smoke.jsonl")
    runner = McoreRunner(steps=2)
    cluster = make_cluster(None, 1, None)
    job = Job.default()
    with out.open("w") as f:
        for i, (name, params) in enumerate(CASES):
            model = get_model(name)
            cand = Candidate.from_params({"log_prob_max_token_len_per_gpu": 16384, **params})
            ev = evaluate(model, cluster, job, cand, "train")
            if ev.memory is None:
                raise SystemExit(f"{name} {cand.layout()}: {ev.prune_reason()}")
            spec = TrialSpec("smoke", i, model, cluster, job, cand, ev.memory, ev.throughput,
                             workdir=Path("trials/probe_smoke") / f"case{i}")
            t0 = time.time()
            res = runner.run(spec)
            line = {
                "model": name, "layout": cand.layout(), "status": res.status.value, "reason": res.reason,
                "throughput_train": res.throughput, "peak_memory_gib": res.peak_memory_gib,
                "torch_peak_gib": res.framework_memory_gib,
                "predicted_update_gib": round(ev.memory.moment("update").peak / 2**30, 2),
                "predicted_throughput_train": round(ev.throughput.throughput, 1), "wall_s": round(time.time() - t0, 1),
                "gpu": cluster.gpu.name, "log_tail": res.log_excerpt[-1500:],
            }
            print(json.dumps(line), flush=True)
            f.write(json.dumps(line) + "\n")


if __name__ == "__main__":
    main()
