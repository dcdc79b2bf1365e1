"""Advice from a profile: the rules read measured numbers, and the memory and throughput models judge every change
before it is said (predicted faster and fitting, or not advised with the model's reason)."""

from __future__ import annotations

from autotune.candidate import Candidate
from autotune.profile import kinds as K
from autotune.profile.advice import MAX_ADVICE, MIN_SPEEDUP, advise, model_bubble, proposals
from autotune.profile.analysis import Phase, ProfileAnalysis, RankPhase
from tests.conftest import make_setup


def _phase(name: str, shares: dict[str, float], ranks: int = 4, pp: int = 1, seconds: float = 10.0,
           comm_hidden: float = 0.0, host: float = 0.0, p2p_exposed: float = 0.0) -> Phase:
    out = []
    for r in range(ranks):
        kinds = {k: shares.get(k, 0.0) * seconds for k in (*K.KINDS, K.IDLE)}
        comm = kinds[K.COMMUNICATION] + comm_hidden * seconds
        out.append(RankPhase(f"rank {r}", r, (r * pp) // ranks if pp > 1 else 0, seconds, kinds,
                             communication_s=comm, communication_hidden_s=comm_hidden * seconds,
                             memory_s=kinds[K.MEMORY], host_copy_s=host * seconds, p2p_exposed_s=p2p_exposed * seconds))
    return Phase(name, "train", "gpu", tuple(out))


def _analysis(*phases: Phase) -> ProfileAnalysis:
    return ProfileAnalysis(tuple(phases), ())


def test_a_measured_pipeline_bubble_is_checked_by_the_model_before_it_is_advised():
    setup = make_setup("qwen2.5-1.5b", gpus=4)
    # fused kernels, as users run: without them the logits' passes dilute VPP=2's gain to 1.0046x, under MIN_SPEEDUP
    cand = Candidate(tp=1, pp=2, rollout_tp=1, use_dynamic_bsz=True, use_fused_kernels=True).normalized()
    a = _analysis(_phase("update_actor", {K.GEMM: 0.6, K.IDLE: 0.3, K.OTHER: 0.1}, pp=2, p2p_exposed=0.05))
    assert a.phases[0].bubble_fraction is not None and a.phases[0].bubble_fraction > 0.3
    advice = advise(a, setup, cand)
    advised = [x for x in advice if x.advised]
    assert 1 <= len(advised) <= MAX_ADVICE
    for x in advice:  # each verdict is the model's own for that change
        ev = setup.evaluate(Candidate.from_params(x.change, cand))
        assert x.fits == ev.feasible
        if x.fits:
            assert x.speedup is not None
            assert abs(x.speedup - ev.throughput.throughput / setup.evaluate(cand).throughput.throughput) < 1e-9
        assert x.advised == (x.fits and x.speedup >= MIN_SPEEDUP)
    modelled, m = model_bubble(setup, cand)
    top = advised[0]
    assert "35% idle or waiting on pipeline neighbours with PP=2" in top.finding
    assert f"{m} micro-batches (model: {100 * modelled:.0f}%)" in top.finding
    assert top.line().startswith(top.finding + ": try ") and "predicted faster" in top.line()
    assert advised == sorted(advised, key=lambda x: -x.speedup)


def test_a_change_the_model_predicts_out_of_memory_is_not_advised():
    setup = make_setup("qwen2.5-7b", gpus=8)
    cand = Candidate(tp=4, pp=1, rollout_tp=2, sequence_parallel=False, use_dynamic_bsz=True).normalized()
    a = _analysis(_phase("update_actor", {K.GEMM: 0.6, K.COMMUNICATION: 0.3, K.IDLE: 0.1}, comm_hidden=0.1))
    changes = [p.change for p in proposals(a, setup, cand)]
    assert {"sequence_parallel": True} in changes and {"tp": 2} in changes
    by_change = {tuple(x.change.items()): x for x in advise(a, setup, cand)}
    for change, x in by_change.items():
        ev = setup.evaluate(Candidate.from_params(dict(change), cand))
        if not ev.feasible:
            assert not x.advised and ("predicted OOM" in x.verdict or "breaks" in x.verdict)
            assert "not advised" in x.line()


def test_offload_copies_propose_turning_offload_off_judged_by_the_memory_model():
    setup = make_setup("qwen2.5-7b", gpus=8)
    cand = Candidate(tp=2, pp=1, rollout_tp=2, use_dynamic_bsz=True, param_offload=True,
                     optimizer_offload=True).normalized()
    a = _analysis(_phase("update_actor", {K.GEMM: 0.5, K.MEMORY: 0.3, K.IDLE: 0.2}, host=0.3))
    advice = advise(a, setup, cand)
    assert {tuple(x.change) for x in advice} >= {("param_offload",), ("optimizer_offload",)}
    for x in advice:
        assert "copying between host and GPU (offload on)" in x.finding
        assert x.fits == setup.evaluate(Candidate.from_params(x.change, cand)).feasible


def test_nothing_stands_out_nothing_is_advised():
    setup = make_setup("qwen2.5-1.5b", gpus=4)
    cand = Candidate(tp=1, pp=1, rollout_tp=1, use_dynamic_bsz=True).normalized()
    a = _analysis(_phase("update_actor", {K.GEMM: 0.85, K.OTHER: 0.1, K.IDLE: 0.05}),
                  _phase("gen", {K.GEMM: 0.5, K.ATTENTION: 0.3, K.IDLE: 0.2}))
    assert advise(a, setup, cand) == []


def test_rollout_communication_with_rollout_tp():
    setup = make_setup("qwen2.5-7b", gpus=8)
    cand = Candidate(tp=2, pp=1, rollout_tp=4, use_dynamic_bsz=True).normalized()
    a = _analysis(Phase("gen", "rollout", "gpu", _phase("gen", {K.GEMM: 0.5, K.COMMUNICATION: 0.3,
                                                                  K.IDLE: 0.2}).ranks))
    (x,) = [x for x in advise(a, setup, cand) if x.change == {"rollout_tp": 2}]
    assert x.finding.startswith("gen: 30% exposed communication")
    assert x.fits == setup.evaluate(Candidate.from_params({"rollout_tp": 2}, cand)).feasible
