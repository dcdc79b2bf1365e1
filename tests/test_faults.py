"""Kill-safety: nothing lost, nothing left running, no configuration launched twice, --n-trials met exactly.

The soak and concurrency tests (slow) kill real `autotune run` processes (forked, the CLI's own main) with
SIGKILL, SIGTERM and SIGINT, at random fault points of the trial write path and from outside, and restart them.
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import threading
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from autotune.runners.simulate import SimulateRunner
from autotune.store.schema import TrialRow, utcnow
from autotune.store.store import Store
from autotune.study.study import Tuner
from benchmarks import soak as soak_mod
from tests.conftest import make_setup

SHM = Path("/dev/shm")


@pytest.fixture
def fast_sqlite(tmp_path: Path) -> str:
    """A SQLite file in memory-backed /dev/shm when there is one (the soak commits thousands of times)."""
    base = SHM if SHM.is_dir() and os.access(SHM, os.W_OK) else tmp_path
    path = base / f"autotune-faults-{os.getpid()}-{tmp_path.name}.db"
    yield f"sqlite:///{path}"
    path.unlink(missing_ok=True)


def _state(tuner: Tuner, number: int) -> TrialState:
    return next(t.state for t in tuner.study.get_trials(deepcopy=False) if t.number == number)


def test_optuna_trial_asked_but_never_recorded_is_closed_on_restart(sqlite_url):
    """Killed between `ask` and the first write: Optuna RUNNING, no row. The next start closes it and records it."""
    setup = make_setup()
    tuner = Tuner(setup, SimulateRunner(), sqlite_url, "s")
    tuner.run(n_trials=2)
    orphan = tuner.study.ask()  # nobody will record or tell it
    again = Tuner(setup, SimulateRunner(), sqlite_url, "s")
    again.recover()
    assert _state(again, orphan.number) == TrialState.FAIL
    row = again.store.trial("s", orphan.number)
    assert row.status == "interrupted" and not row.launched and "never launched" in row.reason
    again.run(n_trials=3)
    trials = again.study.get_trials(deepcopy=False)
    assert all(t.state.is_finished() for t in trials)
    assert {t.number for t in trials} == {r.number for r in again.store.trials("s")}


def test_a_queued_configuration_asked_but_never_recorded_is_queued_again(sqlite_url):
    setup = make_setup()
    tuner = Tuner(setup, SimulateRunner(), sqlite_url, "s")
    tuner.run(n_trials=1)
    params = tuner.store.trials("s")[0].params
    queued = setup.space.project(params, setup.context)
    tuner.study.enqueue_trial(queued, user_attrs={"origin": "stock"})
    orphan = tuner.study.ask()  # pops the queued configuration, then the tuner "dies"
    assert orphan.user_attrs["origin"] == "stock"
    again = Tuner(setup, SimulateRunner(), sqlite_url, "s")
    again.recover()
    waiting = again.study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
    assert len(waiting) == 1 and waiting[0].system_attrs["fixed_params"] == queued
    assert again.store.trial("s", orphan.number).status == "interrupted"


def test_a_result_recorded_but_not_told_to_optuna_is_told_on_restart(sqlite_url):
    """Killed after our row was final and before `tell`: the next start tells Optuna what the row says."""
    setup = make_setup()
    tuner = Tuner(setup, SimulateRunner(), sqlite_url, "s")
    tuner.run(n_trials=1)
    done = tuner.store.trials("s")[-1]
    t = tuner.study.ask()
    old = utcnow() - dt.timedelta(hours=1)  # its tuner, on another machine, long gone
    tuner.store.add_trial(TrialRow(study="s", number=t.number, status="ok", launched=True, candidate_key="k",
                                   params=done.params, verl_overrides={}, throughput=123.5, simulated=True,
                                   reason="simulated", finished_at=old, worker="elsewhere:4242", started_at=old,
                                   heartbeat_at=old))
    again = Tuner(setup, SimulateRunner(), sqlite_url, "s")
    again.recover()
    frozen = next(x for x in again.study.get_trials(deepcopy=False) if x.number == t.number)
    assert frozen.state == TrialState.COMPLETE and frozen.value == 123.5 and frozen.user_attrs["status"] == "ok"


def _row(number: int, key: str) -> TrialRow:
    return TrialRow(study="s", number=number, status="running", candidate_key=key, params={}, verl_overrides={},
                    worker="w")


def _race(url: str, n: int, keys: list[str], limit: int | None, first: int) -> list[str | None]:
    """n threads claim a launch at the same moment, each through its own Store (its own connections)."""
    stores = [Store(url) for _ in range(n)]
    barrier = threading.Barrier(n)
    out: list[str | None] = [None] * n

    def go(i: int) -> None:
        barrier.wait()
        out[i] = stores[i].claim_launch(_row(first + i, keys[i]), limit, exclude=("interrupted",))

    threads = [threading.Thread(target=go, args=(i,)) for i in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return out


def _claim_store(url: str) -> None:
    setup = make_setup()
    Tuner(setup, SimulateRunner(), url, "s")  # creates the study row the claims serialise on


@pytest.mark.parametrize("db", ["sqlite", "postgres"])
def test_launch_claim_is_atomic_across_workers(db, request, tmp_path):
    """Workers proposing the same configuration at once launch it once; a full budget launches nothing more."""
    url = request.getfixturevalue("postgres_url") if db == "postgres" else f"sqlite:///{tmp_path / 'c.db'}"
    if db == "postgres":  # a fresh database per run of this test: the server is shared by the session
        import sqlalchemy

        name = f"claims_{os.getpid()}"
        engine = sqlalchemy.create_engine(url, isolation_level="AUTOCOMMIT")
        with engine.connect() as c:
            c.execute(sqlalchemy.text(f"DROP DATABASE IF EXISTS {name}"))
            c.execute(sqlalchemy.text(f"CREATE DATABASE {name}"))
        engine.dispose()
        url = url.rsplit("/", 1)[0] + f"/{name}"
    _claim_store(url)
    verdicts = _race(url, 4, ["same"] * 4, limit=None, first=100)
    assert verdicts.count(None) == 1
    assert all("duplicate of trial" in v for v in verdicts if v is not None)
    # Budget: 2 launched so far counting the winner above; a limit of 3 lets exactly one of 4 new keys through.
    store = Store(url)
    assert store.claim_launch(_row(200, "other"), None, exclude=("interrupted",)) is None
    verdicts = _race(url, 4, ["a", "b", "c", "d"], limit=3, first=300)
    assert verdicts.count(None) == 1
    assert all("already holds 3 launched trials" in v for v in verdicts if v is not None)
    rows = store.trials("s")
    assert sum(r.launched for r in rows) == 3 and len(rows) == 9


def test_a_kill_at_each_fault_point_loses_nothing(fast_sqlite, tmp_path):
    """SIGKILL at the k-th fault point for k = 1..12 (every point of the write path, and recovery), each followed
    by a restart; then the study is whole."""
    report = _soak_points(fast_sqlite, tmp_path)
    assert report.total_kills >= 10 and report.in_write_path == report.total_kills
    _assert_whole(report)


def _soak_points(url: str, work: Path) -> soak_mod.SoakReport:
    argv = _argv(url, work, n_trials=12)
    ctx = soak_mod.worker_context()
    report = soak_mod.SoakReport(storage=url, workers=1, n_trials=12, kills={"SIGKILL": 0})
    for k in range(1, 13):
        p = ctx.Process(target=soak_mod._worker, args=(argv, f"SIGKILL@{k}", str(work / "log")))
        p.start()
        p.join(120)
        if p.exitcode != 0:
            report.kills["SIGKILL"] += 1
            report.in_write_path += 1
    p = ctx.Process(target=soak_mod._worker, args=(argv, None, str(work / "log")))
    p.start()
    p.join(120)
    assert p.exitcode == 0, (work / "log").read_text()[-3000:]
    soak_mod.check(url, "soak", report)
    return report


def _argv(url: str, work: Path, n_trials: int) -> list[str]:
    space = work / "soak_space.yaml"
    space.write_text(soak_mod.SOAK_SPACE)
    return ["run", "--model", "qwen2.5-1.5b", "--backend", "simulate", "--space", str(space), "--storage", url,
            "--study", "soak", "--n-trials", str(n_trials), "--confirm", "0", "--workdir", str(work / "t"), "--json"]


def _assert_whole(r: soak_mod.SoakReport) -> None:
    if os.environ.get("AUTOTUNE_SOAK_MD"):
        soak_mod.record(r, os.environ["AUTOTUNE_SOAK_MD"])
    assert r.not_final == 0, f"an Optuna trial is left RUNNING or WAITING: {r.leftovers}"
    assert r.unmatched == 0 and r.optuna_trials == r.autotune_rows, (
        f"autotune rows and Optuna trials differ: {r.leftovers}")
    assert r.launched == r.n_trials, "--n-trials not met exactly"
    assert r.duplicates == 0, "a configuration was launched twice"
    assert r.failed_to_stop == 0, "a signal landed and the worker ran on to exit 0"
    assert r.wrong_exit == 0, "a stopped worker exited with another code than 143 (SIGTERM) or 130 (Ctrl-C)"


@pytest.mark.slow
@pytest.mark.timeout(1800)  # a hang guard only: ~2 min on this machine alone, much more beside other jobs
def test_soak_1000_trials_killed_90_times_two_workers_sqlite(fast_sqlite, tmp_path):
    """The issue's soak on one SQLite study worked by two workers at once: 1000 launched trials, 30 kills each of
    SIGKILL, SIGTERM and SIGINT (most at a random fault point of the write path), a restart after each."""
    r = soak_mod.soak(fast_sqlite, tmp_path, n_trials=1000, kills=30, workers=2, seed=11)
    assert all(n >= 30 for n in r.kills.values()), r.kills
    assert r.in_write_path >= 30
    _assert_whole(r)


@pytest.mark.slow
@pytest.mark.postgres
def test_concurrency_four_workers_postgresql_with_kills(postgres_url, tmp_path):
    r = soak_mod.soak(postgres_url, tmp_path, n_trials=200, kills=4, workers=4, seed=5, study="soak-pg-4")
    assert sum(r.kills.values()) >= 12
    _assert_whole(r)
    assert optuna.load_study(study_name="soak-pg-4", storage=postgres_url).best_value > 0


def test_sigterm_during_a_trial_records_it_as_interrupted_at_once(tmp_path):
    """SIGTERM (a scheduler's stop) ends `autotune run` as Ctrl-C does, exit 143: the trial interrupted, re-queued."""
    url = f"sqlite:///{tmp_path / 't.db'}"
    argv = _argv(url, tmp_path, n_trials=3)
    p = soak_mod.worker_context().Process(target=soak_mod._worker, args=(argv, "SIGTERM@4", str(tmp_path / "log")))
    p.start()  # fault points of the first trial: asked 1, evaluated 2, claimed 3, ran 4 (the runner has returned)
    p.join(120)
    assert p.exitcode == 143, (tmp_path / "log").read_text()[-2000:]
    rows = Store(url).trials("soak")
    assert [(r.number, r.status) for r in rows] == [(0, "interrupted")]
    assert rows[0].reason == "interrupted by SIGTERM; re-queued on resume"
    assert optuna.load_study(study_name="soak", storage=url).trials[0].state == TrialState.FAIL


def test_commands_the_tests_start_get_ctrl_c_even_when_the_suite_runs_in_the_background() -> None:
    """conftest restores SIGINT for the suite's children: a suite started by `cmd &` in a script inherits it
    ignored, and the Ctrl-C tests (the dashboard views' fixture, Ray's, the README's dashboard) then waited out."""
    code = "import signal, sys; sys.exit(0 if signal.getsignal(signal.SIGINT) is signal.default_int_handler else 3)"
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0
