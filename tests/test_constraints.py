import pytest

from autotune.candidate import Candidate
from autotune.estimate import constraints
from autotune.job import Job
from tests.conftest import make_setup


def rules(setup, **params) -> set[str]:
    cand = Candidate.from_params({"use_dynamic_bsz": True, "rollout_tp": 1, **params})
    return {v.rule for v in constraints.check(setup.model, setup.cluster, setup.job, cand)}


def test_a_good_candidate_breaks_nothing(setup7b):
    assert rules(setup7b, tp=4, pp=2, ppo_max_token_len_per_gpu=16384, log_prob_max_token_len_per_gpu=32768) == set()


@pytest.mark.parametrize("params, rule", [
    ({"tp": 4, "pp": 1, "cp": 3}, "world_size"),          # 8 GPUs % 12
    ({"tp": 8}, "heads_per_tp"),                         # Qwen2.5-7B: 28 heads, 4 KV heads
    ({"tp": 1, "pp": 8}, "layers_per_stage"),            # 28 layers % 8
    ({"tp": 2, "pp": 2, "vpp": 4}, "layers_per_stage"),  # 28 % (2*4)
    ({"ep": 2}, "expert_parallel"),                      # dense model
    ({"rollout_tp": 8}, "rollout_tp"),                   # 28 heads % 8
    ({"cp": 1, "ppo_max_token_len_per_gpu": 8192}, "token_budget"),  # 8192 < 2048 + 8192
    ({"recompute": "full", "recompute_method": "block", "recompute_num_layers": 30}, "recompute"),
])
def test_each_rule_catches_its_case(setup7b, params, rule):
    assert rule in rules(setup7b, **params)


def test_cp_lets_a_small_budget_cover_the_sequence(setup7b):
    assert "token_budget" not in rules(setup7b, tp=2, cp=2, ppo_max_token_len_per_gpu=8192,
                                       log_prob_max_token_len_per_gpu=8192)


def test_batch_divisibility_without_dynamic_batching():
    setup = make_setup(job=Job.from_mapping({"data.train_batch_size": 64,
                                              "actor_rollout_ref.actor.ppo_mini_batch_size": 8,
                                              "actor_rollout_ref.rollout.n": 3}))
    cand = Candidate.from_params({"tp": 1, "rollout_tp": 1, "ppo_micro_batch_size_per_gpu": 4,
                                  "log_prob_micro_batch_size_per_gpu": 4})
    found = constraints.check(setup.model, setup.cluster, setup.job, cand)
    assert [v.rule for v in found] == ["batch_divisibility"]
    msg = found[0].message
    assert "mini-batch per GPU (24/8 = 3 samples) is not divisible by ppo_micro_batch_size_per_gpu=4" in msg
    odd = make_setup(job=Job.from_mapping({"data.train_batch_size": 63,
                                            "actor_rollout_ref.actor.ppo_mini_batch_size": 7,
                                            "actor_rollout_ref.rollout.n": 3}))
    found = constraints.check(odd.model, odd.cluster, odd.job, cand)
    assert "train_batch_size*n = 189 samples are not divisible by DP=8" in found[0].message


def test_moe_rules():
    setup = make_setup("qwen3-30b-a3b")
    assert "expert_parallel" in rules(setup, ep=3)                       # 128 experts % 3
    assert "expert_parallel" in rules(setup, tp=4, ep=8)                 # EP*ETP(=TP)*PP = 32 > 8 GPUs
    assert "expert_parallel" not in rules(setup, tp=4, ep=8, etp=1)
    assert "expert_parallel" in rules(setup, tp=2, ep=2, etp=1, sequence_parallel=False)


def test_every_violation_is_worded():
    setup = make_setup()
    cand = Candidate.from_params({"tp": 8, "pp": 8, "rollout_tp": 8})
    for v in constraints.check(setup.model, setup.cluster, setup.job, cand):
        assert v.rule in constraints.RULES and len(v.message) > 20 and str(v).startswith(v.rule)
