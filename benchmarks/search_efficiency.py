"""Search efficiency on measured landscapes: how many launched trials each strategy needs to get near the best.

    python -m benchmarks.search_efficiency                         # every table in benchmarks/landscapes/
    python -m benchmarks.search_efficiency --tables T.csv --seeds 5 --out /tmp/se   # a quick run

Every trial is answered by the replay runner from a table of measured configurations (benchmarks/README.md), so
each strategy sees the same real measurements. Strategies, SEEDS seeds each:
- autotune: `autotune.study.study.Tuner` as shipped (constraints + memory-model pruning before launch, model-seeded
  TPE), with the replay runner, on a temporary SQLite database;
- tpe: plain Optuna TPE (default TPESampler) on the same space, no pruning, no seeding; an oom / failed row is a
  launched failure (state FAIL, as an objective that raises);
- random: the table's rows in a random order;
- grid: every row in the order NeMo's auto-configurator would run them (one order, so every seed is the same):
  TP, then PP (and its VPP), then CP, then EP, then the micro-batch size (here the token budget per micro-batch),
  each smallest first, then recompute (none, selective, full: NeMo does not search it, so it varies last).
  NeMo's AutoConfigurator builds its candidate list by nested loops over tp, pp, cp, ep, mbs in that order and
  launches them in list order; it drops candidates by its own rough memory rule, which is not reproduced here.
A candidate that is not a row of the table was never measured; no strategy pays for it: it is not launched and
not counted (autotune's tuner prunes it, "not in the table"; tpe is told PRUNED; random and grid only draw rows).
A configuration proposed again is not launched again by any strategy (a cached answer, not counted).

Measures per (landscape, strategy): launched trials until the first trial within 97% / 99% of the landscape's best
throughput (median and worst seed), OOM launches until 99% is reached, and GPU-hours until then: each launched
trial costs `gpus x MEASURED_STEPS x step_time_s` (an ok row), or `gpus x 1 x median ok step time` (an oom or
failed row: it dies in its first step); start-up time is left out (the same per launch for every strategy).

Held out: the landscapes matching HELD_OUT were decided before any landscape existed, and were not looked at
while developing autotune's search; results are reported for all.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import math
import multiprocessing as mp
import random
import statistics
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna

REPO = Path(__file__).resolve().parent.parent
LANDSCAPES = REPO / "benchmarks" / "landscapes"
RESULTS = REPO / "benchmarks" / "results"
HELD_OUT = ("*-g4",)  # decided up front, by name: every 4-GPU landscape is held out of development
STRATEGIES = ("autotune", "tpe", "random", "grid")
SEEDS = 20
TARGETS = (0.97, 0.99)
MEASURED_STEPS = 3  # a trial runs to its measured step (autotune's default --measure-step)
MAX_IDLE_ASKS = 300  # the tuner's own limit: proposals in a row that launch nothing

optuna.logging.set_verbosity(optuna.logging.WARNING)


@dataclass(frozen=True)
class Launch:
    status: str  # ok | oom | failed
    throughput: float  # 0 unless ok
    cost_gpu_s: float
    line: int


@dataclass
class Trace:
    landscape: str
    strategy: str
    seed: int
    launches: list[Launch] = field(default_factory=list)
    proposals: int = 0  # candidates proposed, launched or not
    wall_s: float = 0.0


def is_held_out(name: str) -> bool:
    return any(fnmatch.fnmatch(name, pat) for pat in HELD_OUT)


# ---------------------------------------------------------------------------------------------------------
# One landscape
# ---------------------------------------------------------------------------------------------------------


class Landscape:
    def __init__(self, path: Path):
        from autotune.candidate import Candidate
        from autotune.runners.replay import ReplayRunner, ReplayTable

        self.path = Path(path)
        self.name = self.path.name.removesuffix(".csv")
        self.table = ReplayTable.load(self.path)
        self.setup = self.table.setup()
        self.runner = ReplayRunner(self.table)
        self.base = self.setup.base
        self.rows = self.runner._rows(self.setup.job)  # candidate key -> row
        self.best = self.table.best.throughput or 0.0
        ok_steps = [r.phases["step"] for r in self.table.rows if r.status.value == "ok" and "step" in r.phases]
        self.median_step = statistics.median(ok_steps) if ok_steps else 1.0
        self.gpus = self.setup.cluster.world_size
        self._candidate = Candidate

    def cost(self, row: Any) -> float:
        if row.status.value == "ok":
            return self.gpus * MEASURED_STEPS * row.phases.get("step", self.median_step)
        return self.gpus * self.median_step

    def launch(self, row: Any) -> Launch:
        return Launch(row.status.value, row.throughput or 0.0, self.cost(row), row.line)

    def done(self, trace: Trace) -> bool:
        return any(x.throughput >= TARGETS[-1] * self.best for x in trace.launches)


def run_autotune(land: Landscape, seed: int, workdir: Path) -> Trace:
    from autotune.study.study import Tuner

    trace = Trace(land.name, "autotune", seed)
    url = f"sqlite:///{workdir / f'{land.name}-{seed}.db'}"
    tuner = Tuner(land.setup, land.runner, url, study_name=f"se-{land.name}-{seed}", seed=seed,
                  space_text=land.table.space_text(), workdir=workdir)
    tuner.recover()
    tuner.seed_study()
    idle = 0
    while idle < MAX_IDLE_ASKS and len(trace.launches) < len(land.rows) and not land.done(trace):
        row = tuner.step()
        trace.proposals += 1
        if row.launched:
            idle = 0
            trace.launches.append(land.launch(land.runner.lookup(_cand(land, row.params), land.setup.job)))
        else:
            idle += 1
    tuner.storage.engine.dispose()
    tuner.store.engine.dispose()
    return trace


def _cand(land: Landscape, params: dict[str, Any]) -> Any:
    return land._candidate.from_params(params)


def run_tpe(land: Landscape, seed: int) -> Trace:
    from optuna.trial import TrialState

    trace = Trace(land.name, "tpe", seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=seed))
    ctx = land.setup.context
    seen: dict[str, float | None] = {}
    idle = 0
    while idle < MAX_IDLE_ASKS and len(trace.launches) < len(land.rows) and not land.done(trace):
        trial = study.ask()
        params = land.setup.space.suggest(trial, ctx)
        key = land._candidate.from_params(params, land.base).key()
        trace.proposals += 1
        row = land.rows.get(key)
        if row is None:
            study.tell(trial, state=TrialState.PRUNED)  # never measured: free, as for every strategy
            idle += 1
            continue
        if key in seen:  # proposed again: the cached answer, not launched again
            value = seen[key]
            study.tell(trial, value, state=TrialState.COMPLETE if value is not None else TrialState.FAIL)
            idle += 1
            continue
        idle = 0
        trace.launches.append(land.launch(row))
        value = row.throughput if row.status.value == "ok" else None
        seen[key] = value
        study.tell(trial, value, state=TrialState.COMPLETE if value is not None else TrialState.FAIL)
    return trace


def run_random(land: Landscape, seed: int) -> Trace:
    trace = Trace(land.name, "random", seed)
    rows = list(land.rows.values())
    random.Random(seed).shuffle(rows)
    for row in rows:
        if land.done(trace):
            break
        trace.proposals += 1
        trace.launches.append(land.launch(row))
    return trace


def nemo_order(land: Landscape) -> list[Any]:
    """Rows in NeMo AutoConfigurator's launch order: tp, pp (vpp), cp, ep, micro-batch size, then recompute."""
    rc = {"none": 0, "selective": 1, "full": 2}

    def key(item: tuple[str, Any]) -> tuple:
        c = land._candidate.from_params(item[1].params, land.base)
        mbs = c.ppo_max_token_len_per_gpu if c.use_dynamic_bsz else (c.ppo_micro_batch_size_per_gpu or 1)
        return (c.tp, c.pp, c.vpp_or_1, c.cp, c.ep, mbs, rc[c.recompute], not c.sequence_parallel)

    return [row for _, row in sorted(land.rows.items(), key=key)]


def run_grid(land: Landscape, seed: int) -> Trace:
    trace = Trace(land.name, "grid", seed)
    for row in nemo_order(land):
        if land.done(trace):
            break
        trace.proposals += 1
        trace.launches.append(land.launch(row))
    return trace


def run_one(job: tuple[str, str, int]) -> Trace:
    path, strategy, seed = job
    land = _landscape(path)
    t0 = time.perf_counter()
    if strategy == "autotune":
        with tempfile.TemporaryDirectory() as d:
            trace = run_autotune(land, seed, Path(d))
    else:
        trace = {"tpe": run_tpe, "random": run_random, "grid": run_grid}[strategy](land, seed)
    trace.wall_s = time.perf_counter() - t0
    return trace


_CACHE: dict[str, Landscape] = {}


def _landscape(path: str) -> Landscape:
    if path not in _CACHE:
        _CACHE[path] = Landscape(Path(path))
    return _CACHE[path]


# ---------------------------------------------------------------------------------------------------------
# Measures
# ---------------------------------------------------------------------------------------------------------


def trials_to(trace: Trace, best: float, frac: float) -> int | None:
    for i, x in enumerate(trace.launches, 1):
        if x.throughput >= frac * best:
            return i
    return None


def gpu_hours_to(trace: Trace, best: float, frac: float) -> float | None:
    n = trials_to(trace, best, frac)
    return None if n is None else sum(x.cost_gpu_s for x in trace.launches[:n]) / 3600


def oom_until(trace: Trace, best: float, frac: float = TARGETS[-1]) -> tuple[int, int]:
    """(oom launches, launches) up to reaching frac of the best (or the whole trace when never reached)."""
    n = trials_to(trace, best, frac) or len(trace.launches)
    return sum(x.status == "oom" for x in trace.launches[:n]), n


def _med(values: list[float | None]) -> float | None:
    """Median where a run that never got there counts as infinitely long."""
    vals = sorted(math.inf if v is None else v for v in values)
    return statistics.median(vals) if vals else None


def _worst(values: list[float | None]) -> float | None:
    return max((math.inf if v is None else v) for v in values) if values else None


def summarize(traces: list[Trace], lands: dict[str, Landscape]) -> list[dict[str, Any]]:
    out = []
    for name, land in lands.items():
        for strat in STRATEGIES:
            ts = [t for t in traces if t.landscape == name and t.strategy == strat]
            if not ts:
                continue
            rec: dict[str, Any] = {"landscape": name, "strategy": strat, "seeds": len(ts),
                                   "held_out": is_held_out(name)}
            for frac in TARGETS:
                n = [trials_to(t, land.best, frac) for t in ts]
                h = [gpu_hours_to(t, land.best, frac) for t in ts]
                rec[f"trials{int(frac * 100)}_median"] = _med(n)
                rec[f"trials{int(frac * 100)}_worst"] = _worst(n)
                rec[f"gpuh{int(frac * 100)}_median"] = _med(h)
                rec[f"reached{int(frac * 100)}"] = sum(v is not None for v in n)
            ooms = [oom_until(t, land.best) for t in ts]
            rec["oom_median"] = statistics.median(o for o, _ in ooms)
            rec["oom_total"] = sum(o for o, _ in ooms)
            rec["launches_total"] = sum(n for _, n in ooms)
            rec["oom_share"] = rec["oom_total"] / max(1, rec["launches_total"])
            rec["proposals_median"] = statistics.median(t.proposals for t in ts)
            rec["wall_s_median"] = statistics.median(t.wall_s for t in ts)
            out.append(rec)
    return out


def diagnostics(land: Landscape) -> dict[str, Any]:
    """How the models see this landscape: rank correlation of predicted vs measured, memory-model confusion."""
    from autotune.runners.base import TrialStatus

    pred, meas = [], []
    false_prune, caught_oom, missed_oom = [], 0, 0
    best_pruned = False
    for row in land.rows.values():
        cand = land._candidate.from_params(row.params, land.base)
        ev = land.setup.evaluate(cand)
        if row.status == TrialStatus.OK:
            if ev.throughput is not None:
                pred.append(ev.throughput.throughput)
                meas.append(row.throughput)
            if not ev.feasible:
                false_prune.append(row.throughput / land.best)
                best_pruned |= row.throughput >= TARGETS[0] * land.best
        elif row.status == TrialStatus.OOM:
            caught_oom += not ev.feasible
            missed_oom += ev.feasible
    ok = [r for r in land.rows.values() if r.status == TrialStatus.OK]
    top = max(zip(pred, meas, strict=True))[1] / land.best if pred else None
    return {
        "rows": len(land.rows), "ok": len(ok), "oom": sum(r.status == TrialStatus.OOM for r in land.rows.values()),
        "spearman": _spearman(pred, meas), "model_top_pick": top,
        "near_best_rows": sum(r.throughput >= TARGETS[0] * land.best for r in ok),
        "ok_pruned": len(false_prune), "near_best_pruned": best_pruned,
        "oom_caught": caught_oom, "oom_missed": missed_oom,
    }


def _spearman(a: list[float], b: list[float]) -> float | None:
    if len(a) < 3:
        return None

    def ranks(x: list[float]) -> list[float]:
        order = sorted(range(len(x)), key=lambda i: x[i])
        r = [0.0] * len(x)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and x[order[j + 1]] == x[order[i]]:
                j += 1
            for k in range(i, j + 1):
                r[order[k]] = (i + j) / 2
            i = j + 1
        return r

    ra, rb = ranks(a), ranks(b)
    ma, mb = statistics.mean(ra), statistics.mean(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb, strict=True))
    var = math.sqrt(sum((x - ma) ** 2 for x in ra) * sum((y - mb) ** 2 for y in rb))
    return cov / var if var else None


# ---------------------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------------------


def _fmt(v: Any, nd: int = 1) -> str:
    if v is None:
        return "-"
    if isinstance(v, float) and math.isinf(v):
        return "never"
    if isinstance(v, float):
        return f"{v:.{nd}f}" if v == v else "-"
    return str(v)


def _gpuh(v: float | None) -> str:
    if v is None or math.isinf(v):
        return "never"
    return f"{v:.4f}" if v < 1 else f"{v:.2f}"


def targets(summary: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per landscape: autotune's median to 97% <= 6, <= a quarter of random's, OOM share < 10%."""
    out = {}
    for name in sorted({r["landscape"] for r in summary}):
        by = {r["strategy"]: r for r in summary if r["landscape"] == name}
        a, rnd = by.get("autotune"), by.get("random")
        if not a or not rnd:
            continue
        out[name] = {
            "le6": a["trials97_median"] <= 6,
            "quarter_random": a["trials97_median"] <= rnd["trials97_median"] / 4,
            "quarter_attainable": rnd["trials97_median"] / 4 >= 1,  # no strategy launches fewer than 1 trial
            "random_quarter": rnd["trials97_median"] / 4,
            "oom_lt10": a["oom_share"] < 0.10,
        }
    return out


def report(summary: list[dict[str, Any]], diags: dict[str, dict[str, Any]], lands: dict[str, Landscape],
           seeds: int, out_md: Path, plots: list[str], wall_s: float) -> str:
    lines = [
        "# Search efficiency on measured landscapes",
        "",
        "Generated by `python -m benchmarks.search_efficiency` (method and definitions: its docstring and "
        "benchmarks/README.md). Every trial is a real measurement **replayed** from a landscape table; nothing "
        "was run or simulated for this page.",
        "",
        f"{len(lands)} landscapes, {seeds} seeds per strategy (grid has one order: its seeds are identical). "
        f"Held out of development (decided by name before any landscape existed: {', '.join(HELD_OUT)}): "
        f"{', '.join(n for n in lands if is_held_out(n)) or 'none present'}. Benchmark wall time {wall_s:.0f} s.",
        "",
        "Objective of these landscapes: tokens/s/GPU of the **training phase only** (a Megatron-core "
        "forward-backward-optimizer step at the row's token budget), not a whole GRPO step; autotune's setup "
        "for them uses objective `train` (its models rank by the update phase and check the update's memory).",
        "",
        "## Landscapes",
        "",
        "| landscape | held out | rows | ok | oom | best tok/s/GPU | rows >= 97% | model rank corr. (Spearman) | "
        "model's top pick / best | ok rows pruned by memory model | near-best pruned | oom rows caught / missed |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, land in lands.items():
        d = diags[name]
        lines.append(
            f"| {name} | {'yes' if is_held_out(name) else 'no'} | {d['rows']} | {d['ok']} | {d['oom']} | "
            f"{land.best:.0f} | {d['near_best_rows']} | {_fmt(d['spearman'], 2)} | {_fmt(d['model_top_pick'], 3)} | "
            f"{d['ok_pruned']} | {'YES' if d['near_best_pruned'] else 'no'} | {d['oom_caught']} / {d['oom_missed']} |")
    lines += [
        "",
        "## Launched trials to reach 97% / 99% of the best",
        "",
        "median and worst seed; `never`: some seed did not get there before the strategy ran out of candidates. "
        "OOM: launches that ran out of memory before reaching 99% (median per seed; share of all launches). "
        "GPU-hours: median, to 97% / 99%.",
        "",
        "| landscape | strategy | to 97%: median | worst | to 99%: median | worst | OOM launched (median) | "
        "OOM share | GPU-h to 97% | GPU-h to 99% |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in summary:
        lines.append(
            f"| {r['landscape']}{' (held out)' if r['held_out'] else ''} | {r['strategy']} | "
            f"{_fmt(r['trials97_median'])} | {_fmt(r['trials97_worst'])} | {_fmt(r['trials99_median'])} | "
            f"{_fmt(r['trials99_worst'])} | {_fmt(r['oom_median'])} | {r['oom_share']:.0%} | "
            f"{_gpuh(r['gpuh97_median'])} | {_gpuh(r['gpuh99_median'])} |")
    tg = targets(summary)
    lines += ["", "## Targets (autotune)", "",
              "median launched trials to 97% <= 6; <= a quarter of random search's median; OOM launches < 10%.", "",
              "| landscape | <= 6 | <= random / 4 | OOM < 10% |", "|---|---|---|---|"]
    for name, t in tg.items():
        quarter = "met" if t["quarter_random"] else "MISSED" + (
            "" if t["quarter_attainable"] else f" (unattainable: random's median / 4 = {t['random_quarter']:.2f} "
            "< 1 trial)")
        lines.append(f"| {name}{' (held out)' if is_held_out(name) else ''} | {'met' if t['le6'] else 'MISSED'} | "
                     f"{quarter} | {'met' if t['oom_lt10'] else 'MISSED'} |")
    lines += ["", "## Plots", ""] + [f"![{Path(p).stem}]({Path(p).name})" for p in plots]
    text = "\n".join(lines) + "\n"
    out_md.write_text(text)
    return text


def plot(traces: list[Trace], lands: dict[str, Landscape], out_dir: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"autotune": "tab:blue", "tpe": "tab:orange", "random": "tab:green", "grid": "tab:gray"}
    n = len(lands)
    cols = min(3, n)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.6 * rows), squeeze=False)
    for ax, (name, land) in zip(axes.flat, lands.items(), strict=False):
        horizon = len(land.rows)
        xs = list(range(1, horizon + 1))
        for strat in STRATEGIES:
            ts = [t for t in traces if t.landscape == name and t.strategy == strat]
            if not ts:
                continue
            curves = []
            for t in ts:
                best, c = 0.0, []
                for i in range(horizon):
                    if i < len(t.launches):
                        best = max(best, t.launches[i].throughput)
                    c.append(best / land.best)
                curves.append(c)
            med = [statistics.median(c[i] for c in curves) for i in range(horizon)]
            lo = [min(c[i] for c in curves) for i in range(horizon)]
            ax.step(xs, med, where="post", color=colors[strat], label=strat)
            ax.fill_between(xs, lo, med, step="post", color=colors[strat], alpha=0.12)
        ax.axhline(0.97, color="k", lw=0.6, ls="--")
        ax.set_title(name + (" (held out)" if is_held_out(name) else ""), fontsize=10)
        ax.set_xlabel("launched trials")
        ax.set_ylabel("best so far / landscape best")
        ax.set_ylim(0, 1.06)
        ax.set_xlim(1, horizon)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=8, loc="lower right")
    fig.suptitle("Best throughput found vs launched trials (median line, worst seed shaded)", fontsize=11)
    fig.tight_layout()
    p1 = out_dir / "search_efficiency.png"
    fig.savefig(p1, dpi=110)
    plt.close(fig)

    summary = summarize(traces, lands)
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * n), 3.8))
    width = 0.2
    names = list(lands)
    for j, strat in enumerate(STRATEGIES):
        vals = []
        for name in names:
            r = next((r for r in summary if r["landscape"] == name and r["strategy"] == strat), None)
            v = r["trials97_median"] if r else 0
            vals.append(len(lands[name].rows) + 1 if v is None or math.isinf(v) else v)
        ax.bar([i + (j - 1.5) * width for i in range(n)], vals, width, color=colors[strat], label=strat)
    ax.set_xticks(range(n))
    ax.set_xticklabels([nm + ("*" if is_held_out(nm) else "") for nm in names], rotation=20, fontsize=8)
    ax.set_ylabel("median launched trials to 97%")
    ax.set_title("Launched trials to 97% of the best (* held out)", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    p2 = out_dir / "search_efficiency_trials.png"
    fig.savefig(p2, dpi=110)
    plt.close(fig)
    return [str(p1), str(p2)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tables", nargs="*", type=Path, help="replay tables (default benchmarks/landscapes/*.csv)")
    ap.add_argument("--seeds", type=int, default=SEEDS)
    ap.add_argument("--strategies", nargs="*", default=list(STRATEGIES), choices=STRATEGIES)
    ap.add_argument("--only", choices=("development", "held-out", "all"), default="all",
                    help="development: leave the held-out landscapes out (while working on the search)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--jobs", type=int, default=max(1, min(2, mp.cpu_count())))
    ap.add_argument("--no-plots", action="store_true")
    ap.add_argument("--json", type=Path, help="also write the summary and every trace as JSON here")
    args = ap.parse_args(argv)
    paths = args.tables or sorted(LANDSCAPES.glob("*.csv"))
    if args.only != "all":
        paths = [p for p in paths if is_held_out(p.name.removesuffix(".csv")) == (args.only == "held-out")]
    if not paths:
        print("no landscapes: build them with `python -m benchmarks.make_landscapes`")
        return 1
    lands = {Path(p).name.removesuffix(".csv"): Landscape(Path(p)) for p in paths}
    jobs = [(str(p), s, seed) for p in paths for s in args.strategies
            for seed in (range(args.seeds) if s != "grid" else range(1))]
    t0 = time.perf_counter()
    if args.jobs > 1:
        with mp.get_context("fork").Pool(args.jobs) as pool:
            traces = pool.map(run_one, jobs, chunksize=1)
    else:
        traces = [run_one(j) for j in jobs]
    # grid is deterministic: its one run stands for every seed
    traces += [Trace(t.landscape, t.strategy, s, t.launches, t.proposals, t.wall_s)
               for t in traces if t.strategy == "grid" for s in range(1, args.seeds)]
    wall = time.perf_counter() - t0
    args.out.mkdir(parents=True, exist_ok=True)
    summary = summarize(traces, lands)
    diags = {name: diagnostics(land) for name, land in lands.items()}
    plots = [] if args.no_plots else plot(traces, lands, args.out)
    md = report(summary, diags, lands, args.seeds, args.out / "search_efficiency.md", plots, wall)
    if args.json:
        finite = [{k: (None if isinstance(v, float) and math.isinf(v) else v) for k, v in r.items()} for r in summary]
        args.json.write_text(json.dumps(
            {"summary": finite, "diagnostics": diags, "targets": targets(summary),
             "traces": [{"landscape": t.landscape, "strategy": t.strategy, "seed": t.seed, "proposals": t.proposals,
                         "launches": [[x.line, x.status, x.throughput] for x in t.launches]} for t in traces]},
            indent=1))
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
