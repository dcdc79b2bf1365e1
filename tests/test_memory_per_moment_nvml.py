"""The memory model per moment against NVML's traces of the real trials (benchmarks/memory_moments.py)."""

from __future__ import annotations

import pytest

from autotune.candidate import Candidate
from autotune.cluster import make_cluster
from autotune.estimate.lengths import Lengths
from autotune.job import Job
from benchmarks import memory_moments as mm


@pytest.fixture(scope="module")
def cases() -> list[mm.MomentCase]:
    return mm.cases(mm.DATA.glob("*/*.db"))


def test_windows_follow_verls_order_inside_a_step() -> None:
    """gen and old_log_prob from the step's start, update_weights and update_actor back from its end."""
    w = mm.step_windows(100.0, 130.0, {"gen": 10.0, "old_log_prob": 5.0, "update_actor": 8.0, "update_weights": 1.0})
    assert w == {"gen": (100.0, 110.0), "old_log_prob": (110.0, 115.0), "update_weights": (129.0, 130.0),
                 "update_actor": (121.0, 129.0)}
    trace = [(100.0 + 0.5 * i, 10.0 + i) for i in range(61)]
    assert mm.window_max(trace, w["gen"]) == 10.0 + 18  # 109.0 s, the last sample 0.75 s before its end
    assert mm.window_max(trace, (129.0, 130.0)) is None  # shorter than the two margins: not judged


def test_the_update_reads_what_the_log_prob_pass_left_cached_unless_the_actor_is_offloaded() -> None:
    moments = {"old_log_prob": 77.0, "update": 51.7, "rollout": 52.3}
    kept = mm.seen_by_nvml(moments, Candidate(tp=1).normalized())
    assert kept == {"old_log_prob": 77.0, "update": 77.0, "rollout": 52.3}
    offloaded = mm.seen_by_nvml(moments, Candidate(tp=1, param_offload=True).normalized())
    assert offloaded["update"] == 51.7


def test_partitions_are_verls_balanced_micro_batches() -> None:
    job = Job.from_file(mm.HERE / "gpu_verl" / "job_smoke.yaml")  # 16 prompts x 8, mini-batch 8 prompts
    cand = Candidate(tp=1, use_dynamic_bsz=True, ppo_max_token_len_per_gpu=32768,
                     log_prob_max_token_len_per_gpu=98304).normalized()
    ln = Lengths(prompt_mean=196.0, prompt_max=512.0, response_mean=1000.0, response_max=1024.0)
    part = mm.partitioned(job, make_cluster(1, 1, "h100"), cand, ln)
    # the update's mini-batch: 64 sequences of 1196 tokens = 76,544 -> 3 micro-batches; the log-prob pass: 153,088 -> 2
    assert part.ppo_max_token_len_per_gpu == 76544 // 3 and part.log_prob_max_token_len_per_gpu == 153088 // 2
    assert mm.partitioned(job, make_cluster(1, 1, "h100"), Candidate(tp=1).normalized(), ln) == \
        Candidate(tp=1).normalized()


def test_every_ok_trial_with_a_trace_is_judged_and_no_moment_is_far_under(cases: list[mm.MomentCase]) -> None:
    """11 trials that measured a step; rollout and vLLM's start within the target wherever a window holds a sample;
    nothing predicted more than 15% under what NVML saw (an under-prediction is the side that runs out of memory)."""
    assert len({c.source for c in cases}) == 11
    judged = [c for c in cases if c.error is not None]
    assert {c.moment for c in judged} == {"vllm_start", "rollout", "old_log_prob", "update"}
    assert all(abs(c.error) <= mm.TARGET for c in judged if c.moment in ("vllm_start", "rollout"))
    assert min(c.error for c in judged) > -0.15, min(judged, key=lambda c: c.error)


def test_the_committed_table_is_what_the_data_give(cases: list[mm.MomentCase]) -> None:
    committed = (mm.HERE / "results" / "memory_moments.md").read_text()
    assert committed == mm.report(cases)
