"""The campaign's real verl profiles (benchmarks/verl_profiles.py) read back from their committed databases."""

from __future__ import annotations

import pytest

from autotune.estimate.throughput import DEFAULT_EFFICIENCY
from benchmarks import verl_profiles as vp


@pytest.fixture(scope="module")
def every() -> list[vp.Profile]:
    return vp.profiles()


@pytest.fixture(scope="module")
def profiles(every: list[vp.Profile]) -> list[vp.Profile]:
    return [p for p in every if p.status == "ok"]


def test_a_profile_per_size_each_phase_traced(every: list[vp.Profile], profiles: list[vp.Profile]) -> None:
    """0.5B (lease 17), 1.5B and 3B (lease 19), 7B (lease 20), all on H200s and all ran to their end; each traced
    phase's shares add up to the whole of its rank-seconds. Lease 10's 0.5B profile on the H100 ran out of memory in
    the update (unfused logits at a 32k budget): shown as failed, with its reason."""
    assert [(p.model, p.gpu, p.status) for p in profiles] == [
        ("qwen2.5-0.5b", "h200", "ok"), ("qwen2.5-1.5b", "h200", "ok"), ("qwen2.5-3b", "h200", "ok"),
        ("qwen2.5-7b", "h200", "ok")]
    for p in profiles:
        assert {ph.name for ph in p.phases} == {"gen", "old_log_prob", "update_actor"}
        for ph in p.phases:
            assert sum(ph.shares.values()) == pytest.approx(1.0, abs=0.02), (p.model, ph.name)
            assert ph.verl_s is not None and ph.traced_s <= ph.verl_s * 1.05 + 0.5
    failed = [p for p in every if p.status != "ok"]
    assert [(p.model, p.gpu) for p in failed] == [("qwen2.5-0.5b", "h100")] and not failed[0].phases
    assert "failed: " in vp.report(every)


def test_the_pass_cost_is_the_gpu_waiting_on_the_host_and_the_busy_time_grows_with_the_model(
        profiles: list[vp.Profile]) -> None:
    """The model's fixed cost per Megatron pass is size-independent; the traces agree: at every size a pass's GPU idles
    about that long (0.9x for the 7B's log-prob pass, up to 2x where the profiler slows the host: the 1.5B's update
    idles 8.66 s, 2.01x of update_pass_s since its refit without the unfused logits' cost, 4.36 -> 4.30 s), while its
    busy time grows with the model. The 7B's update steps half its optimizer on the CPU: its GPU idles 3.6x the pass
    cost, waiting on that step, and pageable host-to-device copies (the parameters back) lead its kernels."""
    for phase, const in vp.PASSES.items():
        cost = getattr(DEFAULT_EFFICIENCY, const)
        idle = [p.phase(phase).idle_s for p in profiles if not vp.waits_on_cpu_optimizer(p, phase)]
        busy = [p.phase(phase).busy_s for p in profiles]
        assert all(0.9 * cost <= i <= 2.05 * cost for i in idle), (phase, idle, cost)
        assert busy == sorted(busy) and busy[-1] > 3 * busy[0], (phase, busy)
    seven = profiles[-1]
    assert vp.waits_on_cpu_optimizer(seven, "update_actor")
    assert not vp.waits_on_cpu_optimizer(profiles[0], "update_actor")
    update = seven.phase("update_actor")
    assert update.idle_s > 3 * DEFAULT_EFFICIENCY.update_pass_s
    assert update.top.startswith("memory Memcpy HtoD (Pageable")


def test_the_committed_report_is_what_the_data_give(every: list[vp.Profile]) -> None:
    assert vp.RESULTS.read_text() == vp.report(every) + "\n"
