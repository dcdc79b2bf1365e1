"""The campaign's two read-outs (benchmarks/calibration.py, benchmarks/trial_cost.py) on the committed real trials."""

from __future__ import annotations

import pytest

from benchmarks import calibration, trial_cost


def test_every_real_trial_is_predicted_and_every_memory_verdict_is_right() -> None:
    """47 real trials in 5 groups (each once: leases 10 and 12 resumed lease 7's 3B and lease 8's 7B study; lease 19's
    ten, lease 20's five and lease 22's six on H200s and lease 21's one join their sizes' groups); lease 12's 7B first
    pick, which ran out of memory in update_actor, is now predicted not to fit, and every trial that ran is still
    predicted to fit, the three measured 7B trials of leases 13 and 20 among them."""
    cases = calibration.cases(list(calibration.DATA.glob("*/*.db")))
    assert len(cases) == 47 and {c.status for c in cases} == {"ok", "oom"}
    assert sum(c.status == "ok" for c in cases if c.model.startswith("qwen2.5-7b")) == 3
    assert all((c.status == "ok") == c.predicted_fits for c in cases), [
        (c.source, c.status, c.predicted_peak_gib) for c in cases if (c.status == "ok") != c.predicted_fits]
    groups = {c.model for c in cases}
    assert {"qwen2.5-0.5b, attention fused", "qwen2.5-0.5b, attention unfused", "qwen2.5-1.5b, attention fused",
            "qwen2.5-3b, attention fused", "qwen2.5-7b, attention fused"} == groups
    seven = next(c for c in cases if c.model.startswith("qwen2.5-7b"))
    assert seven.status == "oom" and not seven.predicted_fits and seven.binding == "update"
    text = calibration.report(cases)
    assert text.count("## ") == 5 and "OOMs predicted to fit: 1" not in text
    assert text.count("OOMs predicted to fit: 0") == 5


def test_a_warm_trial_costs_less_than_a_cold_one_and_less_than_before() -> None:
    cs = [c for c in trial_cost.costs(list(trial_cost.DATA.glob("*/*.db"))) if c.model_layers == 24]
    before = [c.wall_s for c in cs if not c.caches]
    cold = [c for c in cs if c.caches == "cold"]
    warm = [c for c in cs if c.caches == "warm"]
    assert cold and warm and max(c.wall_s for c in warm) < min(c.wall_s for c in cold) < min(before)
    assert all(c.startup_s < cold[0].startup_s for c in warm)
    assert "**0.77x**" in trial_cost.report(cs)


def test_a_warm_trials_stages_add_up_to_its_wall_and_say_what_start_up_the_target_leaves() -> None:
    """Issue 24's target read from the warm 0.5B trials: their stages sum to the tuner's record of each trial, vLLM's
    start is the largest, and steps 1-3 at 60% of the wall would leave under 40 s from launch to step 1."""
    warm = [c for c in trial_cost.costs(list(trial_cost.DATA.glob("*/*.db")))
            if c.model_layers == 24 and c.caches == "warm"]
    assert len(warm) == 2
    for c in warm:
        st = dict(trial_cost.stages(c))
        assert abs(sum(st.values()) - c.wall_s) < 0.01
        assert max(st, key=lambda k: st[k]) == "vLLM ready (ready to fit)" and st["vLLM ready (ready to fit)"] > 90
    assert "launch to step 1 would have to take at most 39 s, 38 s (today 196 s, 206 s)" in "\n".join(
        trial_cost.startup_report(warm))


def test_unfused_attention_costs_its_measured_time() -> None:
    """The doctor's fallback is priced: the attention's FLOPs at TE's unfused rate, in both Megatron passes; on the
    five real unfused trials the update is then within 40% (it was 12x short)."""
    from autotune import verl
    from autotune.candidate import Candidate
    from autotune.cluster import make_cluster
    from autotune.estimate.throughput import DEFAULT_EFFICIENCY, estimate_throughput
    from autotune.job import Job
    from autotune.model import get_model

    m, cl = get_model("qwen2.5-0.5b"), make_cluster(1, 1, "h100")
    job = Job.from_file(calibration.HERE / "gpu_verl" / "job_smoke.yaml")
    cand = Candidate(tp=1, rollout_tp=1, use_dynamic_bsz=True, ppo_max_token_len_per_gpu=32768,
                     log_prob_max_token_len_per_gpu=98304).normalized()
    fused = dict(estimate_throughput(m, cl, job.with_node_defaults({verl.ATTENTION_BACKEND: "fused"}), cand).phases)
    unf = estimate_throughput(m, cl, job.with_node_defaults({verl.ATTENTION_BACKEND: "unfused"}), cand)
    seqs, seq_len = job.train_batch_size * job.rollout_n, unf.lengths.seq_mean
    attn = 6 * m.num_layers * m.q_size * seqs * seq_len * seq_len / 2
    rate = DEFAULT_EFFICIENCY.unfused_attn_tflops * 1e12
    phases = dict(unf.phases)
    assert phases["update_actor"] - fused["update_actor"] == pytest.approx(attn / rate)
    assert phases["old_log_prob"] - fused["old_log_prob"] == pytest.approx(attn / 3 / rate)
    cases = [c for c in calibration.cases(list(calibration.DATA.glob("*/*.db")))
             if c.model.endswith("unfused") and c.status == "ok"]
    errs = sorted(abs(c.predicted_phases["update_actor"] / c.measured_phases["update_actor"] - 1) for c in cases)
    assert len(cases) == 5 and errs[len(errs) // 2] < 0.4
