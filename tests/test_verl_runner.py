"""The verl runner driven through the test double of verl's entry point (tests/fake_verl/main_ppo.py).

Every trial here launches a real process tree (the double and its children), watched, stopped and cleaned up by the
runner; what is faked is only verl itself (no GPU here).
"""

from __future__ import annotations

import dataclasses
import json
import py_compile
import signal
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from autotune import verl
from autotune.candidate import Candidate
from autotune.cluster import visible_gpus
from autotune.runners import RunnerUnavailable, make_runner, stopping
from autotune.runners.base import MeasuredThenInterrupted, RunnerFatal, TrialStatus
from autotune.runners.node.gpu_monitor import GpuMonitor
from autotune.runners.progress import TrialProgress
from autotune.runners.verl import VerlRunner, make_verl_runner
from autotune.verl.doctor import has_bytecode
from tests.conftest import make_setup
from tests.fake_verl import (
    ENTRY,
    env_for,
    fake_module,
    fake_runner,
    fast_options,
    launches,
    leftovers,
    make_spec,
    pid_alive,
    records,
)

FAKE = fake_module()


def run_mode(tmp_path: Path, mode: str, measure_step: int = 3, cand: Candidate | None = None, env: dict | None = None,
             **opts):
    rec = tmp_path / "rec.jsonl"
    runner = fake_runner(env_for(rec, FAKE_VERL_MODE=mode, **(env or {})), **opts)
    spec = make_spec(make_setup(), tmp_path, cand=cand, measure_step=measure_step)
    t0 = time.monotonic()
    res = runner.run(spec)
    return res, time.monotonic() - t0, rec, spec


def test_success_records_every_step_and_stops_early(tmp_path: Path) -> None:
    res, _, rec, spec = run_mode(tmp_path, "ok", env={"FAKE_VERL_TEARDOWN_S": "30"})
    assert res.status == TrialStatus.OK and not res.simulated
    ov = records(rec)[0]["argv"]
    expected = FAKE.step_throughput(FAKE.parse_overrides(ov), 3, "ok")
    assert res.throughput == pytest.approx(expected)
    assert [s["step"] for s in res.steps] == [1, 2, 3, 4]  # the measured step and one more (--extra-steps 1)
    assert res.steps[0][verl.M_THROUGHPUT] == pytest.approx(FAKE.step_throughput(FAKE.parse_overrides(ov), 1, "ok"))
    assert res.phase_timings["gen"] == pytest.approx(res.steps[2]["timing_s/gen"])
    assert res.framework_memory_gib == pytest.approx(45.25)  # max over steps 1-4 of actor/perf/max_memory_allocated_gb
    # the double would linger 30 s in "Ray shutdown" after its last step: the runner stopped it at the measured step
    # (timed from launch: the pre-flight's first import of verl, where installed, is not part of it)
    assert res.extra["timings"]["wall_s"] < 15 and res.extra["timings"]["measured_s"] <= res.extra["timings"]["wall_s"]
    assert leftovers(rec) == []
    # no GPU here: memory is None and the result says why
    assert res.peak_memory_gib is None and res.peak_memory_per_gpu_gib == ()
    assert "not measured" in res.extra["memory"]["nvml_note"]
    assert res.extra["memory"]["predicted_peak_gib"] == pytest.approx(spec.memory.peak / 2**30)


def test_command_is_the_export_argv_plus_short_run_overrides(tmp_path: Path) -> None:
    res, _, rec, spec = run_mode(tmp_path, "ok")
    r = records(rec)[0]
    ov = FAKE.parse_overrides(r["argv"])
    assert ov["trainer.total_training_steps"] == "4" and ov["trainer.val_before_train"] == "false"
    assert ov["trainer.logger"] == "[console,file]" and ov["trainer.resume_mode"] == "disable"
    assert ov["actor_rollout_ref.rollout.max_model_len"] == str(spec.job.max_seq_len)
    assert ov["ray_kwargs.ray_init.address"] == "local" and ov["ray_kwargs.ray_init._temp_dir"].startswith("/tmp/")
    assert ov["actor_rollout_ref.actor.megatron.tensor_model_parallel_size"] == "2"
    assert Path(r["cwd"]) == spec.workdir.resolve()
    from autotune.results.export import launch_argv

    exported = launch_argv(spec.job, spec.cluster, spec.candidate)[3:]
    assert all(a in r["argv"] for a in exported)  # the trial runs what `autotune export` writes
    cmd = json.loads((spec.workdir / "command.json").read_text())
    assert cmd["argv"][2:] == r["argv"]


def test_measured_window_is_averaged(tmp_path: Path) -> None:
    rec = tmp_path / "rec.jsonl"
    runner = fake_runner(env_for(rec, FAKE_VERL_MODE="ok"), measure_from=2)
    res = runner.run(make_spec(make_setup(), tmp_path, measure_step=4))
    ov = FAKE.parse_overrides(records(rec)[0]["argv"])
    steady = FAKE.step_throughput(ov, 2, "ok")
    assert res.throughput == pytest.approx(steady)
    assert "mean of steps 2-4" in res.reason and len(res.steps) == 5


@pytest.mark.parametrize("mode,status,kind,words", [
    ("gpu_oom", "oom", "gpu_oom", "Tried to allocate 4.64 GiB"),
    ("vllm_start_oom", "oom", "vllm_start_oom", "Free memory on device"),
    ("vllm_wakeup_oom", "oom", "vllm_wakeup_oom", "cumem_allocator"),
    ("kv_cache", "oom", "kv_cache_too_small", "KV cache is needed"),
    ("host_oom", "oom", "host_oom", "node running low on memory"),
    ("sigkill", "oom", "host_oom", "OOM killer"),
    ("nccl", "failed", "nccl_error", "NCCL error"),
    ("config_error", "config_error", "config_error", "grad_offload"),
    ("crash", "failed", "crash", "ActorDiedError"),
    ("no_gpus", "failed", "gpus_unavailable", "Total available GPUs 0 is less than total desired GPUs 8"),
    ("early_exit", "failed", "early_exit", "without reaching measured step 3"),
    ("import_error", "failed", "import_error", "No module named 'transformer_engine'"),
    ("attention_backend", "failed", "attention_backend_unavailable", "No dot product attention backend"),
    ("tokenizer_error", "failed", "tokenizer_error", "newline to tokenize to one token"),
])
def test_failure_classes(tmp_path: Path, mode: str, status: str, kind: str, words: str) -> None:
    res, _, rec, _ = run_mode(tmp_path, mode)
    assert res.status.value == status
    assert res.extra["failure"] == kind
    assert words in res.reason
    assert res.log_excerpt and Path(res.log_path).is_file()
    assert leftovers(rec) == []
    if mode == "gpu_oom":
        assert res.steps and res.steps[0]["step"] == 1  # steps before the failure are kept
    retried = kind in ("crash", "nccl_error")
    assert len(res.extra["attempts"]) == (2 if retried else 1)
    if retried:
        assert "attempt 2" in res.reason


def test_a_run_that_hangs_after_vllm_failed_to_start_is_stopped_and_classified(tmp_path: Path) -> None:
    """verl's driver may keep waiting after vLLM's worker died: the runner does not wait for --startup-timeout."""
    res, _, rec, _ = run_mode(tmp_path, "vllm_start_hang", fatal_grace_s=1.0, startup_timeout_s=3600.0)
    assert res.status == TrialStatus.OOM and res.extra["failure"] == "vllm_start_oom"
    assert "(0.95, 75.22 GiB)" in res.reason and "autotune stopped the run" in res.reason
    assert res.extra["timings"]["wall_s"] < 3600 and leftovers(rec) == []


def test_crash_unrelated_to_config_is_retried_once(tmp_path: Path) -> None:
    res, _, rec, spec = run_mode(tmp_path, "crash_once")
    assert res.status == TrialStatus.OK
    assert [a["failure"] for a in res.extra["attempts"]] == ["crash", ""]
    assert (spec.workdir / "verl.attempt2.log").is_file()
    assert len(launches(rec)) == 2 and leftovers(rec) == []


@pytest.mark.parametrize("mode,words", [
    ("hang", "before the first step (--startup-timeout)"),
    ("hang_after_step", "after step 1 (--stall-timeout)"),
    ("rollout_loop", "pending: 12, failure: 3"),
])
def test_stall_watchdog(tmp_path: Path, mode: str, words: str) -> None:
    # Start-up and the gaps between steps have their own limits: a long start-up is not a stall between steps.
    limits = {"startup_timeout_s": 1.5, "stall_timeout_s": 60.0} if mode == "hang" else {"stall_timeout_s": 1.5}
    res, _, rec, spec = run_mode(tmp_path, mode, **limits)
    assert res.status == TrialStatus.TIMEOUT and res.extra["failure"] == "stall"  # the reason names the watchdog
    assert words in res.reason and res.log_excerpt
    stamped = (spec.workdir / "verl.ts.log").read_text().splitlines()  # the console with arrival times
    assert stamped and all(line.startswith("[") and "] " in line for line in stamped)
    assert leftovers(rec) == []


def test_total_time_limit(tmp_path: Path) -> None:
    res, wall, rec, _ = run_mode(tmp_path, "ok", env={"FAKE_VERL_STEP_S": "1.0"}, trial_timeout_s=1.2)
    assert res.status == TrialStatus.TIMEOUT and res.extra["failure"] == "timeout"
    assert "--trial-timeout" in res.reason
    assert leftovers(rec) == []


def test_children_that_escape_the_group_or_ignore_sigterm_are_killed(tmp_path: Path) -> None:
    res, _, rec, _ = run_mode(tmp_path, "leave_child", grace_s=1.0)
    assert res.status == TrialStatus.OK
    r = records(rec)[0]
    assert len(r["children"]) == 4
    assert leftovers(rec) == []
    assert res.extra["cleanup"]["sigkilled"]  # they ignored SIGTERM: SIGKILL after the grace period
    assert res.extra["cleanup"]["remaining"] == []


def test_driver_ignoring_sigterm_is_killed(tmp_path: Path) -> None:
    res, _, rec, _ = run_mode(tmp_path, "ignore_sigterm", grace_s=0.5)
    assert res.status == TrialStatus.OK
    assert records(rec)[0]["pid"] in res.extra["cleanup"]["sigkilled"]
    assert leftovers(rec) == []


def test_report_callback_prunes_a_slow_trial(tmp_path: Path) -> None:
    seen: list[tuple[int, float]] = []

    def report(step: int, thr: float) -> bool:
        seen.append((step, thr))
        return thr < 500

    rec = tmp_path / "rec.jsonl"
    runner = fake_runner(env_for(rec, FAKE_VERL_MODE="slow"))
    res = runner.run(make_spec(make_setup(), tmp_path, measure_step=4, report=report))
    assert res.status == TrialStatus.PRUNED and "stopped at step 1" in res.reason
    assert seen == [(1, res.steps[0][verl.M_THROUGHPUT])]
    assert leftovers(rec) == []
    seen.clear()
    res = fake_runner(env_for(rec, FAKE_VERL_MODE="ok")).run(
        make_spec(make_setup(), tmp_path, number=1, measure_step=3, report=report))
    assert res.status == TrialStatus.OK and [s for s, _ in seen] == [1, 2]  # steps before the measured one


def test_ctrl_c_inside_run_cleans_up_and_propagates(tmp_path: Path) -> None:
    rec = tmp_path / "rec.jsonl"

    def report(step: int, thr: float) -> bool:
        raise KeyboardInterrupt  # as if Ctrl-C arrived while the trial ran

    runner = fake_runner(env_for(rec, FAKE_VERL_MODE="ok"))
    with pytest.raises(KeyboardInterrupt):
        runner.run(make_spec(make_setup(), tmp_path, report=report))
    assert records(rec) and leftovers(rec) == []


def test_a_stop_after_the_measured_step_keeps_the_measurement_and_still_stops(tmp_path: Path) -> None:
    """Ctrl-C or SIGTERM in the extra (noise) step: the trial is measured (lease 25's last 3B trial lost its
    recorded result this way, SIGTERMed in step 4), the run is stopped and cleaned up, and the stop still reaches the
    study, with the measured result on it (MeasuredThenInterrupted) and the signal's name kept."""
    rec, hold = tmp_path / "rec.jsonl", tmp_path / "step4"  # step 4 (the extra step) waits: the stop lands in it
    seen: list[int] = []

    def progress(p: TrialProgress) -> None:
        if p.step >= 3:
            seen.append(p.step)
            if len(seen) == 2:  # a look after the one that brought step 3: the measured step is in
                raise KeyboardInterrupt("SIGTERM")

    runner = fake_runner(env_for(rec, FAKE_VERL_MODE="ok", FAKE_VERL_HOLD_FILE=str(hold), FAKE_VERL_HOLD_STEP="4"))
    with pytest.raises(MeasuredThenInterrupted) as caught:
        runner.run(make_spec(make_setup(), tmp_path, progress=progress))
    assert str(caught.value) == "SIGTERM" and isinstance(caught.value, KeyboardInterrupt)
    res = caught.value.result
    assert res.status == TrialStatus.OK and res.throughput == res.steps[2][verl.M_THROUGHPUT]
    assert [s["step"] for s in res.steps] == [1, 2, 3]
    assert "interrupted by SIGTERM" in res.extra["noise"]["note"]
    assert records(rec) and leftovers(rec) == []


def test_a_signal_in_the_clean_up_after_the_measured_window_keeps_the_measurement(tmp_path: Path) -> None:
    """Lease 48's last 1.5B trial: its step 4 was in and the runner was stopping verl when the lease's deadline sent
    SIGTERM; the signal cut the clean-up, the study recorded the trial interrupted with nothing of its steps, and its
    NVML trace was never written. A real SIGTERM through autotune's handler, landing in the clean-up: the clean-up
    finishes, the trial is recorded measured and the stop still reaches the study."""
    rec = tmp_path / "rec.jsonl"
    runner = fake_runner(env_for(rec, FAKE_VERL_MODE="ok"))
    clean = runner._stop_and_clean

    def signalled_clean_up(*args: object, **kwargs: object) -> dict:
        signal.raise_signal(signal.SIGTERM)  # the handler raises at once inside an interruptible section
        return clean(*args, **kwargs)

    runner._stop_and_clean = signalled_clean_up  # type: ignore[method-assign]
    with pytest.raises(stopping.Stopped), stopping.handle_signals():  # the stop reaches the caller after the block
        with pytest.raises(MeasuredThenInterrupted) as caught, stopping.interruptible():
            runner.run(make_spec(make_setup(), tmp_path))
    assert str(caught.value) == "SIGTERM"
    res = caught.value.result
    assert res.status == TrialStatus.OK and res.throughput == res.steps[2][verl.M_THROUGHPUT]
    assert records(rec) and leftovers(rec) == []  # the clean-up ran to its end


def test_a_stop_before_the_measured_step_is_a_plain_interrupt(tmp_path: Path) -> None:
    rec, hold = tmp_path / "rec.jsonl", tmp_path / "step3"

    def progress(p: TrialProgress) -> None:
        if p.step >= 2:
            raise KeyboardInterrupt

    runner = fake_runner(env_for(rec, FAKE_VERL_MODE="ok", FAKE_VERL_HOLD_FILE=str(hold), FAKE_VERL_HOLD_STEP="3"))
    with pytest.raises(KeyboardInterrupt) as caught:
        runner.run(make_spec(make_setup(), tmp_path, progress=progress))
    assert not isinstance(caught.value, MeasuredThenInterrupted)
    assert records(rec) and leftovers(rec) == []


class FakeNVML:
    """Stands in for pynvml (no GPU here) to check the monitor's arithmetic and the busy-GPU refusal."""

    def __init__(self, used: list[float]):
        self.used = used  # GiB per GPU, mutable by the test

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802 - pynvml's names
        return len(self.used)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:  # noqa: N802
        return i

    def nvmlDeviceGetMemoryInfo(self, h: int) -> SimpleNamespace:  # noqa: N802
        return SimpleNamespace(used=int(self.used[h] * 2**30))

    def nvmlDeviceGetUtilizationRates(self, h: int) -> SimpleNamespace:  # noqa: N802
        return SimpleNamespace(gpu=50)

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list:  # noqa: N802
        return []

    def nvmlDeviceGetUUID(self, h: int) -> str:  # noqa: N802
        return f"GPU-{h}a{h}b-0000"


def test_visible_gpus_read_cuda_visible_devices_as_cuda_does() -> None:
    uuids = [f"GPU-{i}a{i}b-0000" for i in range(4)]
    assert visible_gpus(4, uuids, None) == [0, 1, 2, 3]  # unset: every GPU
    assert visible_gpus(4, uuids, "2") == [2]
    assert visible_gpus(4, uuids, "3,1") == [3, 1]  # CUDA's device 0 is NVML's 3
    assert visible_gpus(4, uuids, "GPU-2a2,GPU-0a0b-0000") == [2, 0]  # UUIDs and their prefixes
    assert visible_gpus(4, uuids, "1,7,2") == [1]  # read up to the first entry that names no GPU
    assert visible_gpus(4, uuids, "") == [] and visible_gpus(4, uuids, "-1") == []


def test_a_study_pinned_to_one_gpu_watches_only_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Four studies on a 4-GPU node, one GPU each: another study's trial on GPU 1 is neither this study's peak
    nor memory it waits to be given back."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")
    nv = FakeNVML([1.0, 1.0, 1.0, 1.0])
    mon = GpuMonitor(interval_s=0.01, nvml=nv)
    mon.start()
    nv.used[1], nv.used[2] = 70.0, 30.0
    time.sleep(0.1)
    nv.used[2] = 1.2
    usage = mon.stop()
    assert usage.baseline_gib == (1.0,) and usage.peak_gib == (30.0,)
    assert mon.wait_released(usage.baseline_gib, 0.5, 0.1) == []  # GPU 1 is not this study's
    nv.used[2] = 9.0
    assert mon.wait_released(usage.baseline_gib, 0.5, 0.1) == ["GPU 0: 9.00 GiB used, 1.00 GiB before the trial"]


def test_gpu_monitor_peaks_per_gpu() -> None:
    nv = FakeNVML([1.0, 1.0])
    mon = GpuMonitor(interval_s=0.01, nvml=nv)
    mon.start()
    nv.used[1] = 60.0
    time.sleep(0.1)
    nv.used[1] = 2.0
    usage = mon.stop()
    assert usage.available and usage.baseline_gib == (1.0, 1.0)
    assert usage.peak_gib == (1.0, 60.0) and usage.peak_max_gib == 60.0
    assert mon.wait_released(usage.baseline_gib, 1.5, 0.1) == []
    assert mon.wait_released(usage.baseline_gib, 0.5, 0.1)  # GPU 1 still holds 1 GiB more


def test_gpu_monitor_traces_every_sample(tmp_path: Path) -> None:
    """The trace is memory per moment and when the GPUs sat idle: a header, then one row per sample (time since
    start, GiB per GPU, NVML's utilization % per GPU: blank where NVML has none)."""
    nv = FakeNVML([1.0, 1.0])
    mon = GpuMonitor(interval_s=3600, nvml=nv, trace=tmp_path / "gpu.csv")  # samples at start and at stop only
    mon.start()
    for _ in range(200):  # the start's sample is on disk while the monitor runs: a killed trial keeps its trace
        if len((tmp_path / "gpu.csv").read_text().splitlines()) == 2:
            break
        time.sleep(0.01)
    assert (tmp_path / "gpu.csv").read_text().splitlines()[1].endswith(",1.000,1.000,50,50")
    nv.used[1] = 60.0
    nv.nvmlDeviceGetUtilizationRates = lambda h: (_ for _ in ()).throw(RuntimeError("Not Supported"))
    usage = mon.stop()
    rows = (tmp_path / "gpu.csv").read_text().splitlines()
    assert rows[0] == "t_s,gpu0_used_gib,gpu1_used_gib,gpu0_util_pct,gpu1_util_pct"
    assert rows[-1].endswith(",1.000,60.000,,") and len(rows) == 1 + usage.samples
    assert usage.mean_util == (50 / usage.samples, 50 / usage.samples)  # the sample without a reading counts 0


def test_gpus_not_given_back_stop_the_next_trial(tmp_path: Path) -> None:
    nv = FakeNVML([0.5] * 8)

    class Leaky(GpuMonitor):
        def __init__(self, interval_s: float):
            super().__init__(interval_s=interval_s, nvml=nv)

        def start(self) -> None:
            super().start()
            nv.used[3] = 70.0  # the "trial" takes GPU 3 and never gives it back

    rec = tmp_path / "rec.jsonl"
    runner = VerlRunner(fast_options(cleanup_timeout_s=0.3), entry=ENTRY, env=env_for(rec, FAKE_VERL_MODE="ok"),
                        gpu_monitor=Leaky)
    res = runner.run(make_spec(make_setup(), tmp_path))
    assert res.status == TrialStatus.OK and res.peak_memory_gib == pytest.approx(70.0)
    assert res.peak_memory_per_gpu_gib[3] == pytest.approx(70.0)
    assert "GPU 3" in " ".join(res.extra["cleanup"]["gpu_busy"])
    with pytest.raises(RunnerFatal, match="GPU 3"):
        runner.run(make_spec(make_setup(), tmp_path, number=1))
    assert len(launches(rec)) == 1  # nothing launched on busy GPUs


def test_missing_data_stops_the_study_before_launch(tmp_path: Path) -> None:
    from autotune.job import Job

    job = Job.from_mapping({verl.TRAIN_FILES: str(tmp_path / "nope.parquet")}, "job.yaml")
    rec = tmp_path / "rec.jsonl"
    with pytest.raises(RunnerFatal, match="does not exist"):
        fake_runner(env_for(rec)).run(make_spec(make_setup(job=job), tmp_path))
    (tmp_path / "few.jsonl").write_text('{"prompt": "a"}\n' * 10)
    job = Job.from_mapping({verl.TRAIN_FILES: str(tmp_path / "few.jsonl")}, "job.yaml")
    with pytest.raises(RunnerFatal, match="holds 10 prompts, fewer than data.train_batch_size"):
        fake_runner(env_for(rec)).run(make_spec(make_setup(job=job), tmp_path))
    assert records(rec) == []


def test_relative_data_paths_still_point_at_the_same_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from autotune.job import Job

    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.jsonl").write_text('{"prompt": "a"}\n' * 600)
    job = Job.from_mapping({verl.TRAIN_FILES: "train.jsonl"}, "job.yaml")
    rec = tmp_path / "rec.jsonl"
    res = fake_runner(env_for(rec, FAKE_VERL_MODE="ok")).run(make_spec(make_setup(job=job), tmp_path / "w"))
    assert res.status == TrialStatus.OK
    assert FAKE.parse_overrides(records(rec)[0]["argv"])[verl.TRAIN_FILES] == str(tmp_path / "train.jsonl")


def test_the_cli_factory_cannot_take_a_test_entry_point() -> None:
    with pytest.raises(RunnerUnavailable):
        make_verl_runner(entry=["python", "x.py"])
    with pytest.raises(RunnerUnavailable):
        make_runner("verl", entry=["python", "x.py"])


def test_dead_children_are_not_confused_with_reused_pids(tmp_path: Path) -> None:
    res, _, rec, _ = run_mode(tmp_path, "ok")
    r = records(rec)[0]
    assert not any(pid_alive(p) for p in [r["pid"], *r["children"]])


def test_no_gpus_for_the_job_stops_before_the_next_launch(tmp_path: Path) -> None:
    """verl's "Total available GPUs 0 is less than total desired GPUs 8" is the machine's, not the candidate's:
    recorded once with verl's output, then the runner refuses to launch again (the study stops and says why)."""
    rec = tmp_path / "rec.jsonl"
    runner = fake_runner(env_for(rec, FAKE_VERL_MODE="no_gpus"), preflight=False)
    setup = make_setup()
    res = runner.run(make_spec(setup, tmp_path, number=0))
    assert res.status == TrialStatus.FAILED and res.extra["failure"] == "gpus_unavailable"
    assert "Total available GPUs 0 is less than total desired GPUs 8" in res.reason
    with pytest.raises(RunnerFatal, match=r"trial 0 found .*same 8 GPUs.*--gpus/--nodes"):
        runner.run(make_spec(setup, tmp_path, number=1))
    assert len(launches(rec)) == 1 and leftovers(rec) == []


def test_bytecode_is_kept_under_the_shared_caches_where_the_environment_forbids_writing_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """PYTHONDONTWRITEBYTECODE=1 over packages without .pyc (the lent machines' image, lease 22) makes every process
    of a trial compile what it imports: the runner drops it for the trial and sets PYTHONPYCACHEPREFIX to
    <workdir>/cache/pycache, so the launched Python (here the verl double, really run) writes its bytecode there and
    the next process and trial read it. Packages that carry bytecode, or a user's own prefix, leave the env alone."""
    for var in (*verl.SHARED_CACHE_ENV, verl.NO_BYTECODE_ENV, verl.BYTECODE_PREFIX_ENV):
        monkeypatch.delenv(var, raising=False)
    rec = tmp_path / "rec.jsonl"
    workdir = tmp_path / "trials" / "s"
    runner = fake_runner(env_for(rec, FAKE_VERL_MODE="ok", PYTHONDONTWRITEBYTECODE="1"))
    monkeypatch.setattr("autotune.runners.verl.has_bytecode", lambda: False)
    res = runner.run(make_spec(make_setup(), workdir, number=0))
    assert res.status == TrialStatus.OK and res.extra["bytecode_cache"] is True
    prefix = tmp_path / "trials" / "cache" / "pycache"
    env = launches(rec)[0]["env"]
    assert env["PYTHONPYCACHEPREFIX"] == str(prefix) and "PYTHONDONTWRITEBYTECODE" not in env
    assert list(prefix.glob("**/json/__init__.*.pyc")), "the launched Python wrote no bytecode there"  # it imports json
    command = json.loads((workdir / "trial_0000" / "command.json").read_text())
    assert command["env"]["PYTHONPYCACHEPREFIX"] == str(prefix)

    # the packages carry their bytecode: nothing changes
    rec2 = tmp_path / "rec2.jsonl"
    runner2 = fake_runner(env_for(rec2, FAKE_VERL_MODE="ok", PYTHONDONTWRITEBYTECODE="1"))
    monkeypatch.setattr("autotune.runners.verl.has_bytecode", lambda: True)
    res2 = runner2.run(make_spec(make_setup(), tmp_path / "t2" / "s", number=0))
    assert "bytecode_cache" not in res2.extra
    env2 = launches(rec2)[0]["env"]
    assert env2["PYTHONDONTWRITEBYTECODE"] == "1" and "PYTHONPYCACHEPREFIX" not in env2

    # the user's own prefix stays, and so does their setting
    rec3 = tmp_path / "rec3.jsonl"
    mine = str(tmp_path / "my-pycache")
    runner3 = fake_runner(env_for(rec3, FAKE_VERL_MODE="ok", PYTHONDONTWRITEBYTECODE="1", PYTHONPYCACHEPREFIX=mine))
    monkeypatch.setattr("autotune.runners.verl.has_bytecode", lambda: False)
    res3 = runner3.run(make_spec(make_setup(), tmp_path / "t3" / "s", number=0))
    assert "bytecode_cache" not in res3.extra and launches(rec3)[0]["env"]["PYTHONPYCACHEPREFIX"] == mine


def test_the_bytecode_probe_reads_a_packages_cache_without_importing_it(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = tmp_path / "probe_pkg_xyz"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise RuntimeError('imported')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert has_bytecode("probe_pkg_xyz") is False
    cached = pkg / "__pycache__" / f"__init__.{sys.implementation.cache_tag}.pyc"
    py_compile.compile(str(pkg / "__init__.py"), cfile=str(cached))
    assert has_bytecode("probe_pkg_xyz") is True
    assert has_bytecode("no_such_package_xyz") is None


@pytest.mark.parametrize("mode,kind", [("import_error", "import_error"), ("tokenizer_error", "tokenizer_error")])
def test_a_broken_stack_or_tokenizer_stops_the_study_after_one_launch(tmp_path: Path, mode: str, kind: str) -> None:
    """Every candidate would fail the same way: one launch, no retry, then the runner refuses the next trial."""
    rec = tmp_path / "rec.jsonl"
    runner = fake_runner(env_for(rec, FAKE_VERL_MODE=mode), preflight=False)
    setup = make_setup()
    res = runner.run(make_spec(setup, tmp_path, number=0))
    assert res.extra["failure"] == kind and len(res.extra["attempts"]) == 1
    with pytest.raises(RunnerFatal, match=r"trial 0 failed: .*every other candidate would fail.*autotune doctor"):
        runner.run(make_spec(setup, tmp_path, number=1))
    assert len(launches(rec)) == 1 and leftovers(rec) == []


def test_compile_and_dataset_caches_are_shared_by_a_nodes_trials(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """verl turns vLLM's compile cache off for every run (VLLM_DISABLE_COMPILE_CACHE=1 in its Ray runtime env, unless
    the launching environment sets it): the runner sets it to 0 and points vLLM's, Inductor's, Triton's and the
    datasets' caches at <workdir>/cache, so the second trial of a node starts warm; the user's own choices stay."""
    for var in verl.SHARED_CACHE_ENV:  # torch's Inductor, once imported, writes its default into os.environ
        monkeypatch.delenv(var, raising=False)
    rec = tmp_path / "rec.jsonl"
    workdir = tmp_path / "trials" / "s"  # <workdir>/<study>, as the tuner lays it out (make_spec's study is "s")
    runner = fake_runner(env_for(rec, FAKE_VERL_MODE="ok", TRITON_CACHE_DIR=str(tmp_path / "mine")))
    first = runner.run(make_spec(make_setup(), workdir, number=0))
    second = runner.run(make_spec(make_setup(), workdir, number=1))
    assert first.status == second.status == TrialStatus.OK
    assert (first.extra["caches"], second.extra["caches"]) == ("cold", "warm")
    env = launches(rec)[0]["env"]
    cache = tmp_path / "trials" / "cache"
    assert env["VLLM_DISABLE_COMPILE_CACHE"] == "0"
    assert env["VLLM_CACHE_ROOT"] == str(cache / "vllm") and env["HF_DATASETS_CACHE"] == str(cache / "datasets")
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str(cache / "inductor")
    assert env["TRITON_CACHE_DIR"] == str(tmp_path / "mine")  # set by the user: kept
    # a confirmation run's folder lies inside its trial's: the same caches, warm
    spec = make_spec(make_setup(), workdir, number=1)
    confirm = runner.run(dataclasses.replace(spec, workdir=spec.workdir / "confirm_6"))
    assert confirm.extra["caches"] == "warm" and launches(rec)[-1]["env"]["VLLM_CACHE_ROOT"] == str(cache / "vllm")
    # off: verl's own default (no compile cache) and the machine's cache folders
    rec2 = tmp_path / "rec2.jsonl"
    off = fake_runner(env_for(rec2, FAKE_VERL_MODE="ok"), shared_caches=False)
    res = off.run(make_spec(make_setup(), tmp_path / "other" / "study", number=0))
    assert "caches" not in res.extra
    assert not {"VLLM_CACHE_ROOT", "VLLM_DISABLE_COMPILE_CACHE"} & set(launches(rec2)[0]["env"])
