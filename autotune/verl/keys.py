"""The verl mapping: every verl 0.9.1 config key, metric name and launch argument autotune uses, written once.

Keys were read off verl 0.9.1's `verl/trainer/config/_generated_ppo_megatron_trainer.yaml`; the reference model
inherits the actor's Megatron layout there through `oc.select`, so only the actor's layout keys are written.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

VERL_VERSION = "0.9.1"
# verl's flattened Megatron trainer config (its every key), relative to the verl package: what a job may name.
CONFIG_REFERENCE = "trainer/config/_generated_ppo_megatron_trainer.yaml"
ENTRY = ("python", "-m", "verl.trainer.main_ppo")
# Arguments every Megatron GRPO launch carries unless the job sets them itself.
BASE_ARGS: dict[str, Any] = {
    "model_engine": "megatron",
    "algorithm.adv_estimator": "grpo",
    "actor_rollout_ref.rollout.name": "vllm",
}

_ACTOR = "actor_rollout_ref.actor"
_MEGATRON = f"{_ACTOR}.megatron"
_TRANSFORMER = f"{_MEGATRON}.override_transformer_config"
_ROLLOUT = "actor_rollout_ref.rollout"
_REF = "actor_rollout_ref.ref"
_OPTIM_OVERRIDE = f"{_ACTOR}.optim.override_optimizer_config"

# Search-space parameter -> the verl keys it sets (the first is the one read from a job file).
PARAM_KEYS: dict[str, tuple[str, ...]] = {
    "tp": (f"{_MEGATRON}.tensor_model_parallel_size",),
    "pp": (f"{_MEGATRON}.pipeline_model_parallel_size",),
    "vpp": (f"{_MEGATRON}.virtual_pipeline_model_parallel_size",),
    "cp": (f"{_MEGATRON}.context_parallel_size",),
    "ep": (f"{_MEGATRON}.expert_model_parallel_size",),
    "etp": (f"{_MEGATRON}.expert_tensor_parallel_size",),
    "sequence_parallel": (f"{_MEGATRON}.sequence_parallel",),
    "recompute": (f"{_TRANSFORMER}.recompute_granularity",),
    "recompute_method": (f"{_TRANSFORMER}.recompute_method",),
    "recompute_num_layers": (f"{_TRANSFORMER}.recompute_num_layers",),
    "recompute_modules": (f"{_TRANSFORMER}.recompute_modules",),
    "use_dynamic_bsz": (f"{_ACTOR}.use_dynamic_bsz",),
    "ppo_max_token_len_per_gpu": (f"{_ACTOR}.ppo_max_token_len_per_gpu",),
    "log_prob_max_token_len_per_gpu": (
        f"{_ROLLOUT}.log_prob_max_token_len_per_gpu",
        f"{_REF}.log_prob_max_token_len_per_gpu",
    ),
    "ppo_micro_batch_size_per_gpu": (f"{_ACTOR}.ppo_micro_batch_size_per_gpu",),
    "log_prob_micro_batch_size_per_gpu": (
        f"{_ROLLOUT}.log_prob_micro_batch_size_per_gpu",
        f"{_REF}.log_prob_micro_batch_size_per_gpu",
    ),
    "rollout_tp": (f"{_ROLLOUT}.tensor_model_parallel_size",),
    "gpu_memory_utilization": (f"{_ROLLOUT}.gpu_memory_utilization",),
    "max_num_batched_tokens": (f"{_ROLLOUT}.max_num_batched_tokens",),
    "param_offload": (f"{_MEGATRON}.param_offload",),
    "optimizer_offload": (f"{_MEGATRON}.optimizer_offload",),
    # The reference model's own offload; verl's default follows the actor's param_offload (ref/megatron_ref.yaml).
    "ref_param_offload": (f"{_REF}.megatron.param_offload",),
    "use_fused_kernels": ("actor_rollout_ref.model.use_fused_kernels",),
    # Megatron's CPU optimizer: OptimizerConfig fields that verl 0.9.1 passes through optim.override_optimizer_config
    # (utils/megatron/optimizer.py init_megatron_optim_config), an empty mapping in verl's config, hence Hydra's
    # `++` (add or override). IMPLIED_KEYS below go with it.
    "optimizer_cpu_offload": (f"++{_OPTIM_OVERRIDE}.optimizer_cpu_offload",),
    "optimizer_offload_fraction": (f"++{_OPTIM_OVERRIDE}.optimizer_offload_fraction",),
}

# What a knob turned on brings with it (knob -> {verl key: value}), written only when the knob is on: the CPU
# optimizer runs with its copies overlapped under the CPU step and with the precision-aware optimizer (the fp32
# master then lives only on the CPU), as verl_megatron_practice's large runs set them.
IMPLIED_KEYS: dict[str, dict[str, Any]] = {
    "optimizer_cpu_offload": {
        f"++{_OPTIM_OVERRIDE}.overlap_cpu_optimizer_d2h_h2d": True,
        f"{_ACTOR}.optim.use_precision_aware_optimizer": True,
    },
}

# Keys autotune sets for the node's software when the job does not (runners/verl.py, from `autotune doctor`):
# verl 0.9.1 builds Megatron models with Megatron-Bridge unless vanilla_mbridge (the legacy mbridge package), and
# its Megatron attention backend defaults to `flash` (megatron.yaml), which needs the flash-attn package.
VANILLA_MBRIDGE = f"{_MEGATRON}.vanilla_mbridge"
ATTENTION_BACKEND = f"{_TRANSFORMER}.attention_backend"
ATTENTION_BACKEND_DEFAULT = "flash"
# The GPU-node stack the verl runner was run with (distribution -> version; the whole set, with why, is
# constraints/gpu-node-torch2.11.txt, and pyproject's `gpu` extra installs it). `autotune doctor` checks these.
GPU_STACK: dict[str, str] = {
    "verl": VERL_VERSION,
    "torch": "2.11.0",
    "vllm": "0.24.0",
    "megatron-core": "0.19.2",
    "mbridge": "0.15.1",
    "transformer-engine": "2.12.0",
    "transformer-engine-torch": "2.12.0",
    "transformers": "5.9.0",
    "tokenizers": "0.22.2",
    "transferqueue": "0.1.10",
}
# verl 0.9.1's own requirement on transformers (its wheel's metadata): outside it verl does not work.
TRANSFORMERS_RANGE = ("5.5.3", "5.11")  # >= first, < second
# Transformer Engine from this version on needs cublasLtGroupedMatrixLayoutInit_internal, absent from torch 2.11's
# cuBLAS (nvidia-cublas 13.1.0.3): it does not load.
TE_TOO_NEW_FOR_TORCH_2_11 = "2.13"

# Keys of the job that autotune reads (never tunes: they change the training itself).
TRAIN_BATCH_SIZE = "data.train_batch_size"
MAX_PROMPT_LENGTH = "data.max_prompt_length"
MAX_RESPONSE_LENGTH = "data.max_response_length"
ROLLOUT_N = f"{_ROLLOUT}.n"
PPO_MINI_BATCH_SIZE = f"{_ACTOR}.ppo_mini_batch_size"
PPO_EPOCHS = f"{_ACTOR}.ppo_epochs"
USE_KL_LOSS = f"{_ACTOR}.use_kl_loss"
USE_KL_IN_REWARD = "algorithm.use_kl_in_reward"
MODEL_PATH = "actor_rollout_ref.model.path"
MAX_MODEL_LEN = f"{_ROLLOUT}.max_model_len"
MAX_NUM_SEQS = f"{_ROLLOUT}.max_num_seqs"
ENFORCE_EAGER = f"{_ROLLOUT}.enforce_eager"
# verl 0.9.1's rollout.yaml default: vLLM captures CUDA graphs for decode (verl 0.4-era runs, such as
# verl_megatron_practice's tables, ran eagerly). Memory (the graph pool) and decode time (per-step overhead) read it.
ENFORCE_EAGER_DEFAULT = False
# verl 0.9.1 runs the V1 trainer by default (ppo_trainer.yaml `trainer.use_v1: true`; verl 0.4-era runs had none).
# Its step takes the rollout from a ReplayBuffer whose sample() checks for a finished batch every 2 s
# (trainer/ppo/v1/replay_buffer.py `poll_interval`, which trainer_base.py never passes from the config), and
# timing_s/gen times that sample(): every gen of the real trials is 2k s + 0.06-0.28 s (tests/test_real_verl_gpu.py).
USE_V1 = "trainer.use_v1"
USE_V1_DEFAULT = True
SAMPLE_POLL_S = 2.0
ROPE_FUSION = f"{_TRANSFORMER}.apply_rope_fusion"  # Megatron's fused RoPE kernel
FREE_CACHE_ENGINE = f"{_ROLLOUT}.free_cache_engine"  # [True]: vLLM sleeps (frees weights and KV) outside rollout
# Weight resharding sends the actor's weights to vLLM in GPU buckets of this size [2048 MiB].
UPDATE_WEIGHTS_BUCKET_MB = f"{_ROLLOUT}.checkpoint_engine.update_weights_bucket_megabytes"
PROMPT_KEY = "data.prompt_key"  # [prompt]: the parquet column holding the prompt
ROLLOUT_NAME = f"{_ROLLOUT}.name"
N_GPUS_PER_NODE = "trainer.n_gpus_per_node"
NNODES = "trainer.nnodes"
TRAIN_FILES = "data.train_files"
VAL_FILES = "data.val_files"

# What defines the training itself; a search space may not name these, or any key below these prefixes.
TRAINING_SEMANTICS: dict[str, str] = {
    "train_batch_size": TRAIN_BATCH_SIZE,
    "ppo_mini_batch_size": PPO_MINI_BATCH_SIZE,
    "rollout_n": ROLLOUT_N,
    "n": ROLLOUT_N,
    "max_prompt_length": MAX_PROMPT_LENGTH,
    "max_response_length": MAX_RESPONSE_LENGTH,
    "ppo_epochs": PPO_EPOCHS,
    "lr": f"{_ACTOR}.optim.lr",
    "learning_rate": f"{_ACTOR}.optim.lr",
    "use_kl_loss": USE_KL_LOSS,
    "kl_loss_coef": f"{_ACTOR}.kl_loss_coef",
    "entropy_coeff": f"{_ACTOR}.entropy_coeff",
    "clip_ratio": f"{_ACTOR}.clip_ratio",
    "loss_agg_mode": f"{_ACTOR}.loss_agg_mode",
    "temperature": f"{_ROLLOUT}.temperature",
    "adv_estimator": "algorithm.adv_estimator",
}
TRAINING_SEMANTIC_PREFIXES = (f"{_ACTOR}.optim.", "algorithm.", "data.", "reward")
# What an imported run's job is (`autotune import`, verl/runs.py): its workload and training, read from verl's
# printed config; a run whose values differ from the study's job is refused. Paths are kept, never compared.
IMPORT_PATH_KEYS = (MODEL_PATH, TRAIN_FILES, VAL_FILES)
IMPORT_JOB_KEYS: tuple[str, ...] = tuple(dict.fromkeys((
    *IMPORT_PATH_KEYS, TRAIN_BATCH_SIZE, MAX_PROMPT_LENGTH, MAX_RESPONSE_LENGTH, ROLLOUT_N, PPO_MINI_BATCH_SIZE,
    PPO_EPOCHS, USE_KL_LOSS, USE_KL_IN_REWARD, MAX_MODEL_LEN, MAX_NUM_SEQS, ENFORCE_EAGER, FREE_CACHE_ENGINE,
    ROPE_FUSION, *TRAINING_SEMANTICS.values(),
)))
# What the node ran besides the tuned knobs and the workload; a study made from imported runs keeps it in its job
# where all its runs agree (the estimates read it: unfused attention's scores).
IMPORT_SETTING_KEYS: tuple[str, ...] = (ATTENTION_BACKEND,)

# Metrics (verl/trainer/ppo/metric_utils.py), one step's dict as the console and file loggers print it.
M_THROUGHPUT = "perf/throughput"
M_TIME_PER_STEP = "perf/time_per_step"
M_TOTAL_TOKENS = "perf/total_num_tokens"
M_MFU_ACTOR = "perf/mfu/actor"
M_MAX_MEM_ALLOCATED = "actor/perf/max_memory_allocated_gb"
M_MAX_MEM_RESERVED = "actor/perf/max_memory_reserved_gb"
M_CPU_MEM_USED = "actor/perf/cpu_memory_used_gb"
# Sequence lengths of the step's batch (compute_data_metrics), tokens.
M_RESPONSE_LENGTH_MEAN = "response_length/mean"
M_RESPONSE_LENGTH_MAX = "response_length/max"
M_PROMPT_LENGTH_MEAN = "prompt_length/mean"
M_PROMPT_LENGTH_MAX = "prompt_length/max"
LENGTH_METRICS = (M_RESPONSE_LENGTH_MEAN, M_RESPONSE_LENGTH_MAX, M_PROMPT_LENGTH_MEAN, M_PROMPT_LENGTH_MAX)
# Phase -> timing metric (seconds).
PHASE_TIMINGS: dict[str, str] = {
    "step": "timing_s/step",
    "gen": "timing_s/gen",
    "old_log_prob": "timing_s/old_log_prob",
    "ref": "timing_s/ref",
    "adv": "timing_s/adv",
    "update_actor": "timing_s/update_actor",
    "update_weights": "timing_s/update_weights",
}


def keys_for(param: str) -> tuple[str, ...]:
    return PARAM_KEYS[param]


def param_for_key(key: str) -> str | None:
    """The search-space parameter that sets a verl key (the key may carry Hydra's '+' or '++' prefix)."""
    key = key.lstrip("+")
    for param, keys in PARAM_KEYS.items():
        if key in (k.lstrip("+") for k in keys):
            return param
    return None


def format_value(value: Any) -> str:
    """A value as Hydra's override grammar reads it back (null, true/false, [a,b], quoted strings)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(format_value(v) for v in value) + "]"
    text = str(value)
    if text and all(c.isalnum() or c in "_-./:@$%~" for c in text) and text.lower() not in ("null", "true", "false"):
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def override(key: str, value: Any) -> str:
    return f"{key}={format_value(value)}"


# ---------------------------------------------------------------------------------------------------------------
# verl runner facts (autotune/runners/verl.py): short trials, log formats, failure messages. verl 0.9.1.
# ---------------------------------------------------------------------------------------------------------------
TOTAL_TRAINING_STEPS = "trainer.total_training_steps"
EXPERIMENT_NAME = "trainer.experiment_name"
PROJECT_NAME = "trainer.project_name"
# A short trial: no validation, no checkpoints, no resume, console + JSONL file loggers (no wandb).
SHORT_RUN: dict[str, Any] = {
    "trainer.val_before_train": False,
    "trainer.test_freq": -1,
    "trainer.save_freq": -1,
    "trainer.resume_mode": "disable",
    "trainer.logger": ["console", "file"],
}
# verl/utils/tracking.py FileLogger: this variable, else ${VERL_FILE_LOGGER_ROOT:-.}/<project>/<experiment>.jsonl;
# the file is opened "wb" (truncated) and gets one `{"step": N, "data": {...}}` line per logged step.
FILE_LOGGER_ENV = "VERL_FILE_LOGGER_PATH"
# verl/trainer/constants_ppo.py PPO_RAY_RUNTIME_ENV sets VLLM_DISABLE_COMPILE_CACHE=1 for every Ray worker (vLLM then
# compiles its graphs anew in every run, ~30-60 s of each start-up) unless the launching environment sets the
# variable: get_ppo_ray_runtime_env drops the keys os.environ already has. The corruption it works around was
# concurrent, non-atomic writes of Inductor artifacts, which torch >= 2.10 writes atomically (vLLM 0.24 pins 2.11).
VLLM_COMPILE_CACHE_OFF_ENV = "VLLM_DISABLE_COMPILE_CACHE"
# The caches a trial's processes fill that the next trial of the same node can reuse (variable -> sub-folder):
# vLLM's torch.compile artifacts, Inductor's and Triton's kernels, Hugging Face datasets' prepared Arrow files.
SHARED_CACHE_ENV: dict[str, str] = {
    "VLLM_CACHE_ROOT": "vllm",
    "TORCHINDUCTOR_CACHE_DIR": "inductor",
    "TRITON_CACHE_DIR": "triton",
    "HF_DATASETS_CACHE": "datasets",
}
# Python's own: set, the first forbids writing bytecode; the second writes it under a folder of its own instead of
# beside each module (autotune.verl.caches.bytecode_cache).
NO_BYTECODE_ENV = "PYTHONDONTWRITEBYTECODE"
BYTECODE_PREFIX_ENV = "PYTHONPYCACHEPREFIX"
# verl/trainer/main_ppo.py run_ppo: `ray.init(**config.ray_kwargs.ray_init)` when Ray is not up yet. These keys
# are not in verl's config, so they need Hydra's `+`.
RAY_INIT_PREFIX = "+ray_kwargs.ray_init."
RAY_ENV_VAR_PREFIX = "+ray_kwargs.ray_init.runtime_env.env_vars."
# Console logger (verl/utils/logger/aggregate_logger.py concat_dict_to_str): "step:N - key:pformat(value) - ...",
# numbers only; printed inside the TaskRunnerV1 Ray actor, so the driver's stdout shows Ray's prefix
# "(TaskRunnerV1 pid=123)" (", ip=..." on other nodes; ANSI-coloured, also into a file) and numpy scalars print as
# np.float64(x). Ray's log deduplication may append " [repeated 2x across cluster]".
# The suffix is dimmed (ANSI) like the prefix is coloured: the parser strips ANSI codes before matching. Several
# prefixes may stand in front of a line (vLLM's engine inside verl's server actor prints
# "(vLLMHttpServer pid=N) (EngineCore pid=M) ..."); a step line has one.
STEP_LINE_RE = (
    r"^(?:\((?P<actor>[A-Za-z_][\w.]*) pid=(?P<pid>\d+)(?:, ip=[^)]*)?\)\s+)*"
    r"step:(?P<step>\d+)(?P<rest>(?: - \S+)*)\s*(?:\[repeated \d+x across cluster\])?\s*$"
)
# Ray's prefix of a line another process printed: "(Name pid=N)" or "(Name pid=N, ip=...)", maybe several.
RAY_PREFIX_RE = r"\((?P<actor>[A-Za-z_][\w.]*) pid=\d+(?:, ip=[^)]*)?\)"
NUMPY_SCALAR_RE = r"^np\.(?:float|int|uint)\d*\((?P<value>[^()]*)\)$"
# Training steps are numbered from 1 (step 0 carries validation metrics only).
FIRST_STEP = 1

# Start-up milestones of a run, in the order they happen: the runner notes when each first shows in the console
# (seconds after launch; the trial's timings), which is what start-up time (and its budget) is made of. Checked
# against real verl 0.9.1 logs, times included (tests/test_real_verl_gpu.py). The driver validates the config
# before it starts Ray; TaskRunnerV1 (verl/trainer/main_ppo.py) prints the resolved config, creates the worker
# group (Megatron actor and ref), inits their engines (weights loaded), starts the vLLM servers and the checkpoint
# engine, then says it is ready to fit. vLLM's own INFO lines (KV cache, graphs) show only where the job raises
# VLLM_LOGGING_LEVEL above verl's WARN.
STARTUP_MILESTONES: dict[str, str] = {
    "validated": r"\[validate_config\] All configuration checks passed",
    "ray_up": r"Started a local Ray instance|Connected to Ray cluster",
    "config": r"\{'actor_rollout_ref': \{",
    "workers": r":create worker group dict_keys\(",
    "weights_loaded": r":actor and ref model engine initialized",
    "vllm_kv_cache": r"GPU KV cache size: [\d,]+ tokens",
    "vllm_graphs": r"Graph capturing finished in",
    "vllm_ready": r":all initialize finished, ready to fit",
    "first_step": r"(?:^|\s)step:1 - ",
}
# A step in which a verl worker compiled a graph anew (torch.compile meeting a new shape: Megatron-core's fused
# functions and verl's compiled ones, whose first shapes are static and whose next recompile them as dynamic): the
# backward's warning the Megatron worker prints again. A recompile that compiles anew (Inductor's caches miss) resets
# Python's record of warnings already printed; one the caches serve does not, and costs little
# (tests/test_verl_log.py shows both with the real torch). Dynamo's own "Recompiling function" line (TORCH_LOGS) is
# no marker: it is printed for the cheap ones too. In the committed real trials the warning came back in every step
# whose update ran 1.5x or more the trial's fastest (23 of 23), in a step from 2 on of 32 of 62 studies' first trials
# (compile caches cold) and of 7 of 138 later trials (benchmarks/results/trial_cost.md).
RECOMPILE_MARKERS: tuple[str, ...] = (
    r"c10d::broadcast_: an autograd kernel was not registered to the Autograd key",
)
# How the timeline names each milestone (autotune/results/timeline.py).
MILESTONE_LABELS: dict[str, str] = {
    "validated": "config validated", "ray_up": "Ray up", "config": "config resolved", "workers": "workers up",
    "weights_loaded": "weights loaded", "vllm_kv_cache": "vLLM KV cache", "vllm_graphs": "vLLM graphs captured",
    "vllm_ready": "vLLM ready (ready to fit)", "first_step": "step 1 in",
}

HOST_OOM = "host_oom"  # a failure kind (the trial's extra["failure"]): the host's memory, not the GPU's
# Failure classes, most specific first; each: (class, autotune status, regexes over the log). The first class with
# a match wins, so an OOM on one rank followed by NCCL errors on the others reads as the OOM.
FAILURE_PATTERNS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    # verl/single_controller/ray/base.py ResourcePoolManager._check_resource_available, raised inside the
    # TaskRunnerV1 actor once Ray is up and the data is loaded: the Ray cluster has fewer GPUs than
    # trainer.n_gpus_per_node x trainer.nnodes (no GPU at all on a CPU machine: "Total available GPUs 0").
    # Not the candidate's fault (every candidate asks for the same GPUs): failed, not retried, never pruned.
    ("gpus_unavailable", "failed", (r"Total available GPUs \d+ is less than total desired GPUs \d+",)),
    ("config_error", "config_error", (
        r"ConfigCompositionException", r"OverrideParseException", r"Could not override '",
        r"Could not append to config", r"Key '[^']+' is not in struct", r"MissingConfigException",
        r"^In '[^']+': Could not find '[^']+'",
        r", in validate_config\b",
        r"must be divisible by (?:minimal possible batch size|model_parallel_size)",
    )),
    ("kv_cache_too_small", "oom", (
        r"KV cache is needed, which is larger than the available KV cache memory",
        r"max seq len \(\d+\).*larger than the available KV cache",
    )),
    ("vllm_start_oom", "oom", (
        r"Free memory on device .* on startup is less than desired GPU memory utilization",
        r"No available memory for the cache blocks",
        r"Not enough memory\. Please try to increase --mem-fraction-static",  # SGLang
    )),
    ("vllm_wakeup_oom", "oom", (r"CUDA Error: out of memory at .*cumem_allocator",)),
    # Before gpu_oom: Ray's memory monitor raises its own `OutOfMemoryError`, which the driver prints as
    # `RayTaskError(OutOfMemoryError)` like torch's (H200, 2026-11-26: three 7B trials with the optimizer on a
    # 128 GiB host, tests/data/real_verl_gpu/h200_2026-11-26_l9).
    (HOST_OOM, "oom", (
        r"ray\.exceptions\.OutOfMemoryError", r"Task was killed due to the node running low on memory",
        r"killed by SIGKILL by OOM killer", r"Memory on the node .* was \d+(?:\.\d+)?GB used / \d+(?:\.\d+)?GB",
        r"Memory on the node .* was \d+(?:\.\d+)?GB / \d+(?:\.\d+)?GB",
    )),
    ("gpu_oom", "oom", (
        r"torch\.(?:cuda\.)?OutOfMemoryError", r"CUDA out of memory\. Tried to allocate",
        r"RayTaskError\((?:torch\.)?(?:cuda\.)?OutOfMemoryError\)",
    )),
    # Deterministic failures of the environment, the model or its tokenizer: never retried (runners/verl.py
    # RETRYABLE); read from the end of the log only (libraries print caught import errors as warnings at start).
    # Transformer Engine's attention: verl's default backend `flash` needs the flash-attn package
    # (transformer_engine/pytorch/attention/dot_product_attention/dot_product_attention.py).
    ("attention_backend_unavailable", "failed", (r"No dot product attention backend is available",)),
    # TE's fused (cuDNN) attention offered, then failing in cuDNN at step 1 (H100, cuDNN 9.19 + TE 2.12, 2026-11-24:
    # "fused_attn_f16_arbitrary_seqlen.cu:414 ... CUDNN_BACKEND_TENSOR_DESCRIPTOR cudnnFinalize failed").
    ("attention_backend_error", "failed", (
        r"fused_attn[\w/.]*\.cu:\d+.*(?:cuDNN|CUDNN)", r"CUDNN_BACKEND_\w+ cudnnFinalize failed",
    )),
    # verl/utils/tokenizer/continuous_token.py (0.9.1): chat-template checks on the model's tokenizer.
    ("tokenizer_error", "failed", (
        r"Expected \w+ newline to tokenize to one token", r"Tokenizer does not define required token",
        r"Tokenizer returned (?:multiple|invalid) ids? for required token", r"to tokenize to at least one token",
        r"Can't load tokenizer for",
    )),
    ("import_error", "failed", (
        r"^(?:\([^)]*\)\s*)*(?:[\w.]+\.)?(?:ModuleNotFoundError|ImportError): ",
        r"RayTaskError\((?:ModuleNotFoundError|ImportError)\)",
        r"undefined symbol: \w+",
    )),
    ("nccl_error", "failed", (
        r"NCCL error", r"ncclInternalError", r"ncclSystemError", r"ncclUnhandledCudaError",
        r"Watchdog caught collective operation timeout", r"NCCL communicator was aborted",
        r"ProcessGroupNCCL.*(?:timeout|Timeout|abort)",
    )),
    # A Python error in the stack's code, e.g. mbridge 0.15.1 vs megatron-core 0.19 (H100, 2026-11-24:
    # "AttributeError: type object 'ModelType' has no attribute 'encoder_and_decoder'"): the same on every retry.
    ("software_error", "failed", (
        r"^(?:\([^)]*\)\s*)*(?:[\w.]+\.)?(?:AttributeError|TypeError|NameError|NotImplementedError): ",
        r"RayTaskError\((?:AttributeError|TypeError|NameError|NotImplementedError)\)",
    )),
)
# Classes matched only in the last lines of a log (the final exception), not in warnings printed at start.
FINAL_ERROR_CLASSES = (
    "attention_backend_unavailable", "attention_backend_error", "tokenizer_error", "import_error", "software_error",
)
FINAL_ERROR_LINES = 300
# A vLLM engine that died while starting: a torch OOM under it is the rollout's, not the trainer's.
# Lines after which a run cannot reach its first step, whatever it does next: vLLM's engine failed to start. verl
# does not always exit then (its driver may keep waiting on the rollout server): the runner stops the run once it
# has had FATAL_GRACE_S to exit by itself, and classifies the log as if it had.
FATAL_LINE_PATTERNS = (
    r"WorkerProc failed to start", r"Engine core initialization failed", r"EngineDeadError",
    r"Free memory on device .* on startup is less than desired GPU memory utilization",
    r"No available memory for the cache blocks",
    r"KV cache is needed, which is larger than the available KV cache memory",
)
FATAL_GRACE_S = 30.0
VLLM_START_MARKERS = (r"Engine core initialization failed", r"EngineCore", r"EngineDeadError", r"vllm/v1/engine")
# Lines printed by vLLM's own processes (Ray prefixes; vLLM 0.24 under verl 0.9.1 prints two, the server actor's and
# the engine core's: "(vLLMHttpServer pid=N) (EngineCore pid=M)"; older vLLM "(EngineCore_DP0 pid=M)").
VLLM_PROCESS_RE = r"\((?:vLLMHttpServer|EngineCore(?:_DP\d+)?|AsyncLLM|LLMEngine|APIServer)\w* pid=\d+"
# The trainer's loop has begun (verl/trainer/ppo/v1/trainer_base.py fit(): its tqdm bar is made after every worker
# and the rollout servers started), or a training step was logged: vLLM's start is over.
TRAINING_STARTED_RE = r"Training Progress:|(?:^|\) )step:\d+ - "
# vLLM reported its engine ready (its KV cache sized, CUDA graphs captured): a torch OOM after this, outside vLLM's
# own processes, is not vLLM's start.
VLLM_READY_RE = r"Graph capturing finished in|init engine \(profile, create kv cache, warmup model\) took"
# Frames of the training side (the actor's/ref's Megatron passes): a torch OOM under one is the trainer's.
TRAINING_FRAMES_RE = (
    r"update_actor|train_batch|compute_log_prob|compute_ref_log_prob|forward_backward|update_policy|"
    r"megatron/core/pipeline_parallel|engine/megatron/transformer_impl"
)
# Printed after the last step of a run that finished (exit code 0): torch's DataLoader workers are killed as Ray
# shuts the trainer's actor down. Not a failure, and never the reason of one.
BENIGN_AFTER_FINISH = (
    r"DataLoader worker \(pid\(?s?\)? ?[\d, ]+\) (?:is killed by signal|exited unexpectedly)",
)
# The rollout keeps retrying failed requests and prints this forever: only the stall watchdog ends it.
ROLLOUT_FAILURE_LOOP_RE = r"pending: \d+, failure: \d+"
# verl's own values (_generated_ppo_megatron_trainer.yaml) of the job-shape keys, for a launch script that leaves
# them out: the script runs with these, not with autotune's typical job.
VERL_JOB_DEFAULTS: dict[str, Any] = {
    TRAIN_BATCH_SIZE: 1024,
    MAX_PROMPT_LENGTH: 512,
    MAX_RESPONSE_LENGTH: 512,
    PPO_MINI_BATCH_SIZE: 256,
    ROLLOUT_N: 1,
}
# verl/single_controller/ray/base.py (0.9.1): ResourcePoolManager(max_colocate_count=3) makes one RayResourcePool
# "global_pool" of [trainer.n_gpus_per_node] * trainer.nnodes; its get_placement_groups() creates one placement group
# per node of n_gpus_per_node bundles {"CPU": max_colocate_count, "GPU": 1}, STRICT_PACK, and returns `self.pgs`
# when already set; ResourcePoolManager._check_resource_available() compares the cluster's *available* GPUs with the
# pool's. The Ray executor reserves exactly these groups and hands them to verl (autotune/verl/ray_hook.py).
RAY_POOL_BUNDLE_CPU = 3
RAY_POOL_STRATEGY = "STRICT_PACK"
RAY_POOL_MODULE = "verl.single_controller.ray.base"
# Ray runtime_env keys set through ray_kwargs.ray_init (Hydra '+' keys, as above).
RAY_SETUP_HOOK_KEY = RAY_INIT_PREFIX + "runtime_env.worker_process_setup_hook"
RAY_NAMESPACE_KEY = RAY_INIT_PREFIX + "namespace"
RAY_ADDRESS_KEY = RAY_INIT_PREFIX + "address"
# In verl's config (null: Ray counts the node's CPUs); ray.init refuses it when it joins a running cluster, so the
# verl runner's kept Ray head takes the job's value instead (autotune/runners/node/ray_head.py).
RAY_NUM_CPUS = "ray_kwargs.ray_init.num_cpus"

# ---------------------------------------------------------------------------------------------------------------
# verl's profiler (verl/utils/profiler/, trainer/config/_generated_ppo_megatron_trainer.yaml; verl 0.9.1), as
# `autotune profile` turns it on. There is no step_start/step_end in 0.9.1: `global_profiler.steps` lists the RL steps.
# ---------------------------------------------------------------------------------------------------------------
PROFILER_TOOL = "global_profiler.tool"  # [null]: torch | nsys | npu | torch_memory | precision_debugger
PROFILER_STEPS = "global_profiler.steps"  # [null]: RL steps (from 1) profiled, each in its own window
PROFILER_SAVE_PATH = "global_profiler.save_path"  # [outputs/profile]: every role and rank writes into it, flat
PROFILER_CONTINUOUS = "global_profiler.profile_continuous_steps"  # [false]: one window over consecutive steps
# Per role (`<prefix>.enable`, `.all_ranks`, `.ranks`, `.tool_config.torch.contents`, `.tool_config.torch.discrete`,
# `.relocate_results`). The colocated actor/rollout/ref worker reads the actor's (workers/engine_workers.py:
# ActorRolloutRefWorker.__init__), a separate reference worker the ref's (its `enable` is false, not the actor's),
# the vLLM servers the rollout's (workers/rollout/vllm_rollout/vllm_async_server.py), and those profile only in
# discrete mode (`_should_profile`: enable, this replica's rank, and tool_config.torch.discrete).
PROFILER_ROLES = {"actor": f"{_ACTOR}.profiler", "ref": f"{_REF}.profiler", "rollout": f"{_ROLLOUT}.profiler"}
PROFILER_ENABLE = "enable"
PROFILER_ALL_RANKS = "all_ranks"
PROFILER_CONTENTS = "tool_config.torch.contents"  # [] = cpu and cuda activity; also memory, shapes, stack
PROFILER_DISCRETE = "tool_config.torch.discrete"  # false: one trace per worker and step; true: one per stage
PROFILER_RELOCATE = "relocate_results"  # rollout: move the engine's traces from its sub-folder up into save_path
# The rollout's engine iterations traced (vLLM's max_iterations = end - start; null: the whole rollout).
PROFILER_ROLLOUT_ITERATIONS = "tool_config.torch.profile_token_end"
# Update mini-batches kept (torch.profiler.schedule over them, the earlier stages kept whole; 0: every mini-batch).
PROFILER_UPDATE_MINI_BATCHES = "tool_config.torch.schedule.active"

# Where the traces land (utils/profiler/torch_profile.py build_trace_basename / get_torch_profiler): one gzipped
# chrome trace per worker process and profiled step, flat in save_path,
#   <worker role>_<scope>_step<N>_rank<R>[-of-<W>][_tp<t>-pp<p>-dp<d>-cp<c>]_pid<P>_<timestamp>[_part<k>].json.gz
# every part passed through `[^0-9A-Za-z.=+-]+ -> "-"` (so the worker role "actor_rollout" is "actor-rollout"); the
# scope is "train" (trainer/ppo/v1/trainer_base.py _start_profiling: start_profile(role="train")) or, in discrete
# mode, the stage; the parallel ranks come from Megatron's parallel_state.
TRACE_NAME_RE = (
    r"^(?:(?P<head>(?!step\d+_|rank\d)[0-9A-Za-z.=+-]+(?:_(?!step\d+_|rank\d)[0-9A-Za-z.=+-]+)?)_)?"
    r"(?:step(?P<step>\d+)_)?rank(?P<rank>\d+)"
    r"(?:-of-(?P<world>\d+))?(?:_(?P<parallel>(?:tp|pp|dp|cp)\d+(?:-(?:tp|pp|dp|cp)\d+)*))?_pid(?P<pid>\d+)"
    r"_(?P<stamp>\d+)(?:_(?:part\d+|mb\d+(?:-\d+)?))?\.json(?:\.gz)?$"
)
# The stages verl marks with record_function inside that trace (workers/engine_workers.py DistProfiler.annotate
# roles), as the phase names of PHASE_TIMINGS; update mini-batches are "mini_batch<i>" inside actor_update.
PROFILE_STAGES = {
    "actor_compute_log_prob": "old_log_prob",
    "ref_compute_log_prob": "ref",
    "actor_update": "update_actor",
}
# The rollout: vLLM's own torch profiler (verl's build_vllm_profiler_args), one trace per GPU of a profiled replica in
# <save_path>/agent_loop_rollout_replica_<r>/ (utils/profiler/config.py rollout_trace_dir), named by vLLM
# (`...rank<k>...pt.trace.json[.gz]`, its tensor-parallel rank), or with relocate_results moved up into save_path as
# rollout-replica<r>[-globalrank<g>]_<vLLM's name> (relocate_rollout_traces). Its whole window is the phase "gen".
ROLLOUT_TRACE_DIR_PREFIX = "agent_loop_rollout_replica_"
ROLLOUT_RELOCATED_RE = r"^rollout-replica(?P<replica>\d+)(?:-globalrank(?P<global>\d+))?_"
ROLLOUT_TRACE_RANK_RE = r"(?:^|[-_.])(?:rank[-_]?|TP-)(?P<rank>\d+)"
ROLLOUT_PHASE = "gen"
# Weight resharding (timing_s/update_weights) runs after the step's profiler stopped (trainer/ppo/v1/trainer_sync.py
# on_step_end, after trainer_base's _stop_profiling): no trace holds it.
UNPROFILED_PHASES = ("update_weights",)


# A job file or a run's printed config, nested as verl's YAML, as the dotted keys above --------------------------------
def flatten(mapping: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested YAML mappings to dotted verl keys; values that are lists stay values."""
    out: dict[str, Any] = {}
    for k, v in mapping.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping) and v:
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out
