"""The Ray executor on a real local Ray cluster (2 nodes x 8 declared GPUs): placement, parallelism, accounting."""

from __future__ import annotations

import json

import pytest

from autotune import cli
from autotune.dashboard import data, table
from autotune.executors import make_executor
from autotune.executors.ray import ExecutorError, RayExecutor
from autotune.runners.simulate import SimulateRunner
from autotune.study import Tuner
from tests.conftest import make_setup
from tests.ray_cluster import NODE_GPUS, SlowSimulate, free_gpus, ray_cluster

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster():
    with ray_cluster(2) as c:
        yield c


def test_parallel_trials_hold_their_own_gpus_and_give_them_back(cluster, sqlite_url, capsys):
    setup = make_setup(gpus=4)  # 4-GPU trials on 2 nodes x 8 GPUs: four fit at once
    runner = SlowSimulate(4.0)  # long enough for the tuner to propose four (an ask costs ~0.3-1 s on 2 busy cores)
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
    from autotune.store import Store

    launched = [r for r in Store(sqlite_url).trials("rp") if r.launched]
    assert len(launched) == 3 and all(r.backend == "replay" and r.placement["gpus"] == 2 for r in launched)
    assert free_gpus(cluster.address, want=2 * NODE_GPUS) == 2 * NODE_GPUS
