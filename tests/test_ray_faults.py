"""Faults on a real local Ray cluster: Ctrl-C and kill -9 of a tuner with four trials running, and four concurrent
`autotune run --executor ray` workers on one PostgreSQL study."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest

from autotune.store.store import Store
from autotune.study.study import Tuner
from tests.conftest import REPO, make_setup
from tests.ray_cluster import HANG_GUARD_S, NODE_GPUS, SlowSimulate, free_gpus

pytestmark = pytest.mark.slow
ALL_GPUS = 2 * NODE_GPUS


@pytest.fixture
def cluster(shared_ray_cluster):
    return shared_ray_cluster  # 2 nodes x 8 GPUs, shared with the other Ray modules (conftest)


@pytest.fixture
def spawned():
    """The tuners a test starts, killed at its end if still running: a failed test leaves the cluster's GPUs free for
    the next one (kill -9 of a tuner ends its Ray job, and Ray removes its placement groups)."""
    procs: list[subprocess.Popen] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait(HANG_GUARD_S)


def start_tuner(cluster, storage: str, study: str, seconds: float = 60.0) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-m", "tests.ray_cluster", cluster.address, storage, study, "4",
                             str(seconds), "8", "4"], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def start_cli(cluster, storage: str, study: str, seconds: float = HANG_GUARD_S) -> subprocess.Popen:
    """`autotune run --executor ray --parallel 4` as a user starts it; its simulate trials last `seconds` unless
    stopped (tests/ray_cluster.py cli_main)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-m", "tests.ray_cluster", "cli", str(seconds), "run", "--model",
                             "qwen2.5-7b", "--gpus", "4", "--backend", "simulate", "--executor", "ray",
                             "--ray-address", cluster.address, "--parallel", "4", "--n-trials", "8",
                             "--storage", storage, "--study", study, "--confirm", "0"],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def wait_running(store: Store, study: str, n: int, proc: subprocess.Popen, timeout: float = HANG_GUARD_S) -> list:
    """Until n trials are RUNNING with their placement recorded."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read()
        try:
            rows = [r for r in store.running(study) if r.placement]
        except Exception:  # the study's tables may not exist yet
            rows = []
        if len(rows) >= n:
            return rows
        time.sleep(0.3)
    raise AssertionError(f"{n} trials never ran at once")


@pytest.mark.parametrize("sig, said, code", [(signal.SIGINT, "by the user (Ctrl-C)", 130),
                                             (signal.SIGTERM, "by SIGTERM", 143)], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_or_sigterm_stops_every_trial_on_the_cluster_and_records_it(cluster, sqlite_url, sig, said, code,
                                                                           spawned):
    """SIGTERM ends `autotune run --executor ray` exactly as Ctrl-C does (Ray's driver set-up would make it exit 15
    with a native stack dump and the trials left running): exit 130 (143 for SIGTERM), each trial interrupted and
    stopped."""
    study = f"int-{sig.name}"
    proc = start_cli(cluster, sqlite_url, study)
    spawned.append(proc)
    store = Store(sqlite_url)
    running = wait_running(store, study, 4, proc)
    assert free_gpus(cluster.address) == 0  # four 4-GPU trials hold all 16 GPUs
    proc.send_signal(sig)
    output = proc.communicate(timeout=HANG_GUARD_S)[0]  # an event (the exit); the timeout only guards a hang
    assert proc.returncode == code, output
    assert "autotune: interrupted" in output
    assert "SIGTERM received" not in output and "logging.cc" not in output and "Traceback" not in output, output
    rows = {r.number: r for r in store.trials(study)}
    for r in running:
        assert rows[r.number].status == "interrupted", rows[r.number].reason
        assert rows[r.number].reason == f"interrupted {said}; re-queued on resume"
        assert rows[r.number].placement["gpus"] == 4
    assert not store.running(study)
    assert free_gpus(cluster.address, want=ALL_GPUS) == ALL_GPUS


def test_kill_9_with_four_trials_running_frees_the_gpus_and_the_next_run_requeues(cluster, sqlite_url, spawned):
    proc = start_tuner(cluster, sqlite_url, "k9")
    spawned.append(proc)
    store = Store(sqlite_url)
    running = wait_running(store, "k9", 4, proc)
    proc.kill()
    proc.wait(HANG_GUARD_S)
    # The groups belonged to the dead tuner's Ray job: Ray removes them, the trials stop on the cluster.
    assert free_gpus(cluster.address, want=ALL_GPUS) == ALL_GPUS
    from autotune.executors.ray import RayExecutor

    ex = RayExecutor(parallel=4, address=cluster.address)
    try:
        tuner = Tuner(make_setup(gpus=4), SlowSimulate(0.1), sqlite_url, "k9", executor=ex)
        tuner.run(n_trials=8)
    finally:
        ex.close()
    rows = store.trials("k9")
    assert not store.running("k9")
    by_number = {r.number: r for r in rows}
    for r in running:
        killed = by_number[r.number]
        assert killed.status == "interrupted" and "stopped while this trial ran" in killed.reason
    assert [r for r in rows if r.origin == "requeue"]
    launched_keys = [r.candidate_key for r in rows if r.launched and r.status != "interrupted"]
    assert len(launched_keys) == len(set(launched_keys))
    assert {r.candidate_key for r in running} <= set(launched_keys)  # every killed configuration ran again


def test_four_cli_workers_share_one_postgres_study(cluster, postgres_url):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "autotune", "run", "--model", "qwen2.5-7b", "--gpus", "4", "--backend", "simulate",
           "--executor", "ray", "--ray-address", cluster.address, "--parallel", "2", "--n-trials", "12",
           "--storage", postgres_url, "--study", "pg4", "--confirm", "0", "--json"]
    procs = [subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(4)]
    outs = [p.communicate(timeout=HANG_GUARD_S) for p in procs]
    for p, (so, se) in zip(procs, outs, strict=True):
        assert p.returncode == 0, se[-2000:]
        assert json.loads(so)["launched"] == 12
    store = Store(postgres_url)
    rows = store.trials("pg4")
    launched = [r for r in rows if r.launched]
    assert len(launched) == 12  # exactly --n-trials across all workers
    assert not [k for k, n in Counter(r.candidate_key for r in launched).items() if n > 1]  # no duplicate
    assert all(r.status not in ("running",) and r.finished_at for r in rows)  # no row left running
    assert len({r.worker for r in launched}) >= 2  # the work was shared
    import optuna

    trials = optuna.load_study(study_name="pg4", storage=postgres_url).get_trials(deepcopy=False)
    assert sorted(t.number for t in trials) == sorted(r.number for r in rows)  # no lost row: one per Optuna trial
    assert all(t.state.is_finished() for t in trials)
