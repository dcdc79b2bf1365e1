"""A correction that cannot over-correct (issue 23): slopes wait for evidence, a phase not measured keeps the
model's time, factors are shown with their range, and on the real verl trials the corrected prediction of another
trial beats the uncorrected one after 1, 2 and 3 measured trials (benchmarks/correction_proof.py)."""

from __future__ import annotations

import math
import statistics

import pytest

from autotune import units
from autotune.candidate import Candidate
from autotune.estimate.correction import Observation, PhaseFit, Priors, fit
from autotune.estimate.throughput import ThroughputEstimate
from benchmarks.correction_proof import BETTER_SHARE, WORSE_LIMIT, Group, Point, ceiling, prove, real_groups, shipped
from tests.conftest import make_setup
from tests.known_misses import HOST_MISSES, KNOWN_OUTLIERS


def _obs(cand: Candidate, pred: float, meas: float, trial: int) -> Observation:
    return Observation(cand, {"update_actor": pred}, {"update_actor": meas}, trial=trial)


def test_two_trials_that_differ_in_a_knob_do_not_tilt_its_slope_three_may():
    job = make_setup().job
    a, b = Candidate(tp=1, use_dynamic_bsz=True), Candidate(tp=4, use_dynamic_bsz=True)
    two = fit([_obs(a, 1.0, 3.0, 0), _obs(b, 1.0, 12.0, 1)], job)
    assert two.phases["update_actor"].mean[1] == 0.0  # log2 TP's slope: at the model's
    three = fit([_obs(a, 1.0, 3.0, 0), _obs(b, 1.0, 12.0, 1), _obs(a, 1.0, 3.0, 2)], job)
    assert three.phases["update_actor"].mean[1] > 0.0  # two values among three trials: it moves, a little
    assert three.phases["update_actor"].mean[1] < 0.2


def test_a_phase_not_measured_keeps_the_models_time():
    job = make_setup().job
    c = Candidate(use_dynamic_bsz=True)
    # A whole verl step measured only as a throughput: no phase gets a factor (the ratio is not a phase's)
    o = Observation(c, {"gen": 3.0, "update_actor": 1.0}, {}, predicted_throughput=100.0, measured_throughput=25.0,
                    trial=0)
    corr = fit([o], job)
    assert corr.phases == {} and corr.time_factor("gen", c, job) == 1.0
    # one phase measured: only that one moves
    o2 = Observation(c, {"gen": 3.0, "update_actor": 1.0}, {"update_actor": 30.0}, trial=1)
    corr = fit([o2], job)
    assert set(corr.phases) == {"update_actor"} and corr.time_factor("gen", c, job) == 1.0
    assert corr.time_factor("update_actor", c, job) > 10


def test_a_gaussian_level_over_corrects_where_the_robust_one_does_not():
    """One CP layout 1.8x slower than predicted says little of a TP layout the model predicts right."""
    job = make_setup().job
    cp = Candidate(cp=2, use_dynamic_bsz=True)
    robust = fit([_obs(cp, 1.0, 1.8, 0)], job).time_factor("update_actor", Candidate(tp=2), job)
    gaussian = fit([_obs(cp, 1.0, 1.8, 0)], job, priors=Priors(spike_p=0.0)).time_factor(
        "update_actor", Candidate(tp=2), job)
    assert robust < 1.1 < 1.5 < gaussian


def test_factors_are_shown_with_their_range():
    assert units.factor(11.2, math.log(1.15)) == "x11.2 (x9.74-12.9)"
    assert units.factor(0.44) == "x0.44"
    job = make_setup().job
    c = Candidate(use_dynamic_bsz=True)
    corr = fit([_obs(c, 1.0, 12.0, i) for i in range(3)], job)
    fit_ = corr.phases["update_actor"]
    assert 0 < fit_.shown_sd < 0.5
    assert f"update_actor {units.factor(fit_.shown, fit_.shown_sd)}" in corr.summary()
    assert "(x" in corr.summary() and "memory" not in corr.summary()
    back = type(corr).from_dict(corr.as_dict())
    assert back.summary() == corr.summary()
    old = PhaseFit((0.1,), ((0.01,),), 1, 1.1)  # a correction saved before the range was kept: shown without one
    assert old.shown_sd == 0.0


def test_each_real_group_has_its_own_name(real_proof: tuple[list, list]):
    """The tables match cases to groups by name: two 0.5B groups of one name (another attention) once showed each
    other's cases, both rows the union of the two."""
    names = [g.name for g in real_proof[0]]
    assert len(names) == len(set(names)) >= 3  # the 0.5B of lease 3, of lease 4, the 3B of lease 7


# The trials with micro-batches of one sequence (test_time_calibration MICRO_BATCHES_OF_ONE), which the base model
# missed by 2x until it priced their micro-batches (lease 22's 1.5B: update_actor 28.4 s measured, 9.8 s predicted;
# lease 24's 0.5B: 27.0 s, 6.5 s): a correction fitted on one of them alone then lifted its group's other steps by up
# to 29%, past WORSE_LIMIT. Priced, they are trials like the others: every correction stays within it, lease 25's 3B
# (priced before it ran: update 38.1 s predicted, 37.6 measured) and lease 26's 1.5B on an H100 (30.1, 30.4) among
# them. Lease 26's micro-batches of 2 and 4k budget (test_time_calibration SMALL_MICRO_BATCHES, unpriced then: updates
# 29-39% over the model) join the same group: the worst correction was +2% (+1% at k = 1 and 2 before them); with
# lease 29's two at the 0.5B (updates 50-56% over the model) and lease 28's four +3%, +4% and +3% at k = 1, 2, 3, and
# +3%, +4% and +2% after lease 32. With the small micro-batches priced (small_micro_batch_s,
# small_budget_micro_batch_s) +2.2%, +1.5% and +1.5%; +2.5% and +2.7% at k = 2 and 3 with lease 41's two-lane
# node, whose nine trials ran 15-45% over the model. Lease 46's two more are in its group too.
MICRO_BATCHES_OF_ONE = {"h200_2026-11-26_l22/c-1.5b-h2#2", "h100_2026-11-26_l24/c-0.5b-bc#4",
                        "h100_2026-11-27_l25/c-3b-h3#1", "h100_2026-11-27_l26/c-1.5b-h4#0",
                        "h200_2026-11-28_l46/c-0.5b-h35#2", "h200_2026-11-28_l46/c-1.5b-h36#2"}
# Lease 46's 0.5B at dyn16k/32k (tests/known_misses.py KNOWN_OUTLIERS), its lane's first trial, its compile caches cold:
# its update ran 2x at steps 2 and 3, its step 3 47% over the model. A study's first trial is always cold, so a user's
# correction meets such a point: fitted on it (alone or with one more) the correction puts its group's others up to
# 5% (k = 1) and 7.6% (k = 2) further off than the uncorrected model, within WORSE_LIMIT; the cases that neither
# fitted on it nor predicted it, 2.2-2.7%.
COLD_OUTLIER = "h200_2026-11-28_l46/c-0.5b-h35#0"


@pytest.fixture(scope="module")
def real_proof() -> tuple[list, list]:
    """The real groups and every case of the shipped correction on them (every k and phase): proved once for the
    module, as benchmarks/correction_proof.py does, not once per k."""
    groups = real_groups()
    return groups, prove(groups, shipped)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_on_the_real_verl_trials_the_correction_beats_the_uncorrected_model(k: int, real_proof: tuple[list, list]):
    all_groups, proof = real_proof
    groups = [g for g in all_groups if len(g.points) > k]  # k to fit on, one at least to predict
    assert any(len(g.points) >= 5 for g in groups)  # lease 3's five, then lease 4's three (another attention)
    cases = [c for c in proof if c.k == k and c.phase == "step"]
    assert cases
    assert sum(c.better or c.tie for c in cases) / len(cases) >= BETTER_SHARE
    assert MICRO_BATCHES_OF_ONE <= {p.label for g in groups for p in g.points}
    assert max(c.worse_by for c in cases) <= WORSE_LIMIT
    # lease 46's cold first trial among the fitted (COLD_OUTLIER): 8.0% at k = 3 since the CPU optimizer's rate is
    # the pairs' fit (under 8% before)
    assert max(c.worse_by for c in cases) < 0.085
    cold = [COLD_OUTLIER in (c.trial, *c.fitted) for c in cases]
    worst_cold = max(c.worse_by for c, x in zip(cases, cold, strict=True) if x)
    assert any(cold) and worst_cold > 0.04
    # the small micro-batches priced (above); 3.1% since lease 62's three on a fast H100 host; 3.55% since lease 63: a
    # correction fitted on two H100 1.5B cold first trials whose step 3 compiled a graph anew (lease 59's and 63's,
    # each 25-27% under its step 2) puts two of its group's others 3.3-3.55% further off (k = 2). Further off than
    # that only where it was fitted on a known miss: the cold outlier, a known outlier or a host miss (lease 68's fast
    # H100, whose small micro-batches' updates ran at half the model's, puts lease 24's micro-batches of one 4.2-5.1%
    # further off; before lease 68 every such case was the cold outlier's)
    misses = {f"{m.split('/')[0]}/{m.rsplit('/', 1)[1]}" for m in HOST_MISSES | KNOWN_OUTLIERS}
    assert COLD_OUTLIER in misses
    assert all(set(c.fitted) & misses for c in cases if c.worse_by > 0.036)
    # Strictly better in about half the cases only (4,741 of 8,604 at k = 3 since the small micro-batches are priced,
    # 4,705 before, after lease 32; 2,775 of 4,984 after leases 28 and 29, 2,076 of 3,684 after lease 27, 2,063 of
    # 3,668 after lease 26, 1,834 of 3,184 after lease 25, 1,782 of 3,048 after lease 24, 1,834 of 3,044 after lease 22,
    # 427 of 872 after lease 20, 66 of 92 after lease 19): the base model's step is now 9% off (median), about one
    # step's noise, and a correction fitted on three trials moves it by under 1% in nine cases of ten (98% since the
    # small micro-batches are priced, 96% before), so corrected and uncorrected tie (issue 23.4's 80% strictly better
    # is not met; the report says so). What holds: the median trial's error moves by under one percentage point.
    med = statistics.median
    assert abs(med(c.corrected for c in cases) - med(c.uncorrected for c in cases)) < 0.01


def test_on_a_landscape_the_robust_level_holds_where_a_gaussian_one_over_corrected():
    """qwen2.5-7b-L8-g4: the CP layouts measured 1.3-1.9x the model, most TP/PP ones 1.0-1.2x. A Gaussian level,
    fitted on one of them, puts another up to 40 % further off (over 50 % before a pass's GPU work was priced by the
    layer form, which orders these probes better: 0.86 against 0.82)."""
    from benchmarks.correction_proof import landscape_groups, variant

    group = [g for g in landscape_groups() if g.name == "qwen2.5-7b-L8-g4"]
    robust = [c for c in prove(group, shipped) if c.k == 1 and c.phase == "step"]
    gaussian = [c for c in prove(group, variant(spike_p=0.0)) if c.k == 1 and c.phase == "step"]
    assert max(c.worse_by for c in robust) <= WORSE_LIMIT < 0.3 < max(c.worse_by for c in gaussian)


def test_within_one_study_the_trials_noise_is_what_a_free_level_would_chase(real_proof: tuple[list, list]):
    """Cut into their studies (one host each), the real trials still do not share an error a correction could learn
    from three trials: the shipped rule stays within the limit, while a level free to follow the measurements (no
    spike) is strictly better in well under 80% of the cases and further off by more than the limit in some, as
    across hosts (correction_accuracy.md, within one study: 48-62% better, worst +21% to +37%)."""
    from benchmarks.correction_proof import study_groups, variant

    groups = study_groups(real_proof[0])
    assert len(groups) >= 20 and all(len({p.label.rsplit("#", 1)[0] for p in g.points}) == 1 for g in groups)
    held_all, free_all = prove(groups, shipped), prove(groups, variant(spike_p=0.0))
    for k in (1, 3):
        held = [c for c in held_all if c.k == k and c.phase == "step"]
        free = [c for c in free_all if c.k == k and c.phase == "step"]
        assert max(c.worse_by for c in held) <= WORSE_LIMIT
        assert sum(c.better for c in free) / len(free) < BETTER_SHARE and max(c.worse_by for c in free) > WORSE_LIMIT


def _point(label: str, predicted: float, measured: float) -> Point:
    est = ThroughputEstimate(phases=(("update_actor", predicted),), tokens_per_step=1.0, world_size=1, concurrency=1.0)
    return Point(label, Observation(Candidate(), {"update_actor": predicted}, {"update_actor": measured}), est,
                 {"update_actor": measured, "step": measured})


def test_the_ceiling_is_reached_where_a_study_shares_its_error_and_not_where_each_trial_has_its_own():
    """A study whose trials all ran 1.5x the model: the oracle's level and the others' both move every trial closer.
    Trials whose errors scatter around the model with nothing shared: neither level helps most of them."""
    job = make_setup().job
    shared = Group("real verl, one study", "s", job, tuple(_point(f"s#{i}", 10.0, 15.0 * (1 + 0.02 * i))
                                                            for i in range(4)))
    scattered = Group("real verl, one study", "t", job, tuple(_point(f"t#{i}", 10.0, m)
                                                               for i, m in enumerate((8.0, 12.5, 9.0, 11.0))))
    [step_shared] = [c for c in ceiling([shared]) if c.phase == "step"]
    assert step_shared.cases == 4 and step_shared.oracle_better == step_shared.others_better == 1.0
    [step_scattered] = [c for c in ceiling([scattered]) if c.phase == "step"]
    assert step_scattered.oracle_better < BETTER_SHARE and step_scattered.others_better <= 0.5


def test_on_the_real_studies_no_level_correction_can_be_better_in_80_percent(real_proof: tuple[list, list]):
    """Issue 23.4's 80 % strictly better, against what the real trials allow: within each study (one host), even a
    level that knew the study's mean error, the predicted trial's own among it, moves only 60-66 % of the trials
    closer in every phase (the others' mean 47-53 %): the rest of each trial's error is its own, so the shipped rule's
    ~50 % strictly better and ~95 % ties is the most a level can honestly show (correction_accuracy.md, the ceiling)."""
    from benchmarks.correction_proof import study_groups

    rows = {c.phase: c for c in ceiling(study_groups(real_proof[0]))}
    assert set(rows) == {"gen", "old_log_prob", "update_actor", "update_weights", "step"}
    for c in rows.values():
        assert c.cases >= 150
        assert 0.5 < c.oracle_better < BETTER_SHARE  # the oracle knows something, not enough
        assert c.others_better < c.oracle_better
