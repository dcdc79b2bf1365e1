"""The ranking of a runner that can run only a finite list of candidates (a replay table): each one evaluated.

make_ranking (search/ranking.py) returns one for a runner with a domain; it answers as the model's ranking does.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from autotune.candidate import Candidate
from autotune.estimate import Evaluation
from autotune.estimate.correction import NO_CORRECTION, Correction
from autotune.estimate.safer import near_equal
from autotune.search.split import Pick, best_pick


class DomainRanking:
    """The ranking of a runner that can run only a finite list of candidates (a replay table): each evaluated."""

    def __init__(self, setup: Any, domain: Sequence[Candidate]):
        self.setup = setup
        self.calls = 0
        ctx = setup.context
        self.items: list[tuple[dict[str, Any], Candidate]] = []
        seen: set[str] = set()
        for c in domain:
            params = setup.space.project(c.params(), ctx)
            cand = Candidate.from_params(params, setup.base)
            if cand.key() != c.key() or cand.key() in seen:
                continue  # not a setting of the space (or a copy)
            seen.add(cand.key())
            self.items.append((params, cand))
        self._evals: dict[int, list[Evaluation]] = {}

    def _evaluated(self, corr: Correction) -> list[Evaluation]:
        if id(corr) not in self._evals:
            self._evals = {id(corr): [corr.apply(self.setup.evaluate_uncorrected(c), self.setup.job)
                                      for _, c in self.items]}
            self._corr = corr
            self.calls += len(self.items)
        return self._evals[id(corr)]

    def ranked(self, corr: Correction = NO_CORRECTION, exclude: Sequence[Candidate] = (),
               safe: bool = False) -> Iterator[Pick]:
        skip = {c.key() for c in exclude}
        evs = self._evaluated(corr)
        order = sorted(range(len(evs)), key=lambda i: -evs[i].predicted_throughput)
        for i in order:
            ev = evs[i]
            if ev.feasible and (ev.safe or not safe) and self.items[i][1].key() not in skip:
                yield Pick(self.items[i][0], self.items[i][1], ev.predicted_throughput, ev.safe)

    best = best_pick

    def seeds(self, k: int, corr: Correction = NO_CORRECTION, exclude: Sequence[Candidate] = ()) -> list[Pick]:
        first = self.best(corr, exclude)
        if first is None or k <= 0:
            return []
        out, layouts = [first], {first.candidate.layout()}
        by_layout: dict[str, list[Pick]] = {}
        for p in self.ranked(corr, exclude):
            by_layout.setdefault(p.candidate.layout(), []).append(p)
        for lay, picks in by_layout.items():
            if len(out) >= k:
                break
            if lay in layouts:
                continue
            safe = next((p for p in picks if p.safe and near_equal(p.throughput, picks[0].throughput)), None)
            out.append(safe or picks[0])
        return out

    def count(self, corr: Correction = NO_CORRECTION) -> int:
        return sum(ev.feasible for ev in self._evaluated(corr))

    def runnable(self, cand: Candidate, corr: Correction = NO_CORRECTION) -> bool:
        evs = self._evaluated(corr)
        return any(c.key() == cand.key() and ev.feasible for (_, c), ev in zip(self.items, evs, strict=True))

    def explain(self) -> str:
        counts: dict[str, list] = {}
        for ev in self._evaluated(NO_CORRECTION):
            for v in ev.violations:
                counts.setdefault(v.rule, [0, v.message])[0] += 1
            if ev.memory is not None and not ev.memory.fits:
                counts.setdefault("memory", [0, "predicted OOM: " + ev.memory.reasons()[0]])[0] += 1
        if not self.items:
            counts["runner"] = [1, "none of the runner's configurations is a setting of the space"]
        top = sorted(counts.items(), key=lambda kv: -kv[1][0])
        return "; ".join(f"{rule} x{n} (e.g. {ex})" if i < 3 else f"{rule} x{n}"
                         for i, (rule, (n, ex)) in enumerate(top))
