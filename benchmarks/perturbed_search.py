"""Search with a wrong model: launched trials to 97% of the best on every replay landscape when the model's
constants are deliberately wrong, with and without learning, against plain TPE.

    python -m benchmarks.perturbed_search                      # 10 perturbations, every landscape
    python -m benchmarks.perturbed_search --perturbations 3 --tables benchmarks/landscapes/qwen2.5-7b-L8-g4.csv

A perturbation (fixed seed) multiplies each of the model's constants by its own factor drawn uniformly in
[0.6, 1.4]: the compute efficiencies (train, forward, decode, prefill, MoE, micro-batch size at half efficiency,
the TP and CP penalties), the bandwidths (HBM share and intensity, all-to-all, PCIe, weight sync) and the activation
memory (the per-layer widths of both memory calibrations). Each landscape is searched by
- autotune learning: `Tuner` as shipped (the exact ranking of the landscape's rows by the perturbed model, the plan,
  the Bayesian correction refitted after every replayed measurement, TPE);
- autotune without learning: the same with `learn=False` (the perturbed model's ranking and TPE only);
- plain TPE (benchmarks/search_efficiency.py's, same seeds as perturbations): no model at all, so perturbations do
  not change it.
Every trial is a replayed measurement; nothing is simulated. A run stops at 97% of the landscape's best (or when
every row was launched). Also recorded: OOM launches before reaching 97%, for the perturbed models and for the
unperturbed one (the target: no OOM launched where the unperturbed model launches none).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.search_efficiency import LANDSCAPES, RESULTS, Landscape, run_tpe, trials_to

TARGET = 0.97
SPREAD = 0.4
EFFICIENCIES = ("train", "forward", "decode_compute", "prefill", "moe_train", "tokens_half", "tp_penalty",
                "cp_penalty")
BANDWIDTHS = ("hbm", "intensity", "a2a", "host_link_share", "cpu_adam_params_per_s", "reshard_gbps")
ACTIVATIONS = ("act_h", "act_q", "act_kv", "act_f")


def perturbed(seed: int | None, spread: float = SPREAD) -> Any:
    """The model's constants with each one multiplied by U(1 - spread, 1 + spread) (seed None: as shipped)."""
    from autotune.estimate import DEFAULT_CONSTANTS

    if seed is None:
        return DEFAULT_CONSTANTS
    rng = random.Random(seed)
    c = DEFAULT_CONSTANTS
    eff = dataclasses.replace(c.efficiency, **{k: getattr(c.efficiency, k) * rng.uniform(1 - spread, 1 + spread)
                                              for k in EFFICIENCIES + BANDWIDTHS})
    acts = {k: rng.uniform(1 - spread, 1 + spread) for k in ACTIVATIONS}
    cal = dataclasses.replace(c.calibration, **{k: getattr(c.calibration, k) * f for k, f in acts.items()})
    probe = dataclasses.replace(c.probe_calibration, **{k: getattr(c.probe_calibration, k) * f
                                                        for k, f in acts.items()})
    return dataclasses.replace(c, efficiency=eff, calibration=cal, probe_calibration=probe)


def run_model(land: Landscape, constants: Any, learn: bool, seed: int, workdir: Path, tag: str = "") -> dict[str, Any]:
    """autotune on one landscape with the given model constants: launches until 97% of the best."""
    from autotune.study.study import Tuner

    setup = dataclasses.replace(land.setup, constants=constants)
    name = f"p-{land.name}-{tag}{seed}-{int(learn)}"
    t0 = time.perf_counter()
    tuner = Tuner(setup, land.runner, f"sqlite:///{workdir / (name + '.db')}", name, seed=seed,
                  space_text=land.table.space_text(), workdir=workdir, learn=learn, warm_start=False)
    tuner.recover()
    tuner.seed_study()
    launches: list[tuple[str, float]] = []
    idle = 0
    while idle < 300 and len(launches) < len(land.rows) and not tuner.plan.exhausted:
        row = tuner.step()
        if row.launched:
            idle = 0
            launches.append((row.status, row.throughput or 0.0))
            if (row.throughput or 0.0) >= TARGET * land.best:
                break
        else:
            idle += 1
    out = {"trials": next((i for i, (_, t) in enumerate(launches, 1) if t >= TARGET * land.best), None),
           "launched": len(launches), "oom": sum(s == "oom" for s, _ in launches),
           "correction": tuner.setup.correction.summary(), "wall_s": time.perf_counter() - t0}
    tuner.storage.engine.dispose()
    tuner.store.engine.dispose()
    return out


def _med(values: list[int | None]) -> float:
    return statistics.median(math.inf if v is None else v for v in values)


def _worst(values: list[int | None]) -> float:
    return max(math.inf if v is None else v for v in values)


def _fmt(v: float) -> str:
    return "never" if math.isinf(v) else (f"{v:.0f}" if v == int(v) else f"{v:.1f}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tables", nargs="*", default=None)
    ap.add_argument("--perturbations", type=int, default=10)
    ap.add_argument("--spread", type=float, default=SPREAD, help="each constant x U(1 - spread, 1 + spread)")
    ap.add_argument("--out", default=str(RESULTS / "perturbed_search"))
    args = ap.parse_args(argv)
    tables = [Path(t) for t in args.tables] if args.tables else sorted(LANDSCAPES.glob("*.csv"))
    seeds = list(range(args.perturbations))
    rows: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for path in tables:
            land = Landscape(path)
            base = {learn: run_model(land, perturbed(None), learn, 0, Path(tmp), "u") for learn in (True, False)}
            for seed in seeds:
                rec = {"landscape": land.name, "perturbation": seed, "rows": len(land.rows)}
                for learn in (True, False):
                    r = run_model(land, perturbed(seed, args.spread), learn, seed, Path(tmp))
                    rec["learn" if learn else "plain"] = r
                tpe = run_tpe(land, seed)
                rec["tpe"] = {"trials": trials_to(tpe, land.best, TARGET), "launched": len(tpe.launches),
                              "oom": sum(x.status == "oom" for x in tpe.launches[: trials_to(tpe, land.best, TARGET)
                                                                                  or len(tpe.launches)])}
                rec["unperturbed"] = base
                rows.append(rec)
                print(json.dumps({k: v for k, v in rec.items() if k != "unperturbed"}), flush=True)
    wall = time.perf_counter() - t0
    summary = summarize(rows)
    Path(args.out + ".json").write_text(json.dumps({"runs": rows, "summary": summary}, indent=1, default=str))
    Path(args.out + ".md").write_text(markdown(summary, len(seeds), wall, args.spread))
    print(markdown(summary, len(seeds), wall, args.spread))


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for name in sorted({r["landscape"] for r in rows}):
        mine = [r for r in rows if r["landscape"] == name]
        base = mine[0]["unperturbed"]
        rec: dict[str, Any] = {"landscape": name, "rows": mine[0]["rows"], "perturbations": len(mine)}
        for key in ("learn", "plain", "tpe"):
            t = [r[key]["trials"] for r in mine]
            rec[f"{key}_median"], rec[f"{key}_worst"] = _med(t), _worst(t)
            rec[f"{key}_oom"] = sum(r[key]["oom"] for r in mine)
            rec[f"{key}_oom_runs"] = sum(r[key]["oom"] > 0 for r in mine)
        rec["unperturbed_trials"] = base[True]["trials"]
        rec["unperturbed_oom"] = base[True]["oom"]
        out.append(rec)
    return out


def markdown(summary: list[dict[str, Any]], n: int, wall: float, spread: float = SPREAD) -> str:
    lines = [
        "# Search with a wrong model (replayed landscapes, perturbed constants)",
        "",
        f"`python -m benchmarks.perturbed_search --perturbations {n}"
        + (f" --spread {spread:g}" if spread != SPREAD else "") + "`: each of the model's compute efficiencies, "
        f"bandwidths and activation-memory widths multiplied by its own factor in [{1 - spread:.1f}, "
        f"{1 + spread:.1f}] (perturbation seeds 0-{n - 1}); launched trials until one reaches {TARGET:.0%} of the "
        "landscape's best, median and worst over the perturbations; plain TPE with seeds 0-"
        f"{n - 1} (it uses no model). OOM: launches that ran out of memory before reaching the target, summed over "
        f"the perturbations (runs with any). Every trial is a replayed measurement. Wall time {wall:.0f} s.",
        "",
        "| landscape | rows | learning: median (worst) | OOM | without learning: median (worst) | OOM | "
        "plain TPE: median (worst) | OOM | unperturbed model: trials, OOM |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in summary:
        lines.append(
            f"| {r['landscape']} | {r['rows']} | {_fmt(r['learn_median'])} ({_fmt(r['learn_worst'])}) | "
            f"{r['learn_oom']} ({r['learn_oom_runs']}) | {_fmt(r['plain_median'])} ({_fmt(r['plain_worst'])}) | "
            f"{r['plain_oom']} ({r['plain_oom_runs']}) | {_fmt(r['tpe_median'])} ({_fmt(r['tpe_worst'])}) | "
            f"{r['tpe_oom']} ({r['tpe_oom_runs']}) | {r['unperturbed_trials']}, {r['unperturbed_oom']} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
