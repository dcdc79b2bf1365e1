"""The batching plan: one concept that the memory and time models both read, numerically what they computed before."""

from __future__ import annotations

import json

import pytest

from autotune import verl
from autotune.candidate import Candidate
from autotune.cluster import Cluster, get_gpu_type
from autotune.estimate.batching import micro_batch_bound, plan_batching
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
    # a mini-batch of 32 x 16 sequences of 3,300 tokens over 2 DP ranks, 32k a CP group: 26 balanced micro-batches
    assert dyn.update_tokens == pytest.approx(256 * 3300 / 26 / 2) and dyn.update_tokens < 16384.0
    assert dyn.update_tokens_typical == 16384.0  # the time model's micro-batch: the budget
    assert plan_batching(job, cl, dyn_cand := Candidate.from_params({"tp": 2, "cp": 2, "use_dynamic_bsz": True,
                                                                     "ppo_max_token_len_per_gpu": 16384}),
                         None).update_tokens == 16384.0  # the worst case: the budget
    assert "whatever the lengths" in micro_batch_bound(dyn_cand)


SMOKE = Job.from_file(REPO / "benchmarks" / "gpu_verl" / "job_smoke.yaml")  # 16 prompts x 8, mini-batch 8 prompts
STEP3 = Lengths(172.0, 234.0, 1018.0, 1024.0)  # c-1.5b-h15 #0's step 3 on that job


@pytest.mark.parametrize(("budget", "parts"), [(32768, 3), (36864, 3), (40960, 2), (98304, 1)])
def test_dynamic_batching_holds_verls_balanced_partitions_at_a_steps_lengths(budget: int, parts: int) -> None:
    """verl 0.9.1 cuts a pass of T tokens into ceil(T / budget) balanced micro-batches (rearrange_micro_batches). Lease
    40 on a one-GPU H200: the smoke job's ~76k-token mini-batches made three of ~25k at dyn36k (the 1.5B held 108.9
    GiB, as at dyn32k) and two of ~38k at dyn40k (out of memory); the worst case keeps the budget, which a pass whose
    tokens sit just under a multiple of it reaches."""
    cl = Cluster(get_gpu_type("h200"), 1, 1)
    ln = STEP3
    c = Candidate.from_params({"rollout_tp": 1, "use_dynamic_bsz": True, "ppo_max_token_len_per_gpu": budget,
                               "log_prob_max_token_len_per_gpu": 98304})
    plan = plan_batching(SMOKE, cl, c, ln)
    mini_batch = 8 * 8 * ln.seq_mean
    assert plan.update_tokens == pytest.approx(min(budget, mini_batch / parts))
    assert plan.log_prob_tokens == pytest.approx(2 * mini_batch / 2)  # 152k tokens: two of ~76k under 96k
    assert plan_batching(SMOKE, cl, c).update_tokens == budget
    # unfused attention takes no packed sequences: each padded to the job's longest, so the budget is reached sooner
    unfused = SMOKE.with_node_defaults({verl.ATTENTION_BACKEND: "unfused"})
    assert unfused.attention_backend == "unfused"
    padded = plan_batching(unfused, cl, c, ln).update_tokens
    assert padded == pytest.approx(min(budget, 64 / parts * SMOKE.max_seq_len)) and padded > plan.update_tokens


def test_the_1_5b_budgets_lease_40_told_apart() -> None:
    """dyn36k fits at the step's lengths (three micro-batches of ~25k: 108.9 GiB on NVML) and dyn40k does not (two of
    ~38k ran out of memory); before the partitions the model held both at their budgets (139.6 and 151.7 GiB)."""
    m, cl = get_model("qwen2.5-1.5b"), Cluster(get_gpu_type("h200"), 1, 1)
    ln = STEP3
    base = {"rollout_tp": 1, "use_dynamic_bsz": True, "use_fused_kernels": True,
            "log_prob_max_token_len_per_gpu": 98304, "gpu_memory_utilization": 0.4}

    def at(budget: int):  # noqa: ANN202 - a MemoryEstimate
        return estimate_memory(m, cl, SMOKE, Candidate.from_params({**base, "ppo_max_token_len_per_gpu": budget}),
                               lengths=ln)
    fits, oom = at(36864), at(40960)
    assert fits.fits and fits.peak / 2**30 == pytest.approx(108.9, rel=0.08)
    assert not oom.fits and oom.binding.name == "update"
