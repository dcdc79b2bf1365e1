"""Stopping a running trial early (`--prune-slower-than`): the runner reports each step's throughput, and a trial
clearly slower than the study's best at the same step is stopped, as Optuna's pruners judge intermediate values."""

from __future__ import annotations

from collections.abc import Callable

import optuna
from optuna.trial import TrialState


def slower_than_best(study: optuna.Study, trial: optuna.Trial, fraction: float | None, after: int
                     ) -> Callable[[int, float], bool]:
    """A runner's per-step callback: records the step's value in Optuna; True when the trial is below `fraction` of
    the best completed trial at the same step (its final value where none reached it), once `after` completed."""

    def report(step: int, value: float) -> bool:
        trial.report(value, step)
        if fraction is None:
            return False
        done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if len(done) < after:
            return False
        same_step = [t.intermediate_values[step] for t in done if step in t.intermediate_values]
        best = max(same_step) if same_step else max(t.value for t in done if t.value is not None)
        return value < fraction * best

    return report
