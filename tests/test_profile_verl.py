"""verl's own profiler, driven on CPU: the keys autotune sets compose and validate in verl's config, turn on the
profilers verl's workers build from it, and the traces land where (and named as) verl 0.9.1 writes them; then the
profiling verl runner end to end through the test double (which writes its traces with verl's profiler code)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from autotune import verl
from autotune.candidate import Candidate
from autotune.profile.analysis import OUTSIDE, analyse
from autotune.profile.runs import profiler_overrides
from autotune.profile.traces import discover
from autotune.results.export import launch_argv
from autotune.verl.preflight import compose_full, hydra_overrides, validate_overrides
from tests.conftest import free_port, make_setup

pytest.importorskip("verl")
torch = pytest.importorskip("torch")


def _argv(tmp_path: Path, world: int = 2, **cand) -> list[str]:
    setup = make_setup("qwen2.5-1.5b", gpus=world)
    c = Candidate(**{"tp": 1, "pp": 1, "rollout_tp": 1, "use_dynamic_bsz": True, **cand}).normalized()
    return launch_argv(setup.job, setup.cluster, c, extra=profiler_overrides(tmp_path / "traces", 3, 50, 2))


def test_profiler_keys_pass_verls_validation_and_turn_every_role_on(tmp_path):
    argv = _argv(tmp_path)
    pre = validate_overrides(hydra_overrides(argv))
    assert pre.ok, pre.message
    from omegaconf import OmegaConf

    cfg = compose_full(hydra_overrides(argv))
    OmegaConf.resolve(cfg)  # as TaskRunnerV1.run does
    assert cfg.global_profiler.tool == "torch" and list(cfg.global_profiler.steps) == [3]
    arr = cfg.actor_rollout_ref
    for role in (arr.actor, arr.ref, arr.rollout):
        assert role.profiler.enable and role.profiler.all_ranks and role.profiler.tool == "torch"
        assert role.profiler.save_path == str(tmp_path / "traces")
    assert arr.rollout.profiler.tool_config.torch.discrete is True  # vLLM servers profile only in discrete mode
    assert arr.rollout.profiler.tool_config.torch.profile_token_end == 50
    assert arr.actor.profiler.tool_config.torch.discrete is False  # one trace per worker and step
    assert arr.actor.profiler.tool_config.torch.schedule.active == 2


def _worker(rank: int, port: int, argv: list[str]) -> None:
    """One training rank: verl's profiler built from the composed config as verl's ActorRolloutRefWorker builds it,
    started as verl's trainer starts it, the stages run under verl's annotations; rank 1 is a later pipeline stage
    that waits for rank 0 (a real wait, over gloo)."""
    import torch.distributed as dist
    from omegaconf import OmegaConf
    from verl.utils.config import omega_conf_to_dataclass
    from verl.utils.profiler import DistProfiler, ProfilerConfig

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    cfg = compose_full(hydra_overrides(argv))
    OmegaConf.resolve(cfg)
    omega = cfg.actor_rollout_ref.actor.profiler
    config = omega_conf_to_dataclass(omega, dataclass_type=ProfilerConfig)
    tool = omega_conf_to_dataclass(omega.tool_config.get(omega.tool))
    lin = torch.nn.Linear(256, 256)

    class Worker:
        def __init__(self) -> None:
            self.profiler = DistProfiler(rank=rank, config=config, tool_config=tool, save_file_prefix="actor_rollout")

        @DistProfiler.annotate(color="blue", role="actor_compute_log_prob")
        def compute_log_prob(self) -> None:
            with torch.no_grad():
                lin(torch.randn(128, 256))

        @DistProfiler.annotate(color="red", role="actor_update", scheduled=True)
        def update_actor(self) -> None:
            for _ in range(2):
                if rank == 0:
                    y = torch.randn(128, 256)
                    for _ in range(10):
                        y = lin(y)
                    dist.send(y.detach().contiguous(), 1)
                else:
                    buf = torch.empty(128, 256)
                    dist.recv(buf, 0)
                    lin(buf).sum().backward()

    try:
        w = Worker()
        dist.barrier()
        w.profiler.start(role="train", profile_step=3)
        w.compute_log_prob()
        w.update_actor()
        w.profiler.stop(run_command=True)
    finally:
        dist.destroy_process_group()


def test_traces_land_where_verl_writes_them(tmp_path):
    import torch.multiprocessing as mp
    from omegaconf import OmegaConf
    from verl.utils.config import omega_conf_to_dataclass
    from verl.utils.profiler import ProfilerConfig
    from verl.utils.profiler.config import build_vllm_profiler_args, relocate_rollout_traces

    argv = _argv(tmp_path, pp=2)
    mp.start_processes(_worker, args=(free_port(), argv), nprocs=2, start_method="spawn", join=True)
    # the rollout: verl hands vLLM a torch_profiler_dir per replica (build_vllm_profiler_args); vLLM (not installed
    # here) writes one trace per GPU there with torch's tensorboard handler, its rank in the name
    cfg = compose_full(hydra_overrides(argv))
    OmegaConf.resolve(cfg)
    rollout = cfg.actor_rollout_ref.rollout.profiler
    rcfg = omega_conf_to_dataclass(rollout, dataclass_type=ProfilerConfig)
    rtool = omega_conf_to_dataclass(rollout.tool_config.get(rollout.tool))
    import json

    for replica in (0, 1):
        args = json.loads(build_vllm_profiler_args(rcfg, rtool, replica, legacy_env=False)["profiler_config"])
        assert args["max_iterations"] == 50
        handler = torch.profiler.tensorboard_trace_handler(args["torch_profiler_dir"],
                                                           worker_name="dp0_pp0_tp0_dcp0_ep0_rank0", use_gzip=True)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], on_trace_ready=handler):
            torch.randn(64, 256) @ torch.randn(256, 256)
    moved = relocate_rollout_traces(ProfilerConfig(**{**rcfg.__dict__, "relocate_results": True}), 1, 1)
    assert len(moved) == 1  # replica 1's trace, moved up into save_path with verl's rollout-replica prefix

    files, other = discover(tmp_path / "traces")
    assert not other
    train = sorted((f for f in files if f.source == "train"), key=lambda f: f.rank)
    assert [(f.rank, f.world, f.step, f.worker) for f in train] == [(0, 2, 3, "actor-rollout_train"),
                                                                    (1, 2, 3, "actor-rollout_train")]
    assert all(Path(f.path).name.endswith(".json.gz") for f in files)
    rollout_files = sorted((f for f in files if f.source == "rollout"), key=lambda f: f.replica)
    assert [f.replica for f in rollout_files] == [0, 1]
    assert Path(rollout_files[0].path).parent.name == verl.ROLLOUT_TRACE_DIR_PREFIX + "0"
    assert Path(rollout_files[1].path).name.startswith("rollout-replica1_")

    a = analyse(files, pp=2)
    assert {p.name for p in a.phases} >= {"gen", "old_log_prob", "update_actor"}
    upd = a.phase("update_actor")
    assert [r.rank for r in upd.ranks] == [0, 1] and [r.pp_rank for r in upd.ranks] == [0, 1]
    assert upd.ranks[1].p2p_exposed_s > 0  # stage 1 waited for stage 0
    assert upd.bubble_fraction is not None
    assert a.phase("gen").source == "rollout" and len(a.phase("gen").ranks) == 2
    assert OUTSIDE not in {p.name for p in a.phases} or a.phase(OUTSIDE).source == "train"


@pytest.mark.slow
def test_profiling_verl_runner_end_to_end(tmp_path, db):
    """The verl runner with the profiler on (through the test double, which writes step 3's traces with verl's own
    profiler code), the analysis, the model's advice, and the profile stored with its trial."""
    from autotune.profile.runs import ProfilingVerlRunner, profile_configuration, store_profile
    from autotune.store.store import Store
    from tests.fake_verl import ENTRY, fast_options

    setup = make_setup("qwen2.5-1.5b", gpus=4)
    cand = Candidate(tp=1, pp=2, rollout_tp=1, use_dynamic_bsz=True).normalized()
    runner = ProfilingVerlRunner(fast_options(trial_timeout_s=240, stall_timeout_s=180), entry=ENTRY,
                                 rollout_iterations=20)
    prof = profile_configuration(runner, setup, cand, tmp_path / "run")
    assert prof.ok, prof.error
    assert prof.result.status.value == "ok" and prof.step == 3
    assert Path(prof.trace_dir) == (tmp_path / "run" / "traces").resolve()
    a = prof.analysis
    upd = a.phase("update_actor")
    assert len(upd.ranks) == 4 and sorted(r.pp_rank for r in upd.ranks) == [0, 0, 1, 1]  # Megatron ranks in names
    assert a.phase("gen") is not None and a.phase("old_log_prob") is not None
    assert any(n.startswith("gen: the first 20 engine iterations of each replica") for n in a.notes)
    assert prof.run_doc()["phase_timings"]["update_weights"] > 0  # the phase no trace holds: verl's own timing
    # the double's later stage waits 0.5 s before its update: that wait is measured as bubble, and the model judged
    # the fixes the bubble points at
    first, later = ([r for r in upd.ranks if r.pp_rank == s] for s in (0, 1))
    assert min(r.bubble_s for r in later) - max(r.bubble_s for r in first) > 0.4
    assert upd.bubble_fraction > 0.15
    changes = [adv.change for adv in prof.advice]
    assert {"vpp": 2} in changes
    for adv in prof.advice:
        assert adv.advised == (adv.fits and adv.speedup is not None and adv.speedup >= 1.005)
    store = Store(db)
    pid = store_profile(store, prof, "verl", cand)
    row = store.profile(pid)
    assert row.status == "ok" and row.analysis["phases"] and row.run["status"] == "ok"
    assert row.run["throughput_profiled"] is not None and "not the configuration's measured speed" in row.run["note"]
