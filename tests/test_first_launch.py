"""A study's first launch must run: until it has measured a trial (ok or out of memory) it launches a safe setting
whenever one exists, however much slower the model thinks it is (issue 23.5); after that the 2% rule."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

from autotune.candidate import Candidate
from autotune.estimate.correction import NO_CORRECTION
from autotune.search.plan import Plan, first_launch
from autotune.search.split import Pick, best_pick
from tests.conftest import REPO


class Listed:
    """A ranking of a few settings, best first (what ModelRanking and DomainRanking hand a plan)."""

    def __init__(self, picks: list[Pick]):
        self.picks = picks

    def ranked(self, corr=NO_CORRECTION, exclude=(), safe: bool = False):
        skip = {c.key() for c in exclude}
        return (p for p in self.picks if (p.safe or not safe) and p.candidate.key() not in skip)

    best = best_pick


def pick(budget: int, throughput: float, safe: bool) -> Pick:
    cand = Candidate.from_params({"use_dynamic_bsz": True, "ppo_max_token_len_per_gpu": budget})
    return Pick({"ppo_max_token_len_per_gpu": budget}, cand, throughput, safe)


AT_LIMIT, SAFE_5 = pick(16384, 1000.0, False), pick(8192, 950.0, True)  # the safe one 5% slower


def plan(ranking: Listed, measured: int) -> Plan:
    p = Plan(None, "s", lambda: SimpleNamespace(correction=NO_CORRECTION), lambda: ranking, 4, [], False, ())
    p.measured = measured
    return p


def test_before_any_measurement_the_safe_one_goes_first():
    ranking = Listed([AT_LIMIT, SAFE_5])
    first, over = first_launch(ranking, NO_CORRECTION, [])
    assert first is SAFE_5 and over is AT_LIMIT
    assert plan(ranking, measured=0).next(0).params == SAFE_5.params
    # Once a trial has been measured (ok or OOM), 5% is more than the model's error: the faster one goes first.
    assert ranking.best(NO_CORRECTION, []) is AT_LIMIT
    assert plan(ranking, measured=1).next(0).params == AT_LIMIT.params


def test_an_at_limit_setting_still_goes_first_when_nothing_is_safe():
    ranking = Listed([AT_LIMIT, pick(12288, 900.0, False)])
    assert first_launch(ranking, NO_CORRECTION, []) == (AT_LIMIT, None)
    assert plan(ranking, measured=0).next(0).params == AT_LIMIT.params


def test_a_safe_best_is_launched_first_and_passes_nothing_over():
    ranking = Listed([SAFE_5, AT_LIMIT])
    assert first_launch(ranking, NO_CORRECTION, []) == (SAFE_5, None)


def _seven_b():
    """The real c-7b study (Qwen2.5-7B, one H200): its setup and its first launch, which ran out of memory."""
    from autotune.search.setup import setup_from_row
    from autotune.store.store import Store

    store = Store(f"sqlite:///{REPO / 'tests/data/real_verl_gpu/h200_2026-11-25_l8/c-7b.db'}")
    study = store.list_studies()[0]
    launched = next(r for r in store.trials(study.name) if r.number == 0)
    store.engine.dispose()
    setup = setup_from_row(study)
    setup = dataclasses.replace(setup, job=setup.job.with_node_defaults(launched.extra["job_defaults"]))
    return setup, launched, study.space_text


def test_the_7b_study_would_now_launch_a_safe_setting_and_says_why(tmp_path):
    """Today's first launch on the 7B study's space is a safe setting, and `autotune run` says which faster one it
    passed over (the study's notes, printed before its first trial)."""
    from autotune.runners.simulate import SimulateRunner
    from autotune.search.ranking import make_ranking
    from autotune.study.study import Tuner

    setup, launched, space_text = _seven_b()
    first, over = first_launch(make_ranking(setup), NO_CORRECTION, [])
    assert launched.status == "oom" and launched.origin == "model-seed"
    assert first.safe and first.candidate.key() != launched.candidate_key
    assert not setup.evaluate(Candidate.from_params(dict(launched.params))).feasible  # predicted not to fit now
    tuner = Tuner(setup, SimulateRunner(), f"sqlite:///{tmp_path}/s.db", "s", workdir=tmp_path,
                  space_text=space_text)
    said = [n for n in tuner.notes if n.startswith("first launch: ")]
    assert len(said) == (over is not None)
    if over is not None:
        assert "not safe" in said[0] and "until this study has measured a trial" in said[0]
    tuner.run(n_trials=1)
    ran = next(r for r in tuner.store.trials("s") if r.launched)
    assert ran.origin == "model-seed" and ran.candidate_key == first.candidate.key()
