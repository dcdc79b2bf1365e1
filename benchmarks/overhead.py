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
largest study, with and without `--all`: wall and CPU time, next to the start-up floor (importing the CLI) and,
with `--baseline-rev REV`, the same commands run by the autotune package of an earlier git revision on the same
database in the same run. Its output is compared with rich laying out the whole table itself (what `status` did
before autotune.cli.tables). `--status-only` times just that, on a freshly filled study of the largest size, and
rewrites only that part of overhead.md.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import random
import resource
import statistics
import subprocess
import sys
import tarfile
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
    from autotune.search.setup import Setup
    from autotune.search.space import load_space

    return Setup(get_model("qwen2.5-7b"), Cluster(get_gpu_type("h100"), 8), Job.default(), load_space("dense"))


def make_sampler(seed: int = 0) -> optuna.samplers.BaseSampler:
    """The tuner's own sampler settings (autotune.study.study.Tuner)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True, constant_liar=True,
                                          n_startup_trials=5)


def prefill(setup, url: str, name: str, n: int, with_rows: bool, seed: int = 1) -> None:
    """n trials in bulk: random points of the space, told with the models' verdict (as the tuner would)."""
    from autotune.candidate import Candidate
    from autotune.runners.base import TrialStatus
    from autotune.store.schema import TrialRow, utcnow
    from autotune.store.store import Store

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
    from autotune.study.study import Tuner

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
    from autotune.store.store import Store

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


def time_cmd(cmd: list[str], pythonpath: Path = REPO, repeat: int = 3) -> tuple[float, float, str]:
    """(median wall s, median CPU s of the child, its standard output) of a command run `repeat` times."""
    walls, cpus, out = [], [], ""
    env = {**os.environ, "PYTHONPATH": str(pythonpath)}
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        out = subprocess.run(cmd, cwd=pythonpath, check=True, capture_output=True, text=True, env=env).stdout
        walls.append(time.perf_counter() - t0)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(walls), statistics.median(cpus), out


def status_cmd(url: str, study: str, all_rows: bool) -> list[str]:
    return [sys.executable, "-m", "autotune", "status", "--storage", url, "--study", study,
            *(["--all"] if all_rows else [])]


def rich_status(url: str, study: str, all_rows: bool) -> str:
    """`autotune status` as rich alone lays the table out (every cell measured): the output to be identical to."""
    import autotune.cli as cli
    import autotune.cli.tables as tables
    from autotune.cli.options import out

    buf = io.StringIO()
    saved, tables.SMALL = tables.SMALL, 10**9
    saved_file, out.file = out.file, buf
    try:
        with contextlib.redirect_stdout(buf):
            cli.main(["status", "--storage", url, "--study", study, *(["--all"] if all_rows else [])])
    finally:
        tables.SMALL, out.file = saved, saved_file
    return buf.getvalue()


def extract_rev(rev: str, into: Path) -> Path:
    """The autotune package and search spaces of git revision `rev`, unpacked under `into`."""
    data = subprocess.run(["git", "archive", rev, "autotune", "search_spaces"], cwd=REPO, check=True,
                          capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(into, filter="data")
    return into


def status_section(url: str, study: str, size: int, baseline_rev: str | None) -> list[str]:
    rows = []
    load = os.getloadavg()[0]
    import_floor = time_cmd([sys.executable, "-c", "import autotune.cli"])
    with tempfile.TemporaryDirectory() as d:
        old = extract_rev(baseline_rev, Path(d)) if baseline_rev else None
        for all_rows in (False, True):
            cmd = status_cmd(url, study, all_rows)
            wall, cpu, out = time_cmd(cmd)
            same = out == rich_status(url, study, all_rows)
            base = time_cmd(cmd, old) if old else None
            rows.append((" ".join(["autotune status", *(["--all"] if all_rows else [])]), wall, cpu, base, same,
                         out.count("\n")))
            print(rows[-1][:3], base[:2] if base else None, "identical" if same else "DIFFERENT", flush=True)
    lines = [f"`autotune status` on the {size:,}-trial study: a separate process as a user runs it, median of 3, "
             "import and start-up included; wall time, and the process's CPU time (which the load of this shared "
             "machine inflates less)" + (f"; before: the same commands run by revision `{baseline_rev}` of "
                                         "autotune on the same database in the same run" if baseline_rev else "")
             + ". Output: compared with rich laying out the whole table itself.", "",
             "| command | wall s | CPU s |" + (" before: wall s | before: CPU s |" if baseline_rev else "")
             + " lines | output |",
             "|---|---|---|" + ("---|---|" if baseline_rev else "") + "---|---|"]
    for name, wall, cpu, base, same, n in rows:
        lines.append(f"| `{name}` | {wall:.2f} | {cpu:.2f} |" + (f" {base[0]:.2f} | {base[1]:.2f} |" if base else "")
                     + f" {n:,} | {'identical' if same else 'DIFFERENT'} |")
    lines += ["", f"Start-up floor (`python -c \"import autotune.cli\"`): {import_floor[0]:.2f} s wall, "
              f"{import_floor[1]:.2f} s CPU. Load average of the machine when these runs started: {load:.1f}."]
    return lines


STATUS_START = "`autotune status` on the"
STATUS_END = "What the tuner reads back"


def status_only(args: argparse.Namespace) -> int:
    """Fill a study of the largest size, time `status` on it, and replace that part of overhead.md."""
    setup = make_setup()
    size = max(args.sizes)
    with tempfile.TemporaryDirectory() as d:
        url = f"sqlite:///{Path(d) / 'status.db'}"
        from autotune.runners.simulate import SimulateRunner
        from autotune.study.study import Tuner

        name = f"overhead-status-{size}"
        t = Tuner(setup, SimulateRunner(), url, study_name=name, seed=0,
                  space_text=Path(setup.space.source).read_text())
        t.storage.engine.dispose()
        t.store.engine.dispose()
        t0 = time.perf_counter()
        prefill(setup, url, name, size, with_rows=True)
        print(f"filled {size} trials in {time.perf_counter() - t0:.0f} s", flush=True)
        section = status_section(url, name, size, args.baseline_rev)
    path = args.out / "overhead.md"
    text = path.read_text() if path.exists() else ""
    if STATUS_START in text and STATUS_END in text:
        head, rest = text.split(STATUS_START, 1)
        tail = rest[rest.index(STATUS_END):]
        text = head + "\n".join(section) + "\n\n" + tail
    else:
        text += "\n" + "\n".join(section) + "\n"
    path.write_text(text)
    print("\n".join(section))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="*", type=int, default=[100, 10_000])
    ap.add_argument("--tail", type=int, default=30, help="trials timed at the end of a prefilled study")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--note", default="", help="a line added to the report (e.g. which code was measured)")
    ap.add_argument("--status-only", action="store_true", help="time `autotune status` alone (see the docstring)")
    ap.add_argument("--baseline-rev", help="git revision whose `autotune status` is timed beside this code's")
    args = ap.parse_args(argv)
    if args.status_only:
        return status_only(args)
    setup = make_setup()
    results = []
    with tempfile.TemporaryDirectory() as d:
        url = f"sqlite:///{Path(d) / 'overhead.db'}"
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
        status_lines = status_section(url, f"overhead-autotune-{big}", big, args.baseline_rev)
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
    lines += ["", *status_lines]
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
