"""The learned memory factor raises verdicts only as far as measurements say (autotune/estimate/correction.py
`memory_factor_used`), and on the real studies it prunes nothing the model launched right and launches no OOM
(benchmarks/memory_verdicts.py)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from autotune.candidate import Candidate
from autotune.cluster import GIB
from autotune.estimate.correction import Correction, Observation, fit
from autotune.search.learning import observation, study_setup
from autotune.search.setup import Setup
from autotune.store.schema import TrialRow
from autotune.store.store import Store
from benchmarks.memory_verdicts import RULES, counts, verdicts
from benchmarks.real_studies import DATA
from tests.conftest import make_setup


def _peak(peak: float, uncertain: float, measured: float) -> Observation:
    return Observation(Candidate(), {}, {}, moments=((peak * GIB, uncertain * GIB, 80 * GIB),),
                       measured_peak=measured * GIB, fitted=True, trial=0)


def test_a_trial_that_measured_none_of_the_uncertain_terms_leaves_the_verdicts_as_they_were():
    corr = fit([_peak(52.0, 0.0, 52.5)], make_setup().job)
    assert corr.memory_n == 1 and corr.memory_sd > 0.2  # nothing learned: the prior's doubt
    assert corr.memory_factor_used == 1.0  # one sd above the mean would be x1.28


def test_low_peaks_lower_the_verdicts_less_than_they_say_high_peaks_raise_them_as_far():
    job = make_setup().job
    low = fit([_peak(60.0, 20.0, 56.0)], job)  # the uncertain part measured at 0.8 of the model's
    assert low.memory_factor < low.memory_factor_used < 1.0
    assert low.memory_factor_used == pytest.approx(math.exp(low.memory_log + low.memory_sd))
    high = fit([_peak(60.0, 20.0, 70.0)], job)
    assert high.memory_factor_used == pytest.approx(high.memory_factor) and high.memory_factor > 1.3


def _measured(lease: str, study: str) -> tuple[Setup, list[TrialRow], list[Observation]]:
    """A committed real study's setup, measured trials and their observations, as its tuner refitted them."""
    store = Store(f"sqlite:///{DATA / lease / study}.db")
    setup = study_setup(store, store.get_study(study))
    rows = store.measured_trials(study)
    return setup, rows, [observation(r, setup, store.steps(r.id)) for r in rows]


def _fits(corr: Correction, obs: Observation) -> bool:
    """The corrected peak of `obs`'s configuration is within its GPU's capacity (a launch, not a prune)."""
    return max(p + (corr.memory_factor_used - 1) * u for p, u, _ in obs.moments) <= min(c for _, _, c in obs.moments)


def test_lease_66s_fused_trial_does_not_talk_the_study_out_of_its_unfused_twin():
    """c-0.5b-h66: #0 (fused kernels) peaked in the rollout, predicted 52.3 GiB and measured 52.7; its log-prob pass
    held none of the logits of #1 (the same without them). One sd above the mean then scaled #1's 58.8 uncertain
    GiB by 1.28 and predicted 88.8 GiB on a 79.6 GiB H100; #1 ran at 78.1."""
    setup, _, (first, unfused) = _measured("h100_2026-12-07_l66", "c-0.5b-h66")
    corr = fit([first], setup.job)
    assert _fits(corr, unfused)  # it fits, as it did
    assert corr.memory_factor_used == 1.0


@pytest.mark.slow
def test_on_the_real_studies_the_factor_launches_no_oom_and_prunes_little_that_ran():
    vs = verdicts(DATA.glob("*/*.db"))
    assert len(vs) > 300 and any(v.oom for v in vs)
    shipped, before, uncorrected = (counts(vs, r) for r in RULES)
    assert shipped[1] == 0 and uncorrected == (0, 0)
    # none pruned since the factor learns the measured step's moments, not the run's NVML peak (lease 34's c-3b-h10 #2
    # and lease 68's c-0.5b-h68 #2 were, after a trial whose whole-run peak held an allocator cache; two before lease
    # 68, three with it)
    assert shipped[0] == 0 and 10 < before[0]


def test_step_1s_allocator_cache_is_not_learned_as_the_models_shortfall():
    """Lease 68's c-0.5b-h68 #1 (the 0.5B offloaded, without fused kernels): NVML saw 73.7 GiB at step 1, a cache
    the allocator holds until verl turns expandable segments on after the first weight sync, and 60.0 GiB at most in
    step 3's moments (65.2 predicted). The correction learns step 3's: after #0 and #1 it does not raise the memory
    of #2 (the same without offload, 72.6 GiB predicted on the 79.6 GiB H100), which ran (x0.96); the whole run's peak
    raised it by x1.14 and pruned #2."""
    setup, rows, (first, cached, unfused, *_) = _measured("h100_2026-12-07_l68", "c-0.5b-h68")
    assert rows[1].peak_memory_gib == pytest.approx(73.7, abs=0.05)
    assert cached.measured_peak / GIB == pytest.approx(60.0, abs=0.1)
    corr = fit([first, cached], setup.job)
    assert corr.memory_factor_used <= 1.0 and _fits(corr, unfused)
    whole_run = fit([first, replace(cached, measured_peak=rows[1].peak_memory_gib * GIB)], setup.job)
    assert whole_run.memory_factor_used > 1.1 and not _fits(whole_run, unfused)
