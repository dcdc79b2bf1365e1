"""A study's plan: what the model proposes next, worked out from what the database holds, so that it survives
restarts and budget changes.

Its agenda, in order: the model's best setting (seed 1; before anything is measured, the best safe one: see
`first_launch`), the references (the user's configuration, verl's stock
one), the best settings of the next-best parallel layouts (the other model seeds). A seed the budget left
unlaunched stays on the agenda: it is launched first when the study resumes with a larger --n-trials. After the
agenda: once a new measurement has corrected the model, the corrected model's best candidate not launched yet,
when it may beat the best measured so far (its prediction raised by the model's doubt); TPE otherwise; and when TPE
keeps proposing what cannot run, the plan's next runnable candidate. The study stops on an exhausted space only when
the plan has no runnable candidate left.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from autotune.candidate import Candidate
from autotune.estimate.safer import FIRST_LAUNCH_TOLERANCE
from autotune.search.domain import DomainRanking
from autotune.search.ranking import ModelRanking
from autotune.search.setup import Setup
from autotune.search.split import Pick
from autotune.store.schema import TrialRow
from autotune.store.store import Store

IDLE_BEFORE_PLAN = 3  # proposals in a row that launch nothing before the plan proposes its next runnable candidate
DOUBT_Z = 1.0  # how far above its prediction a candidate may turn out (in posterior sds) for the model to try it
REFERENCES = ("baseline", "stock")
NOT_LAUNCHED = "not launched:"  # claim_launch's reason when the budget was spent: the row did not resolve its seed


@dataclass(frozen=True)
class Proposal:
    params: dict[str, Any]  # in the space (answered by the ModelSampler), or a reference's full parameters
    origin: str  # model-seed | baseline | stock | model | plan
    predicted: float | None = None


def first_launch(ranking: ModelRanking | DomainRanking, corr: Any, exclude: list[Candidate]
                 ) -> tuple[Pick | None, Pick | None]:
    """(a study's first launch, the faster setting it passed over or None). Before any measurement the first launch
    is the best safe setting whenever one exists (safer.FIRST_LAUNCH_TOLERANCE), not the 2% rule's."""
    first = ranking.best(corr, exclude, tolerance=FIRST_LAUNCH_TOLERANCE)
    top = ranking.best(corr, exclude)
    if first is None or top is None or top.candidate.key() == first.candidate.key():
        return first, None
    return first, top


def _resolved(status: str, reason: str) -> bool:
    """A seeded row settles its seed unless the budget kept it from launching or it was interrupted (re-queued)."""
    return not ((status == "pruned" and (reason or "").startswith(NOT_LAUNCHED)) or status == "interrupted")


class Plan:
    def __init__(self, store: Store, study: str, setup: Callable[[], Setup],
                 ranking: Callable[[], ModelRanking | DomainRanking], n_model_seeds: int,
                 references: list[tuple[str, dict[str, Any]]], learn: bool, not_counted: tuple[str, ...]):
        self.store, self.study, self.n_model_seeds = store, study, n_model_seeds
        self._setup, self._ranking = setup, ranking
        self.references = references
        self.learn = learn
        self.not_counted = not_counted
        self.launched: dict[str, Candidate] = {}
        self.done: dict[str, int] = {}  # origin -> seeded rows that settled
        self.seed_layouts: set[str] = set()
        self.best_measured: float | None = None
        self.measured = 0
        self._seen_measured = -1  # the measurements the last "model" decision saw
        self.exhausted = False

    def refresh(self) -> None:
        """Read the study's state from the database (at the start of a run; after another worker's launch)."""
        self.launched = {}
        for r in self.store.launched_configurations(self.study, exclude=self.not_counted):
            self.launched[r.candidate_key] = Candidate.from_params(dict(r.params))
            if r.origin == "model-seed":
                self.seed_layouts.add(self._layout(self.launched[r.candidate_key]))
        self.done = {}
        for origin, status, reason, _ in self.store.origins(self.study):
            if _resolved(status, reason):
                self.done[origin] = self.done.get(origin, 0) + 1
        measured = self.store.measured_trials(self.study)
        self.measured = len(measured)
        oks = [r.throughput for r in measured if r.status == "ok" and r.throughput]
        self.best_measured = max(oks) if oks else None

    def note(self, row: TrialRow, finished: bool = False) -> None:
        """A row this tuner recorded (pruned, launched, or finished)."""
        if row.launched and row.status not in self.not_counted:
            self.launched[row.candidate_key] = Candidate.from_params(dict(row.params))
            if row.origin == "model-seed":
                self.seed_layouts.add(self._layout(self.launched[row.candidate_key]))
        elif row.status == "interrupted":
            self.launched.pop(row.candidate_key, None)
        if row.origin != "sampler" and (finished or row.status == "pruned") and _resolved(row.status, row.reason):
            self.done[row.origin] = self.done.get(row.origin, 0) + 1
        if finished and row.launched and not row.simulated and row.status in ("ok", "oom"):
            self.measured += 1
            if row.status == "ok" and row.throughput:
                self.best_measured = max(self.best_measured or 0.0, row.throughput)
        if row.status == "pruned" and (row.reason or "").startswith("duplicate of trial"):
            self.refresh()  # another worker launched it: see what else it launched

    @staticmethod
    def _layout(c: Candidate) -> str:
        return c.layout().split(" | ")[0]

    # What comes next
    def next(self, idle: int) -> Proposal | None:
        setup = self._setup()
        corr = setup.correction
        ranking = self._ranking()
        exclude = list(self.launched.values())
        if not self.done.get("model-seed") and self.n_model_seeds > 0:
            return self._seed(first_launch(ranking, corr, exclude)[0] if not self.measured
                              else ranking.best(corr, exclude))
        for origin, params in self.references:
            if not self.done.get(origin):
                return Proposal(params, origin)
        if self.done.get("model-seed", 0) < self.n_model_seeds:
            pick = self._new_layout(ranking, corr, exclude)
            if pick is not None:
                return self._seed(pick)
            self.done["model-seed"] = self.n_model_seeds  # no other layout can run: the seeds are done
        if self.learn and corr.active and self.measured > self._seen_measured:
            self._seen_measured = self.measured
            pick = ranking.best(corr, exclude)
            if pick is not None and self._may_beat(pick, setup):
                return Proposal(pick.params, "model", pick.throughput)
        if idle >= IDLE_BEFORE_PLAN:
            pick = ranking.best(corr, exclude)
            if pick is None:
                self.exhausted = True
                return None
            return Proposal(pick.params, "plan", pick.throughput)
        return None

    def passed_over(self) -> tuple[Pick, Pick] | None:
        """(the study's first launch, the faster setting it passes over) while that launch is still to be made."""
        self.refresh()
        if self.done.get("model-seed") or self.n_model_seeds <= 0 or self.measured:
            return None
        first, top = first_launch(self._ranking(), self._setup().correction, list(self.launched.values()))
        return None if first is None or top is None else (first, top)

    def _seed(self, pick: Pick | None) -> Proposal | None:
        return None if pick is None else Proposal(pick.params, "model-seed", pick.throughput)

    def _new_layout(self, ranking: Any, corr: Any, exclude: list[Candidate]) -> Pick | None:
        for pick in ranking.seeds(self.n_model_seeds + len(self.seed_layouts) + 1, corr, exclude):
            if self._layout(pick.candidate) not in self.seed_layouts:
                return pick
        return None

    def _may_beat(self, pick: Pick, setup: Setup) -> bool:
        if self.best_measured is None:
            return True
        ev = setup.evaluate(pick.candidate)
        if ev.throughput is None:
            return False
        phases = dict(ev.throughput.phases)
        total = sum(phases.values()) or 1.0
        doubt = math.sqrt(sum((t / total * setup.correction.log_sd(p, pick.candidate, setup.job)) ** 2
                              for p, t in phases.items() if p != "adv"))
        return pick.throughput * math.exp(DOUBT_Z * doubt) >= self.best_measured

    def left(self) -> int:
        """Runnable candidates of the space not launched yet (by the corrected model), exactly."""
        ranking, corr = self._ranking(), self._setup().correction
        return ranking.count(corr) - sum(ranking.runnable(c, corr) for c in self.launched.values())
