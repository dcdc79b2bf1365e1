"""Predictions made before a study measured its sequence lengths: they counted other tokens per step than every
measurement and every later prediction, so `status` and the dashboard mark them and give the model's prediction now."""

from __future__ import annotations

from typing import Any

from autotune import units, verl
from autotune.candidate import Candidate
from autotune.estimate.lengths import responses_guessed
from autotune.search.learning import study_setup
from autotune.store.store import Store


def guessed_predictions(store: Store, meta: Any, rows: list[Any]) -> tuple[set[int], str]:
    """The trials predicted before anything told the responses' length (estimate/lengths.py responses_guessed) in a
    study that measured them later, and why such a prediction compares with nothing, with the model's prediction
    now (at the measured lengths, with the study's correction). Nothing where no trial measured lengths: then every
    prediction made the same guess."""
    predicted = [r.number for r in rows if r.predicted_throughput is not None and not r.simulated]
    found = {n for n, m in store.predicted_memories(meta.name, predicted).items() if responses_guessed(m)}
    setup = study_setup(store, meta) if found else None
    if setup is None or not setup.measured_lengths:
        return set(), ""
    now = []
    for r in (r for r in rows if r.number in found):
        try:
            t = setup.evaluate(Candidate.from_params(dict(r.params))).throughput
        except (TypeError, ValueError, ZeroDivisionError):  # a configuration the model cannot describe
            continue
        if t is not None:
            now.append(f"#{r.number} {units.throughput(t.throughput)}")
    words = ("(lengths guessed): predicted before a trial measured the sequence lengths, the responses at the time "
             f"model's typical share of {verl.MAX_RESPONSE_LENGTH}: it counted other tokens per step than its "
             "measurement and than predictions made at the measured lengths, and compares with neither")
    return found, words + (f"; at the measured lengths, corrected, the model now predicts {', '.join(now)}"
                           if now else "")
