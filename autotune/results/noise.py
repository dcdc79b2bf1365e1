"""Measured noise: how much a configuration's throughput moves from step to step, and ties it makes.

The verl runner runs the measured step plus K more (`--extra-steps`, default 1) and stores every step's throughput
in the trial's `extra["noise"]`; the objective stays the measured step's (or window's) value. The spread is the
range of the measured and extra steps' throughputs over the objective. Two configurations whose measured-step
throughputs differ by less than the larger of their spreads are a tie: which one is faster is not known from the
short trials, and a confirmation run (`--confirm`) decides. A step in which a verl worker compiled a graph
anew (torch.compile's recompile on compile caches that lacked it, `recompiled`) holds the compile's seconds, which a
long training run pays once: the words name such a measured step, as a study's first trial on cold compile caches
often has one (autotune/verl/keys.py RECOMPILE_MARKERS). Simulated and replayed results have no noise: "not
measured".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from autotune import verl

NOT_MEASURED = "noise not measured"


def measure(steps: Mapping[int, Mapping[str, float]], first: int, last: int, extra_steps: int,
            missed: str = "", recompiled: Iterable[int] = ()) -> dict[str, Any]:
    """extra["noise"] of a trial measured over steps first..last that ran up to `extra_steps` more; `recompiled`: the
    steps a worker compiled a graph anew in."""
    end = last + extra_steps
    thr = {s: m[verl.M_THROUGHPUT] for s, m in steps.items() if verl.M_THROUGHPUT in (m or {})}
    per_step = {str(s): thr[s] for s in range(verl.FIRST_STEP + 1, end + 1) if s in thr}  # step 1: warm-up
    values = [thr[s] for s in range(first, end + 1) if s in thr]  # the measured window (step 1 too) and after
    window = [thr[s] for s in range(first, last + 1) if s in thr]
    doc: dict[str, Any] = {"steps": [first, end], "measured": [first, last], "per_step": per_step,
                           "recompiled": sorted(set(recompiled))}
    if extra_steps <= 0:
        doc["note"] = "no extra step asked (--extra-steps 0)"
    elif not window or len(values) < len(window) + 1:
        doc["note"] = f"the extra steps did not run: {missed}" if missed else "the extra steps did not run"
    else:
        doc["spread"] = round((max(values) - min(values)) / (sum(window) / len(window)), 5)
        if missed:
            doc["note"] = f"the run ended before step {end}: {missed}"
    return doc


@dataclass(frozen=True)
class Noise:
    """A trial's measured noise, from its extra."""

    spread: float | None
    steps: tuple[int, int]
    per_step: dict[int, float]
    note: str = ""
    recompiled: tuple[int, ...] = ()  # steps a verl worker compiled a graph anew in
    measured: tuple[int, int] = (0, 0)

    @classmethod
    def from_extra(cls, extra: Mapping[str, Any] | None) -> Noise | None:
        doc = (extra or {}).get("noise")
        if not doc:
            return None
        return cls(doc.get("spread"), tuple(doc.get("steps") or (0, 0)),  # type: ignore[arg-type]
                   {int(k): float(v) for k, v in (doc.get("per_step") or {}).items()}, doc.get("note", ""),
                   tuple(int(s) for s in doc.get("recompiled") or ()),
                   tuple(doc.get("measured") or doc.get("steps") or (0, 0)))  # type: ignore[arg-type]

    @property
    def measured_recompiled(self) -> tuple[int, ...]:
        """The measured steps that hold a recompile (their time includes the compile)."""
        a, b = self.measured
        return tuple(s for s in self.recompiled if a <= s <= b)

    @property
    def steady(self) -> float | None:
        """The median throughput of the trial's steps from 2 on in which no graph compiled anew: what its measured step
        would read once the compile is paid (None where no such step ran)."""
        vals = sorted(v for s, v in self.per_step.items() if s not in self.recompiled)
        if not vals:
            return None
        mid = len(vals) // 2
        return vals[mid] if len(vals) % 2 else (vals[mid - 1] + vals[mid]) / 2

    def recompile_words(self) -> str:
        held = self.measured_recompiled
        if not held:
            return ""
        which = " and ".join(f"step {s}" for s in held)
        return (f"{which} compiled a graph anew (torch.compile's recompile, as a study's first trial on cold "
                "compile caches often does): its time includes the compile, which a long run pays once")

    def words(self) -> str:
        a, b = self.steps
        notes = "; ".join(n for n in (self.note, self.recompile_words()) if n)
        if self.spread is None:
            return f"{NOT_MEASURED}: {notes}" if notes else NOT_MEASURED
        return f"steps {a}-{b} spread {self.spread:.1%} (measured noise)" + (f"; {notes}" if notes else "")


def spread(extra: Mapping[str, Any] | None) -> float | None:
    n = Noise.from_extra(extra)
    return n.spread if n else None


def noise_words(row: Any) -> str:
    """A trial's noise in words; simulated and replayed results say they were not measured."""
    if row.simulated or row.backend == "replay":
        return f"{NOT_MEASURED} ({'simulated' if row.simulated else 'replayed'})"
    n = Noise.from_extra(row.extra)
    return n.words() if n else NOT_MEASURED


def at_measured_step(row: Any) -> float | None:
    """Throughput at the study's measured step (a confirmation replaces `throughput` with a later window's mean)."""
    return (row.extra or {}).get("measured_step_throughput", row.throughput)


@dataclass(frozen=True)
class Tie:
    """The best trial and the others within the measured noise of it, at the measured step."""

    trials: tuple[int, ...]  # the best first
    gap: float  # the runner-up's relative gap to the best
    noise: float  # the larger spread of the two
    decided: bool  # every tied leader had its confirmation run: the confirmed throughputs rank them

    def words(self) -> str:
        who = " and ".join(f"trial {n}" for n in self.trials)
        if self.decided:
            return (f"{who} were a tie within measured noise ({self.noise:.1%}; {self.gap:.1%} apart at the measured "
                    "step); their confirmation runs decided")
        return (f"tie within measured noise ({self.noise:.1%}): {who} are {self.gap:.1%} apart at the measured step; "
                "which is faster is not known (a confirmation run, --confirm, decides)")

    def as_dict(self) -> dict[str, Any]:
        return {"trials": list(self.trials), "gap": round(self.gap, 5), "noise": round(self.noise, 5),
                "decided": self.decided, "words": self.words()}


def within_noise(best: float, other: float, noise: float) -> bool:
    """Two measured-step throughputs are a tie where they differ by no more than the measured noise of the best."""
    return abs(best - other) / best <= noise


def hidden_by_a_recompile(rows: Iterable[Any], k: int) -> list[tuple[Any, float]]:
    """The trials outside the k fastest whose measured step compiled a graph anew and whose other steps would put them
    among them: (row, its steady throughput), fastest first. A study's first trial on cold compile caches often
    recompiles in its steps (lease 59's ran step 3 at 0.76 of its step 2); a confirmation run measures it as a long
    run sees it, with the compile paid once. A confirmed trial is measured past its compile already."""
    ok = sorted((r for r in rows if r.status == "ok" and r.throughput is not None and not r.simulated),
                key=lambda r: -r.throughput)  # as confirm_top takes its k
    if k <= 0 or len(ok) <= k:
        return []
    bar = ok[k - 1].throughput
    out = []
    for r in ok[k:]:
        n = Noise.from_extra(r.extra)
        confirmed = ((r.extra or {}).get("confirm") or {}).get("status") == "ok"
        if not confirmed and n is not None and n.measured_recompiled and n.steady is not None and n.steady > bar:
            out.append((r, n.steady))
    return sorted(out, key=lambda x: -x[1])


def hidden_words(number: int, steady: float) -> str:
    """What `best` and the dashboard say of a trial `hidden_by_a_recompile` finds ahead of the best by its other
    steps."""
    return (f"trial {number}'s measured step compiled a graph anew; its other steps ran at {steady:.1f} tokens/s/GPU, "
            "ahead of the best: which is faster is not known until a confirmation run (--confirm) measures it")


def leaders_tie(rows: Iterable[Any]) -> Tie | None:
    """The tie among a study's fastest ok trials, if the best's nearest rivals are within the measured noise."""
    ok = [r for r in rows if r.status == "ok" and at_measured_step(r) is not None and not r.simulated]
    if len(ok) < 2:
        return None
    ok.sort(key=lambda r: (-(r.throughput or 0.0), r.number))
    best = ok[0]
    b = at_measured_step(best)
    tied, gap, noise = [best], 0.0, 0.0
    for r in ok[1:]:
        spreads = [x for x in (spread(best.extra), spread(r.extra)) if x is not None]
        if not spreads or not b:
            continue
        g = abs(b - at_measured_step(r)) / b
        if within_noise(b, at_measured_step(r), max(spreads)):
            tied.append(r)
            if len(tied) == 2:
                gap, noise = g, max(spreads)
    if len(tied) < 2:
        return None
    decided = all(((r.extra or {}).get("confirm") or {}).get("status") == "ok" for r in tied)
    return Tie(tuple(r.number for r in tied), gap, noise, decided)
