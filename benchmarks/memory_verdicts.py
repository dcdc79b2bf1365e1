"""Does the learned memory factor turn the model's right verdicts wrong? On every real verl study, in the order its
trials ran: the correction fitted on its first k measured trials (k = 1, 2, ...) judges each later one (fits or not,
autotune/estimate/correction.py `memory_factor_used` on the uncertain terms of each moment), against what that
trial did (ran, or ran out of memory).

    python -m benchmarks.memory_verdicts     # writes benchmarks/results/memory_verdicts.md

A *false prune* is a configuration the corrected verdict would not launch that then ran; a *false fit* is one it
would launch that ran out of memory (issue 23.3: none). Each trial is rebuilt as the tuner's learning sees it
(autotune/search/learning.py `observation`, at the lengths the study measured); the trials with a verdict, each
once (real_cases.measured_trials). Rules: the one shipped now, the one before it (one posterior sd above the mean,
whatever the data said) and none (the uncorrected model).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from autotune.estimate.correction import Correction, Observation, fit
from autotune.search.learning import measured_lengths, observation
from benchmarks import real_studies
from benchmarks.real_cases import measured_trials

HERE = Path(__file__).resolve().parent
RESULT = HERE / "results" / "memory_verdicts.md"


def _before(c: Correction) -> float:
    return math.exp(c.memory_log + c.memory_sd) if (c.memory_n or c.warm) else 1.0


RULES: dict[str, Callable[[Correction], float]] = {
    "shipped": lambda c: c.memory_factor_used,
    "before: one sd above the mean (6b5041d)": _before,
    "uncorrected": lambda c: 1.0,
}


@dataclass(frozen=True)
class Verdict:
    """One later trial judged by the correction fitted on a study's first k measured trials."""

    study: str
    k: int
    trial: int
    oom: bool  # what the trial did
    fits: dict[str, bool]  # the verdict under each rule
    factor: dict[str, float]  # the factor each rule applied


def _fits(o: Observation, f: float) -> bool:
    return all(p + (f - 1.0) * u <= cap for p, u, cap in o.moments)


def verdicts(dbs: Iterable[Path]) -> list[Verdict]:
    out = []
    for (_db, name), group in itertools.groupby(measured_trials(dbs), key=lambda t: (t[0], t[3].study)):
        rows = list(group)
        store, base = rows[0][1], rows[0][2]
        s = dataclasses.replace(base, measured_lengths=measured_lengths(store, name, base.measure_step))
        seen = [(r, o) for *_, r in rows for o in [observation(r, s, store.steps(r.id))] if o is not None and o.moments]
        for k in range(1, len(seen)):
            corr = fit([o for _, o in seen[:k]], s.job)
            for r, o in seen[k:]:
                factors = {rule: used(corr) for rule, used in RULES.items()}
                out.append(Verdict(name, k, r.number, r.status == "oom",
                                   {n: _fits(o, f) for n, f in factors.items()}, factors))
    return out


def counts(vs: list[Verdict], rule: str) -> tuple[int, int]:
    """(false prunes, false fits) under `rule`."""
    return (sum(not v.fits[rule] and not v.oom for v in vs), sum(v.fits[rule] and v.oom for v in vs))


def report(data: Path) -> str:
    vs = verdicts(data.glob("*/*.db"))
    lines = [
        "# The learned memory factor's verdicts on the real studies (`benchmarks/memory_verdicts.py`)", "",
        "Each real study in the order its trials ran: the correction fitted on its first k measured trials judges "
        "each later one. False prune: not launched, but it ran; false fit: launched, but it ran out of memory.", "",
        f"Cases (study, k, later trial): {len(vs)}, of {len({v.study for v in vs})} studies; "
        f"{sum(v.oom for v in vs)} of them ran out of memory.", "",
        "| rule | false prunes | false fits |", "|---|---|---|",
    ]
    for rule in RULES:
        prunes, fits = counts(vs, rule)
        lines.append(f"| {rule} | {prunes} | {fits} |")
    for rule in RULES:
        wrong = [v for v in vs if v.fits[rule] == v.oom]
        if not wrong:
            continue
        lines += ["", f"## Wrong under `{rule}`", "", "| study | k | trial | did | factor |", "|---|---|---|---|---|"]
        lines += [f"| {v.study} | {v.k} | #{v.trial} | {'ran out of memory' if v.oom else 'ran'} | "
                  f"x{v.factor[rule]:.3f} |" for v in wrong]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    real_studies.write_report(__doc__ or "", RESULT, report, argv)


if __name__ == "__main__":
    main()
