"""The memory model's moments of a verl GRPO step, term by term against a hand calculation; the reference model,
vLLM's sleep, sequence lengths and the two verdicts. Pure functions: no GPU, no database."""

import math
from dataclasses import replace

import pytest

from autotune.candidate import Candidate
from autotune.cluster import GIB, Cluster, get_gpu_type
from autotune.estimate import Evaluation, evaluate, memory_record, memory_verdict, oom_response_length
from autotune.estimate.lengths import Lengths, LengthsError, at_step, prompt_lengths_from_data, worst_case
from autotune.estimate.memory import DEFAULT_CALIBRATION as CAL
from autotune.estimate.memory import estimate_memory
from autotune.job import Job
from autotune.model import get_model
from autotune.search.split import prefer_safe

M = get_model("qwen2.5-7b")
H100x8 = Cluster(get_gpu_type("h100"), 8, 1)
KL_JOB = Job.from_mapping({"actor_rollout_ref.actor.use_kl_loss": True})  # 2k prompt, 8k response, n 16
def mbs_candidate() -> Candidate:
    """No dynamic batching: a micro-batch grows with the responses."""
    return Candidate.from_params({"use_dynamic_bsz": False, "ppo_micro_batch_size_per_gpu": 2,
                                  "log_prob_micro_batch_size_per_gpu": 4, "param_offload": True,
                                  "optimizer_offload": True, "rollout_tp": 1, "use_fused_kernels": True}, HAND)


HAND = Candidate.from_params({"tp": 2, "rollout_tp": 2, "use_dynamic_bsz": True, "ppo_max_token_len_per_gpu": 16384,
                              "log_prob_max_token_len_per_gpu": 32768, "gpu_memory_utilization": 0.5})
SAFE = Candidate.from_params({"tp": 4, "param_offload": True, "optimizer_offload": True, "rollout_tp": 1}, HAND)


def terms(est, moment: str) -> dict[str, float]:
    return dict(est.moment(moment).terms)


def test_every_term_against_a_hand_calculation():
    """Qwen2.5-7B (h 3584, 28 layers, 28 q / 4 kv heads of 128, f 18944, V 152064, untied, qkv bias), 8 x H100,
    TP 2 (SP), no offload, KL loss (a reference model), dynamic batching 16k / 32k, vLLM TP 2 at 0.5."""
    h, L, f, V, q, kv = 3584, 28, 18944, 152064, 28 * 128, 4 * 128
    attn = h * (q + 2 * kv) + q * h + (q + 2 * kv)  # qkv projections + output + qkv bias
    layer = (attn + 3 * h * f) / 2 + 2 * h  # TP shards the matrices, norms replicate
    P = L * layer + 2 * V * h / 2  # embedding + untied output layer, each sharded by TP
    d = 8 / 2  # distributed optimizer shards over DP = 8 / TP
    total = 81559 / 1024 * GIB
    ctx, nccl, asleep = 2 * 1.5 * GIB, 1.2 * GIB, 1.0 * GIB + 0.3 * GIB
    budget = 0.5 * total
    est = estimate_memory(M, H100x8, KL_JOB, HAND)

    assert terms(est, "vllm_start") == pytest.approx({
        "params": 2 * P, "grads": 4 * P, "optimizer": 4 * P / d,  # Adam moments come at the first step
        "ref_params": 2 * P, "cuda_contexts": ctx, "nccl": nccl, "vllm_budget": budget})
    vllm_weights = 2 * M.total_params() / 2
    assert terms(est, "reshard") == pytest.approx({
        "params": 2 * P, "grads": 4 * P, "optimizer": 12 * P / d, "ref_params": 2 * P,
        "reshard_buffers": 2048 * 2**20 + 2 * V * h, "vllm_weights": vllm_weights, "vllm_asleep": asleep,
        "cuda_contexts": ctx, "nccl": nccl})
    assert terms(est, "rollout") == pytest.approx({
        "params": 2 * P, "grads": 4 * P, "optimizer": 12 * P / d, "ref_params": 2 * P, "vllm_budget": budget,
        "cuda_contexts": ctx, "nccl": nccl})

    # Per token per layer (verl's widths 8h + 6q + 4kv + 10f: SwiGLU as megatron's unfused glu keeps it; all over
    # TP with SP); a forward pass holds one layer's MLP temporaries over the residual stream, 10f + 8h.
    a_layer = (6 * q + 4 * kv + 10 * f) / 2 + 8 * h / 2
    s_lp = 32768
    lp_acts, lp_logits = s_lp * (10 * f + 8 * h) / 2, s_lp * V / 2 * 12
    # Allocator slack: none over what tensors hold, 10% of the materialized logits.
    lp = {"params": 2 * P, "grads": 4 * P, "optimizer": 12 * P / d, "ref_params": 2 * P, "activations": lp_acts,
          "logits": lp_logits, "fragmentation": 0.1 * lp_logits, "cuda_contexts": ctx,
          "nccl": nccl, "vllm_asleep": asleep}
    assert terms(est, "old_log_prob") == pytest.approx(lp)
    assert terms(est, "ref_log_prob") == pytest.approx(lp)  # nothing offloaded: the same things on the GPU

    s = 16384
    acts, logits = s * L * a_layer, s * V / 2 * 10  # verl's bf16 logits, their fp32 copy, the fp32 log-softmax
    assert terms(est, "update") == pytest.approx({
        "params": 2 * P, "grads": 4 * P, "optimizer": 12 * P / d, "ref_params": 2 * P, "activations": acts,
        "logits": logits, "fragmentation": 0.1 * logits, "cuda_contexts": ctx,
        "nccl": nccl, "vllm_asleep": asleep})

    # vLLM 0.24: the KV cache is the share minus weights, the profile run's activations, non-torch memory and
    # the CUDA-graph estimate (all inside gpu_memory_utilization x total).
    vllm_acts = 8192 * 2 * (3 * f + 4 * h + q) / 2 + 256 * V * 4
    assert est.kv_cache_bytes == pytest.approx(budget - vllm_weights - vllm_acts - 0.3 * GIB - 1.0 * GIB)
    assert est.kv_needed_bytes == math.ceil(10240 / 16) * 16 * (2 * 28 * 2 * 128 * 2)
    for mom in est.moments:
        assert mom.peak == pytest.approx(sum(v for _, v in mom.terms))


def test_reference_model_is_where_verl_keeps_it():
    no_ref = estimate_memory(M, H100x8, Job.default(), HAND)
    assert "ref_log_prob" not in {m.name for m in no_ref.moments}
    assert all("ref_params" not in dict(m.terms) for m in no_ref.moments)
    ref = 2 * M.total_params() / 2  # the bf16 weights over TP 2 (close: norms replicate)
    # verl's default: the reference follows the actor's param_offload (trainer/config/ref/megatron_ref.yaml).
    off = Candidate.from_params({"param_offload": True, "optimizer_offload": True}, HAND)
    est = estimate_memory(M, H100x8, KL_JOB, off)
    for moment in ("vllm_start", "reshard", "rollout", "old_log_prob", "update"):
        assert terms(est, moment)["ref_params"] == 0, moment
    assert terms(est, "ref_log_prob")["ref_params"] == pytest.approx(ref, rel=0.01)
    # ...unless the ref's own key says otherwise: then it stays through the whole step.
    kept = estimate_memory(M, H100x8, KL_JOB, Candidate.from_params({"ref_param_offload": False}, off))
    assert terms(kept, "rollout")["ref_params"] == pytest.approx(ref, rel=0.01)
    assert kept.moment("update").peak == pytest.approx(est.moment("update").peak + terms(kept, "update")["ref_params"])


def test_offload_decides_what_the_actor_keeps_at_each_moment():
    off = Candidate.from_params({"param_offload": True, "optimizer_offload": True}, HAND)
    est = estimate_memory(M, H100x8, Job.default(), off)
    full = estimate_memory(M, H100x8, Job.default(), HAND)
    assert terms(est, "rollout")["params"] == terms(est, "rollout")["grads"] == terms(est, "rollout")["optimizer"] == 0
    # eval mode loads the params only; resharding loads them to export; the update loads everything.
    assert terms(est, "old_log_prob")["grads"] == 0 and terms(est, "old_log_prob")["params"] > 0
    assert terms(est, "reshard")["params"] == terms(full, "reshard")["params"] and terms(est, "reshard")["grads"] == 0
    assert est.moment("update").peak == pytest.approx(full.moment("update").peak)


def test_vllm_sleeps_unless_free_cache_engine_is_off():
    est = estimate_memory(M, H100x8, Job.default(), HAND)
    assert terms(est, "update")["vllm_asleep"] == pytest.approx(CAL.cudagraph_pool + CAL.vllm_nontorch)
    eager = estimate_memory(M, H100x8, Job.from_mapping({"actor_rollout_ref.rollout.enforce_eager": True}), HAND)
    assert terms(eager, "update")["vllm_asleep"] == pytest.approx(CAL.vllm_nontorch)
    awake = estimate_memory(M, H100x8, Job.from_mapping({"actor_rollout_ref.rollout.free_cache_engine": False}), HAND)
    assert terms(awake, "update")["vllm_budget"] == pytest.approx(0.5 * H100x8.gpu.memory_bytes)
    assert awake.moment("update").peak > est.moment("update").peak + 30 * GIB


def test_lengths_move_the_micro_batch_as_verl_partitions_it():
    """Dynamic batching: at a step's lengths verl's balanced partition of the mini-batch (a little under the budget
    here), at the worst case the budget; without it the sequences themselves."""
    job = Job.default()
    short = Lengths(300, 1000, 1200, 3000)
    dyn_w, dyn_s = (estimate_memory(M, H100x8, job, HAND, lengths=ln) for ln in (None, short))
    tokens = job.ppo_mini_batch_size * job.rollout_n / (8 / HAND.tp) * short.seq_mean
    part = tokens / math.ceil(tokens / HAND.ppo_max_token_len_per_gpu)
    ratio = terms(dyn_s, "update")["activations"] / terms(dyn_w, "update")["activations"]
    assert ratio == pytest.approx(part / HAND.ppo_max_token_len_per_gpu) and ratio < 1
    assert "whatever the lengths" in dyn_s.bound
    mbs = Candidate.from_params({"use_dynamic_bsz": False, "ppo_micro_batch_size_per_gpu": 2,
                                 "log_prob_micro_batch_size_per_gpu": 4}, HAND)
    w, s = (estimate_memory(M, H100x8, job, mbs, lengths=ln) for ln in (None, short))
    # micro-batch of 2: one sequence of the step's longest and one of mean length (unpadded), vs 2 x 10240.
    ratio = terms(s, "update")["activations"] / terms(w, "update")["activations"]
    assert ratio == pytest.approx((1500 + 4000) / (2 * 10240))
    assert "grows with the responses" in s.bound
    assert w.lengths == worst_case(job) and w.lengths.worst_case


def test_at_step_lengths_come_from_the_best_source():
    job = Job.default()
    assert at_step(job).worst_case
    est = at_step(job, response_length=1500)
    assert (est.response_mean, est.response_max, est.prompt_max) == (1500, 3000, 2048)
    assert "--response-length 1500" in est.sources[0] and not est.worst_case
    measured = [{"response_length/mean": 900.0, "response_length/max": 4100.0, "prompt_length/mean": 300.0,
                 "prompt_length/max": 1000.0}, {"response_length/mean": 1100.0, "response_length/max": 3900.0}]
    m = at_step(job, response_length=1500, measured=measured)  # a measurement beats the estimate
    assert (m.response_mean, m.response_max, m.prompt_mean, m.prompt_max) == (1100, 4100, 300, 1000)
    assert "measured response_length/mean" in m.sources[0]
    with pytest.raises(LengthsError, match="--response-length 9000"):
        at_step(job, response_length=9000)


def test_prompt_lengths_from_the_jobs_parquet(tmp_path):
    pa = pytest.importorskip("pyarrow")  # verl's dependency; autotune reads parquet only where it is installed
    import pyarrow.parquet as pq

    chats = [[{"role": "user", "content": "x" * 400}], [{"role": "user", "content": "y" * 1200}]]
    pq.write_table(pa.table({"prompt": chats}), tmp_path / "train.parquet")
    job = Job.from_mapping({"data.train_files": str(tmp_path / "train.parquet")})
    mean, mx, src = prompt_lengths_from_data(job)
    assert (mean, mx) == (208.0, 308.0)  # 4 characters a token + 8 a message, no tokenizer here
    assert "2 rows of train.parquet" in src and "approximated" in src
    assert prompt_lengths_from_data(Job.default()) is None
    assert at_step(job, prompts=(mean, mx, src)).prompt_max == 308.0


def test_fits_now_but_not_at_the_worst_case_says_when():
    mbs = mbs_candidate()
    job = Job.default()
    ln = at_step(job, response_length=1500)
    ev = evaluate(M, H100x8, job, mbs, lengths=ln)
    assert ev.feasible and not ev.worst_fits and not ev.safe
    n, moment = oom_response_length(M, H100x8, job, mbs, ln)
    assert moment == "update"
    at_n = estimate_memory(M, H100x8, job, mbs, lengths=Lengths(2048, 2048, n, n))
    before = estimate_memory(M, H100x8, job, mbs, lengths=Lengths(2048, 2048, n - 64, n - 64))
    assert not at_n.fits and before.fits  # the bisection's answer, to 64 tokens
    v = memory_verdict(M, H100x8, job, ev, 3, ln)
    assert v["verdict"] == f"fits at step 3; OOM in update_actor once responses reach {n} tokens"
    rec = memory_record(M, H100x8, job, ev, 3, ln)
    assert rec["fits"] and not rec["worst_case"]["fits"] and rec["oom_response_length"] == n
    assert set(rec["moment_peaks_gib"]) == {"vllm_start", "reshard", "rollout", "old_log_prob", "update"}
    assert rec["lengths"]["response_mean"] == 1500 and rec["worst_case"]["lengths"]["worst_case"]
    safe = evaluate(M, H100x8, job, SAFE, lengths=ln)
    assert memory_verdict(M, H100x8, job, safe, 3, ln)["verdict"].endswith("the longest sequences the job allows")


def test_the_study_prefers_the_safe_one_among_equals():
    mbs = mbs_candidate()
    ln = at_step(Job.default(), response_length=1500)
    risky = evaluate(M, H100x8, Job.default(), mbs, lengths=ln)
    safe = evaluate(M, H100x8, Job.default(), SAFE, lengths=ln)
    assert risky.feasible and not risky.safe and safe.safe

    def at(ev: Evaluation, thr: float) -> tuple[str, Evaluation]:
        t = ev.throughput
        return (f"{thr}", replace(ev, throughput=replace(t, tokens_per_step=t.tokens_per_step * thr / t.throughput)))

    ranked = prefer_safe([at(risky, 100.0), at(safe, 99.0), at(safe, 90.0)])
    assert [p for p, _ in ranked] == ["99.0", "100.0", "90.0"]  # within 2%: the safe one first
    assert [p for p, _ in prefer_safe([at(risky, 100.0), at(safe, 95.0)])] == ["100.0", "95.0"]  # not equals


def test_ref_param_offload_key_and_export():
    # An unset reference knob leaves the id as it would be without the knob (ids are hashes of applied_params).
    import hashlib
    import json
    later = ("ref_param_offload", "optimizer_cpu_offload", "optimizer_offload_fraction")  # knobs added since
    applied = {k: v for k, v in Candidate.from_params({}).applied_params().items() if k not in later}
    digest = hashlib.sha1(json.dumps(applied, sort_keys=True).encode()).hexdigest()[:12]
    assert Candidate.from_params({}).key() == digest
    assert "actor_rollout_ref.ref.megatron.param_offload" not in Candidate().verl_overrides()
    c = Candidate.from_params({"ref_param_offload": True})
    assert c.verl_overrides()["actor_rollout_ref.ref.megatron.param_offload"] is True and c.ref_offloaded
    assert c.key() != Candidate.from_params({}).key()
    job = Job.from_mapping({"actor_rollout_ref.ref.megatron.param_offload": True})
    assert job.candidate(Candidate()).ref_param_offload is True


def test_the_reference_models_offload_is_tuned_only_when_the_job_has_one():
    import random

    from autotune.search.space import load_space, space_context

    for name in ("dense", "moe"):
        space = load_space(name)
        with_ref = space.sample(random.Random(1), space_context(name == "moe", 8, 8, ref=True))
        assert with_ref["ref_param_offload"] in (True, False)
        assert "ref_param_offload" not in space.sample(random.Random(1), space_context(name == "moe", 8, 8))


def test_verdicts_on_the_measured_verl_runs_are_right_or_explained():
    from benchmarks.memory_accuracy import verl_section
    from benchmarks.throughput_rank import DEFAULT_REF

    lines, counts = verl_section(DEFAULT_REF)
    assert counts["rows"] >= 50 and counts["oom"] >= 4  # grpo_qwen2.5_7b.csv marks four OOMs
    assert counts["wrong"] == 0, "\n".join(line for line in lines if "**NO**" in line)
    assert counts["right"] >= counts["rows"] - 4


def test_probe_accuracy_stays_under_10_percent_with_no_missed_oom():
    import re

    from benchmarks.memory_accuracy import RESULTS, report

    text = report(sorted(RESULTS.glob("mcore_*.csv")))
    assert "- predicted to fit but went OOM: 0" in text
    mape = float(re.search(r"\| total \| update-moment peak \| NVML peak used \| ([\d.]+)%", text).group(1))
    assert mape < 10.0


def test_every_term_and_moment_is_documented():
    """docs/memory_model.md and the code stay in step: each term and moment the model emits has its row there."""
    from pathlib import Path

    doc = (Path(__file__).resolve().parent.parent / "docs" / "memory_model.md").read_text()
    jobs = (KL_JOB, Job.from_mapping({"actor_rollout_ref.rollout.free_cache_engine": False}))
    names = {n for job in jobs for mo in estimate_memory(M, H100x8, job, HAND).moments
             for n in (mo.name, *(t for t, _ in mo.terms))}
    assert {"ref_log_prob", "reshard", "vllm_asleep", "reshard_buffers"} <= names
    missing = sorted(n for n in names if f"`{n}`" not in doc)
    assert not missing, f"not in docs/memory_model.md: {missing}"
