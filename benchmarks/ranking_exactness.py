"""The exact ranking: is its best the model's optimum, how long does it take, and what did sampling miss.

    python -m benchmarks.ranking_exactness            # results/ranking_exactness.md, .json
    python -m benchmarks.ranking_exactness --quick    # fewer brute-force cases
    python -m benchmarks.ranking_exactness --only shipped   # one part; the other kept from the existing .json

1. Brute force: spaces small enough to enumerate (a reduced dense space and a reduced MoE space, every setting
   evaluated one by one), Qwen2.5-7B on 1, 2, 4 and 8 x H100 and Qwen3-30B-A3B on 1, 2, 4, 8 x H200 (with
   --full-dense also the shipped dense space on one H100: 10,886,400 settings, hours one by one): the ranking's
   best and the number of runnable settings against
   brute force, and the first launch of a simulate study (the real Tuner) against the brute-force optimum.
2. The shipped spaces (dense, moe) on 1, 2, 4, 8 x H100, default job: ranking time (from nothing to the best, and
   the exact count of runnable settings), model calls, and the best found by the previous method (1500 random
   settings, then one-knob hill climbing from the 5 best, seed 0), measured in the same run.
Times are wall-clock on the machine that runs it (this repository's results: a shared 2-core machine, loaded).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import random
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"

SMALL_DENSE = """name: small-dense
dimensions:
  tp: {choices: [1, 2, 4]}
  pp: {choices: [1, 2]}
  vpp: {choices: [null, 2], when: {pp: {gt: 1}}}
  cp: {choices: [1, 2]}
  sequence_parallel: {choices: [true, false], when: {tp: {gt: 1}}}
  recompute: {choices: [none, selective, full]}
  recompute_num_layers: {choices: [1, 2], when: {recompute: full}}
  use_dynamic_bsz: {choices: [true, false]}
  ppo_max_token_len_per_gpu: {choices: [8192, 16384, 32768], when: {use_dynamic_bsz: true}}
  log_prob_max_token_len_per_gpu: {choices: [16384, 65536], when: {use_dynamic_bsz: true}}
  ppo_micro_batch_size_per_gpu: {choices: [1, 2], when: {use_dynamic_bsz: false}}
  log_prob_micro_batch_size_per_gpu: {choices: [4], when: {use_dynamic_bsz: false}}
  rollout_tp: {choices: [1, 2, 4]}
  gpu_memory_utilization: {choices: [0.4, 0.6, 0.7]}
  param_offload: {choices: [false, true]}
  use_fused_kernels: {choices: [false, true]}
"""

SMALL_MOE = """name: small-moe
dimensions:
  tp: {choices: [1, 2, 4]}
  pp: {choices: [1, 2, 4]}
  vpp: {choices: [null, 2], when: {pp: {gt: 1}}}
  ep: {choices: [1, 2, 4, 8], when: {moe: true}}
  etp: {choices: [null, 1], when: {moe: true}}
  sequence_parallel: {choices: [true], when: {tp: {gt: 1}}}
  recompute: {choices: [none, full]}
  use_dynamic_bsz: {choices: [true]}
  ppo_max_token_len_per_gpu: {choices: [8192, 16384, 32768]}
  log_prob_max_token_len_per_gpu: {choices: [16384, 65536]}
  rollout_tp: {choices: [2, 4, 8]}
  gpu_memory_utilization: {choices: [0.5, 0.7]}
  optimizer_offload: {choices: [false, true]}
"""


def settings(space: Any, ctx: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []

    def walk(i: int, values: dict[str, Any], params: dict[str, Any]) -> None:
        if i == len(space.dimensions):
            out.append(params)
            return
        d = space.dimensions[i]
        if not d.active(values):
            walk(i + 1, values, params)
            return
        for c in d.choices:
            walk(i + 1, {**values, d.name: c}, {**params, d.name: c})

    walk(0, dict(ctx), {})
    return out


def brute(setup: Any) -> dict[str, Any]:
    """Every setting evaluated: the best (the safe one among near-equals, as the study takes it) and the count."""
    from autotune.candidate import Candidate
    from autotune.estimate.safer import SAFE_TOLERANCE

    t0 = time.perf_counter()
    seen: dict[str, Any] = {}
    all_settings = settings(setup.space, setup.context)
    for p in all_settings:
        cand = Candidate.from_params(p, setup.base)
        if cand.key() not in seen:
            ev = setup.evaluate(cand)
            seen[cand.key()] = (ev.predicted_throughput, ev.safe, cand.key()) if ev.feasible else None
    rows = sorted((v for v in seen.values() if v), key=lambda v: -v[0])
    best = None
    if rows:
        safe = next((r for r in rows if r[1]), None)
        best = safe if not rows[0][1] and safe and safe[0] >= rows[0][0] * (1 - SAFE_TOLERANCE) else rows[0]
    return {"settings": len(all_settings), "distinct": len(seen), "runnable": len(rows),
            "best": best[0] if best else None, "best_key": best[2] if best else None,
            "ties": [r[2] for r in rows if best and math.isclose(r[0], best[0], rel_tol=1e-9)],
            "wall_s": time.perf_counter() - t0}


def sampled_best(setup: Any, samples: int = 1500, seed: int = 0) -> tuple[float, float]:
    """The previous ranking (autotune before the exact one): random settings, then one-knob hill climbing from the
    5 best. (predicted throughput of its best, seconds)."""
    from autotune.candidate import Candidate

    t0 = time.perf_counter()
    rng = random.Random(seed)
    ctx, space = setup.context, setup.space
    cache: dict[str, tuple[dict[str, Any], float]] = {}

    def score(params: dict[str, Any]) -> tuple[dict[str, Any], float]:
        params = space.project(params, ctx)
        cand = Candidate.from_params(params, setup.base)
        if cand.key() not in cache:
            cache[cand.key()] = (params, setup.evaluate(cand).predicted_throughput)
        return cache[cand.key()]

    for _ in range(samples):
        score(space.sample(rng, ctx))
    for params, value in sorted(cache.values(), key=lambda pv: -pv[1])[:5]:
        if value <= 0:
            continue
        best_p, best_v, improved = params, value, True
        while improved:
            improved = False
            for dim in space.dimensions:
                if dim.name not in best_p:
                    continue
                for choice in dim.choices:
                    p, v = score({**best_p, dim.name: choice})
                    if v > best_v * 1.0001:
                        best_p, best_v, improved = p, v, True
    return max(v for _, v in cache.values()), time.perf_counter() - t0


def first_launch(setup: Any) -> str | None:
    """The candidate key of a simulate study's first launch (the real Tuner, a fresh database)."""
    from autotune.runners.simulate import SimulateRunner
    from autotune.search.split import InfeasibleSpaceError
    from autotune.study.study import Tuner

    with tempfile.TemporaryDirectory() as d:
        try:
            tuner = Tuner(setup, SimulateRunner(), f"sqlite:///{d}/b.db", "b", space_text="benchmark",
                          warm_start=False)
        except InfeasibleSpaceError:
            return None  # refused before any trial, as it should be when nothing can run
        tuner.run(n_trials=1)
        row = next((r for r in tuner.store.trials("b") if r.launched), None)
        tuner.storage.engine.dispose()
        tuner.store.engine.dispose()
        return row.candidate_key if row else None


def exactness_cases(quick: bool, full_dense: bool = False) -> list[tuple[str, Any]]:
    from autotune.cluster import Cluster, get_gpu_type
    from autotune.job import Job
    from autotune.model import get_model
    from autotune.search.setup import Setup
    from autotune.search.space import load_space, parse_space

    job = Job.from_mapping({"data.max_response_length": 4096})
    cases = []
    for model, text, gpu in (("qwen2.5-7b", SMALL_DENSE, "h100"), ("qwen3-30b-a3b", SMALL_MOE, "h200")):
        for gpus in ((2, 8) if quick else (1, 2, 4, 8)):
            space = parse_space(text, "benchmark")
            cases.append((f"{model} small {space.name.split('-')[1]} space, {gpus} x {gpu.upper()}",
                          Setup(get_model(model), Cluster(get_gpu_type(gpu), gpus, 1), job, space)))
    if full_dense:
        cases.append(("qwen2.5-7b full dense space, 1 GPU",
                      Setup(get_model("qwen2.5-7b"), Cluster(get_gpu_type("h100"), 1, 1), Job.default(),
                            load_space("dense"))))
    return cases


def main(argv: list[str] | None = None) -> None:
    from autotune.cluster import Cluster, get_gpu_type
    from autotune.job import Job
    from autotune.model import get_model
    from autotune.search.ranking import ModelRanking
    from autotune.search.setup import Setup
    from autotune.search.space import load_space

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--full-dense", action="store_true", help="also brute-force the shipped dense space on 1 GPU")
    ap.add_argument("--only", choices=("exactness", "shipped"), default=None,
                    help="run one part; the other part is kept from the existing OUT.json")
    ap.add_argument("--out", default=str(RESULTS / "ranking_exactness"))
    args = ap.parse_args(argv)
    kept = json.loads(Path(args.out + ".json").read_text()) if args.only and Path(args.out + ".json").exists() else {}
    exact = kept.get("exactness", [])
    cases = [] if args.only == "shipped" else exactness_cases(args.quick, args.full_dense)
    if cases:
        exact = []
    for name, setup in cases:
        b = brute(setup)
        t0 = time.perf_counter()
        r = ModelRanking(setup)
        best = r.best()
        count = r.count()
        t = time.perf_counter() - t0
        launch = first_launch(setup)
        rec = {"case": name, "space_settings": b["settings"], "runnable": b["runnable"], "ranking_count": count,
               "brute_best": b["best"], "ranking_best": best.throughput if best else None,
               "best_equal": (best is None and b["best"] is None) or (best is not None and b["best"] is not None
                                                                      and best.candidate.key() in b["ties"]),
               "first_launch_is_optimum": launch in b["ties"] if b["ties"] else launch is None,
               "brute_s": round(b["wall_s"], 2), "ranking_s": round(t, 2), "calls": r.calls}
        exact.append(rec)
        print(json.dumps(rec), flush=True)
        Path(args.out + ".json").write_text(json.dumps({**kept, "exactness": exact}, indent=1))
    shipped = kept.get("shipped", []) if args.only == "exactness" else []
    for model, space in () if args.only == "exactness" else (("qwen2.5-7b", "dense"), ("qwen3-30b-a3b", "moe")):
        for gpus in (1, 2, 4, 8):
            setup = Setup(get_model(model), Cluster(get_gpu_type("h100"), gpus, 1), Job.default(), load_space(space))
            t0 = time.perf_counter()
            r = ModelRanking(setup)
            best = r.best()
            t_best = time.perf_counter() - t0
            count = r.count()
            t_all = time.perf_counter() - t0
            old, t_old = sampled_best(setup)
            rec = {"model": model, "space": space, "gpus": gpus, "space_settings": setup.space.size(setup.context),
                   "runnable": count, "best": best.throughput if best else None,
                   "best_label": best.candidate.layout() if best else None,
                   "sampled_best": old if old > 0 else None, "ranking_s": round(t_best, 2),
                   "ranking_and_count_s": round(t_all, 2), "sampled_s": round(t_old, 2), "calls": r.calls,
                   "blocks": len(r.blocks())}
            shipped.append(rec)
            print(json.dumps(rec), flush=True)
            Path(args.out + ".json").write_text(json.dumps({**kept, "exactness": exact, "shipped": shipped}, indent=1))
    # which command produced which part (a part kept from an earlier run keeps its command)
    ran = "python -m benchmarks.ranking_exactness" + "".join(
        f" {a}" for a in (argv if argv is not None else __import__("sys").argv[1:]))
    commands = {**kept.get("commands", {})}
    for part in ("exactness", "shipped"):
        if args.only in (None, part):
            commands[part] = ran
    result = {"exactness": exact, "shipped": shipped, "commands": commands}
    Path(args.out + ".json").write_text(json.dumps(result, indent=1))
    Path(args.out + ".md").write_text(markdown(exact, shipped, commands))
    print(markdown(exact, shipped, commands))


def _f(v: Any, nd: int = 1) -> str:
    return "-" if v is None else (f"{v:,.{nd}f}" if isinstance(v, float) else f"{v:,}")


def markdown(exact: list[dict[str, Any]], shipped: list[dict[str, Any]], commands: dict[str, str] | None = None
             ) -> str:
    lines = [
        "# Exact ranking: against brute force, and on the shipped spaces",
        "",
        "`python -m benchmarks.ranking_exactness` (method: its docstring). Predicted throughputs are the model's "
        "(tokens/s/GPU); times are wall-clock on this repository's shared 2-core machine, under load.",
        "",
        *[f"- {part}: `{cmd}`" for part, cmd in (commands or {}).items()],
        "",
        "## Against brute force",
        "",
        "| case | settings | runnable (brute force) | runnable (ranking) | best: brute force | best: ranking | "
        "same best | simulate study's 1st launch = optimum | brute force s | ranking s | model calls |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in exact:
        lines.append(f"| {r['case']} | {_f(r['space_settings'])} | {_f(r['runnable'])} | {_f(r['ranking_count'])} | "
                     f"{_f(r['brute_best'])} | {_f(r['ranking_best'])} | {'yes' if r['best_equal'] else 'NO'} | "
                     f"{'yes' if r['first_launch_is_optimum'] else 'NO'} | {r['brute_s']} | {r['ranking_s']} | "
                     f"{_f(r['calls'])} |")
    lines += [
        "",
        "## The shipped spaces (default job: 2k prompt, 8k response, batch 512, n 16; H100)",
        "",
        "| model | space | GPUs | settings | runnable | best (exact) | layout | best by sampling + hill climbing "
        "| gain | exact: to best s | + count s | sampling s | model calls |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in shipped:
        gain = (f"{(r['best'] / r['sampled_best'] - 1) * 100:+.1f}%" if r["best"] and r["sampled_best"]
                else ("space refused by sampling" if r["best"] else "-"))
        label = (r["best_label"] or "nothing runs").replace(" | ", ", ")
        lines.append(f"| {r['model']} | {r['space']} | {r['gpus']} | {_f(r['space_settings'])} | {_f(r['runnable'])} "
                     f"| {_f(r['best'])} | {label} | {_f(r['sampled_best'])} | {gain} | "
                     f"{r['ranking_s']} | {r['ranking_and_count_s']} | {r['sampled_s']} | {_f(r['calls'])} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()


__all__ = ["dataclasses"]
