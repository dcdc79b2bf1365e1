"""estimate/reads.py is a claim about the estimates: a piece (a phase's time, a memory moment, the tokens of a step,
a static rule) does not move when only knobs it does not read change. The exact ranking is exact only if the claim
holds, so it is tested here on random candidates, changing every unread knob at once."""

from __future__ import annotations

import dataclasses
import random

import pytest

from autotune.candidate import Candidate
from autotune.estimate import constraints, estimate_unchecked
from autotune.estimate.correction import FEATURES, UNCERTAIN_TERMS, features
from autotune.estimate.lengths import at_step
from autotune.estimate.reads import ALL, RULE_READS, reads_for
from autotune.job import Job
from tests.conftest import make_setup


def _values(setup, cand):
    s = setup
    ev = estimate_unchecked(s.model, s.cluster, s.job, cand, s.objective, s.lengths)
    out = {("phase", k): v for k, v in ev.throughput.phases}
    for mem, tag in ((ev.memory, "step"), (ev.worst_memory, "worst")):
        for m in mem.moments:
            out[("moment", m.name, tag)] = (round(m.peak), round(sum(v for k, v in m.terms if k in UNCERTAIN_TERMS)))
        out[("moment", "vllm_kv_cache", tag)] = (round(mem.kv_cache_bytes), round(mem.kv_needed_bytes))
    out[("tokens",)] = ev.throughput.tokens_per_step
    return out


def _pieces(reads):
    yield from ((("phase", k), r) for k, r in reads.phases.items())
    for k, r in reads.moments.items():
        yield ("moment", k, "step"), r
        yield ("moment", k, "worst"), r
    yield ("tokens",), reads.tokens


def _sized(setup, c: Candidate) -> bool:
    """The layout fits the cluster at all (the ranking estimates nothing else)."""
    return not any(constraints.RULES[r](setup.model, setup.cluster, setup.job, c) for r in ("world_size",
                                                                                            "tp_fits_node"))


def _random_candidates(setup, rng, n):
    ctx = setup.context
    out = []
    while len(out) < n:
        c = Candidate.from_params(setup.space.project(setup.space.sample(rng, ctx), ctx), setup.base)
        if _sized(setup, c):
            out.append(c)
    return out


def _mix(a: Candidate, b: Candidate, keep: frozenset[str]) -> Candidate:
    """b's values for every knob except `keep`, which stay a's (normalised as verl runs it)."""
    return Candidate.from_params({f: getattr(a if f in keep else b, f) for f in Candidate.param_names()})


def _host(setup, gib: float):
    return dataclasses.replace(setup, cluster=dataclasses.replace(setup.cluster, host_memory_gib=gib))


SETUPS = {
    "dense": lambda: make_setup("qwen2.5-7b", 8),
    "moe": lambda: make_setup("qwen3-30b-a3b", 8),
    "dense-ref-awake-lengths": lambda: dataclasses.replace(
        make_setup("qwen2.5-7b", 4, job=Job.from_mapping({"actor_rollout_ref.actor.use_kl_loss": True,
                                                          "actor_rollout_ref.rollout.free_cache_engine": False})),
        response_length=1500.0),
    "train": lambda: dataclasses.replace(make_setup("qwen2.5-7b", 4), objective="train"),
    # a host small enough that offload and the CPU optimizer break its rule (estimate/host.py) for some candidates
    "dense-ref-small-host": lambda: _host(make_setup("qwen2.5-7b", 4, job=Job.from_mapping(
        {"actor_rollout_ref.actor.use_kl_loss": True})), 200.0),
    "moe-train": lambda: dataclasses.replace(make_setup("qwen3-30b-a3b", 8), objective="train"),
}


@pytest.mark.parametrize("name", list(SETUPS))
def test_no_piece_moves_when_only_unread_knobs_change(name):
    setup = SETUPS[name]()
    reads = reads_for(setup.objective, setup.job)
    rng = random.Random(3)
    cands = _random_candidates(setup, rng, 60)
    for a, b in zip(cands[::2], cands[1::2], strict=True):
        va = _values(setup, a)
        for piece, keep in _pieces(reads):
            mixed = _mix(a, b, keep)
            if any(getattr(mixed, f) != getattr(a, f) for f in keep) or not _sized(setup, mixed):
                continue  # normalisation changed a read knob, or no layout: not a test of this piece
            vm = _values(setup, mixed)
            assert vm[piece] == pytest.approx(va[piece], rel=1e-9), (piece, a, mixed)
            if piece[0] == "phase" and piece[1] in FEATURES:
                assert list(features(piece[1], mixed, setup.job)) == list(features(piece[1], a, setup.job))
        for rule, keep in reads.rules.items():
            mixed = _mix(a, b, keep)
            if any(getattr(mixed, f) != getattr(a, f) for f in keep):
                continue
            fn = constraints.RULES[rule]
            assert fn(setup.model, setup.cluster, setup.job, mixed) == fn(setup.model, setup.cluster, setup.job, a)
    if setup.cluster.host_memory_gib:  # the host rule was tested both ways
        verdicts = {bool(constraints.RULES["host_memory"](setup.model, setup.cluster, setup.job, c)) for c in cands}
        assert verdicts == {True, False}


def test_every_rule_says_what_it_reads():
    """A new rule without an entry reads everything (exact, slower): say it, so that the ranking stays fast."""
    assert set(constraints.RULES) <= set(RULE_READS)
    assert all(r <= ALL for r in RULE_READS.values())


def test_lengths_are_what_at_step_makes():
    job = Job.default()
    assert at_step(job, response_length=1500.0).response_mean == 1500.0


@pytest.mark.parametrize("name", list(SETUPS))
def test_additive_pieces_are_the_sum_the_ranking_takes(name):
    """An additive piece = its value with the offload knobs off + what they add at a reference setting of
    everything else (estimate/reads.py's claim, as autotune/search/ranking.py computes it)."""
    from autotune.estimate.reads import OFFLOAD_REFERENCE

    setup = SETUPS[name]()
    reads = reads_for(setup.objective, setup.job)
    rng = random.Random(5)
    reference = dataclasses.replace(setup.base, **OFFLOAD_REFERENCE)
    checked = 0
    for a in _random_candidates(setup, rng, 40):
        for (kind, piece), (offload, shared) in reads.additive.items():
            keys = [k for k in _values(setup, a) if k[0] == kind and k[1] == piece]
            off = dataclasses.replace(a, **{k: OFFLOAD_REFERENCE[k] for k in offload})
            at = dataclasses.replace(reference, **{k: getattr(a, k) for k in offload | shared})
            at_off = dataclasses.replace(at, **{k: OFFLOAD_REFERENCE[k] for k in offload})
            va, voff, vat, vatoff = (_values(setup, c) for c in (a, off, at, at_off))
            for k in keys:
                if kind == "phase":
                    assert va[k] == pytest.approx(voff[k] + vat[k] - vatoff[k], rel=1e-9, abs=1e-9)
                else:
                    for i in range(2):
                        assert va[k][i] == pytest.approx(voff[k][i] + vat[k][i] - vatoff[k][i], rel=1e-9, abs=2)
                checked += 1
    assert checked > 20 or not reads.additive
