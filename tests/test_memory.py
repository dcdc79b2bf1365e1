import dataclasses
from pathlib import Path

import pytest

from autotune.candidate import Candidate
from autotune.cluster import GIB
from autotune.estimate.memory import (
    DEFAULT_CALIBRATION,
    MCORE_013_CALIBRATION,
    activation_bytes,
    estimate_memory,
    kv_bytes_per_token,
    model_state_bytes,
    params_per_gpu,
)
from benchmarks.throughput_rank import DEFAULT_REF, cluster_for, read_rows
from tests import real_counts
from tests.conftest import make_setup

DYN = {"use_dynamic_bsz": True, "rollout_tp": 1, "ppo_max_token_len_per_gpu": 16384,
       "log_prob_max_token_len_per_gpu": 32768}


def cand(**kw) -> Candidate:
    return Candidate.from_params({**DYN, **kw})


def test_distributed_optimizer_is_6_plus_12_over_d_bytes_per_param(setup7b):
    c = cand(tp=1)
    states = model_state_bytes(setup7b.model, setup7b.cluster, c)
    p = params_per_gpu(setup7b.model, c).total
    assert p == pytest.approx(setup7b.model.total_params(), rel=1e-6)
    assert sum(states.values()) == pytest.approx(p * (6 + 12 / 8))
    assert states["params"] == pytest.approx(2 * p) and states["grads"] == pytest.approx(4 * p)


def test_tp_and_pp_shard_the_weights(setup7b):
    m = setup7b.model
    full = params_per_gpu(m, cand(tp=1)).total
    assert params_per_gpu(m, cand(tp=2)).total == pytest.approx(full / 2, rel=0.01)
    # PP: a stage holds half the layers plus one of embedding / output layer.
    assert params_per_gpu(m, cand(tp=1, pp=2)).total == pytest.approx(
        (full - m.embedding_params()) / 2 + m.embedding_params() / 2, rel=0.01)


def test_offload_lowers_rollout_residue_not_update_peak(setup7b):
    base = estimate_memory(setup7b.model, setup7b.cluster, setup7b.job, cand(tp=4))
    off = estimate_memory(setup7b.model, setup7b.cluster, setup7b.job, cand(tp=4, param_offload=True,
                                                                               optimizer_offload=True))
    assert off.moment("rollout").peak < base.moment("rollout").peak - 10 * GIB
    assert off.moment("update").peak == pytest.approx(base.moment("update").peak)
    rollout = dict(off.moment("rollout").terms)
    assert rollout["params"] == rollout["grads"] == rollout["optimizer"] == 0


def test_selective_recompute_shortens_the_update_not_a_log_prob_pass(setup7b):
    """Recompute only drops what a backward would keep: a forward-only pass holds its layer's MLP tensors whatever
    the recompute modules (the 3B and 7B trials with `core_attn,mlp` measured old_log_prob 10-11% above a model that
    dropped them)."""
    m, cl, job = setup7b.model, setup7b.cluster, setup7b.job
    plain = estimate_memory(m, cl, job, cand(tp=2))
    rc = estimate_memory(m, cl, job, cand(tp=2, recompute="selective", recompute_modules="core_attn,mlp"))
    acts = [{n: dict(est.moment(n).terms)["activations"] for n in ("old_log_prob", "update")} for est in (plain, rc)]
    assert acts[1]["old_log_prob"] == pytest.approx(acts[0]["old_log_prob"])
    assert acts[1]["update"] < 0.5 * acts[0]["update"]


def test_fused_kernels_shrink_logits(setup7b):
    plain = estimate_memory(setup7b.model, setup7b.cluster, setup7b.job, cand(tp=2))
    fused = estimate_memory(setup7b.model, setup7b.cluster, setup7b.job, cand(tp=2, use_fused_kernels=True))
    logits = dict(plain.moment("update").terms)["logits"]
    # unfused: tokens * vocab/TP * bytes per element (MEMORY.md estimates 10 B; the H200 probes measured ~6 B)
    assert logits == pytest.approx(16384 * 152064 / 2 * DEFAULT_CALIBRATION.logits_bytes)
    assert dict(fused.moment("update").terms)["logits"] < logits / 10


def test_recompute_order_of_activations(setup7b):
    s, m, cl, j = setup7b, setup7b.model, setup7b.cluster, setup7b.job
    cal = DEFAULT_CALIBRATION
    none = activation_bytes(m, cl, j, cand(tp=2), cal)
    sel = activation_bytes(m, cl, j, cand(tp=2, recompute="selective"), cal)
    sel_mlp = activation_bytes(m, cl, j, cand(tp=2, recompute="selective", recompute_modules="core_attn,mlp"), cal)
    full = activation_bytes(m, cl, j, cand(tp=2, recompute="full"), cal)
    assert full < sel_mlp < sel < none
    assert sel > 0.85 * none  # selective core_attn saves little with flash attention (MEMORY.md)
    assert full < 0.2 * none
    del s


def test_cp_and_pipeline_in_flight(setup7b):
    m, cl, j = setup7b.model, setup7b.cluster, setup7b.job
    cal = DEFAULT_CALIBRATION
    micro = {"use_dynamic_bsz": False, "ppo_micro_batch_size_per_gpu": 1, "log_prob_micro_batch_size_per_gpu": 1,
             "rollout_tp": 1}
    one = activation_bytes(m, cl, j, Candidate.from_params({**micro, "tp": 2}), cal)
    cp2 = activation_bytes(m, cl, j, Candidate.from_params({**micro, "tp": 2, "cp": 2}), cal)
    assert cp2 == pytest.approx(one / 2)
    # 1F1B: the first of PP stages holds PP micro-batches of 1/PP of the layers: the same as no PP.
    pp2 = activation_bytes(m, cl, j, Candidate.from_params({**micro, "tp": 2, "pp": 2}), cal)
    assert pp2 == pytest.approx(one)
    vpp = activation_bytes(m, cl, j, Candidate.from_params({**micro, "tp": 2, "pp": 2, "vpp": 2}), cal)
    assert vpp == pytest.approx(one * (1 + 1 / 4))


def test_vllm_budget_and_kv_cache(setup7b):
    m = setup7b.model
    assert kv_bytes_per_token(m, 1) == 2 * 28 * 4 * 128 * 2
    assert kv_bytes_per_token(m, 8) == 2 * 28 * 1 * 128 * 2  # KV heads replicate past their count
    lo = estimate_memory(m, setup7b.cluster, setup7b.job, cand(tp=4, gpu_memory_utilization=0.4))
    hi = estimate_memory(m, setup7b.cluster, setup7b.job, cand(tp=4, gpu_memory_utilization=0.8))
    extra = hi.moment("rollout").peak - lo.moment("rollout").peak
    assert extra == pytest.approx(0.4 * setup7b.cluster.gpu.memory_bytes)
    assert hi.kv_cache_bytes > lo.kv_cache_bytes
    tiny = estimate_memory(m, setup7b.cluster, setup7b.job, cand(tp=4, rollout_tp=1, gpu_memory_utilization=0.2))
    assert not tiny.kv_fits and any("vllm_kv_cache" in r for r in tiny.reasons())


def test_breakdown_sums_to_peak_and_names_the_binding_moment(setup7b):
    est = estimate_memory(setup7b.model, setup7b.cluster, setup7b.job, cand(tp=1))
    d = est.as_dict()
    assert set(d["moments"]) == {"vllm_start", "reshard", "rollout", "old_log_prob", "update"}
    for mom in d["moments"].values():
        assert sum(mom["terms_gib"].values()) == pytest.approx(mom["peak_gib"], abs=0.01)
    # TP=1 without offload: 7.6B params * (6 + 12/8) B stay resident when vLLM starts, and the update is too big.
    assert not est.fits
    assert est.reasons()[0].startswith("vllm_start") and any(r.startswith("update") for r in est.reasons())


def test_no_measured_qwen25_7b_configuration_is_predicted_to_oom():
    """The DAPO runs were verl 0.4 on Megatron-core 0.13: judged with that version's SwiGLU widths."""
    rows = [r for r in read_rows(Path(DEFAULT_REF) / "dapo7b.csv") if r.step]
    assert len(rows) >= 10
    for r in rows:
        s = dataclasses.replace(make_setup("qwen2.5-7b"), cluster=cluster_for(r), job=r.job)
        est = estimate_memory(s.model, s.cluster, s.job, r.cand, MCORE_013_CALIBRATION)
        assert est.fits, (r.number, r.cand.layout(), est.reasons())


def _real_trials() -> list[tuple[str, str, object, dict]]:
    """(source, status, the model's evaluation at the measured lengths, the measured step's metrics) of every real
    verl 0.9.1 trial (tests/data/real_verl_gpu/)."""
    from autotune import verl
    from autotune.estimate import evaluate
    from autotune.estimate.lengths import at_step
    from benchmarks.real_cases import DATA, measured_trials

    out = []
    for db, store, setup, row in measured_trials(DATA.glob("*/*.db")):
        job = setup.job.with_node_defaults((row.extra or {}).get("job_defaults") or {})
        at = next((dict(s.metrics) for s in store.steps(row.id) if s.step == setup.measure_step), {})
        ln = at_step(job, measured=[at]) if at.get(verl.M_RESPONSE_LENGTH_MEAN) is not None else None
        ev = evaluate(setup.model, setup.cluster, job, Candidate(**row.params), setup.objective, ln, setup.constants)
        out.append((f"{db.parent.name}/{row.study}#{row.number}", row.status, ev, {**at, "nvml": row.peak_memory_gib}))
    return out


TORCH = ("params", "grads", "optimizer", "activations", "logits")


def test_swiglu_keeps_what_megatrons_unfused_glu_saves():
    """verl leaves bias_activation_fusion off, so megatron's mlp.py `glu` runs: fc1's output (2f), silu's output
    (f), `x_linear + glu_linear_offset` (f) and the product fc2 saves (f), bf16: 10f bytes a token; Megatron-core
    0.13's glu had no offset copy (8f)."""
    from autotune.estimate.memory import PROBE_CALIBRATION, act_bytes_per_token_layer

    m = make_setup("qwen2.5-7b").model
    c = cand(tp=1)
    h, q, kv, f = m.hidden_size, m.q_size, m.kv_size, m.ffn_hidden_size
    assert act_bytes_per_token_layer(m, c, DEFAULT_CALIBRATION, False) == 8 * h + 6 * q + 4 * kv + 10 * f
    assert act_bytes_per_token_layer(m, c, MCORE_013_CALIBRATION, False) == 8 * h + 6 * q + 4 * kv + 8 * f
    assert PROBE_CALIBRATION.act_f == 8.0 and PROBE_CALIBRATION.fragmentation == 0.08  # the probes' own fit


def test_the_7b_first_pick_that_ran_out_of_memory_is_predicted_not_to_fit():
    """c-7b #0 (H200): "Tried to allocate 294.00 MiB ... 134.06 GiB is allocated by PyTorch", in glu during the
    forward of update_actor's second mini-batch (the Adam moments exist). 294 MiB is one f-wide bf16 tensor of an
    8137-token micro-batch; what was allocated beyond the weights, fp32 grads and optimizer is that micro-batch's
    activations, and only 10f a token can hold it within 28 layers (6f's whole stack is smaller)."""
    seven = next(ev for src, status, ev, _ in _real_trials() if "c-7b#0" in src)
    upd = dict(seven.memory.moment("update").terms)
    assert not seven.memory.fits and not seven.memory.moment("update").fits
    states = (upd["params"] + upd["grads"] + upd["optimizer"]) / GIB
    assert states == pytest.approx(85.1, abs=0.1)
    m = make_setup("qwen2.5-7b").model
    h, q, kv, f = m.hidden_size, m.q_size, m.kv_size, m.ffn_hidden_size
    tokens = 294 * 2**20 / (2 * f)  # 294 MiB = tokens x f x 2 B
    allocated_acts = 134.06 - states
    assert 28 * (8 * h + 6 * q + 4 * kv + 10 * f) * tokens / GIB > allocated_acts
    assert 28 * (8 * h + 6 * q + 4 * kv + 6 * f) * tokens / GIB < allocated_acts


def test_every_real_trial_that_ran_is_predicted_within_8_percent():
    """Predicted peak against NVML's (every process on the GPU) for every real trial that ran, and the update's
    torch-managed memory against verl's own max_memory_allocated_gb. Since lease 40 the model holds verl's balanced
    partitions at a step's lengths and a log-prob pass's forward peak: the budgets well above their partitions (c-0.5b
    #0 and its re-runs, c-1.5b-h15 #0, +17-20 % before) are within 8 %. The exceptions are the four offloaded 0.5B
    trials without fused kernels (c-0.5b #2, c-0.5b-bc #2, c-0.5b-kw #1, c-0.5b-h68 #1):
    NVML's peak is step 1's allocator cache (verl's max_memory_reserved_gb 69.7 against 53.8 allocated), which the
    allocator frees before it runs out of memory; what tensors held is predicted within 3 %. Step 1 alone: verl 0.9.1
    turns the allocator's expandable segments on at the end of each weight sync (engine_workers.py, after
    update_weights), the first of which ends step 1, so step 1's log-prob pass fragments the logits' blocks (lease 68's
    c-0.5b-h68 #1: 73.7 GiB at step 1, 58.9 and 60.0 at steps 2-3; without offload #2 78.1 against 74.9 and 74.7)."""
    ran = [(src, ev, at) for src, status, ev, at in _real_trials() if status == "ok"]
    assert len(ran) == real_counts.MEASURED
    # lease 48's cut trial has no NVML peak: the lease's deadline stopped the tuner before the runner's buffered trace
    # reached its file (written line by line since); it is judged on its verdict alone
    assert [src for src, _, at in ran if at["nvml"] is None] == ["h200_2026-11-28_l48/c-1.5b-h44#5"]
    cached = ("c-0.5b#2", "c-0.5b-bc#2", "c-0.5b-kw#1", "c-0.5b-h68#1")
    for src, ev, at in ran:
        assert ev.memory.fits, src
        if at["nvml"] is None:
            continue
        err = ev.memory.peak / GIB / at["nvml"] - 1
        if src.endswith(cached):
            assert -0.13 < err < -0.08, (src, err)
            held = max(sum(v for k, v in mo.terms if k in TORCH) for mo in ev.memory.moments) / GIB
            assert held == pytest.approx(at["actor/perf/max_memory_allocated_gb"], rel=0.03), src
            assert at["actor/perf/max_memory_reserved_gb"] > 1.2 * at["actor/perf/max_memory_allocated_gb"]
        else:
            assert abs(err) < 0.08, (src, err)
    for name in ("c-1.5b#0", "c-3b#0", "c-3b#3"):
        src, ev, at = next(t for t in ran if t[0].endswith(name))
        torch = sum(v for k, v in ev.memory.moment("update").terms if k in TORCH) / GIB
        # within 6 %: the trial's largest allocation, where the model holds step 3's partitions (c-3b #3: -5 %)
        assert torch == pytest.approx(at["actor/perf/max_memory_allocated_gb"], rel=0.06), src


def test_a_log_prob_pass_holds_one_layers_mlp_over_the_residual_stream(setup7b):
    """A forward without grad frees each layer's tensors before the next: its peak is the MLP's (fc1's output and
    SwiGLU's temporaries, 10f) over the residual stream (8h), whatever the recompute."""
    from autotune.estimate.memory import forward_peak_bytes

    m = setup7b.model
    h, f = m.hidden_size, m.ffn_hidden_size
    assert forward_peak_bytes(m, cand(tp=1), DEFAULT_CALIBRATION) == 10 * f + 8 * h
    assert forward_peak_bytes(m, cand(tp=2, sequence_parallel=False), DEFAULT_CALIBRATION) == 10 * f / 2 + 8 * h
    assert forward_peak_bytes(m, cand(tp=2, sequence_parallel=True), DEFAULT_CALIBRATION) == (10 * f + 8 * h) / 2


def test_a_recomputed_mlp_is_held_again_in_its_backward(setup7b):
    """Selective `mlp` recompute saves the MLP's 10f a token in every layer but holds it again, with fc1's output
    gradient (4f), in the one layer whose backward runs."""
    from autotune.estimate.memory import recomputed_mlp_bytes

    m, cl, job = setup7b.model, setup7b.cluster, setup7b.job
    f = m.ffn_hidden_size
    mlp = cand(tp=2, recompute="selective", recompute_modules="core_attn,mlp")
    assert recomputed_mlp_bytes(m, mlp, DEFAULT_CALIBRATION) == 14 * f / 2
    assert recomputed_mlp_bytes(m, cand(tp=2, recompute="selective", recompute_modules="core_attn"),
                                DEFAULT_CALIBRATION) == 0.0
    assert recomputed_mlp_bytes(m, cand(tp=2), DEFAULT_CALIBRATION) == 0.0
    attn_only = cand(tp=2, recompute="selective", recompute_modules="core_attn")
    acts = [dict(estimate_memory(m, cl, job, c).moment("update").terms)["activations"] for c in (mlp, attn_only)]
    tokens = estimate_memory(m, cl, job, mlp).batching.update_tokens
    saved = 28 * 10 * f / 2 * tokens  # what dropping the MLP's tensors saves over the 7B's 28 layers
    assert acts[0] == pytest.approx(acts[1] - saved + 14 * f / 2 * tokens)
