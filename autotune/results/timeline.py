"""A trial's timeline: launch, verl's start-up milestones, each step's start and end, exit; and the study's sum.

Read from what the verl runner stores in a trial's `extra`: `timings` (`<milestone>_s`: seconds after launch a
milestone's line showed in the console, autotune.verl.STARTUP_MILESTONES; `wall_s`: launch to exit, clean-up
included) and `step_spans_s` (step -> [start, end]: a step ends when its line shows and starts `timing_s/step`
earlier). "GPU busy" is the steps' time over the trial's wall time: what start-up (Ray, model build, vLLM) costs a
short trial. Simulated and replayed trials have no timeline: nothing ran now.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from autotune import units, verl

SPANS = "step_spans_s"  # the key of extra the step spans are stored under
# A trial that joined the verl runner's kept Ray head (extra["ray"]: "kept", or "fresh" for the one that started it,
# before launch: timings["ray_head_start_s"]) connects to Ray instead of starting it (runners/node/ray_head.py).
KEPT_RAY = ("kept", "fresh")
KEPT_RAY_UP = "Ray joined (kept head)"


def step_spans(seen_at: Mapping[int, float], steps: Mapping[int, Mapping[str, float]]) -> dict[str, list[float]]:
    """{step: [start, end]} in seconds after launch, for steps whose line was seen and whose time verl reported."""
    spans: dict[str, list[float]] = {}
    before = 0.0  # a step starts after the previous one ended (verl runs them one after another)
    for step, end in sorted(seen_at.items()):
        took = (steps.get(step) or {}).get(verl.PHASE_TIMINGS["step"])
        if took is not None and took >= 0:
            spans[str(step)] = [round(min(end, max(before, end - took)), 2), round(end, 2)]
        before = end
    return spans


@dataclass(frozen=True)
class Event:
    key: str  # a STARTUP_MILESTONES name, or "launch" / "exit"
    label: str
    at_s: float  # seconds after launch


@dataclass(frozen=True)
class StepSpan:
    step: int
    start_s: float
    end_s: float

    @property
    def seconds(self) -> float:
        return self.end_s - self.start_s


@dataclass(frozen=True)
class Timeline:
    """One run of a trial (its last attempt), launch at 0 s."""

    wall_s: float
    milestones: tuple[Event, ...]  # start-up milestones seen, in time order
    steps: tuple[StepSpan, ...]
    ray: str = ""  # how the run got its Ray (autotune/runners/node/ray_head.py); "" where not recorded
    ray_head_start_s: float = 0.0  # starting the kept head before launch: paid by this run, not in wall_s

    @classmethod
    def from_extra(cls, extra: Mapping[str, Any] | None) -> Timeline | None:
        """The timeline a runner recorded in a trial's extra; None where it recorded none (simulated, replayed,
        imported, or not launched)."""
        extra = extra or {}
        timings = extra.get("timings") or {}
        wall = timings.get("wall_s")
        if not isinstance(wall, (int, float)) or wall <= 0:
            return None
        ray = str(extra.get("ray") or "")
        labels = {**verl.MILESTONE_LABELS, **({"ray_up": KEPT_RAY_UP} if ray in KEPT_RAY else {})}
        events = [Event(k, labels.get(k, k), float(timings[f"{k}_s"]))
                  for k in verl.STARTUP_MILESTONES if k != "first_step"
                  and isinstance(timings.get(f"{k}_s"), (int, float))]
        spans = [StepSpan(int(s), float(a), float(b)) for s, (a, b) in (extra.get(SPANS) or {}).items()]
        head = timings.get("ray_head_start_s")
        return cls(float(wall), tuple(sorted(events, key=lambda e: e.at_s)),
                   tuple(sorted(spans, key=lambda s: s.step)), ray,
                   float(head) if isinstance(head, (int, float)) else 0.0)

    @property
    def startup_s(self) -> float:
        """Launch to the first step's start (the whole run when no step started)."""
        return min(self.steps[0].start_s, self.wall_s) if self.steps else self.wall_s

    @property
    def steps_s(self) -> float:
        return sum(s.seconds for s in self.steps)

    @property
    def after_s(self) -> float:
        """The last step's end to exit: stopping verl, Ray's shutdown, waiting for the GPUs to be given back."""
        return max(0.0, self.wall_s - self.steps[-1].end_s) if self.steps else 0.0

    @property
    def busy_fraction(self) -> float:
        """The steps' share of the trial's wall time ("GPU busy")."""
        return min(1.0, self.steps_s / self.wall_s)

    def rows(self) -> list[tuple[str, float, float | None]]:
        """(what, at seconds after launch, lasting seconds or None) from launch to exit, in time order."""
        rows: list[tuple[str, float, float | None]] = [("launch", 0.0, None)]
        rows += [(e.label, e.at_s, None) for e in self.milestones]
        rows += [(f"step {s.step}", s.start_s, s.seconds) for s in self.steps]
        rows.sort(key=lambda r: r[1])
        return [*rows, ("exit", self.wall_s, None)]

    def ray_words(self) -> str:
        """How the run got its Ray, where it joined the kept head ("" otherwise)."""
        if self.ray not in KEPT_RAY:
            return ""
        if self.ray_head_start_s:
            return (f"Ray: started the kept head before launch ({units.seconds(self.ray_head_start_s)} s, not in "
                    "the times above), then joined it")
        return "Ray: joined the kept head an earlier trial started (no Ray start or stop of its own)"

    def summary(self) -> str:
        words = self.ray_words()
        return (f"GPU busy {self.busy_fraction:.0%} of this trial: steps {units.seconds(self.steps_s)} s of "
                f"{units.seconds(self.wall_s)} s launch to exit (start-up {units.seconds(self.startup_s)} s, "
                f"stop and clean-up {units.seconds(self.after_s)} s)" + (f"; {words}" if words else ""))

    def as_dict(self) -> dict[str, Any]:
        return {"wall_s": self.wall_s, "startup_s": round(self.startup_s, 2), "steps_s": round(self.steps_s, 2),
                "after_s": round(self.after_s, 2), "busy_fraction": round(self.busy_fraction, 4),
                "ray": self.ray, "ray_head_start_s": self.ray_head_start_s,
                "events": [{"what": w, "at_s": a, "seconds": d} for w, a, d in self.rows()]}


@dataclass(frozen=True)
class StudyTime:
    """Where a study's launched real runs spent their wall time (seconds): start-up, steps, and the rest (between
    steps, stopping verl, clean-up)."""

    runs: int
    startup_s: float
    steps_s: float
    other_s: float

    @property
    def wall_s(self) -> float:
        return self.startup_s + self.steps_s + self.other_s

    @property
    def busy_fraction(self) -> float:
        return self.steps_s / self.wall_s if self.wall_s else 0.0

    def words(self, gpus: int) -> str:
        h = gpus / 3600.0
        return (f"of which start-up {self.startup_s * h:.2f} GPU-hours, steps {self.steps_s * h:.2f}, the rest "
                f"(stop, clean-up) {self.other_s * h:.2f}: GPU busy {self.busy_fraction:.0%} of the time "
                f"({self.runs} runs timed, confirmations included)")


def timelines(extra: Mapping[str, Any] | None) -> list[Timeline]:
    """The trial's own run and its confirmation run's, where recorded."""
    extra = extra or {}
    found = [Timeline.from_extra(extra), Timeline.from_extra((extra.get("confirm") or {}).get("timeline"))]
    return [t for t in found if t is not None]


def study_time(rows: Iterable[Any]) -> StudyTime | None:
    """The sum over a study's launched trials that ran now (never simulated or replayed ones); None if none."""
    found = [t for r in rows if r.launched and not r.simulated and r.backend != "replay"
             for t in timelines(r.extra)]
    if not found:
        return None
    # a kept Ray head's start (before its first trial's launch) counts as start-up
    return StudyTime(len(found), sum(t.startup_s + t.ray_head_start_s for t in found), sum(t.steps_s for t in found),
                     sum(t.wall_s - t.startup_s - t.steps_s for t in found))
