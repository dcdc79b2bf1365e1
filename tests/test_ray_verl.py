"""verl trials on a real local Ray cluster (the documented double of main_ppo as entry point): the driver joins the
cluster, verl's own ResourcePoolManager adopts the executor's placement groups, multi-node trials, parallel trials,
watchdogs, a node that leaves mid-trial, and the stack's shims reaching verl's Ray workers through the setup hook."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from pathlib import Path

import pytest

from autotune import verl
from autotune.executors.ray import RayExecutor
from autotune.runners.verl import VerlRunner
from autotune.study.study import Tuner
from tests.conftest import make_setup
from tests.fake_verl import ENTRY, env_for, fast_options, leftovers
from tests.ray_cluster import HANG_GUARD_S, NODE_GPUS, add_node, free_gpus

pytestmark = pytest.mark.slow


@pytest.fixture
def cluster(shared_ray_cluster):
    return shared_ray_cluster  # 2 nodes x 8 GPUs, shared with the other Ray modules (conftest)


# Watchdogs that never fire in a trial that makes progress, however loaded the machine (a trial's start-up, Ray
# joining and verl's import, is tens of seconds of CPU here); a test of a watchdog sets its own.
PATIENT = {"stall_timeout_s": HANG_GUARD_S, "trial_timeout_s": 2 * HANG_GUARD_S}


def ray_runner(address: str, record, **env: str) -> VerlRunner:
    """The verl runner as `--executor ray` makes it (ray_address set), with the double as entry point."""
    opts = fast_options(ray_address=address, preflight=False, **PATIENT)
    return VerlRunner(opts, entry=ENTRY, env=env_for(record, **{"FAKE_VERL_TEARDOWN_S": "0.5",
                                                       "FAKE_VERL_STEP_S": "0.3", **env}))


class PerTrial(VerlRunner):
    """The verl runner with the watchdogs chosen per trial (one runner serves every trial of a study): the trial that
    hangs gets a short stall timeout, the others PATIENT ones, so no trial is cut short by how slowly it started."""

    def __init__(self, base: VerlRunner, short_stall_s: float, hangs: int):
        super().__init__(base.options, entry=base.entry, env=base.env)
        self.base, self.short_stall_s, self.hangs = base, short_stall_s, hangs

    def run(self, spec):
        opts = dataclasses.replace(self.base.options, stall_timeout_s=self.short_stall_s) \
            if spec.number == self.hangs else self.base.options
        return VerlRunner(opts, entry=self.base.entry, env=self.base.env).run(spec)


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
        # The hanging trial's start-up has the PATIENT watchdog (its start-up timeout); its short stall timeout counts
        # from step 1, after which it hangs (no step is ever late there); the OOM trial's failure class never depends
        # on how slowly it started.
        runner = PerTrial(ray_runner(ex.gcs_address, tmp_path / "rec.jsonl", FAKE_VERL_RULES=json.dumps(rules)),
                          short_stall_s=5.0, hangs=0)
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
        # Steps of 1 s, but step 2 waits for the node to go (FAKE_VERL_HOLD_FILE): the trial is mid-run when it does.
        hold = tmp_path / "node-removed"
        runner = ray_runner(ex.gcs_address, tmp_path / "rec.jsonl", FAKE_VERL_STEP_S="1.0",
                            FAKE_VERL_HOLD_FILE=str(hold))
        tuner = Tuner(make_setup(gpus=8, nodes=2), runner, sqlite_url, "node", executor=ex, workdir=tmp_path)
        ran = threading.Event()

        def remove_when_running() -> None:
            while not ran.is_set():
                rows = [r for r in tuner.store.trials("node") if r.launched]
                if rows and rows[0].log_path is None and "step:1" in _log(tmp_path, rows[0].number):
                    cluster.remove_node(worker_node)
                    hold.touch()
                    return
                time.sleep(0.2)

        killer = threading.Thread(target=remove_when_running, daemon=True)
        killer.start()
        try:
            tuner.run(n_trials=1)  # measured step 3: the node goes after step 1
        finally:
            ran.set()
            killer.join(HANG_GUARD_S)
        row = next(r for r in tuner.store.trials("node") if r.launched)
    finally:
        ex.close()
    assert row.status == "failed", row.reason
    assert "left the cluster" in row.reason or "ActorDiedError" in row.reason or "died" in row.reason, row.reason
    assert len(row.placement["nodes"]) == 2
    assert free_gpus(cluster.address, want=NODE_GPUS) == NODE_GPUS  # the remaining node's GPUs are all free
    assert no_leftovers(tmp_path / "rec.jsonl")
    add_node(cluster)  # the module's cluster as it was


def no_leftovers(record, timeout: float = HANG_GUARD_S) -> bool:
    deadline = time.monotonic() + timeout
    while leftovers(record) and time.monotonic() < deadline:
        time.sleep(0.2)
    return leftovers(record) == []


def _log(tmp_path, number: int) -> str:
    p = tmp_path / "node" / f"trial_{number:04d}" / "verl.log"
    return p.read_text(errors="replace") if p.exists() else ""


def test_the_hook_adopts_only_groups_in_verls_own_bundle_shape(cluster, monkeypatch):
    """verl's pool takes the reserved groups only when they are what it would have made itself: as many bundles, each
    {"CPU": max_colocate_count, "GPU": 1} (its workers take 1 CPU and 1/max_colocate_count GPU each); other groups
    leave verl's own behaviour (its free-GPU check, its own groups), never workers waiting for CPUs."""
    import ray
    import verl.single_controller.ray.base as pool_module
    from ray.util.placement_group import placement_group, placement_group_table, remove_placement_group

    from autotune.executors.ray import NAMESPACE
    from autotune.verl import ray_hook as verl_hook

    ray.init(address=cluster.address, namespace=NAMESPACE, log_to_driver=False, logging_level="ERROR")
    try:
        name = "autotune:hook-shape:t00000:n0"
        ours = placement_group([{"CPU": 1, "GPU": 1}] * 2, strategy="STRICT_PACK", name=name)
        ray.get(ours.ready())
        monkeypatch.setenv(verl_hook.ENV, name)
        verl_hook.patch(pool_module)

        def pool(max_colocate_count: int) -> list:
            mgr = pool_module.ResourcePoolManager(resource_pool_spec={"global_pool": [2]}, mapping={},
                                                  max_colocate_count=max_colocate_count)
            mgr.create_resource_pool()
            return mgr.resource_pool_dict["global_pool"].get_placement_groups()

        theirs = pool(3)  # verl's default shape is {"CPU": 3, "GPU": 1}: not these groups, verl makes its own
        assert [g.id for g in theirs] != [ours.id]
        assert placement_group_table(theirs[0])["bundles"][0] == {"CPU": 3.0, "GPU": 1.0}
        for g in theirs:
            remove_placement_group(g)
        assert [g.id for g in pool(1)] == [ours.id]  # the same shape: adopted
        remove_placement_group(ours)
    finally:
        ray.shutdown()
    assert free_gpus(cluster.address, want=2 * NODE_GPUS) == 2 * NODE_GPUS


def test_the_shim_reaches_verls_ray_workers_through_the_setup_hook(cluster, tmp_path: Path) -> None:
    """The stack's shims (autotune/verl/shims.py, tests/test_doctor.py's subject): in a real local Ray cluster, a driver
    that joins with the runner's setup hook in its runtime_env (as verl's driver does with ray_kwargs.ray_init) gets
    workers in which mbridge 0.15.1's use of the removed ModelType name works; without the hook it fails."""
    import os
    import subprocess
    import sys

    from autotune.verl import shims as verl_shims
    from tests.ray_cluster import SYSTEM_CONFIG
    from tests.stub_stack import ENUMS, GPT_MODEL, MBRIDGE_UTIL, ROOT

    root = tmp_path / "pkgs"
    for rel, src in {"megatron/__init__.py": "", "megatron/core/__init__.py": "", "megatron/core/enums.py": ENUMS,
                     "megatron/core/transformer/__init__.py": "", "megatron/core/transformer/enums.py": ENUMS,
                     "megatron/core/models/__init__.py": "", "megatron/core/models/gpt/__init__.py": "",
                     "megatron/core/models/gpt/gpt_model.py": GPT_MODEL,
                     "mbridge/__init__.py": "", "mbridge/core/__init__.py": "", "mbridge/core/util.py": MBRIDGE_UTIL
                     }.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(src)
    script = f"""
import ray, sys
hook = sys.argv[1] or None
env = {{"env_vars": {{"PYTHONPATH": {str(root) + os.pathsep + str(ROOT)!r}}}}}
if hook:
    env["worker_process_setup_hook"] = hook
ray.init(address=sys.argv[2], log_to_driver=False, runtime_env=env)
@ray.remote
def build():
    from ray._raylet import Config
    try:
        import mbridge.core.util as u
        return repr(u.IS_ENC_DEC), Config.worker_register_timeout_seconds()
    except AttributeError as e:
        return "AttributeError: " + str(e), Config.worker_register_timeout_seconds()
result, register_s = ray.get(build.remote())
print("RESULT", result, flush=True)
print("REGISTER", register_s, flush=True)
ray.shutdown()
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("RAY_ADDRESS", None)
    for hook, want in ((verl_shims.SETUP_HOOK, "RESULT False"), ("", "RESULT AttributeError: encoder_and_decoder")):
        proc = subprocess.run([sys.executable, "-c", script, hook, cluster.address], env=env,
                              capture_output=True, text=True, timeout=300)
        assert want in proc.stdout, proc.stdout + proc.stderr[-2000:]
        # the worker had the cluster's patience: Ray's 60 s to register failed it on a loaded machine
        assert f"REGISTER {SYSTEM_CONFIG['worker_register_timeout_seconds']}" in proc.stdout, proc.stdout
