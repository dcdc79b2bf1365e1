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


C3B = Path(__file__).parent / "data" / "real_verl_gpu" / "h100_2026-11-25_l7" / "c-3b.db"


def test_the_real_3b_study_reproduces_its_5761_and_status_says_what_0s_prediction_assumed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A real 3B study (2026-11-25) predicted its first pick at 2,827.6 tokens/s/GPU and the same configuration with
    selective recompute at 5,761.5: not 2x faster, but 44k tokens per step (responses at the typical share of the
    cap, 184 tokens) against the 152k its first trial measured (responses 1,018). At one length the model puts
    recompute 4% slower (its checkpoint, 1.2 s over the 8k budget's 20 micro-batches: the pair's updates measured 1.1 s
    apart over steps 2 on). `status` marks the prediction made at guessed lengths and gives the model's now."""
    import dataclasses
    import json
    import shutil

    from autotune.candidate import Candidate
    from autotune.estimate.correction import fit
    from autotune.search.learning import observation, step_lengths
    from autotune.search.setup import setup_from_row
    from autotune.store.store import Store
    from tests.conftest import cli_run

    db = tmp_path / "c-3b.db"
    shutil.copy(C3B, db)  # never the committed database
    store = Store(f"sqlite:///{db}")
    setup = setup_from_row(store.get_study("c-3b"))
    rows = {r.number: r for r in store.trials("c-3b")}
    first = tuple(x for st in store.steps(rows[0].id) if st.step == setup.measure_step
                  for x in [step_lengths(st.metrics)] if x)
    at = dataclasses.replace(setup, measured_lengths=first)  # what the study knew when it launched #3
    corr = fit([o for r in (rows[0], rows[1]) for o in [observation(r, at)] if o], at.job)
    sel, none = (Candidate.from_params(dict(rows[n].params)) for n in (3, 0))
    t3 = dataclasses.replace(at, correction=corr).evaluate(sel).throughput
    assert t3.tokens_per_step == pytest.approx(128 * (172.125 + 1018.4921875))  # #0's measured step-3 lengths
    # 5,761.5 was the model of that day on those tokens: the stored prediction counted exactly them
    assert rows[3].predicted_step_s * rows[3].predicted_throughput == pytest.approx(t3.tokens_per_step, rel=1e-6)
    t0 = at.evaluate_uncorrected(none).throughput
    assert 1.03 < at.evaluate_uncorrected(sel).throughput.step_time / t0.step_time < 1.05  # recompute: a bit slower
    assert rows[0].predicted_step_s * rows[0].predicted_throughput < 0.3 * t0.tokens_per_step  # #0: 44k of 152k

    code, out, _ = cli_run(capsys, "status", "--storage", f"sqlite:///{db}", "--json")
    assert code == 0
    guessed = {t["number"]: t["predicted_lengths_guessed"] for t in json.loads(out)["trials"]}
    assert guessed == {0: True, 1: False, 3: False}
    code, out, _ = cli_run(capsys, "status", "--storage", f"sqlite:///{db}")
    assert code == 0 and "(lengths guessed)" in out and "the model now predicts #0" in out


def test_a_study_keeps_what_it_knew_of_the_lengths_and_an_older_database_opens(tmp_path: Path) -> None:
    """The data's prompt lengths (read where the job's files are) and --response-length are kept with the study, so
    a setup rebuilt from the database alone (export, the dashboard, a replay) judges as the study did: lease 42's 7B
    study launched dyn32k/96k with its data's ~170-token prompts, a rebuild without them dyn24k/96k. A database made
    before the column existed gains it on open, its studies knowing nothing (None)."""
    import dataclasses
    import sqlite3

    from autotune.search.setup import setup_from_row
    from autotune.store.store import Store

    url = f"sqlite:///{tmp_path / 's.db'}"
    setup = dataclasses.replace(make_setup(), prompt_lengths=(148.4, 234.0, "train.parquet: 16 prompts"),
                                response_length=700.0)
    Tuner(setup, fake_runner(env_for(tmp_path / "rec.jsonl")), url, "kept", workdir=tmp_path / "t")
    again = setup_from_row(Store(url).get_study("kept"))
    assert again.prompt_lengths == (148.4, 234.0, "train.parquet: 16 prompts") and again.response_length == 700.0
    assert again.lengths == setup.lengths
    with sqlite3.connect(tmp_path / "s.db") as con:  # as a database of before the column
        con.execute("ALTER TABLE autotune_studies DROP COLUMN lengths")
    old = setup_from_row(Store(url).get_study("kept"))
    assert old.prompt_lengths is None and old.response_length is None and old.lengths is None
