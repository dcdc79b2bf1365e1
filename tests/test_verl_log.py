"""The verl log parser on every form of line verl (through Ray) prints, and the failure classifier."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.verl.log import (
    LineTail,
    RunLog,
    classify,
    is_recompile,
    parse_jsonl_record,
    parse_number,
    parse_step_line,
    recompiled_steps_in_stamps,
)


@pytest.mark.parametrize("text,value", [
    ("1234.5", 1234.5), ("-3", -3.0), ("1e-06", 1e-06), ("np.float64(12.25)", 12.25), ("np.int64(3)", 3.0),
    ("np.float32(0.5)", 0.5), ("True", 1.0), ("False", 0.0), ("nan", None), ("np.float64(nan)", None),
    ("inf", None), ("'text'", None),
])
def test_numbers_as_pprint_prints_them(text: str, value: float | None) -> None:
    assert parse_number(text) == value


def test_step_line_with_ray_actor_prefix_and_numpy_wrappers() -> None:
    line = ("(TaskRunnerV1 pid=1234) step:3 - actor/pg_loss:np.float64(-0.0123) - perf/throughput:1234.5 - "
            "timing_s/step:np.float64(12.25) - training/global_step:3 - perf/total_num_tokens:np.int64(32768) - "
            "val-core/openai/gsm8k/reward/mean@1:0.5")
    step, m = parse_step_line(line)
    assert step == 3
    assert m == {"actor/pg_loss": -0.0123, "perf/throughput": 1234.5, "timing_s/step": 12.25,
                 "training/global_step": 3.0, "perf/total_num_tokens": 32768.0,
                 "val-core/openai/gsm8k/reward/mean@1": 0.5}


@pytest.mark.parametrize("line", [
    "step:2 - perf/throughput:10.0",  # verl's LocalLogger without Ray (single-process runs)
    "(TaskRunner pid=99) step:2 - perf/throughput:10.0",  # legacy trainer (trainer.use_v1=False)
    "(TaskRunnerV1 pid=99, ip=10.0.0.2) step:2 - perf/throughput:10.0",  # actor on another node
    "\x1b[36m(TaskRunnerV1 pid=99)\x1b[0m step:2 - perf/throughput:10.0",  # Ray colours on a terminal
    "(TaskRunnerV1 pid=99) step:2 - perf/throughput:10.0 [repeated 2x across cluster]",  # Ray's deduplication
    "Training Progress:  33%|###  | 1/3\r(TaskRunnerV1 pid=99) step:2 - perf/throughput:10.0\r",
])
def test_step_line_variants(line: str) -> None:
    assert parse_step_line(line) == (2, {"perf/throughput": 10.0})


@pytest.mark.parametrize("line", [
    "(TaskRunnerV1 pid=1) Training Progress:  33%|###  | 1/3",
    "(WorkerDict pid=5) INFO: step:3 reached",
    "ray init kwargs: {'num_cpus': None}",
    "(TaskRunnerV1 pid=1) Creating file logger at /x.jsonl",
    "",
])
def test_other_lines_are_not_steps(line: str) -> None:
    assert parse_step_line(line) is None


def test_step_zero_validation_metrics_are_not_training_steps(tmp_path: Path) -> None:
    log = tmp_path / "verl.log"
    log.write_text("(TaskRunnerV1 pid=1) step:0 - val-core/x/reward/mean@1:0.3\n"
                   "(TaskRunnerV1 pid=1) step:1 - perf/throughput:5.0\n")
    run = RunLog(LineTail(log), LineTail(tmp_path / "none.jsonl"))
    assert run.poll() == [1]
    assert list(run.steps) == [1]


def test_jsonl_record_format_of_verl_file_logger() -> None:
    rec = json.dumps({"step": 4, "data": {"perf/throughput": 812.5, "timing_s/gen": 3, "flag": True,
                                          "note": "x", "bad": float("nan")}})
    assert parse_jsonl_record(rec) == (4, {"perf/throughput": 812.5, "timing_s/gen": 3.0, "flag": 1.0})
    assert parse_jsonl_record("not json") is None
    assert parse_jsonl_record(json.dumps({"step": "x", "data": {}})) is None


def test_tail_reads_only_whole_lines_and_follows_truncation(tmp_path: Path) -> None:
    f = tmp_path / "m.jsonl"
    tail = LineTail(f)
    assert tail.read() == []  # not created yet
    f.write_bytes(b"one\ntw")
    assert tail.read() == ["one"]
    with f.open("ab") as fh:
        fh.write(b"o\n")
    assert tail.read() == ["two"]
    f.write_bytes(b"new\n")  # verl's FileLogger opens with "wb": a retry truncates the file
    assert tail.read() == ["new"]
    with f.open("ab") as fh:
        fh.write(b"last")
    assert tail.flush() == ["last"]


def test_jsonl_values_win_over_console_values(tmp_path: Path) -> None:
    log, jl = tmp_path / "verl.log", tmp_path / "m.jsonl"
    log.write_text("(TaskRunnerV1 pid=1) step:1 - perf/throughput:np.float64(100.0) - only/console:1\n")
    jl.write_text(json.dumps({"step": 1, "data": {"perf/throughput": 100.25, "only/file": 2}}) + "\n")
    run = RunLog(LineTail(log), LineTail(jl))
    assert run.poll() == [1]
    assert run.steps[1] == {"perf/throughput": 100.25, "only/console": 1.0, "only/file": 2.0}


OOM_TRAIN = """ray.exceptions.RayTaskError(OutOfMemoryError): ray::WorkerDict.actor_rollout_update_actor() (pid=5150)
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.64 GiB. GPU 3 has a total capacity of 79.11 GiB
[rank1]:[E101 ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=42)
Error executing job with overrides: ['a=1']"""
OOM_IN_VLLM = """(EngineCore_DP0 pid=7) File "/x/vllm/v1/engine/core.py", line 80, in __init__
(EngineCore_DP0 pid=7) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.
RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"""


@pytest.mark.parametrize("text,kind,status", [
    (OOM_TRAIN, "gpu_oom", "oom"),
    (OOM_IN_VLLM, "vllm_start_oom", "oom"),
    ("ValueError: Free memory on device (30.12/79.11 GiB) on startup is less than desired GPU memory utilization "
     "(0.9, 71.2 GiB). Decrease GPU memory utilization", "vllm_start_oom", "oom"),
    ("ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`",
     "vllm_start_oom", "oom"),
    ("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.", "vllm_start_oom", "oom"),
    ("ValueError: To serve at least one request with the models's max seq len (10240), (1.31 GiB KV cache is "
     "needed, which is larger than the available KV cache memory (0.55 GiB).", "kv_cache_too_small", "oom"),
    ("CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:62", "vllm_wakeup_oom", "oom"),
    ("ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.", "host_oom", "oom"),
    ("ray.exceptions.ActorDiedError: The actor died because its worker was killed by SIGKILL by OOM killer",
     "host_oom", "oom"),
    ("torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:3356, unhandled system error",
     "nccl_error", "failed"),
    ("hydra.errors.ConfigCompositionException: Could not override 'actor_rollout_ref.actor.megatron.grad_offload'."
     "\nKey 'grad_offload' is not in struct", "config_error", "config_error"),
    ("  File \"/x/verl/utils/config.py\", line 109, in validate_config\nAssertionError: n_gpus (8) must be "
     "divisible by model_parallel_size (6) times context_parallel_size (1)", "config_error", "config_error"),
    ("ValueError: Total available GPUs 4 is less than total desired GPUs 8", "gpus_unavailable", "failed"),
    ("ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.", "crash", "failed"),
])
def test_classify_failures(text: str, kind: str, status: str) -> None:
    f = classify("some startup line\n" + text + "\nError executing job with overrides: []\n", 1)
    assert (f.kind, f.status) == (kind, status)
    assert f.excerpt and f.message


def test_oom_message_quotes_the_torch_line_not_the_ray_wrapper() -> None:
    f = classify(OOM_TRAIN, 1)
    assert "Tried to allocate 4.64 GiB" in f.message


def test_sigkill_from_outside_reads_as_host_oom_but_ours_does_not() -> None:
    assert classify("step line\n", -9).kind == "host_oom"
    assert classify("step line\n", -9, killed_by_us=True).kind == "crash"


def test_crash_reason_names_the_last_exception_not_hydras_wrapper() -> None:
    f = classify("KeyError: 'x'\nError executing job with overrides: ['a=1']\n", 1)
    assert f.kind == "crash" and "KeyError: 'x'" in f.message and "overrides" not in f.message


# --- Real-log shapes (issue 15: what a real verl 0.9.1 + vLLM 0.24 run on an H100 printed) --------------------------
VLLM = "(vLLMHttpServer pid=4101) (EngineCore pid=4388)"
STEP1 = "(TaskRunnerV1 pid=3000) step:1 - actor/pg_loss:-0.0123 - perf/throughput:310.5 - timing_s/adv:0.0123"
DATALOADER_TAIL = """(TaskRunnerV1 pid=3000) Training Progress: 100%|##########| 3/3 [00:15<00:00,  4.1s/it]
Traceback (most recent call last):
  File "/usr/lib/python3.12/site-packages/torch/utils/data/_utils/signal_handling.py", line 73, in handler
    _error_if_any_worker_fails()
RuntimeError: DataLoader worker (pid 51234) is killed by signal: Terminated.
"""


def test_a_clean_finish_with_a_dataloader_traceback_is_not_a_crash() -> None:
    text = STEP1 + "\n" + STEP1.replace("step:1", "step:3") + "\n" + DATALOADER_TAIL
    f = classify(text, 0)
    assert f.kind == "early_exit" and f.kind != "crash"
    # the same teardown noise under a real crash is never given as its reason
    f = classify("KeyError: 'x'\n" + DATALOADER_TAIL, 1)
    assert f.kind == "crash" and "KeyError: 'x'" in f.message and "DataLoader" not in f.message


def test_two_vllm_prefixes_are_read_as_a_vllm_process() -> None:
    text = (f"{VLLM} INFO 11-23 20:05:01 [gpu_worker.py:300] Available KV cache memory: 20.5 GiB\n"
            f"{VLLM} ERROR 11-23 20:05:02 [core.py:708] EngineCore failed to start.\n"
            f"{VLLM} torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 12.00 GiB.\n")
    assert classify(text, 1).kind == "vllm_start_oom"
    f = classify(f"{VLLM} KeyError: 'layers.0'\nsome line\n", 1)
    assert "KeyError: 'layers.0'" in f.message  # the last error line is found behind two prefixes


EARLY_STEP1_OOM = f"""(TaskRunnerV1 pid=3000) Training Progress:   0%|          | 0/3 [00:00<?, ?it/s]
{VLLM} INFO 11-23 20:06:10 [block_pool.py:321] Successfully reset prefix cache
{VLLM} INFO 11-23 20:06:12 [gpu_model_runner.py:2810] sleep mode freed 60.20 GiB memory
Traceback (most recent call last):
ray.exceptions.RayTaskError(OutOfMemoryError): ray::WorkerDict.actor_rollout_compute_log_prob() (pid=3500)
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 23.19 GiB. GPU 0 has a total capacity of 79.19 GiB
{VLLM} INFO 11-23 20:06:13 [core.py:1000] shutting down
"""


def test_an_oom_early_in_step_one_is_trainings_though_vllm_lines_are_near() -> None:
    f = classify(EARLY_STEP1_OOM, 1)
    assert (f.kind, f.status) == ("gpu_oom", "oom")
    # no training frame in the traceback: the trainer's loop had begun, so vLLM's start was over
    f = classify(EARLY_STEP1_OOM.replace("actor_rollout_compute_log_prob", "run"), 1)
    assert f.kind == "gpu_oom"
    # the same OOM printed by vLLM's own engine once training began: the rollout's
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 23.19 GiB."
    text = EARLY_STEP1_OOM.replace(oom, f"{VLLM} {oom}").replace("actor_rollout_compute_log_prob", "generate")
    assert classify(text, 1).kind == "rollout_oom"


def test_coloured_repeated_suffix_is_accepted() -> None:
    line = ("\x1b[36m(TaskRunnerV1 pid=99)\x1b[0m step:2 - perf/throughput:10.0"
            "\x1b[2m [repeated 2x across cluster]\x1b[0m")
    assert parse_step_line(line) == (2, {"perf/throughput": 10.0})


@pytest.mark.parametrize("tail,kind", [
    ("ModuleNotFoundError: No module named 'flash_attn'", "import_error"),
    ("(WorkerDict pid=5) ImportError: cannot import name 'ModelType' from 'megatron.core.enums'", "import_error"),
    ("OSError: /x/libtransformer_engine.so: undefined symbol: cublasLtGroupedMatrixLayoutInit_internal",
     "import_error"),
    ("(WorkerDict pid=5) ValueError: No dot product attention backend is available for the provided inputs. "
     "Please run with NVTE_DEBUG=1 NVTE_DEBUG_LEVEL=2 to find out the reasons for disabling all backends.",
     "attention_backend_unavailable"),
    ("ValueError: Expected Qwen newline to tokenize to one token, got [5, 6]", "tokenizer_error"),
    # H100, 2026-11-24, verl 0.9.1 step 1 with attention_backend=fused (TE 2.12, cuDNN 9.19; the line as TE raises it)
    ("(WorkerDict pid=5) RuntimeError: /TransformerEngine/transformer_engine/common/fused_attn/"
     "fused_attn_f16_arbitrary_seqlen.cu:414 in function operator(): cuDNN Error: CUDNN_BACKEND_TENSOR_DESCRIPTOR "
     "cudnnFinalize failed", "attention_backend_error"),
])
def test_deterministic_environment_failures_have_their_own_class(tail: str, kind: str) -> None:
    warnings_at_start = ("(TaskRunnerV1 pid=1) UserWarning: megatron engine is not available: "
                         "ModuleNotFoundError(\"No module named 'megatron'\")\n")
    f = classify(warnings_at_start + "Traceback (most recent call last):\n" + tail + "\n", 1)
    assert (f.kind, f.status) == (kind, "failed")
    assert f.message and tail.split(": ")[-1][:20] in f.message


def test_import_warnings_at_start_do_not_make_a_crash_an_import_error() -> None:
    text = ("ModuleNotFoundError: No module named 'torchtitan'\n" + "(TaskRunnerV1 pid=1) noise\n" * 400
            + "*** SIGSEGV received at time=1 on cpu 3 ***\n")
    assert classify(text, 1).kind == "crash"


def test_the_real_cpu_log_reads_as_gpus_unavailable_not_an_import_error() -> None:
    text = (Path(__file__).parent / "data" / "real_verl_cpu.log").read_text()
    f = classify(text, 1)
    assert f.kind == "gpus_unavailable"


def test_an_oom_after_vllm_reported_ready_is_not_vllms_start() -> None:
    ready = f"{VLLM} INFO 11-23 20:05:40 [gpu_model_runner.py:4100] Graph capturing finished in 12 secs, took 0.9 GiB\n"
    oom = ("(WorkerDict pid=3500) EngineCore pid=1 left a note\n"
           "(WorkerDict pid=3500) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n")
    assert classify(oom, 1).kind == "vllm_start_oom"  # vLLM's engine near, never ready: its start
    assert classify(ready + oom, 1).kind == "gpu_oom"


REAL = Path(__file__).parent / "data" / "real_verl_gpu"


@pytest.mark.parametrize(("trial", "steps"), [
    ("h100_2026-12-06_l59/c-1.5b-h59_trial_0000", (1, 3)),  # update 18.8, 7.7, 15.2 s at steps 1-3 (cold caches)
    ("h100_2026-12-06_l59/c-1.5b-h59_trial_0001", (1,)),  # warm: 17.0, 16.4, 17.5 s
    ("h200_2026-11-28_l46/c-0.5b-h35_trial_0000", (1, 2, 3)),  # cold: 12.2, 13.4, 5.6 s at steps 2-4
    ("h200_2026-11-28_l47/c-0.5b-h40_trial_0000", (1, 3)),  # cold: 5.3, 10.7, 5.6 s at steps 2-4
])
def test_the_steps_a_real_worker_traced_a_new_graph_in(trial: str, steps: tuple[int, ...]) -> None:
    """Read back from real verl's time-stamped consoles: the worker's backward warning returns in the steps whose
    update ran long (a recompile), and in step 1 of every trial."""
    text = (REAL / trial / "verl.ts.log").read_text(errors="replace")
    assert recompiled_steps_in_stamps(text) == steps


@pytest.mark.slow
def test_a_recompile_that_compiles_anew_brings_the_warning_back_and_one_the_caches_serve_does_not(
        tmp_path: Path) -> None:
    """Why the marker is the worker's warning, from the real torch (Inductor, on the CPU): a recompile for a new shape
    that compiles anew resets Python's once-per-place record of printed warnings, so a warning the process printed
    before prints again (what the real workers' backward warning shows in the steps that recompiled, above); run
    again on the caches the first run filled, Dynamo recompiles for the same shape (its own line, TORCH_LOGS),
    Inductor's caches serve it and the warning stays silent: Dynamo's line would name cheap recompiles too."""
    src = """
import sys, warnings, torch
def warn(tag):
    warnings.warn("the worker's warning")
    print("after", tag, file=sys.stderr)
@torch.compile
def f(x):
    return torch.nn.functional.silu(x).sum()
for tag, n in (("first", 64), ("new shape", 48), ("seen shape", 80)):
    f(torch.ones(n, 32, requires_grad=True)).backward()
    warn(tag)
    warn(tag + ", again")
"""
    env = {**os.environ, "TORCH_LOGS": "recompiles", "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
           "TRITON_CACHE_DIR": str(tmp_path / "triton")}

    def run() -> list[str]:
        done = subprocess.run([sys.executable, "-c", src], env=env, capture_output=True, text=True, timeout=600,
                              cwd=tmp_path)
        assert done.returncode == 0, done.stderr[-2000:]
        seen = []
        for line in done.stderr.splitlines():
            if "Recompiling function" in line:
                seen.append("recompiled")
            elif "the worker's warning" in line and "UserWarning" in line:
                seen.append("printed")
            elif line.startswith("after "):
                seen.append(line.removeprefix("after "))
        return seen

    assert run() == ["printed", "first", "first, again", "recompiled", "printed", "new shape", "new shape, again",
                     "seen shape", "seen shape, again"]  # cold caches: the recompile compiled anew
    assert run() == ["printed", "first", "first, again", "recompiled", "new shape", "new shape, again",
                     "seen shape", "seen shape, again"]  # warm: the same recompile, served by the caches
    assert not any(is_recompile(ln) for ln in (REAL / "h100_2026-12-06_l59/c-1.5b-h59_trial_0001/verl.ts.log")
                   .read_text(errors="replace").splitlines()[:1100])  # its start-up, before step 1's backward


def test_a_recompile_costs_less_on_warm_caches_on_the_lent_h100() -> None:
    """benchmarks/recompile_cost.py on the lent H100 (torch 2.11, Inductor): the SwiGLU's first compile and its
    recompile for a new token count each took 2.9-3.9x longer on empty compile caches than on the caches the first
    run left; one recompile in each run (the warm one too: served by the caches); the third count, dynamic by then,
    compiled nothing."""
    for name in ("recompile_cost_h100.json", "recompile_cost_h100_small.json"):
        doc = json.loads((Path(__file__).parent.parent / "benchmarks" / "results" / name).read_text())
        assert doc["device"].startswith("NVIDIA H100") and doc["backend"] == "inductor"
        cold, warm = ([c["s"] for c in doc[k]["calls"]] for k in ("cold", "warm"))
        assert doc["cold"]["recompiles"] == doc["warm"]["recompiles"] == 1
        assert cold[0] > 2.5 * warm[0] and cold[1] > 3 * warm[1] and max(cold[2], warm[2]) < 0.01


@pytest.mark.slow
def test_the_recompile_benchmark_runs_on_a_cpu(capsys: pytest.CaptureFixture[str]) -> None:
    """The script's smoke (aot_eager on the CPU): a cold and a warm run, each its calls and one recompile."""
    from benchmarks import recompile_cost

    recompile_cost.main(["--backend", "aot_eager", "--hidden", "64", "--tokens", "16,8,24"])
    doc = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [c["tokens"] for c in doc["cold"]["calls"]] == [16, 8, 24] and doc["warm"]["recompiles"] == 1
