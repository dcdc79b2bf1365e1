"""Many tuners on one PostgreSQL study (issue 27): three `autotune run` processes at once, signalled (SIGKILL,
SIGTERM, SIGINT) at random points of the ask/record window or from outside, then counted once every one has
exited, with no restart: Optuna trials left RUNNING, false interrupts (a live tuner's trial closed by another),
signals that did not stop their worker, exit codes."""

from __future__ import annotations

import os
import random
import re
import signal
from pathlib import Path

import optuna
import pytest
import sqlalchemy
from optuna.trial import TrialState

from autotune.store.store import Store
from benchmarks import soak as soak_mod

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


def _fresh_db(url: str, name: str) -> str:
    engine = sqlalchemy.create_engine(url, isolation_level="AUTOCOMMIT")
    with engine.connect() as c:
        c.execute(sqlalchemy.text(f"DROP DATABASE IF EXISTS {name}"))
        c.execute(sqlalchemy.text(f"CREATE DATABASE {name}"))
    engine.dispose()
    return url.rsplit("/", 1)[0] + f"/{name}"


def _argv(url: str, work: Path, study: str, n_trials: int) -> list[str]:
    space = work / "soak_space.yaml"
    space.write_text(soak_mod.SOAK_SPACE)
    return ["run", "--model", "qwen2.5-1.5b", "--backend", "simulate", "--space", str(space), "--storage", url,
            "--study", study, "--n-trials", str(n_trials), "--confirm", "0", "--workdir", str(work / "t"), "--json"]


def _round(url: str, work: Path, study: str, n_trials: int, plans: list[str | None],
           outside: dict[int, str], stagger: random.Random | None = None) -> dict[str, int]:
    """Workers started on a new study (at once, or `stagger`ed by up to 0.3 s each; plans: a fault plan each;
    outside: worker index -> a signal sent once the study has a launched trial), joined; then the study's counts."""
    ctx = soak_mod.worker_context()
    log, fired = str(work / f"{study}.log"), work / f"{study}.fired"
    argv = _argv(url, work, study, n_trials)
    procs = [ctx.Process(target=soak_mod._worker, args=(argv, plan, log, str(fired))) for plan in plans]
    for p in procs:
        p.start()
        if stagger is not None:
            p.join(stagger.uniform(0.0, 0.3))
    sent: dict[int, str] = {}
    for i, sig in outside.items():
        soak_mod._wait_launched(url, study, 1, procs[i])
        if procs[i].is_alive():
            os.kill(procs[i].pid, signal.Signals[sig])
            sent[procs[i].pid] = sig
    soak_mod._join(procs, url, study, log)
    signalled = {p.pid: plan.split("@")[0] for p, plan in zip(procs, plans, strict=True) if plan}
    landed = {pid: sig for pid, sig in signalled.items() if pid in soak_mod._fired_pids(fired)} | sent
    counts = {"running_left": 0, "false_interrupts": 0, "failed_to_stop": 0, "wrong_exit": 0, "clean_failed": 0,
              "landed": len(landed)}
    for p in procs:
        if p.pid in landed:
            counts["failed_to_stop"] += p.exitcode == 0
            counts["wrong_exit"] += p.exitcode not in (0, *soak_mod.EXIT_CODES[landed[p.pid]])
        elif p.exitcode != 0:
            counts["clean_failed"] += 1
    trials = optuna.load_study(study_name=study, storage=url).get_trials(deepcopy=False)
    counts["running_left"] = sum(t.state == TrialState.RUNNING for t in trials)
    counts["false_interrupts"] = soak_mod.false_interrupts(Store(url).trials(study), set(landed))
    if counts["clean_failed"] or counts["running_left"]:
        text = Path(log).read_text()
        print("\n".join(line for line in text.splitlines() if "error" in line.lower()))  # the cause, before the tail
        print(text[-3000:])
    return counts


def _total(rounds: list[dict[str, int]]) -> dict[str, int]:
    return {k: sum(r[k] for r in rounds) for k in rounds[0]}


def test_clean_concurrent_starts_of_a_new_study_interrupt_nothing(postgres_url, tmp_path):
    """Three tuners start a new study at the same moment, no kill: no trial is closed as interrupted (a start-up
    recovery once took a live tuner's fresh trial, on a study with no rows yet, for a dead one's)."""
    url = _fresh_db(postgres_url, f"clean_{os.getpid()}")
    rng = random.Random(3)
    rounds = [_round(url, tmp_path, f"clean-{i}", 8, [None, None, None], {}, rng if i % 2 else None)
              for i in range(6)]
    interrupted = sum(r.status == "interrupted" for i in range(6) for r in Store(url).trials(f"clean-{i}"))
    print("clean concurrent starts:", _total(rounds), "interrupted:", interrupted)
    for i in range(6):  # the runnable candidates left: the same count from every tuner of a finished study
        said = re.findall(r'"runnable_left": (\d+)', (tmp_path / f"clean-{i}.log").read_text())
        assert len(said) == 3 and len(set(said)) == 1, said
    assert interrupted == 0
    assert _total(rounds) | {"landed": 0} == {"running_left": 0, "false_interrupts": 0, "failed_to_stop": 0,
                                              "wrong_exit": 0, "clean_failed": 0, "landed": 0}


def test_kills_and_signals_across_the_ask_record_window_leave_nothing_running(postgres_url, tmp_path):
    """Per round, three tuners on a new study: the first killed (SIGKILL, SIGTERM or SIGINT) at a random fault
    point of its first trials, the second signalled gracefully at a random point or from outside, the third
    clean. Once all have exited (no restart): no Optuna trial RUNNING, no false interrupt, every landed signal
    stopped its worker with 143 (SIGTERM) or 130 (Ctrl-C)."""
    url = _fresh_db(postgres_url, f"kills_{os.getpid()}")
    rng = random.Random(27)
    rounds = []
    for i in range(6):
        first = f"{rng.choice(('SIGKILL', 'SIGTERM', 'SIGINT'))}@{rng.randint(1, 15)}"
        graceful = rng.choice(("SIGTERM", "SIGINT"))
        second, outside = (f"{graceful}@{rng.randint(1, 25)}", {}) if i % 2 == 0 else (None, {1: graceful})
        rounds.append(_round(url, tmp_path, f"kills-{i}", 24, [first, second, None], outside))
    total = _total(rounds)
    print("kills across the ask/record window:", total)
    assert total["landed"] >= 9, rounds
    assert total["running_left"] == 0, rounds
    assert total["false_interrupts"] == 0, rounds
    assert total["failed_to_stop"] == 0 and total["wrong_exit"] == 0, rounds
    assert total["clean_failed"] == 0, rounds


def test_graceful_stops_of_every_tuner_tell_every_trial_they_asked(postgres_url, tmp_path):
    """Per round, all three tuners of a new study are stopped by SIGTERM or Ctrl-C at a random point of the
    ask/record window (or from outside): nobody is left to recover anything, so once they have exited no Optuna
    trial may be RUNNING: each told its own before it returned, and exited 143 or 130."""
    url = _fresh_db(postgres_url, f"graceful_{os.getpid()}")
    rng = random.Random(143)
    rounds = []
    for i in range(6):
        sigs = [rng.choice(("SIGTERM", "SIGINT")) for _ in range(3)]
        plans = [f"{sig}@{rng.randint(1, 25)}" for sig in sigs[:2]] + [None]
        rounds.append(_round(url, tmp_path, f"graceful-{i}", 40, plans, {2: sigs[2]}))
    total = _total(rounds)
    print("graceful stops of every tuner:", total)
    assert total["landed"] >= 15, rounds
    assert total["running_left"] == 0, rounds
    assert total["failed_to_stop"] == 0 and total["wrong_exit"] == 0 and total["false_interrupts"] == 0, rounds
