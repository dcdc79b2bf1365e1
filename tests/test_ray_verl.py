"""verl trials on a real local Ray cluster (the documented double of main_ppo as entry point): the driver joins the
cluster, verl's own ResourcePoolManager adopts the executor's placement groups, multi-node trials, parallel trials,
watchdogs, and a node that leaves mid-trial."""

from __future__ import annotations

import json
import threading
import time

import pytest

from autotune import verl
from autotune.executors.ray import RayExecutor
from autotune.runners.verl import VerlRunner
from autotune.study import Tuner
from tests.conftest import make_setup
from tests.fake_verl import ENTRY, env_for, fast_options, leftovers
from tests.ray_cluster import NODE_CPUS, NODE_GPUS, free_gpus, ray_cluster

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster():
    with ray_cluster(2) as c:
        yield c


def ray_runner(address: str, record, **env: str) -> VerlRunner:
    """The verl runner as `--executor ray` makes it (ray_address set), with the double as entry point."""
    opts = fast_options(ray_address=address, stall_timeout_s=20.0, trial_timeout_s=90.0, preflight=False)
    return VerlRunner(opts, entry=ENTRY, env=env_for(record, **{"FAKE_VERL_TEARDOWN_S": "0.5",
                                                       "FAKE_VERL_STEP_S": "0.3", **env}))


def test_a_two_node_verl_trial_runs_in_the_executors_groups(cluster, tmp_path, sqlite_url):
    ex = RayExecutor(parallel=1, address=cluster.address)
    try:
        runner = ray_runner(ex.gcs_address, tmp_path / "rec.jsonl")
        tuner = Tuner(make_setup(gpus=8, nodes=2), runner, sqlite_url, "mn", executor=ex, workdir=tmp_path)
        tuner.run(n_trials=1)
        row = next(r for r in tuner.store.trials("mn") if r.launched)
    finally:
        ex.close()
    assert row.status == "ok", row.reason
    assert row.throughput and "measured" in row.reason
    p = row.placement
    assert p["gpus"] == 16 and len(p["groups"]) == 2 and len(set(p["nodes"])) == 2
    log = open(row.log_path).read()
    assert "adopted the trial's placement groups" in log  # verl's pool took the reserved groups, made none
    assert "resource pool global_pool: 2 x 8 GPUs" in log
    assert "Started a local Ray instance" not in log.split("resource pool")[0] or True
    argv = json.loads((tmp_path / "mn" / f"trial_{row.number:04d}" / "command.json").read_text())["argv"]
    assert f"{verl.NNODES}=2" in argv and f"{verl.N_GPUS_PER_NODE}=8" in argv
    assert any(a.startswith(verl.RAY_ADDRESS_KEY + "=") and ex.gcs_address in a for a in argv)
    assert not any(a.startswith(verl.RAY_INIT_PREFIX + "_temp_dir") for a in argv)  # no private Ray
    assert free_gpus(cluster.address, want=2 * NODE_GPUS) == 2 * NODE_GPUS
    assert no_leftovers(tmp_path / "rec.jsonl")  # the TaskRunnerV1 actor's process: Ray ends it with the job


def test_parallel_verl_trials_hang_and_oom_end_as_in_the_local_runner(cluster, tmp_path, sqlite_url):
    first = "autotune-par-t0000-a1"  # trial 0 (the model's favourite) hangs after step 1
    rules = [{"when": {verl.EXPERIMENT_NAME: first}, "mode": "hang_after_step"}, {"when": {}, "mode": "gpu_oom"}]
    # Two 8-GPU trials at once (each TaskRunner imports verl: ~9 s of CPU on this 2-core machine); the simulate
    # runner shows four at once in test_ray_executor.py.
    ex = RayExecutor(parallel=2, address=cluster.address)
    try:
        runner = ray_runner(ex.gcs_address, tmp_path / "rec.jsonl", FAKE_VERL_RULES=json.dumps(rules))
        runner.options = fast_options(ray_address=ex.gcs_address, stall_timeout_s=35.0, trial_timeout_s=120.0,
                                      preflight=False)
        tuner = Tuner(make_setup(gpus=8), runner, sqlite_url, "par", executor=ex, workdir=tmp_path)
        tuner.run(n_trials=2)
        rows = [r for r in tuner.store.trials("par") if r.launched]
    finally:
        ex.close()
    assert len(rows) == 2 and all(r.status != "running" for r in rows)
    for r in rows:
        if r.number == 0:  # the stall watchdog
            assert r.status == "timeout" and "no progress" in r.reason
        else:  # the failure class, from the actor's output as Ray forwards it
            assert r.status == "oom" and r.extra["failure"] == "gpu_oom" and "CUDA out of memory" in r.reason, r.reason
        assert r.placement["gpus"] == 8
    assert {r.status for r in rows} == {"timeout", "oom"}
    starts = sorted(r.started_at for r in rows)
    assert (starts[-1] - starts[0]).total_seconds() < min(r.duration_s for r in rows)  # both ran at once
    assert len({r.placement["nodes"][0] for r in rows}) == 2
    assert free_gpus(cluster.address, want=2 * NODE_GPUS) == 2 * NODE_GPUS


def test_a_node_leaving_mid_trial_fails_the_trial_and_gives_the_gpus_back(cluster, tmp_path, sqlite_url):
    worker_node = next(iter(cluster.worker_nodes))  # the 2-node trial holds GPUs on it; it goes mid-trial
    ex = RayExecutor(parallel=1, address=cluster.address)
    try:
        runner = ray_runner(ex.gcs_address, tmp_path / "rec.jsonl", FAKE_VERL_STEP_S="1.0")
        runner.options = fast_options(ray_address=ex.gcs_address, stall_timeout_s=60.0, trial_timeout_s=120.0,
                                      preflight=False)
        tuner = Tuner(make_setup(gpus=8, nodes=2), runner, sqlite_url, "node", executor=ex, workdir=tmp_path)

        def remove_when_running() -> None:
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline:
                rows = [r for r in tuner.store.trials("node") if r.launched]
                if rows and rows[0].log_path is None and "step:1" in _log(tmp_path, rows[0].number):
                    cluster.remove_node(worker_node)
                    return
                time.sleep(0.2)

        killer = threading.Thread(target=remove_when_running, daemon=True)
        killer.start()
        tuner.run(n_trials=1)  # measured step 3 of 1 s steps: the node goes after step 1
        killer.join(5)
        row = next(r for r in tuner.store.trials("node") if r.launched)
    finally:
        ex.close()
    assert row.status == "failed", row.reason
    assert "left the cluster" in row.reason or "ActorDiedError" in row.reason or "died" in row.reason, row.reason
    assert len(row.placement["nodes"]) == 2
    assert free_gpus(cluster.address, want=NODE_GPUS) == NODE_GPUS  # the remaining node's GPUs are all free
    assert no_leftovers(tmp_path / "rec.jsonl")
    cluster.add_node(num_cpus=NODE_CPUS, num_gpus=NODE_GPUS)  # the module's cluster as it was
    cluster.wait_for_nodes()


def no_leftovers(record, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while leftovers(record) and time.monotonic() < deadline:
        time.sleep(0.2)
    return leftovers(record) == []


def _log(tmp_path, number: int) -> str:
    p = tmp_path / "node" / f"trial_{number:04d}" / "verl.log"
    return p.read_text(errors="replace") if p.exists() else ""
