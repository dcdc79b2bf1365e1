"""The runner's parsing and failure classes on real verl 0.9.1 GPU runs (one H100, 2026-11-24, logs as the runner
recorded them: tests/data/real_verl_gpu/; benchmarks/gpu_verl/ made them, benchmarks/results/real_verl_gpu.md says
what each trial was)."""

from __future__ import annotations

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
