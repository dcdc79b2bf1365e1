"""The Ray executor on a real local Ray cluster (2 nodes x 8 declared GPUs): placement, parallelism, accounting."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest

from autotune import cli
from autotune.dashboard import data, table
from autotune.executors import make_executor
from autotune.executors.ray import ExecutorError, RayExecutor
from autotune.runners.base import RunnerFatal, TrialResult, TrialSpec
from autotune.runners.simulate import SimulateRunner
from autotune.study import study
from autotune.study.study import Tuner
from tests.conftest import REPO, make_setup
from tests.ray_cluster import HANG_GUARD_S, NODE_GPUS, SlowSimulate, add_node, free_gpus, token_cluster

pytestmark = pytest.mark.slow


@pytest.fixture
def cluster(shared_ray_cluster):
    return shared_ray_cluster  # 2 nodes x 8 GPUs, shared with the other Ray modules (conftest)


def test_parallel_trials_hold_their_own_gpus_and_give_them_back(cluster, sqlite_url, capsys):
    setup = make_setup(gpus=4)  # 4-GPU trials on 2 nodes x 8 GPUs: four fit at once
    runner = SlowSimulate(0.2, together=4)  # each trial waits until four run at once (however long proposing takes)
    ex = RayExecutor(parallel=4, address=cluster.address)
    try:
        tuner = Tuner(setup, runner, sqlite_url, "par", executor=ex)
        summary = tuner.run(n_trials=6)
        rows = tuner.store.trials("par")
        launched = [r for r in rows if r.launched]
        assert summary["launched"] == len(launched) == 6
        assert runner.peak == 4  # four in flight, never more
        assert all(r.status == "ok" and r.simulated for r in launched)
        assert len({r.candidate_key for r in launched}) == 6  # no configuration twice, also among concurrent ones
        for r in launched:
            p = r.placement
            assert p["executor"] == "ray" and p["gpus"] == 4 and len(p["nodes"]) == 1 and len(p["groups"]) == 1
            assert r.extra["placement_release"]["released"] is True
        assert len({p["nodes"][0] for p in runner.placements}) == 2  # both nodes used
        assert all(r.status != "running" for r in rows)
    finally:
        ex.close()
    assert free_gpus(cluster.address, want=2 * NODE_GPUS) == 2 * NODE_GPUS  # every GPU back
    # Where each trial ran: `autotune status` (a column, and in --json) and the dashboard's trials table.
    capsys.readouterr()
    assert cli.main(["status", "--storage", sqlite_url, "--study", "par", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)["trials"]
    assert all(t["placement"]["gpus"] == 4 and t["placement"]["nodes"] for t in shown)
    assert cli.main(["status", "--storage", sqlite_url, "--study", "par"]) == 0
    assert "placement" in capsys.readouterr().out
    store = tuner.store
    meta = table.table_meta(store, store.get_study("par"), data.version(store, "par"))
    assert "placement" in [c["key"] for c in meta["columns"]]
    row = table._table_row(next(r for r in store.trials("par") if r.launched))
    assert row["placement"].endswith("(4 GPUs)")


def test_a_multi_node_trial_spans_nodes_and_a_job_too_big_is_refused(cluster, sqlite_url):
    ex = RayExecutor(parallel=2, address=cluster.address)
    try:
        runner = SlowSimulate(0.2)
        tuner = Tuner(make_setup(gpus=8, nodes=2), runner, sqlite_url, "mn", executor=ex)
        tuner.run(n_trials=2)
        launched = [r for r in tuner.store.trials("mn") if r.launched]
        assert len(launched) == 2 and runner.peak == 1  # 16 GPUs each: one at a time on a 16-GPU cluster
        p = launched[0].placement
        assert p["gpus"] == 16 and len(p["groups"]) == 2 and len(set(p["nodes"])) == 2
        with pytest.raises(ExecutorError, match="cannot hold one trial of 2 node"):
            Tuner(make_setup(gpus=16, nodes=2), SimulateRunner(), sqlite_url, "big", executor=ex).run(n_trials=1)
        assert tuner.store.trials("big") == []  # refused before anything was asked
    finally:
        ex.close()


def test_local_executor_is_the_default_and_refuses_parallel():
    assert make_executor().name == "local"
    with pytest.raises(ValueError, match="--executor ray"):
        make_executor("local", parallel=2)


def test_an_unreachable_cluster_is_a_clear_error_with_exit_code_2(sqlite_url, capsys):
    from tests.conftest import free_port

    addr = f"127.0.0.1:{free_port()}"
    assert cli.main(["run", "--model", "qwen2.5-7b", "--executor", "ray", "--ray-address", addr,
                     "--storage", sqlite_url]) == 2
    assert f"cannot connect to the Ray cluster at '{addr}'" in capsys.readouterr().err
    assert cli.main(["run", "--model", "qwen2.5-7b", "--parallel", "2", "--storage", sqlite_url]) == 2
    assert "--executor ray" in capsys.readouterr().err


def test_replay_runs_through_the_ray_executor_from_the_cli(cluster, sqlite_url, capsys):
    table = "benchmarks/landscapes/qwen2.5-7b-L8-g2.csv"
    assert cli.main(["run", "--backend", "replay", "--table", table, "--executor", "ray", "--ray-address",
                     cluster.address, "--parallel", "2", "--n-trials", "3", "--storage", sqlite_url, "--study", "rp",
                     "--confirm", "0", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["launched"] == 3
    from autotune.store.store import Store

    launched = [r for r in Store(sqlite_url).trials("rp") if r.launched]
    assert len(launched) == 3 and all(r.backend == "replay" and r.placement["gpus"] == 2 for r in launched)
    assert free_gpus(cluster.address, want=2 * NODE_GPUS) == 2 * NODE_GPUS


def test_a_cpu_shortage_is_refused_up_front_like_a_gpu_shortage(cluster, sqlite_url, capsys):
    """The issue's cluster: a node with 8 GPUs and 2 CPUs. Each GPU's bundle asks 3 CPUs (verl's own shape, which
    verl's workers need), so that node holds no trial: a job that would need it is refused at once, in one line."""
    node = add_node(cluster, num_cpus=2)
    try:
        ex = RayExecutor(parallel=1, address=cluster.address)
        try:
            assert ex.capacity(8) == 2 and ex.capacity(8, ("GPU",)) == 3  # the CPUs, not the GPUs, are short
            with pytest.raises(ExecutorError) as e:
                ex.check(3, 8)
            msg = str(e.value)
            assert "cannot hold one trial of 3 node(s) x 8 GPUs: short of CPU" in msg and "2 CPU, 8 GPU" in msg
            assert '{"CPU": 3, "GPU": 1}' in msg and "--num-cpus" in msg
            ex.check(2, 8)  # what the other nodes hold is still accepted
        finally:
            ex.close()
        capsys.readouterr()
        code = cli.main(["run", "--model", "qwen2.5-7b", "--gpus", "8", "--nodes", "3", "--executor", "ray",
                         "--ray-address", cluster.address, "--storage", sqlite_url, "--study", "cpu"])
        err = capsys.readouterr().err
        assert code == 2 and "short of CPU" in err and len(err.strip().splitlines()) == 1, err
    finally:
        cluster.remove_node(node)
    from autotune.store.store import Store

    assert Store(sqlite_url).trials("cpu") == []  # refused before anything was asked


class _Blind(RayExecutor):
    """An executor whose up-front check passed on a cluster that changed since (a node left)."""

    def check(self, nodes: int, gpus_per_node: int) -> None:
        pass


def test_an_infeasible_placement_group_ends_its_trial_with_the_reason(cluster, sqlite_url):
    ex = _Blind(parallel=1, address=cluster.address)
    try:
        tuner = Tuner(make_setup(gpus=2 * NODE_GPUS), SimulateRunner(), sqlite_url, "inf", executor=ex)
        with pytest.raises(RunnerFatal, match="could not be placed .* infeasible"):
            tuner.run(n_trials=1)  # Ray's own state says no node can ever hold 16 bundles: no waiting
    finally:
        ex.close()
    rows = [r for r in tuner.store.trials("inf") if r.launched]
    assert len(rows) == 1 and rows[0].status == "interrupted" and "infeasible" in rows[0].reason
    assert "re-queued on resume" in rows[0].reason
    assert free_gpus(cluster.address, want=2 * NODE_GPUS) == 2 * NODE_GPUS


def test_a_group_pending_past_the_deadline_ends_its_trial_with_the_reason(cluster, sqlite_url):
    from ray.util.placement_group import placement_group, remove_placement_group

    ex = RayExecutor(parallel=1, address=cluster.address, placement_timeout_s=2.0)
    try:  # another job holds every GPU of the cluster: the trial's groups are feasible but never placed
        blockers = [placement_group([{"GPU": 1}] * NODE_GPUS, strategy="STRICT_PACK") for _ in range(2)]
        import ray

        ray.get([b.ready() for b in blockers])
        tuner = Tuner(make_setup(gpus=4), SimulateRunner(), sqlite_url, "pend", executor=ex)
        with pytest.raises(RunnerFatal, match="did not free 1 x 4 bundles .* within 2 s"):
            tuner.run(n_trials=1)
        for b in blockers:
            remove_placement_group(b)
    finally:
        ex.close()
    row = next(r for r in tuner.store.trials("pend") if r.launched)
    assert row.status == "interrupted" and "NO_RESOURCES" in row.reason, row.reason
    assert free_gpus(cluster.address, want=2 * NODE_GPUS) == 2 * NODE_GPUS


class _Held(SimulateRunner):
    """Each trial runs until the test releases it (by trial number)."""

    def __init__(self) -> None:
        self.running: dict[int, threading.Event] = {}
        self.lock = threading.Lock()

    def run(self, spec: TrialSpec) -> TrialResult:
        go = threading.Event()
        with self.lock:
            self.running[spec.number] = go
        deadline = time.monotonic() + HANG_GUARD_S
        while not go.wait(0.05) and not spec.stop.is_set() and time.monotonic() < deadline:
            pass
        return super().run(spec)


class _Watched(Tuner):
    """Releases one held trial per proposal and, at the next proposal, notes how the database shows it."""

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.checking: int | None = None
        self.seen: list[tuple[int, str, bool]] = []  # (trial, its status at the next proposal, still in flight)
        self.proposals = 0

    def propose(self, inflight):
        self.proposals += 1
        ex, runner = self.executor, self.runner
        if self.checking is not None:
            row = self.store.trial(self.study_name, self.checking)
            self.seen.append((self.checking, row.status, self.checking in inflight))
            self.checking = None
        deadline = time.monotonic() + HANG_GUARD_S  # every submitted trial is running (an event, not a guess)
        while not set(inflight) <= set(runner.running) and time.monotonic() < deadline:
            time.sleep(0.05)
        with runner.lock:
            held = [n for n, go in runner.running.items() if not go.is_set()]
        if held:
            runner.running[held[0]].set()
            ex._trials[held[0]].thread.join(HANG_GUARD_S)  # the executor is done with it: finished, groups removed
            self.checking = held[0]
        return super().propose(inflight)


def test_finished_trials_are_recorded_while_proposals_go_on(cluster, sqlite_url, tmp_path, monkeypatch):
    """--parallel K on a space with fewer configurations than K: the tuner keeps proposing (duplicates, pruned) with
    a slot free; a trial that ends meanwhile is recorded before the next proposal, never left `running`."""
    space = tmp_path / "two.yaml"
    space.write_text("name: two\ndimensions:\n  use_dynamic_bsz: {choices: [true]}\n  rollout_tp: {choices: [1, 2]}\n"
                     "  tp: {choices: [2]}\n")  # TP 1 at verl's 16k budget: the update does not fit (issue 23)
    monkeypatch.setattr(study, "MAX_IDLE_ASKS", 12)  # then the space is spent and the run ends
    ex = RayExecutor(parallel=4, address=cluster.address)
    try:
        tuner = _Watched(make_setup("qwen2.5-1.5b", gpus=2, space=str(space)), _Held(), sqlite_url, "poll",
                         executor=ex)
        summary = tuner.run(n_trials=6)
    finally:
        ex.close()
    assert "exhausted" in summary["stopped"]
    assert len(tuner.seen) >= 2, tuner.seen  # several trials ended while the tuner was proposing
    for number, status, in_flight in tuner.seen:
        assert status == "ok" and not in_flight, (number, status)  # recorded, its slot free for the proposal
    rows = tuner.store.trials("poll")
    assert not [r for r in rows if r.status == "running"]
    assert free_gpus(cluster.address, want=2 * NODE_GPUS) == 2 * NODE_GPUS


def _run_cli(address: str, tmp_path, **env: str) -> subprocess.CompletedProcess:
    """`autotune run --executor ray` as a user runs it, in a process of its own (Ray reads its auth mode at start)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    return subprocess.run([sys.executable, "-m", "autotune", "run", "--model", "qwen2.5-1.5b", "--gpus", "1",
                           "--executor", "ray", "--ray-address", address, "--n-trials", "1", "--confirm", "0",
                           "--storage", f"sqlite:///{tmp_path / 'auth.db'}", "--json"],
                          cwd=REPO, env={**base, "PYTHONPATH": str(REPO), **env}, capture_output=True, text=True,
                          timeout=HANG_GUARD_S)


def test_a_cluster_that_requires_a_token_says_authentication_in_one_line(tmp_path):
    """Ray 2.60's token authentication (RAY_AUTH_MODE=token on the cluster): a worker without the token, or with
    another one, gets one line that says authentication failed and what to do, not Ray's warning a second and
    then "cannot connect"; with the cluster's token it runs."""
    token = "3f1c" * 16
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text(token)  # the issue's ~/.ray/auth_token, present but not sent
    with token_cluster(token, str(tmp_path)) as address:
        for env, said in [({"HOME": str(tmp_path)}, "this process sends none (Ray sends a token to an explicit "
                                                    "--ray-address only with RAY_AUTH_MODE=token)"),
                          ({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "0" * 64},
                           "the cluster refused the token from RAY_AUTH_TOKEN")]:
            out = _run_cli(address, tmp_path, **env)
            err = out.stderr.strip().splitlines()
            assert out.returncode == 2 and len(err) == 1, out.stderr[-3000:]
            assert err[0].startswith(f"autotune: error: cannot connect to the Ray cluster at '{address}': "
                                     "authentication failed") and said in err[0], err[0]
            assert "InvalidAuthToken" in err[0] and "ray get-auth-token" in err[0]
        ok = _run_cli(address, tmp_path, RAY_AUTH_MODE="token", HOME=str(tmp_path))  # the token file, sent
        assert ok.returncode == 0, ok.stderr[-3000:]
        assert json.loads(ok.stdout)["launched"] == 1


# Issue 25 item 17: without --ray-address, which cluster is joined is said, with its address ----------------------
def test_without_an_address_the_recorded_cluster_is_named_else_a_private_one(tmp_path, monkeypatch):
    from autotune.executors.ray import find_cluster

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    none = find_cluster(None)
    assert none.address == "local" and "no Ray cluster on this host" in none.said and "private local" in none.said
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "ray_current_cluster").write_text("10.0.0.7:6379\n")
    found = find_cluster(None)
    assert found.address == "10.0.0.7:6379"
    assert "found the Ray cluster at 10.0.0.7:6379, which this host joined with `ray start`" in found.said
    assert str(tmp_path / "ray" / "ray_current_cluster") in found.said
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.8:6379")
    assert find_cluster(None).address == "10.0.0.8:6379" and "(RAY_ADDRESS)" in find_cluster(None).said
    assert find_cluster("10.0.0.9:6379").address == "10.0.0.9:6379" and find_cluster("10.0.0.9:6379").said == ""


def test_a_stale_record_is_one_line_naming_it(tmp_path, monkeypatch, capsys):
    from tests.conftest import free_port

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    (tmp_path / "ray").mkdir()
    addr = f"127.0.0.1:{free_port()}"
    (tmp_path / "ray" / "ray_current_cluster").write_text(addr)
    db = tmp_path / "never.db"
    assert cli.main(["run", "--model", "qwen2.5-7b", "--executor", "ray", "--storage", f"sqlite:///{db}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"cannot connect to the Ray cluster at '{addr}' (the address " in err[0]
    assert str(tmp_path / "ray" / "ray_current_cluster") in err[0] and not db.exists()


def test_the_cluster_this_host_joined_is_said_on_the_console(cluster, sqlite_url, capsys, tmp_path, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "ray_current_cluster").write_text(cluster.address)
    table = "benchmarks/landscapes/qwen2.5-7b-L8-g2.csv"
    assert cli.main(["run", "--backend", "replay", "--table", table, "--executor", "ray", "--n-trials", "1",
                     "--storage", sqlite_url, "--study", "found", "--confirm", "0"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"autotune: --executor ray without --ray-address: found the Ray cluster at {cluster.address},"
                          " which this host joined with `ray start`"), out[:500]
