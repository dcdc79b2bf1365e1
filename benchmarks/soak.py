"""Soak: a simulate study killed again and again (SIGKILL, SIGTERM, SIGINT) and restarted; then nothing is lost.

Each round starts `autotune run` (the CLI's own `main`, forked from a fork server that imported autotune once: no
interpreter start-up per restart, and no fork of a process with threads, whose locks a child can inherit held)
for one or more workers on the same study. A worker is killed either by a fault point of its write path
(autotune/faults.py: the N-th point, N drawn at random) or from outside once the study holds M more launched trials
than at the round's start (M drawn at random from 0, i.e. at start-up or recovery, to MAX_OUTSIDE), after a random
delay under half a second. Both are counted in the study's own progress, not in seconds, so the kills are spent
before the study is complete however fast or loaded the machine is. When every kill is spent, one last round runs
without faults. Then the study must hold: every Optuna trial final, one autotune
row per Optuna trial and the same status, exactly --n-trials launched trials that count, and no configuration
launched twice.

    python -m benchmarks.soak --workers 2    # appends a row to benchmarks/results/soak.md (1000 trials, 3 x 30 kills)
"""

from __future__ import annotations

import argparse
import collections
import multiprocessing
import os
import random
import re
import signal
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path

import optuna
from optuna.trial import TrialState
from sqlalchemy import Engine, create_engine, func, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.pool import NullPool

from autotune import cli, faults
from autotune.store.schema import TrialRow
from autotune.store.store import Store
from autotune.store.tuners import OWNER

RESULTS = Path(__file__).resolve().parent / "results"
# A space of 2,880 distinct configurations that all fit: 1000 launches need no exhausted region. It is a user's
# search-space file, so the product runs as it always does.
_GMU = ", ".join(f"{0.3 + i / 100:.2f}" for i in range(60))
_MNBT = ", ".join(str(8192 + 1024 * i) for i in range(16))
SOAK_SPACE = f"""\
name: soak
description: Many cheap, feasible settings of the rollout (the soak and concurrency tests); fused kernels, without
  which the 1.5B's logits at verl's default 16k budget hold more than an H100.
dimensions:
  use_dynamic_bsz: {{choices: [true]}}
  use_fused_kernels: {{choices: [true]}}
  rollout_tp: {{choices: [1, 2, 4]}}
  gpu_memory_utilization: {{choices: [{_GMU}]}}
  max_num_batched_tokens: {{choices: [{_MNBT}]}}
"""
SIGNALS = ("SIGKILL", "SIGTERM", "SIGINT")
# Per kill, at most: MAX_POINT fault points (~5 a launched trial), or MAX_OUTSIDE launched trials of the study. With
# two workers a round launches at most ~16 trials, so 90 kills (45 rounds) launch at most ~720 of the 1000.
MAX_POINT = 40
MAX_OUTSIDE = 8
_OPTUNA_OF = {"ok": TrialState.COMPLETE, "oom": TrialState.PRUNED, "config_error": TrialState.PRUNED,
              "pruned": TrialState.PRUNED, "timeout": TrialState.FAIL, "failed": TrialState.FAIL,
              "interrupted": TrialState.FAIL}


@dataclass
class SoakReport:
    storage: str
    workers: int
    n_trials: int
    kills: dict[str, int] = field(default_factory=dict)  # signal -> kills that landed
    in_write_path: int = 0  # kills sent by a fault point of the write path
    rounds: int = 0
    optuna_trials: int = 0
    autotune_rows: int = 0
    launched: int = 0  # launched trials that count towards --n-trials
    interrupted: int = 0  # launched, killed, re-queued and run again
    not_final: int = 0  # Optuna trials RUNNING or WAITING at the end
    failed_to_stop: int = 0  # kills that landed (fault fired, or sent to a live worker) and yet the worker exited 0
    wrong_exit: int = 0  # kills that stopped a worker with another code than SIGKILL's, 143 (SIGTERM), 130 (SIGINT)
    false_interrupts: int = 0  # interrupted trials blamed on a worker that was never killed
    unmatched: int = 0  # Optuna trials without a row, rows without a trial, or statuses that disagree
    duplicates: int = 0  # configurations launched (and not interrupted) more than once
    seconds: float = 0.0
    leftovers: list[str] = field(default_factory=list)  # the trials not final or unmatched, in words (for a failure)

    @property
    def lost(self) -> int:
        return self.not_final + self.unmatched

    @property
    def total_kills(self) -> int:
        return sum(self.kills.values())


def worker_context() -> multiprocessing.context.BaseContext:
    """Workers forked from a clean fork server (not from the caller, whose threads may hold locks at the fork: a
    forked worker hung that way in CI beside pytest-timeout's and PostgreSQL's threads)."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["autotune.cli", "benchmarks.soak"])
    return ctx


def _worker(argv: list[str], plan: str | None, log: str, fired: str | None = None) -> None:
    """A forked `autotune run`: its own fault plan, default signal handling, output to a log file; a fault that
    fires is written to `fired`."""
    os.environ.pop(faults.ENV, None)
    os.environ.pop(faults.FIRED, None)
    if plan:
        os.environ[faults.ENV] = plan
    if fired:
        os.environ[faults.FIRED] = fired
    faults.reset()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    sys.stdout = sys.stderr = open(fd, "w", buffering=1, closefd=False)  # noqa: SIM115 - ends with os._exit
    code = 1
    try:
        code = cli.main(argv)
    except KeyboardInterrupt:  # Ctrl-C after the command's own handling ended: it stopped, as a shell reports
        code = 130
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
    finally:
        os._exit(code)


def soak(storage: str, workdir: Path, n_trials: int = 1000, kills: int = 30, workers: int = 1,
         signals: tuple[str, ...] = SIGNALS, seed: int = 0, study: str = "soak") -> SoakReport:
    """Run the soak and check the study; `kills` per signal."""
    rng = random.Random(seed)
    workdir.mkdir(parents=True, exist_ok=True)
    space = workdir / "soak_space.yaml"
    space.write_text(SOAK_SPACE)
    argv = ["run", "--model", "qwen2.5-1.5b", "--backend", "simulate", "--space", str(space), "--storage", storage,
            "--study", study, "--n-trials", str(n_trials), "--confirm", "0", "--workdir", str(workdir / "trials"),
            "--json"]
    todo = [s for s in signals for _ in range(kills)]
    rng.shuffle(todo)
    report = SoakReport(storage=storage.split("://")[0], workers=workers, n_trials=n_trials,
                        kills={s: 0 for s in signals})
    ctx = worker_context()
    start = time.monotonic()
    log = str(workdir / "workers.log")
    fired = workdir / "fired.log"
    fired.unlink(missing_ok=True)
    killed: set[int] = set()  # pids of workers a kill landed on
    # Fault points per trial are ~6 (~7 trials per kill); a plan past the trials left simply does not fire.
    while todo:
        report.rounds += 1
        procs = []
        at_start = _launched(storage, study)
        for _ in range(workers):
            sig = todo.pop() if todo else None  # a worker left unkilled would run the study to its end
            inside = sig is not None and rng.random() < 0.75
            plan = f"{sig}@{rng.randint(1, MAX_POINT)}" if inside else None
            p = ctx.Process(target=_worker, args=(argv, plan, log, str(fired)))
            p.start()
            procs.append((p, sig, inside))
        sent = set()
        for p, sig, inside in procs:
            if sig and not inside:  # from outside, at a random moment (start-up, recovery, a trial, a write)
                _wait_launched(storage, study, at_start + rng.randint(0, MAX_OUTSIDE), p)
                p.join(rng.uniform(0.0, 0.5))
                if p.is_alive():
                    os.kill(p.pid, signal.Signals[sig])
                    sent.add(p.pid)
        _join([p for p, _, _ in procs], storage, study, log)
        sent |= _fired_pids(fired)
        for p, sig, inside in procs:
            if sig and p.pid in sent:
                killed.add(p.pid)
                if p.exitcode == 0:  # the worker ran on and finished: the signal was ignored
                    report.failed_to_stop += 1
                    continue
                report.kills[sig] += 1
                report.in_write_path += inside
                report.wrong_exit += p.exitcode not in EXIT_CODES[sig]
            elif sig:  # the study finished before the kill landed: try again
                todo.append(sig)
            elif p.exitcode != 0:
                raise RuntimeError(f"a worker with no fault exited {p.exitcode}; see {log}: "
                                   + Path(log).read_text()[-3000:])
        if all(p.exitcode == 0 for p, _, _ in procs) and _done(storage, study, n_trials):
            break  # the study is complete: nothing more to kill
    # Every kill spent: the same command once more per worker, to the end.
    procs = [ctx.Process(target=_worker, args=(argv, None, log)) for _ in range(workers)]
    for p in procs:
        p.start()
    _join(procs, storage, study, log)
    if any(p.exitcode != 0 for p in procs):
        raise RuntimeError(f"the final run exited {[p.exitcode for p in procs]}; see {log}: "
                           + Path(log).read_text()[-3000:])
    report.seconds = round(time.monotonic() - start, 1)
    check(storage, study, report, killed)
    return report


# How a worker a kill landed on may end: killed by the signal, or its own graceful exit code (143, 130).
EXIT_CODES = {"SIGKILL": (-9,), "SIGTERM": (143, -15), "SIGINT": (130, -2)}


def _fired_pids(path: Path) -> set[int]:
    """Workers whose fault point fired (each wrote `pid plan point` before signalling itself)."""
    return {int(line.split()[0]) for line in path.read_text().splitlines() if line.strip()} if path.exists() \
        else set()


def false_interrupts(rows: list[TrialRow], killed: set[int]) -> int:
    """Interrupted trials blamed on a worker that was never killed: the worker the reason names ("the tuner
    (host:pid) stopped ..."), else the one that recorded it (a graceful stop records its own)."""
    n = 0
    for r in rows:
        if r.status != "interrupted":
            continue
        named = re.search(r"the tuner \(([^()]+)\)", r.reason or "")
        culprit = named.group(1) if named else r.worker
        pid = culprit.rpartition(":")[2]
        n += not (pid.isdigit() and int(pid) in killed)
    return n


def _join(procs: list[multiprocessing.Process], storage: str, study: str, log: str) -> None:
    """Until every worker has exited. A worker is hung (killed, RuntimeError) only when it is alive and the study
    made no progress (no new launched trial) for HUNG_S: a loaded machine is slow, not hung."""
    last, since = _launched(storage, study), time.monotonic()
    # one look at who is alive per round: a worker may exit between two looks (a separate any() then next() over
    # is_alive() raised StopIteration when the last one exited in between)
    while alive := [p for p in procs if p.is_alive()]:
        alive[0].join(1.0)
        now = _launched(storage, study)
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since > HUNG_S:
            for p in procs:
                if p.is_alive():
                    p.kill()
            raise RuntimeError(f"workers {[p.pid for p in procs]} made no progress for {HUNG_S:g} s; see {log}")


HUNG_S = 180.0


def _launched(storage: str, study: str) -> int:
    """Launched trials the study holds (0 before its tables exist). One COUNT on a connection of its own (no pool:
    nothing open is inherited by the forked workers)."""
    engine = _ENGINES.setdefault(storage, create_engine(storage, poolclass=NullPool))
    try:
        with engine.connect() as c:
            return int(c.scalar(select(func.count()).select_from(TrialRow).where(
                TrialRow.study == study, TrialRow.launched.is_(True))) or 0)
    except SQLAlchemyError:  # the first worker has not created the tables yet
        return 0


_ENGINES: dict[str, Engine] = {}


def _wait_launched(storage: str, study: str, target: int, proc: multiprocessing.Process) -> None:
    """Until the study holds `target` launched trials, or the worker is gone (it was killed or finished)."""
    while proc.is_alive() and _launched(storage, study) < target:
        proc.join(0.1)


def _done(storage: str, study: str, n_trials: int) -> bool:
    return Store(storage).launched_count(study, exclude=("interrupted",)) >= n_trials


def check(storage: str, study: str, report: SoakReport, killed: set[int] | None = None) -> None:
    """Fill the report's end-state figures from the database (false interrupts: given the killed workers)."""
    trials = optuna.load_study(study_name=study, storage=storage).get_trials(deepcopy=False)
    rows = Store(storage).trials(study)
    by_number = {r.number: r for r in rows}
    report.optuna_trials, report.autotune_rows = len(trials), len(rows)
    report.not_final = sum(not t.state.is_finished() for t in trials)
    numbers = {t.number for t in trials}
    disagree = [t for t in trials if t.number in by_number and _OPTUNA_OF.get(by_number[t.number].status) != t.state
                and not (by_number[t.number].status == "ok" and t.state == TrialState.FAIL)]
    report.unmatched = len(numbers ^ set(by_number)) + len(disagree)
    odd = {t.number for t in trials if not t.state.is_finished() or t.number not in by_number} | {
        t.number for t in disagree}
    report.leftovers = [_describe(t, by_number.get(t.number)) for t in trials if t.number in odd] + [
        f"row #{n} without an Optuna trial" for n in sorted(set(by_number) - numbers)]
    counted = [r for r in rows if r.launched and r.status != "interrupted"]
    report.launched = len(counted)
    report.interrupted = sum(r.status == "interrupted" for r in rows)
    per_key = collections.Counter(r.candidate_key for r in counted)
    report.duplicates = sum(n - 1 for n in per_key.values() if n > 1)
    if killed is not None:
        report.false_interrupts = false_interrupts(rows, killed)


def _describe(t: optuna.trial.FrozenTrial, row: TrialRow | None) -> str:
    owner = t.system_attrs.get(OWNER)
    said = f"row {row.status} by {row.worker}: {row.reason}" if row else "no row"
    asked = f"{t.datetime_start:%H:%M:%S.%f}" if t.datetime_start else "never"
    return f"#{t.number} {t.state.name} (asked {asked} by {owner or 'an unmarked tuner'}; {said})"


HEADER = ["# Soak: kills at random moments, restarts, nothing lost", "",
          "Rows written by `python -m benchmarks.soak` and by the slow tests of tests/test_faults.py (run with "
          "AUTOTUNE_SOAK_MD=benchmarks/results/soak.md), which assert them. Simulate backend, on a 2-core "
          "machine shared with other jobs; each kill is followed by a restart of the same command; a kill `in write "
          "path` is sent by the worker to itself at a random fault point of the trial write path "
          "(autotune/faults.py), the others from outside after a random number of launched trials (0-8) and a "
          "random delay under 0.5 s. `interrupted` counts trials killed "
          "while running (re-queued and run again) and trials asked but never recorded (closed on restart). "
          "`failed to stop`: kills that landed (the fault fired, or the signal was sent to a live worker) after which "
          "the worker exited 0 (a retry only when the kill never landed); `wrong exit`: stopped with another code "
          "than 143 (SIGTERM), 130 (SIGINT) or the signal's; `false interrupts`: interrupted trials blamed on a worker "
          "never killed (rows before these columns did not count them).", "",
          "| storage | workers | --n-trials | launched | SIGKILL | SIGTERM | SIGINT | in write path | "
          "Optuna trials | autotune rows | interrupted | not final | trials lost | duplicates | seconds | "
          "failed to stop | wrong exit | false interrupts |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]


def record(report: SoakReport, path: str | Path) -> None:
    """Append the report's row to a markdown table (created with its header)."""
    p = Path(path)
    text = p.read_text() if p.exists() else "\n".join(HEADER) + "\n"
    p.write_text(text + row(report) + "\n")


def row(r: SoakReport) -> str:
    db = "SQLite" if r.storage.startswith("sqlite") else "PostgreSQL"
    return (f"| {db} | {r.workers} | {r.n_trials} | {r.launched} | {r.kills.get('SIGKILL', 0)} | "
            f"{r.kills.get('SIGTERM', 0)} | {r.kills.get('SIGINT', 0)} | {r.in_write_path} | "
            f"{r.optuna_trials} | {r.autotune_rows} | {r.interrupted} | {r.not_final} | {r.lost} | "
            f"{r.duplicates} | {r.seconds} | {r.failed_to_stop} | {r.wrong_exit} | {r.false_interrupts} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", default="/tmp/autotune-soak")
    ap.add_argument("--storage", help="SQLite or PostgreSQL URL (default: a SQLite file in the workdir)")
    ap.add_argument("--n-trials", type=int, default=1000)
    ap.add_argument("--kills", type=int, default=30, help="kills per signal")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--output", default=str(RESULTS / "soak.md"), help="markdown table the row is appended to")
    args = ap.parse_args()
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    url = args.storage
    if not url:  # memory-backed /dev/shm where there is one: the soak commits some 30,000 times
        db = (Path("/dev/shm") if os.access("/dev/shm", os.W_OK) else work) / f"autotune-soak-{os.getpid()}.db"
        db.unlink(missing_ok=True)
        url = f"sqlite:///{db}"
    r = soak(url, work, args.n_trials, args.kills, workers=args.workers, seed=args.seed)
    print(asdict(r) | {"lost": r.lost})
    record(r, args.output)
    if not args.storage:
        db.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
