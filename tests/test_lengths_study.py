"""A study learns the sequence lengths of its own trials: later verdicts at the measured step use them."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.study.study import Tuner
from tests.conftest import make_setup
from tests.fake_verl import env_for, fake_runner, leftovers


@pytest.mark.slow
def test_measured_response_lengths_feed_later_verdicts(tmp_path: Path, sqlite_url: str) -> None:
    rec = tmp_path / "rec.jsonl"
    tuner = Tuner(make_setup(), fake_runner(env_for(rec)), sqlite_url, "lengths", workdir=tmp_path / "t")
    assert tuner.setup.lengths is None  # nothing known yet: the worst case the job allows
    tuner.run(2)
    rows = [r for r in tuner.store.trials("lengths") if r.launched]
    assert rows[0].predicted_memory["lengths"]["worst_case"]
    # The verl double reports response_length/mean 712.4 + 50 * step and /max 1800 + 400 * step: step 3.
    ln = tuner.setup.lengths
    assert (ln.response_mean, ln.response_max, ln.prompt_mean, ln.prompt_max) == (862.4, 3000.0, 310.5, 1024.0)
    assert "measured response_length/mean" in ln.sources[0]
    later = [r for r in tuner.store.trials("lengths") if r.number > rows[0].number]
    assert later and later[-1].predicted_memory["lengths"]["response_max"] == 3000.0
    assert later[-1].predicted_memory["verdict"].startswith(("fits at step 3", "OOM at step 3"))
    # A resumed tuner finds the measurements again.
    again = Tuner(make_setup(), fake_runner(env_for(rec)), sqlite_url, "lengths", workdir=tmp_path / "t")
    again.refresh_lengths()
    assert again.setup.lengths == ln
    assert leftovers(rec) == []


@pytest.mark.slow
def test_the_first_correction_is_fitted_at_the_lengths_its_trial_measured(tmp_path: Path, sqlite_url: str) -> None:
    """The refit after a measured trial predicts it at the lengths it measured: fitted before the study folded them
    in, the first correction compared a step of 1,196-token sequences with a prediction at the job caps' typical
    shares (245 tokens) and read a 2x error as 6.6x (a real 1.5B study, 2026-11-25)."""
    from autotune.search.learning import observation
    from autotune.search.setup import Setup

    rec = tmp_path / "rec.jsonl"
    tuner = Tuner(make_setup(), fake_runner(env_for(rec)), sqlite_url, "first-fit", workdir=tmp_path / "t")
    tuner.run(1)
    row = next(r for r in tuner.store.trials("first-fit") if r.launched)
    assert row.status == "ok" and tuner.setup.lengths is not None
    saved = tuner.learning.current
    # the same fit, made by hand at the lengths the trial measured, is the study's
    obs = observation(row, tuner.setup)
    at_typical = observation(row, Setup(**{**tuner.setup.__dict__, "measured_lengths": ()}))
    assert obs is not None and at_typical is not None
    assert obs.predicted_phases != at_typical.predicted_phases  # the lengths matter to the prediction
    from autotune.estimate.correction import fit

    expected = fit([obs], tuner.setup.job, tuner.learning.prior)
    assert saved.factors_text() == expected.factors_text()
    assert leftovers(rec) == []
