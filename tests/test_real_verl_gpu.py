"""The runner's parsing and failure classes on real verl 0.9.1 GPU runs (one H100, 2026-11-24, logs as the runner
recorded them: tests/data/real_verl_gpu/; benchmarks/gpu_verl/ made them, benchmarks/results/real_verl_gpu.md says
what each trial was)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from autotune.runners.verl_log import LineTail, RunLog, classify

LEASE1 = Path(__file__).parent / "data" / "real_verl_gpu" / "h100_2026-11-24"


def log_of(trial: str) -> str:
    return (LEASE1 / trial / "verl.log").read_text(errors="replace")


@pytest.mark.parametrize("trial,rc,killed,kind,words", [
    # mbridge 0.15.1 vs megatron-core 0.19 before the shim reached the class mbridge uses: deterministic, no retry
    ("trial_0000", 1, False, "software_error", "has no attribute 'encoder_and_decoder'"),
    # vLLM asked for 0.95 of the GPU beside the resident actor; verl's driver kept waiting (stopped by the runner)
    ("trial_0005", -15, True, "vllm_start_oom", "(0.95, 75.22 GiB)"),
    # 64 sequences a micro-batch without dynamic batching: the update's logits
    ("trial_0006", 1, False, "gpu_oom", "Tried to allocate 690.00 MiB"),
])
def test_real_failures_are_classified(trial: str, rc: int, killed: bool, kind: str, words: str) -> None:
    f = classify(log_of(trial), rc, killed_by_us=killed)
    assert f.kind == kind and words in f.message, (f.kind, f.message)


def test_the_real_vllm_start_failure_is_a_line_no_run_recovers_from(tmp_path: Path) -> None:
    """What makes the runner stop a run that keeps waiting after vLLM's worker died (FATAL_LINE_PATTERNS)."""
    log = tmp_path / "verl.log"
    log.write_text(log_of("trial_0005"))
    run = RunLog(LineTail(log), LineTail(tmp_path / "none.jsonl"), started=0.0)
    run.poll(final=True)
    assert run.fatal_at is not None and not run.steps


def test_real_startup_milestones_are_read(tmp_path: Path) -> None:
    log = tmp_path / "verl.log"
    log.write_text(log_of("trial_0006"))
    run = RunLog(LineTail(log), LineTail(tmp_path / "none.jsonl"), started=0.0)
    run.poll(final=True)
    assert {"ray_up", "config"} <= set(run.milestones)


def _vllm_failure_lines(text: str) -> list[str]:
    """The vLLM worker's failure block: the lines from 'WorkerProc failed to start.' to the ValueError, with values
    (pids, times, numbers, paths) blanked, so that what remains is the format."""
    lines = text.split("\n")
    start = next(i for i, ln in enumerate(lines) if "WorkerProc failed to start." in ln)
    end = next(i for i in range(start, len(lines)) if "ValueError: Free memory on device" in lines[i])
    return [re.sub(r"\d+(?:\.\d+)?", "N", ln) for ln in (lines[start], lines[start + 1], lines[end])]


@pytest.mark.parametrize("mode", ["vllm_start_oom", "vllm_start_hang"])
def test_the_doubles_vllm_start_failure_is_printed_as_the_real_one(tmp_path: Path, mode: str) -> None:
    """The double's vLLM lines against the real H100 log: coloured server prefix, the worker's own prefix, vLLM's
    log header, the message with the device name."""
    from tests.fake_verl import env_for, fake_runner, leftovers, make_spec
    from tests.test_real_verl import double_log

    if mode == "vllm_start_oom":
        lines, res = double_log(tmp_path, mode)
        text = "\n".join(lines)
        assert res.extra["failure"] == "vllm_start_oom"
    else:  # the driver keeps waiting: stopped by the runner once the fatal line has had its grace
        rec = tmp_path / "rec.jsonl"
        from tests.conftest import make_setup

        res = fake_runner(env_for(rec, FAKE_VERL_MODE=mode), fatal_grace_s=1.0, preflight=False).run(
            make_spec(make_setup(), tmp_path))
        assert leftovers(rec) == [] and res.extra["failure"] == "vllm_start_oom"
        text = Path(res.log_path).read_text()
    assert _vllm_failure_lines(text) == _vllm_failure_lines(log_of("trial_0005"))
