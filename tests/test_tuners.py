"""Liveness and graceful stops (autotune/store/tuners.py, autotune/runners/stopping.py): recovery never closes a live
tuner's trial, closes a dead one's as soon as its death is known, and a graceful stop tells every Optuna trial it
asked."""

from __future__ import annotations

import datetime as dt
import os
import socket
import subprocess
import sys

import optuna
import pytest
from optuna.trial import TrialState
from sqlalchemy import update

from autotune import faults
from autotune.runners import stopping
from autotune.runners.simulate import SimulateRunner
from autotune.store.schema import utcnow
from autotune.store.tuners import GRACE_PERIOD_S, OWNER, TunerRow
from autotune.study.study import Tuner
from tests.conftest import make_setup


def _tuner(url: str) -> Tuner:
    return Tuner(make_setup(), SimulateRunner(), url, "s")


def _register(tuner: Tuner, worker: str, silent_s: float = 0.0) -> None:
    """Another tuner, as the registry sees it: registered on the study, last heartbeat `silent_s` ago."""
    with tuner.store.session() as s:
        now = utcnow()  # SQLite's now() is UTC
        s.merge(TunerRow(worker=worker, study="s", proc_start=0, started_at=now,
                         heartbeat_at=now - dt.timedelta(seconds=silent_s)))


def _asked_by(tuner: Tuner, worker: str) -> optuna.Trial:
    t = tuner.study.ask()
    tuner.storage.set_trial_system_attr(t._trial_id, OWNER, worker)
    return t


def _state(tuner: Tuner, number: int) -> TrialState:
    return next(t.state for t in tuner.study.get_trials(deepcopy=False) if t.number == number)


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_a_live_tuners_fresh_trial_on_a_new_study_is_not_closed(sqlite_url):
    """Another host's tuner, registered and beating, has asked a trial and written nothing yet: a start leaves it."""
    tuner = _tuner(sqlite_url)
    _register(tuner, "otherhost:4242")
    t = _asked_by(tuner, "otherhost:4242")
    tuner.recover()
    assert _state(tuner, t.number) == TrialState.RUNNING and tuner.store.trial("s", t.number) is None


def test_another_hosts_tuner_is_dead_once_its_heartbeat_is_older_than_the_grace_period(sqlite_url):
    tuner = _tuner(sqlite_url)
    _register(tuner, "otherhost:4242", silent_s=GRACE_PERIOD_S + 5)
    t = _asked_by(tuner, "otherhost:4242")
    tuner.recover()
    assert _state(tuner, t.number) == TrialState.FAIL
    row = tuner.store.trial("s", t.number)
    assert row.status == "interrupted" and "(otherhost:4242)" in row.reason and "never launched" in row.reason


def test_a_dead_process_on_this_host_is_dead_at_once(sqlite_url):
    """Registered, heartbeat fresh, but its PID is gone: its trials are closed now, not after a grace period."""
    tuner = _tuner(sqlite_url)
    worker = f"{socket.gethostname()}:{_dead_pid()}"
    _register(tuner, worker)
    t = _asked_by(tuner, worker)
    tuner.recover()
    assert _state(tuner, t.number) == TrialState.FAIL


def test_a_stopped_tuners_leftovers_are_closed(sqlite_url):
    tuner = _tuner(sqlite_url)
    _register(tuner, "otherhost:4242")
    t = _asked_by(tuner, "otherhost:4242")
    with tuner.store.session() as s:
        s.execute(update(TunerRow).where(TunerRow.worker == "otherhost:4242").values(stopped_at=utcnow()))
    tuner.recover()
    assert _state(tuner, t.number) == TrialState.FAIL


def test_an_unmarked_trial_is_left_while_another_tuner_lives(sqlite_url):
    """Asked, but killed before its owner was marked: it may be a live tuner's (between ask and mark), so it is
    left while another tuner of the study is alive and younger than the grace period; closed when none is."""
    tuner = _tuner(sqlite_url)
    _register(tuner, "otherhost:4242")
    t = tuner.study.ask()
    tuner.recover()
    assert _state(tuner, t.number) == TrialState.RUNNING
    with tuner.store.session() as s:
        s.execute(update(TunerRow).values(stopped_at=utcnow()))
    tuner.recover()
    assert _state(tuner, t.number) == TrialState.FAIL


def test_of_two_tuners_stopping_at_once_the_later_closes_an_unmarked_trial(sqlite_url, monkeypatch):
    """Two tuners reach their budget together: each one's last pass saw the other alive and left an unmarked trial
    (CI: a PostgreSQL soak of four workers ended with it RUNNING). The other stops after this one's last pass and
    before it deregisters; this one looks once more after deregistering, and closes it."""
    tuner = _tuner(sqlite_url)
    _register(tuner, "otherhost:4242")
    t = tuner.study.ask()
    deregister = tuner.registry.deregister

    def both_stop() -> None:
        with tuner.store.session() as s:
            s.execute(update(TunerRow).where(TunerRow.worker == "otherhost:4242").values(stopped_at=utcnow()))
        deregister()

    monkeypatch.setattr(tuner.registry, "deregister", both_stop)
    tuner.run(n_trials=2)
    assert _state(tuner, t.number) == TrialState.FAIL
    row = tuner.store.trial("s", t.number)
    assert row.status == "interrupted" and "never launched" in row.reason and not row.launched


def test_a_running_trial_of_a_live_tuner_elsewhere_is_left_and_closed_when_it_dies(sqlite_url):
    tuner = _tuner(sqlite_url)
    tuner.run(n_trials=1)
    row = tuner.store.trials("s")[0]
    t = _asked_by(tuner, "otherhost:4242")
    _register(tuner, "otherhost:4242")
    old = utcnow() - dt.timedelta(hours=1)  # its rows' own heartbeat is old: the registry decides, not the rows
    from autotune.store.schema import TrialRow

    tuner.store.add_trial(TrialRow(study="s", number=t.number, status="running", launched=True, candidate_key="k2",
                                   params=row.params, verl_overrides={}, worker="otherhost:4242", started_at=old,
                                   heartbeat_at=old))
    tuner.recover()
    assert tuner.store.trial("s", t.number).status == "running"
    with tuner.store.session() as s:
        s.execute(update(TunerRow).where(TunerRow.worker == "otherhost:4242")
                  .values(heartbeat_at=utcnow() - dt.timedelta(seconds=GRACE_PERIOD_S + 5)))
    tuner.recover()
    assert tuner.store.trial("s", t.number).status == "interrupted" and _state(tuner, t.number) == TrialState.FAIL


def test_a_tuner_registers_while_it_runs_and_deregisters_after(sqlite_url):
    tuner = _tuner(sqlite_url)
    seen = []
    tuner.run(n_trials=2, on_trial=lambda row: seen.append(tuner.registry.peers()[tuner.registry.me].stopped))
    assert seen and not any(seen)
    assert tuner.registry.peers()[tuner.registry.me].stopped


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("point", range(1, 11))
def test_a_signal_at_any_point_of_the_write_path_stops_with_every_asked_trial_told(sqlite_url, sig, point,
                                                                                     monkeypatch):
    """The signal only sets a flag; the loop stops at its next safe point (Stopped, its exit code), and no Optuna
    trial is left RUNNING: asked-and-not-recorded, recorded-and-not-told, running: all told, each with its row."""
    tuner = _tuner(sqlite_url)
    tuner.run(n_trials=1)  # a study with a measured trial: later trials go through every point
    monkeypatch.setenv(faults.ENV, f"{sig}@{point}")
    faults.reset()
    with pytest.raises(stopping.Stopped) as stopped, stopping.handle_signals():
        tuner.run(n_trials=6)
    assert str(stopped.value) == sig and stopping.exit_code(stopped.value) == {"SIGTERM": 143, "SIGINT": 130}[sig]
    trials = tuner.study.get_trials(deepcopy=False)
    assert [t.number for t in trials if not t.state.is_finished()] == []
    rows = {r.number: r for r in tuner.store.trials("s")}
    assert set(rows) == {t.number for t in trials} and all(r.status != "running" and r.reason for r in rows.values())
    assert tuner.registry.peers()[tuner.registry.me].stopped


def test_a_handler_that_only_sets_the_flag_never_raises_outside_an_interruptible_section():
    import signal

    with pytest.raises(stopping.Stopped), stopping.handle_signals():
        os.kill(os.getpid(), signal.SIGTERM)  # the handler runs here: a flag, no exception
        assert stopping.requested() == "SIGTERM"
        # no safe point checked: the block's end still stops (a signal is never ignored)
    assert stopping.requested() is None


def test_a_deferred_section_holds_a_signal_until_it_ends_even_inside_an_interruptible_one():
    """A trial's clean-up and record (stopping.deferred): a signal there sets the flag and the section runs to its end;
    the interruptible section around it raises again after it. A thread's deferred section leaves the main thread's
    sections alone (the Ray executor's trials run in threads)."""
    import signal
    import threading

    done = []
    with pytest.raises(stopping.Stopped), stopping.handle_signals(), stopping.interruptible():
        with stopping.deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            done.append("clean-up")  # not cut
        assert stopping.requested() == "SIGTERM"
        os.kill(os.getpid(), signal.SIGTERM)  # interruptible again: raises at once
        done.append("never")
    assert done == ["clean-up"]
    depth = []

    def trial_thread() -> None:
        with stopping.deferred():
            depth.append(stopping._depth)

    with stopping.interruptible():
        t = threading.Thread(target=trial_thread)
        t.start()
        t.join()
        assert depth == [1] and stopping._depth == 1  # the main thread's wait stays interruptible


def test_status_and_the_dashboard_show_optuna_trials_without_a_row(sqlite_url, capsys):
    """An Optuna trial asked and never recorded is not hidden: `status` (text and JSON) and the dashboard's summary
    name it, its owner and whether that tuner is alive."""
    import json

    from autotune.dashboard.studies import summary
    from tests.conftest import cli_run

    tuner = _tuner(sqlite_url)
    tuner.run(n_trials=1)
    _register(tuner, "otherhost:4242")
    t = _asked_by(tuner, "otherhost:4242")
    code, out, _ = cli_run(capsys, "status", "--storage", sqlite_url)
    assert code == 0 and f"1 Optuna trial(s) without an autotune row: #{t.number} RUNNING (asked by otherhost:4242, " \
        "alive)" in out
    code, out, _ = cli_run(capsys, "status", "--storage", sqlite_url, "--json")
    assert json.loads(out)["optuna_without_row"] == [{"number": t.number, "state": "RUNNING",
                                                     "owner": "otherhost:4242", "owner_alive": True}]
    assert [u.number for u in summary(tuner.store, tuner.store.get_study("s"))["unrecorded"]] == [t.number]
    with tuner.store.session() as s:  # its tuner stops: the next look closes the trial, and it has its row
        s.execute(update(TunerRow).where(TunerRow.worker == "otherhost:4242").values(stopped_at=utcnow()))
    tuner.recover()
    code, out, _ = cli_run(capsys, "status", "--storage", sqlite_url)
    assert "without an autotune row" not in out
