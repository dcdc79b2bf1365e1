"""Tuner-side overhead per trial, against Optuna's own ask/tell on the same SQLite storage.

    python -m benchmarks.overhead                  # 100 and 10,000 trials -> benchmarks/results/overhead.md
    python -m benchmarks.overhead --sizes 100 1000 --tail 20 --out /tmp/oh

What a tuner step costs besides the trial itself: ask Optuna, build the candidate, check the constraints,
estimate memory and throughput, look for a launched duplicate, persist the trial (our row + Optuna's), read the
launched count back. Measured with the simulate runner (whose own work is a few dictionary copies) on qwen2.5-7b,
8 x H100, the default job and the dense space, on a SQLite file.

How each size is measured:
- 100 trials: a fresh study run by `Tuner.run`, every proposal timed (pruned ones included: they are trials of
  the study too); the baseline is a fresh Optuna study in the same database file, the same sampler settings
  (TPE, multivariate, group, constant liar, seed), the same space, doing only ask + suggest + tell.
- 10,000 trials: running 10,000 full steps would take hours of TPE sampling alone, so the study is first
  filled to N - TAIL trials in bulk (random points of the space, told with the model's estimate, pruned where
  the models prune, with autotune's own trial rows), then the last TAIL trials are run by the tuner and timed
  as above; then TAIL more by plain Optuna ask/tell on the same study (as large, same storage). The per-trial
  numbers are means over those TAIL trials: the cost at the end of a study of that size.
`autotune status` is timed as a separate process (`python -m autotune status`), as a user runs it, on the
largest study, with and without `--all`.
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState, create_trial
from sqlalchemy import event

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
optuna.logging.set_verbosity(optuna.logging.WARNING)


def make_setup():
    from autotune.cluster import Cluster, get_gpu_type
    from autotune.job import Job
    from autotune.model import get_model
    from autotune.space import load_space
    from autotune.study import Setup

    return Setup(get_model("qwen2.5-7b"), Cluster(get_gpu_type("h100"), 8), Job.default(), load_space("dense"))


def make_sampler(seed: int = 0) -> optuna.samplers.BaseSampler:
    """The tuner's own sampler settings (autotune.study.Tuner)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True, constant_liar=True,
                                          n_startup_trials=5)


def prefill(setup, url: str, name: str, n: int, with_rows: bool, seed: int = 1) -> None:
    """n trials in bulk: random points of the space, told with the models' verdict (as the tuner would)."""
    from autotune.candidate import Candidate
    from autotune.runners.base import TrialStatus
    from autotune.store import Store, TrialRow, utcnow

    if n <= 0:
        return
    storage = optuna.storages.RDBStorage(url)
    # Bulk filling only (not timed): no fsync per commit. The timed trials run on ordinary connections.
    event.listen(storage.engine, "connect", lambda conn, _: conn.execute("PRAGMA synchronous=OFF"))
    storage.engine.dispose()
    study = optuna.load_study(study_name=name, storage=storage)
    rng = random.Random(seed)
    ctx = setup.context
    frozen, rows = [], []
    for i in range(n):
        params = setup.space.sample(rng, ctx)
        cand = Candidate.from_params(params, setup.base)
        ev = setup.evaluate(cand)
        dists = {k: CategoricalDistribution(list(setup.space[k].choices)) for k in params}
        ok = ev.feasible
        frozen.append(create_trial(params=params, distributions=dists, value=ev.predicted_throughput if ok else None,
                                   state=TrialState.COMPLETE if ok else TrialState.PRUNED,
                                   user_attrs={"origin": "sampler", "status": "ok" if ok else "pruned"}))
        if with_rows:
            now = utcnow()
            rows.append(TrialRow(
                study=name, number=i, status=(TrialStatus.OK if ok else TrialStatus.PRUNED).value,
                origin="sampler", launched=ok, simulated=True, backend="simulate", candidate_key=cand.key(),
                params=cand.params(), verl_overrides=cand.verl_overrides(), worker="prefill",
                predicted_throughput=ev.throughput.throughput if ev.throughput else None,
                predicted_peak_gib=ev.memory.peak / 2**30 if ev.memory else None,
                predicted_memory=ev.memory.as_dict() if ev.memory else None,
                throughput=ev.predicted_throughput if ok else None, reason="" if ok else ev.prune_reason(),
                started_at=now, heartbeat_at=now, finished_at=now, duration_s=0.0))
    study.add_trials(frozen)
    if with_rows:
        store = Store(url)
        with store.session() as s:
            s.add_all(rows)
        store.engine.dispose()
    storage.engine.dispose()


def time_autotune(setup, url: str, size: int, tail: int) -> dict:
    """Per-trial tuner-side time over the last `tail` trials of a study of `size` trials."""
    from autotune.runners.simulate import SimulateRunner
    from autotune.study import Tuner

    name = f"overhead-autotune-{size}"
    text = Path(setup.space.source).read_text()
    tuner = Tuner(setup, SimulateRunner(), url, study_name=name, seed=0, space_text=text)
    pre = size - tail
    prefill(setup, url, name, pre, with_rows=True)
    tuner.recover()
    tuner.seed_study()  # the first run of a study seeds it (not timed: once per study)
    times, launched = [], 0
    for _ in range(tail):
        t0 = time.perf_counter()
        tuner.launched_count()  # what Tuner.run reads back before every step
        row = tuner.step()
        times.append(time.perf_counter() - t0)
        launched += row.launched
    n_trials = len(tuner.study.get_trials(deepcopy=False))
    tuner.storage.engine.dispose()
    tuner.store.engine.dispose()
    return {"name": name, "times": times, "launched": launched, "trials": n_trials}


def time_optuna(setup, url: str, size: int, tail: int, study_name: str | None = None) -> dict:
    """Optuna alone on the same storage: ask, suggest the same space, tell the model's estimate.

    `study_name`: go on with that (already filled) study instead of a fresh one of `size - tail` trials.
    """
    from autotune.candidate import Candidate

    name = study_name or f"overhead-optuna-{size}"
    storage = optuna.storages.RDBStorage(url)
    study = optuna.create_study(study_name=name, storage=storage, sampler=make_sampler(), direction="maximize",
                                load_if_exists=True)
    if not study_name:
        prefill(setup, url, name, size - tail, with_rows=False)
    ctx = setup.context
    values = {}
    times = []
    for _ in range(tail):
        t0 = time.perf_counter()
        trial = study.ask()
        params = setup.space.suggest(trial, ctx)
        t1 = time.perf_counter()
        key = tuple(sorted(params.items()))
        if key not in values:  # the objective's value is not Optuna's overhead: computed outside the timing
            ev = setup.evaluate(Candidate.from_params(params, setup.base))
            values[key] = ev.predicted_throughput if ev.feasible else None
        t2 = time.perf_counter()
        v = values[key]
        study.tell(trial, v, state=TrialState.COMPLETE if v is not None else TrialState.PRUNED)
        times.append(time.perf_counter() - t0 - (t2 - t1))
    n_trials = len(study.get_trials(deepcopy=False))
    storage.engine.dispose()
    return {"name": name, "times": times, "trials": n_trials}


def time_scan(url: str, study: str, repeat: int = 5) -> dict:
    """The two read-backs of a tuner step, as SQL queries and as the Python scans they replaced."""
    from autotune.store import Store

    store = Store(url)
    key = store.trials(study)[-1].candidate_key
    excl = ("interrupted", "running")

    def sql() -> None:
        store.launched_count(study)
        store.launched_with_key(study, key, exclude=excl)

    def scan() -> None:
        sum(1 for r in store.trials(study) if r.launched)
        next((r.number for r in store.trials(study)
              if r.candidate_key == key and r.launched and r.status not in excl), None)

    out = {}
    for name, fn in (("sql_ms", sql), ("scan_ms", scan)):
        ts = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        out[name] = 1000 * statistics.median(ts)
    store.engine.dispose()
    return out


def time_status(url: str, study: str, all_rows: bool, repeat: int = 3) -> float:
    cmd = [sys.executable, "-m", "autotune", "status", "--storage", url, "--study", study] + (["--all"] if all_rows
                                                                                              else [])
    best = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run(cmd, cwd=REPO, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        best.append(time.perf_counter() - t0)
    return statistics.median(best)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="*", type=int, default=[100, 10_000])
    ap.add_argument("--tail", type=int, default=30, help="trials timed at the end of a prefilled study")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--note", default="", help="a line added to the report (e.g. which code was measured)")
    args = ap.parse_args(argv)
    setup = make_setup()
    results = []
    with tempfile.TemporaryDirectory() as d:
        url = f"sqlite:///{Path(d) / 'overhead.db'}"
        status_times = {}
        for size in args.sizes:
            tail = size if size <= 100 else args.tail
            t0 = time.perf_counter()
            a = time_autotune(setup, url, size, tail)
            # Large sizes: Optuna goes on with the same study (as large, same storage) instead of a second bulk fill.
            o = time_optuna(setup, url, size, tail, study_name=None if size <= 100 else a["name"])
            ms_a, ms_o = 1000 * statistics.mean(a["times"]), 1000 * statistics.mean(o["times"])
            results.append({"size": size, "tail": tail, "autotune_ms": ms_a, "optuna_ms": ms_o,
                            "autotune_p50": 1000 * statistics.median(a["times"]),
                            "optuna_p50": 1000 * statistics.median(o["times"]),
                            "ratio": ms_a / ms_o, "trials": a["trials"], "launched": a["launched"],
                            "wall_s": time.perf_counter() - t0})
            print(results[-1], flush=True)
        big = max(args.sizes)
        scan = time_scan(url, f"overhead-autotune-{big}")
        status_times["status"] = time_status(url, f"overhead-autotune-{big}", False)
        status_times["status --all"] = time_status(url, f"overhead-autotune-{big}", True)
    lines = [
        "# Tuner overhead per trial",
        "",
        "Generated by `python -m benchmarks.overhead` (method: its docstring). SQLite file storage, "
        "simulate runner, qwen2.5-7b on 8 x H100, dense space; this machine: "
        f"{_cpu()}.",
        *([args.note, ""] if args.note else [""]),
        "| study size (trials) | trials timed | autotune step, mean ms | median ms | Optuna ask+tell, mean ms | "
        "median ms | ratio (mean) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(f"| {r['size']:,} | {r['tail']} {'(the whole study)' if r['tail'] == r['size'] else '(the last)'}"
                     f" | {r['autotune_ms']:.1f} | {r['autotune_p50']:.1f} | {r['optuna_ms']:.1f} | "
                     f"{r['optuna_p50']:.1f} | {r['ratio']:.2f} |")
    lines += ["", f"`autotune status` on the {big:,}-trial study (a separate process, median of 3, import and "
                  "start-up included):", ""]
    for k, v in status_times.items():
        lines.append(f"- `autotune {k}`: {v:.2f} s")
    lines += ["", f"What the tuner reads back before every step, on the {big:,}-trial study (median of 5): the "
              "launched count and the launched-duplicate check as SQL queries (`Store.launched_count`, "
              "`Store.launched_with_key`, now) against the Python scans over every trial row they replaced:", "",
              f"- SQL queries: {scan['sql_ms']:.1f} ms per step; Python scans: {scan['scan_ms']:.1f} ms per step "
              f"({scan['scan_ms'] / scan['sql_ms']:.0f}x)"]
    text = "\n".join(lines) + "\n"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "overhead.md").write_text(text)
    print(text)
    return 0


def _cpu() -> str:
    import os

    return f"{os.cpu_count()} CPU cores, Python {sys.version.split()[0]}, Optuna {optuna.__version__}"


if __name__ == "__main__":
    raise SystemExit(main())
