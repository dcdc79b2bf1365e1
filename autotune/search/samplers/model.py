"""ModelSampler: Optuna's TPE with the model's proposals ahead of it.

Before each trial the study's plan (autotune/search/plan.py) may hold a proposal: the corrected model's best candidate
not launched yet, a model seed, or the plan's next runnable candidate when TPE keeps proposing what cannot run.
The sampler then answers every parameter of that trial from the proposal; otherwise it is TPE, unchanged (trials
the model proposed are in the study like any other, so TPE learns from them too). Queued trials (enqueue_trial's
fixed parameters: references, re-queues) pass through untouched.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from optuna.distributions import BaseDistribution
from optuna.samplers import BaseSampler
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState


class ModelSampler(BaseSampler):
    def __init__(self, base: BaseSampler):
        self._base = base
        self._next: Any = None  # the proposal for the next trial that is not queued (set by the tuner)
        self._planned: dict[int, Any] = {}  # trial number -> the proposal answering its parameters

    def hold(self, proposal: Any) -> None:
        """The plan's proposal (params, origin) for the next trial asked, or None: TPE's turn."""
        self._next = proposal

    def planned(self, number: int) -> Any:
        return self._planned.get(number)

    def reseed_rng(self) -> None:
        self._base.reseed_rng()

    def before_trial(self, study: Study, trial: FrozenTrial) -> None:
        self._base.before_trial(study, trial)
        if trial.system_attrs.get("fixed_params") is not None or self._next is None:
            return
        self._planned[trial.number], self._next = self._next, None

    def infer_relative_search_space(self, study: Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        if trial.number in self._planned:
            return {}
        return self._base.infer_relative_search_space(study, trial)

    def sample_relative(self, study: Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        if trial.number in self._planned:
            return {}
        return self._base.sample_relative(study, trial, search_space)

    def sample_independent(self, study: Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        planned = self._planned.get(trial.number)
        if planned is not None and param_name in planned.params:
            return planned.params[param_name]
        return self._base.sample_independent(study, trial, param_name, param_distribution)

    def after_trial(self, study: Study, trial: FrozenTrial, state: TrialState,
                    values: Sequence[float] | None) -> None:
        self._planned.pop(trial.number, None)
        self._base.after_trial(study, trial, state, values)
