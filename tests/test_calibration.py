"""The campaign's two read-outs (benchmarks/calibration.py, benchmarks/trial_cost.py) on the committed real trials."""

from __future__ import annotations

from benchmarks import calibration, trial_cost


def test_every_real_trial_is_predicted_and_every_memory_verdict_is_right() -> None:
    cases = calibration.cases(list(calibration.DATA.glob("*/*.db")))
    assert len(cases) == 11 and {c.status for c in cases} == {"ok", "oom"}
    assert all((c.status == "ok") == c.predicted_fits for c in cases)
    groups = {c.model for c in cases}
    assert {"qwen2.5-0.5b, attention fused", "qwen2.5-0.5b, attention unfused",
            "qwen2.5-1.5b, attention fused"} == groups
    text = calibration.report(cases)
    assert text.count("## ") == 3 and "OOMs predicted to fit: 0" in text


def test_a_warm_trial_costs_less_than_a_cold_one_and_less_than_before() -> None:
    cs = [c for c in trial_cost.costs(list(trial_cost.DATA.glob("*/*.db"))) if c.model_layers == 24]
    before = [c.wall_s for c in cs if not c.caches]
    cold = [c for c in cs if c.caches == "cold"]
    warm = [c for c in cs if c.caches == "warm"]
    assert cold and warm and max(c.wall_s for c in warm) < min(c.wall_s for c in cold) < min(before)
    assert all(c.startup_s < cold[0].startup_s for c in warm)
    assert "**0.77x**" in trial_cost.report(cs)
