"""TEST DOUBLE, part of main_ppo.py: the traces verl 0.9.1 writes for a step when its profiler is on.

The files come from verl's own code, not from imitations of it: the double composes verl's Hydra config with the
launch's overrides, builds each training rank's profiler the way verl's ActorRolloutRefWorker does
(`omega_conf_to_dataclass` of actor_rollout_ref.actor.profiler, `DistProfiler(rank, config, tool_config,
save_file_prefix=<worker role>)`), starts it with the trainer's arguments (role="train", profile_step=N) and runs the
stages under verl's `DistProfiler.annotate` with verl's role names, on CPU torch; verl names and writes the files.
What is imitated: Megatron's parallel_state (each rank's tp/pp/dp/cp in Megatron's tp-cp-dp-pp order, handed to
verl's file naming in place of `get_dist_topology`), the work itself (small CPU matmuls; a later pipeline stage waits
for the earlier ones, as a real pipeline's fill does), and vLLM's engine traces (torch.profiler's tensorboard handler
in verl's `rollout_trace_dir` for each replica whose rollout profiler verl's config turns on, one file per GPU named
with vLLM's rank suffix).
"""

from __future__ import annotations

import os
import time


def _int(ov: dict[str, str], key: str, default: int) -> int:
    v = ov.get(key, "null")
    return default if v in ("null", "None", "") else int(v)


def requested(ov: dict[str, str], step: int) -> bool:
    steps = ov.get("global_profiler.steps", "null").strip("[]")
    return ov.get("global_profiler.tool") == "torch" and str(step) in [s.strip() for s in steps.split(",")]


def write_traces(argv: list[str], ov: dict[str, str], step: int) -> None:
    import torch
    import verl
    import verl.utils.profiler.torch_profile as torch_profile
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf
    from verl.utils.config import omega_conf_to_dataclass
    from verl.utils.profiler import DistProfiler, ProfilerConfig
    from verl.utils.profiler.config import rollout_trace_dir

    overrides = [a for a in argv if "=" in a and not a.startswith("-") and not a.startswith("+ray_kwargs")]
    cfg_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=cfg_dir, version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=overrides)
    OmegaConf.resolve(cfg)  # as verl's TaskRunnerV1.run does before it builds the workers
    arr = cfg.actor_rollout_ref
    world = int(cfg.trainer.n_gpus_per_node) * int(cfg.trainer.nnodes)
    mg = arr.actor.megatron
    tp, pp, cp = (int(mg.tensor_model_parallel_size), int(mg.pipeline_model_parallel_size),
                  int(mg.context_parallel_size))
    dp = world // (tp * pp * cp)
    role = "actor_rollout_ref" if bool(arr.actor.use_kl_loss) else "actor_rollout"  # verl's Role string
    omega = arr.actor.profiler  # the colocated worker reads the actor's profiler config
    pcfg = omega_conf_to_dataclass(omega, dataclass_type=ProfilerConfig)
    tool = omega_conf_to_dataclass(omega.tool_config.get(omega.tool)) if omega.tool == "torch" else None
    weight = torch.randn(256, 256)

    class Worker:  # the stages of verl's ActorRolloutRefWorker, with its annotations
        def __init__(self, rank: int):
            self.rank = rank
            self.profiler = DistProfiler(rank=rank, config=pcfg, tool_config=tool, save_file_prefix=role)

        @DistProfiler.annotate(color="blue", role="actor_compute_log_prob")
        def compute_log_prob(self) -> None:
            with torch.no_grad():
                for _ in range(4):
                    torch.randn(64, 256) @ weight

        @DistProfiler.annotate(color="red", role="actor_update", scheduled=True)
        def update_actor(self, stage: int) -> None:
            time.sleep(0.5 * stage)  # a later pipeline stage waits for the first micro-batch
            w = weight.clone().requires_grad_(True)
            for _ in range(4):
                (torch.randn(64, 256) @ w).sum().backward()

    for rank in range(world):
        topo = {"rank": rank, "world_size": world, "tp": rank % tp, "cp": (rank // tp) % cp,
                "dp": (rank // (tp * cp)) % dp, "pp": rank // (tp * cp * dp)}
        torch_profile.get_dist_topology = lambda topo=topo: dict(topo)
        w = Worker(rank)
        w.profiler.start(role="train", profile_step=step)
        w.compute_log_prob()
        w.update_actor(topo["pp"])
        w.profiler.stop(run_command=True)

    rollout = arr.rollout.profiler
    rcfg = omega_conf_to_dataclass(rollout, dataclass_type=ProfilerConfig)
    rtool = omega_conf_to_dataclass(rollout.tool_config.get(rollout.tool)) if rollout.tool == "torch" else None
    rtp = int(arr.rollout.tensor_model_parallel_size)
    for replica in range(world // rtp):
        if not (rcfg.enable and rtool is not None and rtool.discrete and (rcfg.all_ranks or replica == 0)):
            continue  # verl's vLLMHttpServer._should_profile
        where = rollout_trace_dir(rcfg, replica)
        for k in range(rtp):
            handler = torch.profiler.tensorboard_trace_handler(where, worker_name=f"dp0_pp0_tp{k}_dcp0_ep0_rank{k}",
                                                               use_gzip=True)
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], on_trace_ready=handler):
                for _ in range(8):  # decode steps
                    with torch.profiler.record_function("execute_model"):
                        torch.randn(8, 256) @ weight
                    time.sleep(0.002)  # the scheduler between steps
