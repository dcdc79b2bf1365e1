"""TEST DOUBLE of `python -m verl.trainer.main_ppo` (verl 0.9.1), for testing autotune's verl runner without GPUs.

It is not verl and trains nothing. It reproduces what the runner observes of a real verl Megatron GRPO run:
- the Hydra override argv it is given (checked: the keys a short autotune trial must carry, and the file logger
  path passed both as VERL_FILE_LOGGER_PATH and through `+ray_kwargs.ray_init.runtime_env.env_vars`);
- driver output as Ray forwards it: `ray init kwargs: ...`, worker noise, and per step the console logger's line
  `(TaskRunnerV1 pid=N) step:N - key:value - ...` (verl/utils/logger/aggregate_logger.py: plain floats, as a real
  verl 0.9.1 run printed them), printed inside the TaskRunnerV1 actor, after its pprint of the resolved config
  (here: the part the overrides set); vLLM's lines behind two prefixes "(vLLMHttpServer pid=N) (EngineCore pid=M)";
  after the last step the trainer's progress bar at 100% and torch's DataLoader teardown traceback (exit code 0);
- the JSONL file logger (verl/utils/tracking.py FileLogger: "Creating file logger at ...", file opened "wb",
  one `{"step": N, "data": {...}}` line per step);
- a process tree like Ray's (child "raylet"/"worker" processes in the same session);
- failures with verl's, vLLM's, Ray's, NCCL's and Hydra's own messages (copied from their sources/issues, see
  autotune/verl/keys.py FAILURE_PATTERNS and /work/shared/reference/VERL.md), exit code 1 as Hydra gives it.

Behaviour: env FAKE_VERL_MODE, or FAKE_VERL_RULES = JSON [{"when": {override key: value}, "mode": m}, ...]
matched on the overrides (first match wins; default "ok"). Modes: ok, slow, no_gpus, gpu_oom, vllm_start_oom,
vllm_wakeup_oom, kv_cache, host_oom, sigkill, nccl, config_error, crash, crash_once, hang, hang_after_step,
rollout_loop, early_exit, leave_child, ignore_sigterm, late_oom (OOM at step 5), vllm_start_hang, import_error,
attention_backend, tokenizer_error (at FAKE_VERL_FAIL_STEP), leak_actor (on a Ray cluster: runs as ok, and leaves a
detached actor, whose worker outlives the job).
With verl's profiler on (`global_profiler.tool=torch`, `global_profiler.steps=[N]`) it writes step N's traces with
verl's own profiler code (profiled.py).
Other knobs: FAKE_VERL_STEP_S (seconds per step, default 0.02), FAKE_VERL_STEP_JITTER (steps after the first run at
1 - j (odd) and 1 + j (even) of their throughput: measured noise; default 0), FAKE_VERL_STARTUP_S (default 0.05:
a test that needs a start-up phase to watch sets its own),
FAKE_VERL_TEARDOWN_S (after the last step, like Ray's shutdown; default 3), FAKE_VERL_FAIL_STEP (default 2),
FAKE_VERL_RECOMPILE_STEPS (default "1": the steps in which the Megatron worker prints the backward's warning a graph
compiled anew brings back, verbatim as lease 59's real run printed it: in step 1 of every real trial, in later steps
where torch.compile recompiled on cold caches; such a later step runs at RECOMPILE_SLOWDOWN of its throughput),
FAKE_VERL_RECORD (append one JSON line: pid, children, mode),
FAKE_VERL_HOLD_FILE (step FAKE_VERL_HOLD_STEP, default 2, starts only once this file exists: a test acts mid-run on an
event, not after a guessed delay).
On a Ray cluster (`+ray_kwargs.ray_init.address=HOST:PORT`, as autotune's Ray executor passes it) it behaves as
verl's driver does there (verl/trainer/main_ppo.py run_ppo, verl/single_controller/ray/base.py): it joins that
cluster with `ray.init(**ray_kwargs.ray_init)` (namespace and runtime_env with env_vars and the setup hook; no
private Ray), starts a TaskRunnerV1 actor that asks verl's *real* ResourcePoolManager for its "global_pool" of
[trainer.n_gpus_per_node] * trainer.nnodes GPUs (one placement group per node), starts one worker actor per node in
those groups, and prints its step lines from the TaskRunnerV1 actor (Ray forwards them to the driver with its
"(TaskRunnerV1 pid=N, ip=...)" prefix); each step waits on every worker, so a worker lost with its node fails the run
with Ray's ActorDiedError, as verl's would. The FAKE_VERL_* knobs reach the actor through the runtime_env.
Never selectable by a user command: only tests pass it to VerlRunner(entry=...).
"""

from __future__ import annotations

import json
import os
import pprint
import signal
import subprocess
import sys
import time
from pathlib import Path

SHORT_RUN_KEYS = ("trainer.total_training_steps", "trainer.val_before_train", "trainer.test_freq",
                  "trainer.save_freq", "trainer.resume_mode", "trainer.logger", "trainer.experiment_name",
                  "actor_rollout_ref.rollout.max_model_len")
LOGGER_KEY = "ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH"
RAY_INIT_KEY = "ray_kwargs.ray_init."


VLLM_PRE = "(vLLMHttpServer pid=4101) (EngineCore pid=4242)"  # vLLM 0.24's engine inside verl's server actor
# vLLM 0.24's worker failing to start beside the resident actor, as the real log prints it (H100 2026-11-24,
# tests/data/real_verl_gpu/h100_2026-11-24/trial_0005/verl.log: Ray colours the server actor's prefix).
_WORKER_PRE = ("\x1b[36m(vLLMHttpServer pid=9632)\x1b[0m (Worker pid=10044) ERROR 11-24 00:53:22 "
               "[multiproc_executor.py:898]")
VLLM_WORKER_FAILED = [f"{_WORKER_PRE} {ln}" for ln in (
    "WorkerProc failed to start.",
    "Traceback (most recent call last):",
    '  File "/root/site/vllm/v1/executor/multiproc_executor.py", line 865, in worker_main',
    "    raise ValueError(",
    "ValueError: Free memory on device cuda:0 (72.43/79.18 GiB) on startup is less than desired GPU memory "
    "utilization (0.95, 75.22 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.",
)]
DATALOADER_TEARDOWN = (
    "Traceback (most recent call last):",
    '  File "/usr/lib/python3/site-packages/torch/utils/data/_utils/signal_handling.py", line 73, in handler',
    "    _error_if_any_worker_fails()",
    "RuntimeError: DataLoader worker (pid 51234) is killed by signal: Terminated.",
)


def typed(value: str) -> object:
    """An override's value as verl's resolved config holds it (Hydra's grammar, simplified)."""
    low = value.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("null", "none"):
        return None
    if value.startswith("[") and value.endswith("]"):
        return [typed(v.strip()) for v in value[1:-1].split(",") if v.strip()]
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            pass
    return value.strip("'")


def printed_config(ov: dict[str, str]) -> dict:
    """The part of verl's printed config that the overrides set, nested as verl prints it (its keys sorted)."""
    root: dict = {}
    for key, value in sorted(ov.items()):
        if key.startswith("ray_kwargs.") or "." not in key:
            continue
        node = root
        *parents, last = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = typed(value)
    return root


def _sibling(name: str):
    """A module next to this file (the double runs as a script, not as part of the tests package)."""
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.spec_from_file_location(f"fake_verl_{name}", os.path.join(here, f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def parse_overrides(argv: list[str]) -> dict[str, str]:
    out = {}
    for a in argv:
        if "=" in a:
            k, v = a.split("=", 1)
            out[k.lstrip("+")] = v
    return out


def throughput(ov: dict[str, str]) -> float:
    """The double's steady-state tokens/s/GPU for a candidate: a fixed, made-up function of the layout."""
    g = lambda k, d: int(ov.get(k, d)) if ov.get(k, "null") not in ("null", "None") else d  # noqa: E731
    tp = g("actor_rollout_ref.actor.megatron.tensor_model_parallel_size", 1)
    pp = g("actor_rollout_ref.actor.megatron.pipeline_model_parallel_size", 1)
    rtp = g("actor_rollout_ref.rollout.tensor_model_parallel_size", 2)
    full = ov.get("actor_rollout_ref.actor.megatron.override_transformer_config.recompute_granularity") == "full"
    dyn = ov.get("actor_rollout_ref.actor.use_dynamic_bsz") == "true"
    thr = 2000.0 / (1 + 0.1 * (tp - 1) + 0.15 * (pp - 1) + 0.05 * abs(rtp - 2))
    return round(thr * (0.8 if full else 1.0) * (1.1 if dyn else 1.0), 3)


# A step from 2 on that compiled a graph anew runs slower: lease 59's cold first trial ran its step 3 (update 15.2 s
# against 7.7 s) at 5,592.9 tokens/s/GPU against 7,379.6 at step 2.
RECOMPILE_SLOWDOWN = 0.76


def recompile_steps() -> list[str]:
    return os.environ.get("FAKE_VERL_RECOMPILE_STEPS", "1").split(",")


def step_throughput(ov: dict[str, str], step: int, mode: str) -> float:
    warm = 0.6 if step == 1 else 1.0
    jitter = float(os.environ.get("FAKE_VERL_STEP_JITTER", "0"))  # later steps alternate: odd -j, even +j
    noise = 1.0 if step == 1 else 1.0 + (jitter if step % 2 == 0 else -jitter)
    compiled = RECOMPILE_SLOWDOWN if step > 1 and str(step) in recompile_steps() else 1.0
    return round(throughput(ov) * warm * noise * compiled * (0.3 if mode == "slow" else 1.0), 3)


def choose_mode(ov: dict[str, str]) -> str:
    if os.environ.get("FAKE_VERL_MODE"):
        return os.environ["FAKE_VERL_MODE"]
    for rule in json.loads(os.environ.get("FAKE_VERL_RULES", "[]")):
        if all(ov.get(k) == str(v) for k, v in rule["when"].items()):
            return rule["mode"]
    return "ok"


# The Megatron worker's warning at a backward through a newly traced graph, Ray's colour on its prefix
# (tests/data/real_verl_gpu/h100_2026-12-06_l59/c-1.5b-h59_trial_0000/verl.log, step 3)
RETRACED_WARNING = (
    "\x1b[36m(WorkerDict pid=3312)\x1b[0m /opt/torch/.venv/lib/python3.12/site-packages/torch/autograd/graph.py:869: "
    "UserWarning: "
    "c10d::broadcast_: an autograd kernel was not registered to the Autograd key(s) but we are trying to backprop "
    "through it. This may lead to silently incorrect behavior. This behavior is deprecated and will be removed in a "
    "future version of PyTorch. If your operator is differentiable, please ensure you have registered an autograd "
    "kernel to the correct Autograd key (e.g. DispatchKey::Autograd, DispatchKey::CompositeImplicitAutograd). If your "
    "operator is not differentiable, or to squash this warning and use the previous behavior, please register "
    "torch::CppFunction::makeFallthrough() to DispatchKey::Autograd. (Triggered internally at "
    "/pytorch/torch/csrc/autograd/autograd_not_implemented_fallback.cpp:76.)",
    "\x1b[36m(WorkerDict pid=3312)\x1b[0m   return Variable._execution_engine.run_backward(  # Calls into the C++ "
    "engine to run the backward pass",
)


def out(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def hydra_fail(argv: list[str], lines: list[str]) -> None:
    """Hydra's report of an exception (HYDRA_FULL_ERROR=1): its own line first, then the traceback and error."""
    out(f"Error executing job with overrides: {argv!r}")
    for ln in lines:
        out(ln)
    sys.exit(1)


def ray_init_kwargs(ov: dict[str, str]) -> dict:
    """What verl's run_ppo prints before ray.init: its default runtime env merged with +ray_kwargs.ray_init.*."""
    env_vars = {"TOKENIZERS_PARALLELISM": "true", "NCCL_DEBUG": "WARN", "VLLM_LOGGING_LEVEL": "WARN",
                "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "true", "VLLM_DISABLE_COMPILE_CACHE": "1"}
    kwargs: dict = {"num_cpus": None, "runtime_env": {"env_vars": env_vars, "working_dir": None,
                                                      "py_executable": None}}
    for key, value in ov.items():
        if key.startswith(RAY_INIT_KEY):
            name = key[len(RAY_INIT_KEY):]
            if name.startswith("runtime_env.env_vars."):
                env_vars[name.rsplit(".", 1)[1]] = value
            elif "." not in name:
                kwargs[name] = {"false": False, "true": True}.get(value, value)
    return kwargs


def task_error(exc: str, task_pid: int) -> str:
    """The driver's line for an exception raised in TaskRunnerV1.run (Ray colours the task name, also in a file)."""
    return (f"ray.exceptions.RayTaskError({exc}): \x1b[36mray::TaskRunnerV1.run()\x1b[39m (pid={task_pid}, "
            f"ip=10.0.0.1, actor_id=dd72be70500ec01ddfcd3ba001000000, repr=<main_ppo.TaskRunnerV1 object at "
            "0x7f618d726310>)")


def spawn_sleeper(new_session: bool = False, new_group: bool = False, ignore_term: bool = False) -> int:
    code = ("import signal,time\n" + ("signal.signal(signal.SIGTERM, signal.SIG_IGN)\n" if ignore_term else "")
            + "while True: time.sleep(0.5)\n")
    p = subprocess.Popen([sys.executable, "-c", code], start_new_session=new_session,
                         process_group=0 if new_group and not new_session else None,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return p.pid


def unquote(value: str) -> str:
    return value[1:-1] if len(value) >= 2 and value[0] == value[-1] == "'" else value


def on_ray_cluster(argv: list[str], ov: dict[str, str], address: str) -> None:
    """verl's run_ppo against an existing cluster: ray.init(address=...), TaskRunnerV1.run in an actor."""
    import ray

    prefix = "ray_kwargs.ray_init.runtime_env."
    env_vars = {k[len(prefix + "env_vars."):]: unquote(v) for k, v in ov.items() if k.startswith(prefix + "env_vars.")}
    env_vars.update({k: v for k, v in os.environ.items() if k.startswith("FAKE_VERL_")})  # the double's knobs
    runtime_env: dict = {"env_vars": env_vars}
    if ov.get(prefix + "worker_process_setup_hook"):
        runtime_env["worker_process_setup_hook"] = unquote(ov[prefix + "worker_process_setup_hook"])
    kwargs = {"address": address, "namespace": ov.get("ray_kwargs.ray_init.namespace"), "runtime_env": runtime_env}
    out(f"ray init kwargs: {kwargs}")
    ray.init(**kwargs)
    runner = ray.remote(num_cpus=1)(TaskRunnerV1).remote()
    try:
        ray.get(runner.run.remote(argv))
    except ray.exceptions.RayError as e:
        out("Traceback (most recent call last):")
        out('  File "/usr/lib/python3/site-packages/verl/trainer/main_ppo.py", line 93, in run_ppo')
        out("    ray.get(runner.run.remote(config))")
        for ln in str(e).splitlines()[:12]:
            out(ln)
        out(f"Error executing job with overrides: {argv!r}")
        sys.exit(1)
    sys.exit(0)


class _Worker:
    """One rank per node of the pool (verl starts one per GPU; one per node is enough to be lost with its node)."""

    def step(self, n: int) -> int:
        return n


class TaskRunnerV1:
    def run(self, argv: list[str]) -> None:
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
        from verl.single_controller.ray.base import ResourcePoolManager

        ov = parse_overrides(argv)
        gpn, nnodes = int(ov["trainer.n_gpus_per_node"]), int(ov.get("trainer.nnodes", "1"))
        mgr = ResourcePoolManager(resource_pool_spec={"global_pool": [gpn] * nnodes}, mapping={})
        mgr.create_resource_pool()  # verl's own check of the cluster's free GPUs runs here
        pgs = mgr.resource_pool_dict["global_pool"].get_placement_groups()
        workers = [ray.remote(num_cpus=1, num_gpus=1)(_Worker).options(
            scheduling_strategy=PlacementGroupSchedulingStrategy(placement_group=pg, placement_group_bundle_index=0)
        ).remote() for pg in pgs]
        out(f"resource pool global_pool: {nnodes} x {gpn} GPUs in placement groups "
            f"{[pg.id.hex()[:12] for pg in pgs]}")
        if choose_mode(ov) == "leak_actor":  # a detached actor: Ray does not end it with the job (a leaked worker)
            leak = ray.remote(num_cpus=0)(_Worker).options(name=f"leak-{os.getpid()}", lifetime="detached").remote()
            ray.get(leak.step.remote(0))
        try:
            train(argv, ov, choose_mode(ov), pre="", children=[],
                  barrier=lambda step: ray.get([w.step.remote(step) for w in workers]))
        except SystemExit as e:  # the local double's exits: 0 ends the run, anything else fails it as verl's would
            if e.code not in (0, None):
                raise RuntimeError(f"TaskRunnerV1.run failed (exit {e.code})") from None


def main(argv: list[str]) -> None:
    t_main = time.time()
    ov = parse_overrides(argv)
    mode = choose_mode(ov)
    env_path = os.environ.get("VERL_FILE_LOGGER_PATH")
    missing = [k for k in SHORT_RUN_KEYS if k not in ov]
    if ov.get("model_engine") != "megatron" or ov.get("algorithm.adv_estimator") != "grpo" or missing \
            or ov.get(LOGGER_KEY) != env_path or ov.get("trainer.logger") != "[console,file]":
        hydra_fail(argv, [f"FAKE_VERL_ARGV_ERROR: not a short autotune trial command (missing {missing}, "
                          f"logger path {ov.get(LOGGER_KEY)!r} vs env {env_path!r})"])
    if mode == "ignore_sigterm":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    address = ov.get("ray_kwargs.ray_init.address")
    if address and address != "local":
        on_ray_cluster(argv, ov, address)
    children = [spawn_sleeper(), spawn_sleeper()]  # "gcs_server", "raylet": same session, same group
    if mode == "leave_child":  # escapes the process group / the session, and ignores SIGTERM
        children += [spawn_sleeper(new_group=True, ignore_term=True), spawn_sleeper(new_session=True,
                                                                                     ignore_term=True)]
    cache_env = {k: os.environ[k] for k in ("VLLM_CACHE_ROOT", "VLLM_DISABLE_COMPILE_CACHE", "TORCHINDUCTOR_CACHE_DIR",
                                             "TRITON_CACHE_DIR", "HF_DATASETS_CACHE", "CUDNN_PATH",
                                             "PYTHONPYCACHEPREFIX", "PYTHONDONTWRITEBYTECODE") if k in os.environ}
    if os.environ.get("FAKE_VERL_RECORD"):
        with open(os.environ["FAKE_VERL_RECORD"], "a") as f:
            f.write(json.dumps({"pid": os.getpid(), "pgid": os.getpgid(0), "children": children, "mode": mode,
                                "cwd": os.getcwd(), "argv": argv, "env": cache_env}) + "\n")
    # vLLM keeps its torch.compile artifacts under VLLM_CACHE_ROOT unless VLLM_DISABLE_COMPILE_CACHE=1 (verl's own
    # runtime env sets it to 1 for every worker unless the launching environment has it)
    if cache_env.get("VLLM_CACHE_ROOT") and cache_env.get("VLLM_DISABLE_COMPILE_CACHE", "1") != "1":
        compiled = Path(cache_env["VLLM_CACHE_ROOT"]) / "torch_compile_cache" / "fake"
        compiled.mkdir(parents=True, exist_ok=True)
        (compiled / "graph.py").write_text("# compiled\n")
    task_pid = children[1]
    pre = f"\x1b[36m(TaskRunnerV1 pid={task_pid})\x1b[0m"  # Ray colours the actor prefix, also in a file
    train(argv, ov, mode, pre, children, t_main=t_main)


def train(argv: list[str], ov: dict[str, str], mode: str, pre: str, children: list[int], t_main: float = 0.0,
          barrier=None) -> None:
    """The run after Ray is up: start-up noise, failures by mode, step lines, the JSONL file."""
    env_path = os.environ.get("VERL_FILE_LOGGER_PATH")
    total = int(ov["trainer.total_training_steps"])
    step_s = float(os.environ.get("FAKE_VERL_STEP_S", "0.02"))
    fail_step = int(os.environ.get("FAKE_VERL_FAIL_STEP", "2"))
    t_main = t_main or time.time()
    task_pid = children[1] if len(children) > 1 else os.getpid()
    if barrier is None:  # verl's own local Ray (on a cluster, ray.init prints its own lines)
        out(f"ray init kwargs: {ray_init_kwargs(ov)}")
        out("2026-01-01 00:00:00,000\tINFO worker.py:2038 -- Started a local Ray instance.")

    if mode == "config_error":
        hydra_fail(argv, [
            "Traceback (most recent call last):",
            '  File "/usr/lib/python3/site-packages/hydra/_internal/config_loader_impl.py", line 389, in '
            "_apply_overrides_to_config",
            "    OmegaConf.update(cfg, key, value, merge=True)",
            "omegaconf.errors.ConfigKeyError: Key 'grad_offload' is not in struct",
            "    full_key: actor_rollout_ref.actor.megatron.grad_offload",
            "    object_type=dict",
            "hydra.errors.ConfigCompositionException: Could not override "
            "'actor_rollout_ref.actor.megatron.grad_offload'.",
            "To append to your config use +actor_rollout_ref.actor.megatron.grad_offload=True",
        ])
    time.sleep(float(os.environ.get("FAKE_VERL_STARTUP_S", "0.05")))
    for ln in pprint.pformat(printed_config(ov)).split("\n"):  # TaskRunnerV1.run: pprint of the resolved config
        out(f"{pre} {ln}")
    if mode == "no_gpus":  # verl on a machine without GPUs (tests/data/real_verl_cpu.log): data loaded, then this
        out(f"{pre} Using dataset class: RLHFDataset")
        out(f"{pre} dataset len: 32")
        want = int(ov.get("trainer.n_gpus_per_node", "8")) * int(ov.get("trainer.nnodes", "1"))
        hydra_fail(argv, [
            "Traceback (most recent call last):",
            '  File "/usr/lib/python3/site-packages/verl/trainer/main_ppo.py", line 93, in run_ppo',
            "    ray.get(runner.run.remote(config))",
            task_error("ValueError", task_pid),
            '  File "/usr/lib/python3/site-packages/verl/single_controller/ray/base.py", line 240, in '
            "_check_resource_available",
            "    raise ValueError(",
            f"ValueError: Total available GPUs 0 is less than total desired GPUs {want}",
        ])
    if mode == "crash_once" and not os.path.exists("fake_verl_crashed_once"):
        open("fake_verl_crashed_once", "w").close()
        mode = "crash"
    elif mode == "crash_once":
        mode = "ok"
    if mode == "hang":  # a placement group that never becomes ready
        while True:
            out("(autoscaler +30s) Warning: The following resource request cannot be scheduled right now: "
                "{'GPU': 1.0, 'CPU': 3.0}. This is likely due to all cluster resources being claimed by actors.")
            time.sleep(1.0)
    # TaskRunnerV1's start-up (verl/trainer/main_ppo.py), as the real log prints it (tests/data/real_verl_gpu/)
    out(f"{pre} INFO:2026-01-01 00:00:01,000:create worker group dict_keys(['actor_rollout'])")
    out(f"{pre} INFO:2026-01-01 00:00:02,000:actor and ref model engine initialized")
    if mode == "vllm_start_hang":  # vLLM's worker fails to start; the driver keeps waiting (real log, H100 2026-11-24)
        for ln in VLLM_WORKER_FAILED:
            out(ln)
        while True:
            time.sleep(1.0)
    if mode == "vllm_start_oom":  # the same start failure, after which verl exits
        hydra_fail(argv, [
            *VLLM_WORKER_FAILED,
            "ray.exceptions.RayTaskError(RuntimeError): ray::vLLMHttpServer.launch_server() (pid=9632)",
            "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
        ])
    if mode == "kv_cache":
        hydra_fail(argv, [
            f"{VLLM_PRE} ERROR 01-01 00:00:11 [core.py:708] EngineCore failed to start.",
            f"{VLLM_PRE} ValueError: To serve at least one request with the models's max seq len "
            "(10240), (1.31 GiB KV cache is needed, which is larger than the available KV cache memory (0.55 GiB). "
            "Based on the available memory, the estimated maximum model length is 4288. Try increasing "
            "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.",
            "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
        ])
    out(f"{pre} INFO:2026-01-01 00:00:03,000:checkpoint engine manager initialized")
    out(f"{pre} INFO:2026-01-01 00:00:03,000:all initialize finished, ready to fit")
    if os.environ.get("FAKE_VERL_FILE_LOGGER", "1") == "1":
        out(f"{pre} Creating file logger at {os.path.abspath(env_path)}")
        jsonl = open(env_path, "wb", buffering=0)
    else:
        jsonl = None
    out(f"{pre} Training Progress:   0%|          | 0/{total} [00:00<?, ?it/s]")
    for step in range(1, total + 1):
        if mode == "rollout_loop" and step == 2:
            while True:
                out(f"{pre} [AgentLoopManager] pending: 12, failure: 3, retrying")
                time.sleep(0.2)
        if step == int(os.environ.get("FAKE_VERL_HOLD_STEP", "2")) and os.environ.get("FAKE_VERL_HOLD_FILE"):
            while not os.path.exists(os.environ["FAKE_VERL_HOLD_FILE"]):
                time.sleep(0.1)
        if mode == "hang_after_step" and step == 2:
            while True:  # an NCCL collective that never returns
                time.sleep(1.0)
        if step == fail_step:
            failure(mode, argv, pre)
        if mode == "late_oom" and step == 5:  # fine at the measured step, out of memory later
            failure("gpu_oom", argv, pre)
        if mode == "early_exit" and step == 2:
            out(f"{pre} Training Progress: 100%|##########| 1/1")
            sys.exit(0)
        time.sleep(step_s)
        if barrier is not None:
            barrier(step)  # every rank of the pool takes part in a step
        if ov.get("global_profiler.tool", "null") != "null":  # verl's profiler on: its traces (profiled.py)
            profiled = _sibling("profiled")
            if profiled.requested(ov, step):
                profiled.write_traces(argv, ov, step)
        if str(step) in recompile_steps():
            for ln in RETRACED_WARNING:
                out(ln)
        thr = step_throughput(ov, step, mode)
        t_step = 4096.0 / thr
        metrics = {
            "training/global_step": step, "training/epoch": 0,
            "actor/pg_loss": -0.0123, "actor/grad_norm": 0.51, "critic/score/mean": 0.25,
            # Responses grow as training goes on, as in real GRPO runs.
            "response_length/mean": 712.4 + 50 * step, "response_length/max": 1800.0 + 400 * step,
            "prompt_length/mean": 310.5, "prompt_length/max": 1024.0,
            "actor/perf/max_memory_allocated_gb": 41.25 + step,
            "actor/perf/max_memory_reserved_gb": 52.0 + step, "actor/perf/cpu_memory_used_gb": 88.1,
            "timing_s/gen": t_step * 0.55, "timing_s/old_log_prob": t_step * 0.1, "timing_s/adv": t_step * 0.001,
            "timing_s/update_actor": t_step * 0.3, "timing_s/update_weights": t_step * 0.05,
            "timing_s/step": t_step, "perf/total_num_tokens": 4096 * 8, "perf/time_per_step": t_step,
            "perf/throughput": thr, "perf/mfu/actor": 0.31,
        }
        parts = [f"step:{step}"]
        for k, v in metrics.items():  # plain floats, as a real verl 0.9.1 run prints them (issue 15)
            parts.append(f"{k}:{v!r}")
        out(pre + " " + " - ".join(parts))
        if jsonl:
            jsonl.write(json.dumps({"step": step, "data": metrics}).encode() + b"\n")
        if step == total and os.environ.get("FAKE_VERL_RECORD"):  # for benchmarks: the double's own time
            with open(os.environ["FAKE_VERL_RECORD"], "a") as f:
                f.write(json.dumps({"pid": os.getpid(), "children": [], "own_s": time.time() - t_main,
                                    "t_main": t_main}) + "\n")
        out(f"{pre} Training Progress:  {100 * step // total}%|#####     | {step}/{total} [00:01<00:01, 1.0s/it]")
        if mode == "vllm_wakeup_oom" and step == 1:
            hydra_fail(argv, [
                "(WorkerDict pid=5151) CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:62",
                "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.",
            ])
    out(f"{pre} Training Progress: 100%|##########| {total}/{total} [00:01<00:00, 1.0s/it]")
    time.sleep(float(os.environ.get("FAKE_VERL_TEARDOWN_S", "3")))  # Ray shutting down its workers
    for ln in DATALOADER_TEARDOWN:  # torch's DataLoader workers killed as Ray shuts the actor down
        out(ln)
    for pid in children[:2]:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    sys.exit(0)


def failure(mode: str, argv: list[str], pre: str) -> None:
    if mode == "gpu_oom":
        hydra_fail(argv, [
            "Traceback (most recent call last):",
            '  File "/usr/lib/python3/site-packages/verl/trainer/main_ppo.py", line 94, in run_ppo',
            "    ray.get(runner.run.remote(config))",
            task_error("OutOfMemoryError", 1234),
            '  File "/usr/lib/python3/site-packages/verl/workers/engine_workers.py", line 344, in train_batch',
            "ray.exceptions.RayTaskError(OutOfMemoryError): ray::WorkerDict.actor_rollout_update_actor() "
            "(pid=5150, ip=10.0.0.1)",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.64 GiB. GPU 3 has a total capacity of "
            "79.11 GiB of which 2.19 GiB is free. Including non-PyTorch memory, this process has 76.90 GiB memory "
            "in use. Of the allocated memory 70.12 GiB is allocated by PyTorch, and 4.21 GiB is reserved by PyTorch "
            "but unallocated.",
            # the other ranks then time out in NCCL: the OOM must still be what is reported
            "[rank1]:[E101 00:10:00.000 ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog caught collective operation "
            "timeout: WorkNCCL(SeqNum=42, OpType=ALLREDUCE) ran for 600000 milliseconds before timing out.",
        ])
    if mode == "host_oom":
        hydra_fail(argv, [
            "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.",
            "Memory on the node (IP: 10.0.0.1, ID: 3f2a) where the task (actor ID: 9c1d, name=WorkerDict.__init__, "
            "pid=5152, memory used=120.50GB) was running was 480.12GB / 503.50GB (0.95356), which exceeds the memory "
            "usage threshold of 0.95. Ray killed this worker (ID: 77ab) because it was the most recently scheduled "
            "task; to see more information about memory usage on this node, use `ray logs raylet.out -ip 10.0.0.1`.",
        ])
    if mode == "nccl":
        hydra_fail(argv, [
            "ray.exceptions.RayTaskError(DistBackendError): ray::WorkerDict.actor_rollout_init_model() (pid=5153)",
            "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/"
            "ProcessGroupNCCL.cpp:3356, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL "
            "version 2.21.5",
            "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.",
        ])
    if mode == "crash":
        hydra_fail(argv, [
            "*** SIGSEGV received at time=1767225600 on cpu 3 ***",
            "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.",
            "\tclass_name: TaskRunnerV1",
            "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit "
            "detail: Worker unexpectedly exits with a connection error code 2. End of file.",
        ])
    if mode in ("import_error", "attention_backend", "tokenizer_error"):  # deterministic: the same on every try
        last = {
            "import_error": "ModuleNotFoundError: No module named 'transformer_engine'",
            "attention_backend": "ValueError: No dot product attention backend is available for the provided "
                                 "inputs. Please run with NVTE_DEBUG=1 NVTE_DEBUG_LEVEL=2 to find out the reasons "
                                 "for disabling all backends.",
            "tokenizer_error": "ValueError: Expected Qwen newline to tokenize to one token, got [12, 13]",
        }[mode]
        hydra_fail(argv, [
            "Traceback (most recent call last):",
            '  File "/usr/lib/python3/site-packages/verl/trainer/main_ppo.py", line 93, in run_ppo',
            "    ray.get(runner.run.remote(config))",
            task_error(last.split(":")[0], 1234),
            last,
        ])
    if mode == "sigkill":
        out(f"{pre} (raylet) killing nothing; the kernel is about to")
        os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    main(sys.argv[1:])
