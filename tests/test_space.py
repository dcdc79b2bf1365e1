import random

import pytest

from autotune.search.space import SpaceError, builtin_spaces, load_space, parse_space, space_context
from benchmarks.ranking_exactness import settings  # every setting of a space, enumerated


def test_builtin_spaces_load_and_cover_the_issue_dimensions():
    assert set(builtin_spaces()) >= {"dense", "moe"}
    dense, moe = load_space("dense"), load_space("moe")
    for name in ("tp", "pp", "vpp", "cp", "sequence_parallel", "recompute", "recompute_modules", "recompute_method",
                 "recompute_num_layers", "use_dynamic_bsz", "ppo_max_token_len_per_gpu",
                 "log_prob_max_token_len_per_gpu", "ppo_micro_batch_size_per_gpu", "rollout_tp",
                 "gpu_memory_utilization", "max_num_batched_tokens", "param_offload", "optimizer_offload",
                 "use_fused_kernels"):
        assert name in dense.names, name
    assert "ep" in moe.names and "etp" in moe.names and "ep" not in dense.names


def test_conditional_dimensions_are_asked_only_when_active():
    space = load_space("moe")
    rng = random.Random(1)
    for _ in range(200):
        p = space.sample(rng, space_context(True, 8, 8))
        assert ("vpp" in p) == (p["pp"] > 1)
        assert ("recompute_method" in p) == (p["recompute"] == "full")
    dense_ctx = space_context(False, 8, 8)
    assert all("ep" not in space.sample(rng, dense_ctx) for _ in range(50))  # EP only for MoE


def test_size_counts_conditional_settings():
    space = parse_space("dimensions:\n  pp: {choices: [1, 2]}\n  vpp: {choices: [null, 2], when: {pp: {gt: 1}}}\n")
    assert space.size({}) == 3  # pp=1; pp=2 x vpp in {null, 2}


@pytest.mark.parametrize("moe, world", [(False, 8), (True, 8), (True, 2)])
def test_size_equals_every_setting_enumerated_where_conditions_nest_and_name_the_context(moe, world):
    space = parse_space("""
dimensions:
  tp: {choices: [1, 2, 4]}
  pp: {choices: [1, 2]}
  vpp: {choices: [null, 2, 4], when: {pp: {gt: 1}}}
  ep: {choices: [1, 2, 8], when: {moe: {eq: true}}}
  etp: {choices: [null, 1], when: {ep: {gt: 1}}}
  recompute: {choices: [none, selective, full]}
  recompute_method: {choices: [uniform, block], when: {recompute: {eq: full}}}
  recompute_num_layers: {choices: [1, 2], when: {recompute: {eq: full}, world_size: {ge: 4}}}
  use_dynamic_bsz: {choices: [true, false]}
  ppo_max_token_len_per_gpu: {choices: [8192, 16384], when: {use_dynamic_bsz: {eq: true}}}
  ppo_micro_batch_size_per_gpu: {choices: [1, 2, 4], when: {use_dynamic_bsz: {eq: false}}}
  param_offload: {choices: [true, false]}
""")
    ctx = space_context(moe, world, 8)
    every = settings(space, ctx)  # each setting visited, one by one: what the memoised count must equal
    assert space.size(ctx) == len(every) == len({tuple(sorted(p.items())) for p in every}) > 500


@pytest.mark.parametrize("text, message", [
    ("dimensions: [1, 2", "not valid YAML"),
    ("- just a list", "a mapping with `name` and `dimensions`"),
    ("dimensions:\n  tp: {choices: [1, 2]}\nfoo: 1\n", r":3 \(foo\): unknown top-level"),
    ("dimensions:\n  tp: {choices: [1, 2]}\n  tpp: {choices: [1]}\n",
     r":3 \(dimensions.tpp\): unknown dimension 'tpp'.*allowed: tp, pp"),
    ("dimensions:\n  actor_rollout_ref.actor.megatron.tensor_model_parallel_size: {choices: [1]}\n",
     "that verl key is the parameter 'tp'"),
    ("dimensions:\n  tp: {choices: []}\n", "non-empty list"),
    ("dimensions:\n  tp: {choices: [1, two]}\n", "choice 'two' is not a int"),
    ("dimensions:\n  recompute: {choices: [none, everything]}\n", r"not one of \['none', 'selective', 'full'\]"),
    ("dimensions:\n  gpu_memory_utilization: {choices: [0.5, 1.5]}\n", "between 0 and 1"),
    ("dimensions:\n  vpp: {choices: [null, 2], when: {pp: {gt: 1}}}\n  pp: {choices: [1, 2]}\n",
     "must be an earlier dimension"),
    ("dimensions:\n  pp: {choices: [1, 2]}\n  vpp: {choices: [2], when: {pp: {bigger: 1}}}\n", "use one operator"),
    ("dimensions:\n  tp: {choices: [1], range: [1, 2]}\n", "unknown key"),
])
def test_malformed_space_says_where_and_what_is_allowed(text, message):
    with pytest.raises(SpaceError, match=message):
        parse_space(text, "my_space.yaml")


@pytest.mark.parametrize("name", ["train_batch_size", "ppo_mini_batch_size", "rollout_n", "max_response_length", "lr"])
def test_space_may_not_touch_the_training_itself(name):
    with pytest.raises(SpaceError, match="changes the training itself.*job file"):
        parse_space(f"dimensions:\n  {name}: {{choices: [1, 2]}}\n", "s.yaml")


def test_missing_space_file_lists_builtins():
    with pytest.raises(SpaceError, match="dense, moe"):
        load_space("/nonexistent/space.yaml")
