"""A study learns the sequence lengths of its own trials: later verdicts at the measured step use them."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.study import Tuner
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
