"""Offload priced by what moves when (estimate/offload.py), and Megatron's CPU optimizer as a knob."""

from __future__ import annotations

import pytest
import yaml

from autotune import verl
from autotune.candidate import Candidate
from autotune.cli.imports import candidate_from_config
from autotune.cluster import GIB, Cluster, get_gpu_type
from autotune.estimate.memory import estimate_memory, model_state_bytes, ref_param_bytes
from autotune.estimate.offload import (
    DEFAULT_HOST_COPY,
    cpu_optimizer_seconds,
    gpu_optimizer,
    host_gbps,
    offload_seconds,
)
from autotune.estimate.throughput import estimate_throughput
from autotune.job import Job
from autotune.model import get_model
from autotune.results.export import launch_values, render
from autotune.results.labels import label
from autotune.search.space import value_error
from tests.conftest import make_setup

M7 = get_model("qwen2.5-7b")
H100x8 = Cluster(get_gpu_type("h100"), 8)
H200x1 = Cluster(get_gpu_type("h200"), 1)
DYN = dict(use_dynamic_bsz=True, rollout_tp=1, recompute="full")


def test_host_bandwidth_per_gpu_type_and_node():
    # Gen5 x16 at 80 %, two GPUs per switch uplink on an 8-GPU node; a lone GPU has its link to itself.
    assert host_gbps(H100x8) == pytest.approx(64 * 0.8 / 2)
    assert host_gbps(H200x1) == pytest.approx(64 * 0.8)
    assert host_gbps(Cluster(get_gpu_type("a100"), 8)) == pytest.approx(32 * 0.8 / 2)


def test_each_phase_moves_what_verl_moves():
    c = Candidate.from_params(dict(tp=4, param_offload=True, optimizer_offload=True))
    states = model_state_bytes(M7, H100x8, c)
    ref = ref_param_bytes(M7, c)
    bw = host_gbps(H100x8) * 1e9
    s = offload_seconds(states, ref, c, H100x8)
    w = 2 * states["params"] / bw  # bf16 weights in and out
    assert s["old_log_prob"] == pytest.approx(w) and s["update_weights"] == pytest.approx(w)
    opt = 2 * (states["optimizer_master"] + states["optimizer_adam"]) / bw
    assert s["update_actor"] == pytest.approx(w + opt)  # gradients are freed and re-zeroed, never copied
    assert s["ref"] == pytest.approx(2 * ref / bw)  # the reference follows the actor's param_offload
    only_opt = offload_seconds(states, ref, Candidate.from_params(dict(tp=4, optimizer_offload=True)), H100x8)
    assert set(only_opt) == {"update_actor"} and only_opt["update_actor"] == pytest.approx(opt)
    assert offload_seconds(states, ref, Candidate.from_params(dict(tp=4)), H100x8) == {}


def test_offload_time_lands_in_the_phases():
    job = Job.from_mapping({verl.USE_KL_LOSS: True})
    on = Candidate.from_params(dict(tp=4, **DYN, param_offload=True, optimizer_offload=True))
    off = Candidate.from_params(dict(tp=4, **DYN))
    a = dict(estimate_throughput(M7, H100x8, job, on).phases)
    b = dict(estimate_throughput(M7, H100x8, job, off).phases)
    states = model_state_bytes(M7, H100x8, on)
    moved = offload_seconds(states, ref_param_bytes(M7, on), on, H100x8)
    for phase, secs in moved.items():
        assert a[phase] - b[phase] == pytest.approx(secs)
    assert a["gen"] == b["gen"]


def test_cpu_optimizer_candidate_keys_and_export():
    c = Candidate.from_params({"optimizer_cpu_offload": True})
    assert c.optimizer_offload_fraction == 1.0  # on: everything unless told
    assert Candidate.from_params({"optimizer_offload_fraction": 0.5}).optimizer_offload_fraction is None  # off
    assert Candidate().normalized().key() == Candidate.from_params({"optimizer_offload_fraction": 0.3}).key()
    assert c.key() != Candidate().key()
    o = Candidate.from_params({"optimizer_cpu_offload": True, "optimizer_offload_fraction": 0.5}).verl_overrides()
    over = "++actor_rollout_ref.actor.optim.override_optimizer_config."
    assert o[over + "optimizer_cpu_offload"] is True and o[over + "optimizer_offload_fraction"] == 0.5
    assert o[over + "overlap_cpu_optimizer_d2h_h2d"] is True
    assert o["actor_rollout_ref.actor.optim.use_precision_aware_optimizer"] is True
    assert not any("optim." in k for k in Candidate().verl_overrides())  # off: verl's defaults, nothing written
    setup = make_setup()
    values = launch_values(Job.from_mapping({over.lstrip("+") + "optimizer_offload_fraction": 0.2}), setup.cluster,
                           Candidate.from_params({"optimizer_cpu_offload": True, "optimizer_offload_fraction": 0.5}))
    assert values[over + "optimizer_offload_fraction"] == 0.5
    assert over.lstrip("+") + "optimizer_offload_fraction" not in values  # the candidate's key replaces the job's
    assert verl.param_for_key(over.lstrip("+") + "optimizer_offload_fraction") == "optimizer_offload_fraction"
    # A run's resolved config (no Hydra prefixes) gives the candidate back.
    cfg = {over.lstrip("+") + "optimizer_cpu_offload": True, over.lstrip("+") + "optimizer_offload_fraction": 0.5,
           "actor_rollout_ref.actor.megatron.tensor_model_parallel_size": 2}
    back = candidate_from_config(cfg)
    assert back.optimizer_cpu_offload and back.optimizer_offload_fraction == 0.5


def test_cpu_optimizer_in_space_and_label():
    assert value_error("optimizer_offload_fraction", 1.5) and value_error("optimizer_offload_fraction", 0.5) is None
    dims = {d.name: d for d in make_setup().space.dimensions}
    assert dims["optimizer_cpu_offload"].choices == (False, True)
    assert dims["optimizer_offload_fraction"].when[0].name == "optimizer_cpu_offload"
    on = Candidate.from_params({"optimizer_cpu_offload": True, "optimizer_offload_fraction": 0.5})
    assert "cpu-adam0.5" in label(on, Candidate())
    assert "adam" not in label(Candidate(), Candidate())


def test_cpu_optimizer_memory():
    c = Candidate.from_params({"optimizer_cpu_offload": True, "optimizer_offload_fraction": 0.5})
    states = model_state_bytes(M7, H200x1, c)
    master, adam = gpu_optimizer(states, c)
    assert master == pytest.approx(states["optimizer_master"] / 2)
    assert adam == pytest.approx(states["optimizer_adam"] / 2)
    mem = estimate_memory(M7, H200x1, Job.default(), c)
    assert dict(mem.moment("update").terms)["optimizer"] == pytest.approx(master + adam)
    assert any("CPU optimizer: 50%" in n for n in mem.notes)


def test_7b_on_one_h200_fits_only_with_the_cpu_optimizer():
    """The user's example on one GPU: 12 bytes/param of fp32 master + Adam (~85 GiB) do not fit beside the rest."""
    job = Job.default()
    off = Candidate.from_params(DYN)
    on = Candidate.from_params({**DYN, "optimizer_cpu_offload": True})
    assert model_state_bytes(M7, H200x1, off)["optimizer_adam"] / GIB > 50
    assert not estimate_memory(M7, H200x1, job, off).fits
    assert estimate_memory(M7, H200x1, job, on).fits


def test_cpu_optimizer_time():
    c = Candidate.from_params({**DYN, "optimizer_cpu_offload": True})
    states = model_state_bytes(M7, H200x1, c)
    params = states["optimizer_master"] / 4
    secs = cpu_optimizer_seconds(states, c, H200x1)
    # The CPU AdamW (5.4e8 params/s, fitted on the real trials' pairs) is slower than the copies: it sets the time.
    assert secs == pytest.approx(params / DEFAULT_HOST_COPY.cpu_adam_params_per_s)
    assert cpu_optimizer_seconds(states, Candidate.from_params(DYN), H200x1) == 0.0
    a = dict(estimate_throughput(M7, H200x1, Job.default(), c).phases)
    b = dict(estimate_throughput(M7, H200x1, Job.default(), Candidate.from_params(DYN)).phases)
    job = Job.default()  # one CPU step per optimizer step: one per mini-batch
    assert a["update_actor"] - b["update_actor"] == pytest.approx(secs * job.optimizer_steps)


def test_export_writes_the_cpu_optimizer():
    from autotune.results.export import ExportInfo

    c = Candidate.from_params({"optimizer_cpu_offload": True, "optimizer_offload_fraction": 0.5})
    info = ExportInfo("s", 1, 1.0, False, c.layout(), "m")
    values = yaml.safe_load(render("yaml", info, Job.default(), make_setup().cluster, c))
    text = yaml.safe_dump(values)
    assert "optimizer_cpu_offload" in text and "optimizer_offload_fraction" in text
