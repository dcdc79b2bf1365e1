"""Parallel trials on replayed landscapes: wall-clock and GPU-hours to reach 97% of the best, K = 1, 2, 4, 8.

    python -m benchmarks.parallel_speedup                      # every landscape, 3 seeds
    python -m benchmarks.parallel_speedup --seeds 1 --ks 1 4   # a quick run

The real `Tuner` (pruning, model seeds, constant-liar TPE, duplicates never launched) and the real `ReplayRunner`
run through `VirtualClockExecutor`, an executor with K slots and a virtual clock: a trial submitted at time t ends
at t + its duration, where the duration comes from its table row: STARTUP_S (verl start-up: Ray, model load, vLLM)
+ measure_step x step_time_s for an ok row, STARTUP_S + the table's median step time for an oom / failed row (it
dies in its first step). Finished trials come back in order of their end time, so the tuner proposes the next
trial knowing exactly what a real parallel run would know then (the others are pending: constant liar).
Measured per (landscape, K, seed): the virtual time when the first trial within 97% of the landscape's best
finishes, and the GPU-hours spent until then (finished trials in full, running ones up to that moment).
Two tuner configurations: `seeded` (autotune as shipped: the model's best candidates first) and `unseeded`
(--model-seeds 0: the sampler alone, a search that needs more trials, where parallelism has room to help).
"""

from __future__ import annotations

import argparse
import dataclasses
import heapq
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

from autotune.executors.base import Executor, Finished
from autotune.runners.base import Runner, TrialSpec

REPO = Path(__file__).resolve().parent.parent
LANDSCAPES = REPO / "benchmarks" / "landscapes"
RESULTS = REPO / "benchmarks" / "results"
STARTUP_S = 120.0
TARGET = 0.97
KS = (1, 2, 4, 8)


class VirtualClockExecutor(Executor):
    """K slots and a virtual clock; a trial's duration comes from `duration(result)`."""

    name = "virtual"

    def __init__(self, parallel: int, duration: Any):
        super().__init__(parallel)
        self.clock = 0.0
        self.duration = duration
        self._heap: list[tuple[float, int, float, Any]] = []  # (end, number, start, result)
        self.started: dict[int, float] = {}

    def submit(self, spec: TrialSpec, runner: Runner) -> None:
        result = runner.run(spec)
        self.started[spec.number] = self.clock
        heapq.heappush(self._heap, (self.clock + self.duration(result), spec.number, self.clock, result))

    def wait(self, timeout: float | None = None) -> list[Finished]:
        if not self._heap:
            return []
        end, number, start, result = heapq.heappop(self._heap)
        self.clock = end
        self.started.pop(number, None)
        return [Finished(number, result, end - start)]

    def stop_all(self, reason: str) -> list[Finished]:
        return []

    @property
    def running(self) -> int:
        return len(self._heap)


class _Reached(Exception):
    pass


def run_one(path: Path, k: int, seed: int, seeds_first: bool, workdir: Path, constants: Any = None
            ) -> dict[str, Any]:
    from autotune.runners.replay import ReplayRunner, ReplayTable
    from autotune.study.study import Tuner

    table = ReplayTable.load(path)
    setup = table.setup()
    runner = ReplayRunner(table)
    best = table.best.throughput
    gpus = setup.cluster.world_size
    ok_steps = [r.phases["step"] for r in table.rows if r.status.value == "ok" and "step" in r.phases]
    median_step = statistics.median(ok_steps)

    def duration(result: Any) -> float:
        if result.status.value == "ok":
            return STARTUP_S + setup.measure_step * result.phase_timings.get("step", median_step)
        return STARTUP_S + median_step

    ex = VirtualClockExecutor(k, duration)
    config = "perturbed" if constants is not None else ("seeded" if seeds_first else "unseeded")
    if constants is not None:  # the model's constants deliberately wrong (benchmarks/perturbed_search.py)
        setup = dataclasses.replace(setup, constants=constants)
    name = f"{path.stem}-k{k}-s{seed}-{config}"
    tuner = Tuner(setup, runner, f"sqlite:///{workdir / (name + '.db')}", name, seed=seed,
                  n_model_seeds=4 if seeds_first else 0, space_text=table.space_text(), workdir=workdir,
                  executor=ex, warm_start=False)
    done: list[tuple[float, float]] = []  # (duration, gpus) of finished launched trials
    out: dict[str, Any] = {"landscape": path.stem, "k": k, "seed": seed, "seeded": seeds_first, "config": config}
    statuses: list[str] = []

    def on_trial(row: Any) -> None:
        if not row.launched:
            return
        statuses.append(row.status)
        done.append((row.duration_s, gpus))
        if row.throughput is not None and row.throughput >= TARGET * best:
            running = sum((ex.clock - s) * gpus for s in ex.started.values())
            out.update(wall_s=ex.clock, gpu_h=(sum(d * g for d, g in done) + running) / 3600,
                       launched=len(statuses), oom_launched=statuses.count("oom"))
            raise _Reached

    try:
        tuner.run(len(table.rows), on_trial=on_trial)
        out.update(wall_s=None, gpu_h=None, launched=len(statuses), oom_launched=statuses.count("oom"))
    except _Reached:
        pass
    tuner.storage.engine.dispose()
    tuner.store.engine.dispose()
    return out


def summarize(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    keys = sorted({(r["landscape"], r.get("config") or ("seeded" if r["seeded"] else "unseeded")) for r in runs})
    for land, config in keys:
        mine = [r for r in runs if r["landscape"] == land
                and (r.get("config") or ("seeded" if r["seeded"] else "unseeded")) == config]
        base = [r for r in mine if r["k"] == 1]
        b_wall = statistics.median(r["wall_s"] for r in base if r["wall_s"] is not None)
        b_gpu = statistics.median(r["gpu_h"] for r in base if r["gpu_h"] is not None)
        for k in sorted({r["k"] for r in mine}):
            rk = [r for r in mine if r["k"] == k and r["wall_s"] is not None]
            wall, gpu = statistics.median(r["wall_s"] for r in rk), statistics.median(r["gpu_h"] for r in rk)
            rows.append({"landscape": land, "config": config, "k": k,
                         "wall_h": round(wall / 3600, 3), "gpu_h": round(gpu, 3),
                         "wall_vs_k1": round(wall / b_wall, 3), "gpu_h_vs_k1": round(gpu / b_gpu, 3),
                         "launched_median": statistics.median(r["launched"] for r in rk),
                         "oom_launched": sum(r["oom_launched"] for r in rk), "seeds": len(rk)})
    return rows


def markdown(rows: list[dict[str, Any]], seeds: int) -> str:
    lines = [
        "# Parallel trials: wall-clock and GPU-hours to 97% of the best (virtual clock, replayed landscapes)",
        "",
        f"`python -m benchmarks.parallel_speedup --seeds {seeds}`: the real Tuner + ReplayRunner through a virtual-"
        f"clock executor with K slots; a trial lasts {STARTUP_S:g} s of start-up + measure_step x the row's "
        "step_time_s (an OOM: start-up + one median step). Medians over seeds; ratios against K = 1 of the same "
        "landscape and configuration. `seeded` is autotune as shipped; `unseeded` starts from the sampler alone "
        "(--model-seeds 0).",
        "",
        "| landscape | config | K | wall h | GPU-h | wall vs K=1 | GPU-h vs K=1 | launched | OOM launched |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['landscape']} | {r['config']} | {r['k']} | {r['wall_h']} | {r['gpu_h']} | "
                     f"{r['wall_vs_k1']} | {r['gpu_h_vs_k1']} | {r['launched_median']} | {r['oom_launched']} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tables", nargs="*", default=None)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--ks", type=int, nargs="*", default=list(KS))
    ap.add_argument("--out", default=str(RESULTS / "parallel_speedup"))
    ap.add_argument("--perturbations", type=int, default=0,
                    help="instead: the model's constants perturbed (benchmarks/perturbed_search.py, seeds 0..N-1), "
                    "autotune as shipped with learning")
    args = ap.parse_args(argv)
    if args.perturbations:
        return main_perturbed(args)
    tables = [Path(t) for t in args.tables] if args.tables else sorted(LANDSCAPES.glob("*.csv"))
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for path in tables:
            for seeded in (True, False):
                for k in args.ks:
                    for seed in range(args.seeds):
                        runs.append(run_one(path, k, seed, seeded, Path(tmp)))
                        print(json.dumps(runs[-1]), flush=True)
            Path(args.out + ".runs.json").write_text(json.dumps(runs, indent=1))  # partial results survive
    rows = summarize(runs)
    Path(args.out + ".json").write_text(json.dumps({"runs": runs, "summary": rows}, indent=1))
    Path(args.out + ".md").write_text(markdown(rows, args.seeds))
    Path(args.out + ".runs.json").unlink(missing_ok=True)
    print(markdown(rows, args.seeds))


def main_perturbed(args: argparse.Namespace) -> None:
    """K = 1, 2, 4, 8 on every landscape with the model wrong: one run per perturbation (its seed is the tuner's)."""
    from benchmarks.perturbed_search import perturbed

    tables = [Path(t) for t in args.tables] if args.tables else sorted(LANDSCAPES.glob("*.csv"))
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for path in tables:
            for k in args.ks:
                for p in range(args.perturbations):
                    runs.append(run_one(path, k, p, True, Path(tmp), constants=perturbed(p)))
                    print(json.dumps(runs[-1]), flush=True)
    rows = summarize(runs)
    out = args.out if args.out != str(RESULTS / "parallel_speedup") else str(RESULTS / "parallel_speedup_perturbed")
    Path(out + ".json").write_text(json.dumps({"runs": runs, "summary": rows}, indent=1))
    text = perturbed_markdown(runs, rows, args.perturbations)
    Path(out + ".md").write_text(text)
    print(text)


def perturbed_markdown(runs: list[dict[str, Any]], rows: list[dict[str, Any]], n: int) -> str:
    """The perturbed run's page: the table of `markdown`, its own method line, and how often K = 1 needed one trial."""
    head = (f"`python -m benchmarks.parallel_speedup --perturbations {n}`: the model's constants perturbed (each x "
            f"U(0.6, 1.4), perturbation seeds 0-{n - 1}, as in benchmarks/perturbed_search.py; the perturbation's seed "
            "is the tuner's), autotune as shipped (model seeds, learning); the real Tuner + ReplayRunner through a "
            "virtual-clock executor with K slots")
    text = markdown(rows, n)
    lines = text.splitlines()
    i = next(j for j, line in enumerate(lines) if line.startswith("`python -m benchmarks.parallel_speedup"))
    lines[i] = head + lines[i][lines[i].index("; a trial lasts"):].replace(
        " `seeded` is autotune as shipped; `unseeded` starts from the sampler alone (--model-seeds 0).", "")
    lines[i] += (" `launched`: launched trials finished when the target was reached (median); GPU-h also counts "
                 "the trials still running then.")
    k1 = [r for r in runs if r["k"] == 1]
    first = sum(r["launched"] == 1 and r["wall_s"] is not None for r in k1)
    lines += ["", f"K = 1 reached 97% of the best with its first launched trial in {first} of {len(k1)} runs "
              "(landscape x perturbation): where one sequential trial suffices, parallel trials cannot shorten the "
              "wall-clock and multiply the GPU-hours by about K."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()


__all__ = ["VirtualClockExecutor", "dataclasses"]
