import dataclasses

from autotune.candidate import Candidate
from autotune.cluster import get_gpu_type
from autotune.estimate.memory import estimate_memory
from autotune.estimate.throughput import estimate_throughput
from autotune.job import Job
from tests.conftest import make_setup

BASE = {"use_dynamic_bsz": True, "tp": 4, "rollout_tp": 1, "ppo_max_token_len_per_gpu": 20480,
        "log_prob_max_token_len_per_gpu": 61440, "use_fused_kernels": True}


def est(setup, **kw):
    c = Candidate.from_params({**BASE, **kw})
    return estimate_throughput(setup.model, setup.cluster, setup.job, c)


def test_measured_dapo7b_row5_is_reproduced_roughly(setup7b):
    # dapo7b.csv #5 (8xH100, tp4, rollout tp1): step 450 s, gen 144, update 203, old_logp 84, reshard 3.2.
    t = est(setup7b, param_offload=True, optimizer_offload=True, gpu_memory_utilization=0.6,
            max_num_batched_tokens=10240)
    phases = dict(t.phases)
    assert 300 < t.step_time < 600
    assert 150 < phases["update_actor"] < 260 and 60 < phases["old_log_prob"] < 120
    assert t.throughput == t.tokens_per_step / (t.step_time * 8)


def test_known_directions(setup7b):
    base = est(setup7b)
    assert est(setup7b, recompute="full").phases[2][1] > base.phases[2][1]  # recompute costs update time
    assert est(setup7b, ppo_max_token_len_per_gpu=10240).throughput < base.throughput  # smaller GEMMs
    assert est(setup7b, tp=4, pp=2).throughput < base.throughput  # bubble
    assert est(setup7b, gpu_memory_utilization=0.3).throughput < base.throughput  # fewer KV blocks
    assert est(setup7b, param_offload=True).throughput < base.throughput  # PCIe traffic


def test_ref_model_adds_a_phase():
    s = make_setup(job=Job.from_mapping({"actor_rollout_ref.actor.use_kl_loss": True}))
    names = [k for k, _ in est(s).phases]
    assert "ref" in names
    assert "ref" not in [k for k, _ in est(make_setup()).phases]


def test_more_gpus_of_the_same_kind_give_shorter_steps(setup7b):
    big = dataclasses.replace(setup7b, cluster=dataclasses.replace(setup7b.cluster, nodes=4))
    assert est(big).step_time < est(setup7b).step_time


def test_faster_gpu_is_faster(setup7b):
    h20 = dataclasses.replace(setup7b, cluster=dataclasses.replace(setup7b.cluster, gpu=get_gpu_type("h20")))
    c = Candidate.from_params(BASE)
    assert estimate_throughput(h20.model, h20.cluster, h20.job, c, estimate_memory(
        h20.model, h20.cluster, h20.job, c)).throughput < est(setup7b).throughput
