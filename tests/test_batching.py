"""The batching plan: one concept that the memory and time models both read, numerically what they computed before."""

from __future__ import annotations

import json

import pytest

from autotune.candidate import Candidate
from autotune.cluster import Cluster, get_gpu_type
from autotune.estimate.batching import plan_batching
from autotune.estimate.lengths import Lengths
from autotune.estimate.memory import estimate_memory
from autotune.estimate.throughput import estimate_throughput
from autotune.job import Job
from autotune.model import get_model
from tests import batching_grid
from tests.conftest import REPO

GOLDEN = json.loads((REPO / "tests" / "data" / "batching_golden.json").read_text())


def test_golden_grid_covers_the_batching_cases() -> None:
    kinds = {(r["params"]["use_dynamic_bsz"], r["params"]["pp"] > 1, r["params"]["cp"] > 1) for r in GOLDEN}
    assert len(kinds) == 8  # dynamic batching or not x PP or not x CP or not
    assert len(GOLDEN) >= 60


@pytest.mark.parametrize("i", range(len(batching_grid.combos())))
def test_estimates_are_bit_identical_to_before_the_plan(i: int) -> None:
    """Every memory term, KV figure, phase time and probe micro-batch of the grid, exactly as the code before the
    plan computed it (tests/batching_grid.py wrote tests/data/batching_golden.json from that code)."""
    rows = [r for r in GOLDEN if r["combo"] == i]
    assert rows
    for r in rows:
        cand = Candidate.from_params(r["params"])
        assert batching_grid.values(i, cand) == r["values"], (i, cand.key())


def test_memory_and_time_read_the_same_plan() -> None:
    m, cl, job = get_model("qwen2.5-7b"), Cluster(get_gpu_type("h100"), 8, 1), Job.default()
    ln = Lengths(1800.0, 2048.0, 1500.0, 3000.0)
    cand = Candidate.from_params({"tp": 2, "pp": 2, "use_dynamic_bsz": False, "ppo_micro_batch_size_per_gpu": 4,
                                  "log_prob_micro_batch_size_per_gpu": 8, "rollout_tp": 2})
    mem = estimate_memory(m, cl, job, cand, lengths=ln)
    assert mem.batching == plan_batching(job, cl, cand, ln)
    plan = mem.batching
    assert plan.data_parallel == 2
    # the largest micro-batch holds the step's longest sequence; the typical one is of mean length
    assert plan.update_tokens == 3 * 3300.0 + 5048.0
    assert plan.update_tokens_typical == 4 * 3300.0
    assert plan.log_prob_tokens == 7 * 3300.0 + 5048.0
    assert plan.update_micro_batches == 32 * 16 // 2 // 4  # mini-batch x n over DP, 4 sequences each
    assert plan.log_prob_micro_batches == 512 * 16 // 2 // 8
    assert plan.rollout_replicas == 4 and plan.sequences_per_replica == 512 * 16 / 4  # rollout TP 2
    assert "ppo_micro_batch_size_per_gpu=4" in mem.bound
    thr = estimate_throughput(m, cl, job, cand, mem)
    assert thr.batching is not None and thr.batching.update_micro_batches == plan.update_micro_batches
    dyn = plan_batching(job, cl, Candidate.from_params({"tp": 2, "cp": 2, "use_dynamic_bsz": True,
                                                        "ppo_max_token_len_per_gpu": 16384}), ln)
    assert dyn.update_tokens == dyn.update_tokens_typical == 16384.0  # the budget bounds it whatever the lengths
