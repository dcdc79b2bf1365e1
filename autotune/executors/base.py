"""The executor interface: places runners' trials on resources, up to `parallel` at once (Ray Tune's roles: an
executor places, a runner runs). The tuner submits trial specs and collects finished results; it never knows where
a trial ran beyond the `Placement` the executor reports.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from autotune import faults
from autotune.runners.base import Runner, RunnerFatal, TrialResult, TrialSpec, TrialStatus


@dataclass(frozen=True)
class Placement:
    """Where a trial holds its GPUs: node addresses (one per node of the job) and GPUs per node."""

    executor: str
    nodes: tuple[str, ...]
    gpus_per_node: int
    groups: tuple[str, ...] = ()  # Ray placement group names, one per node

    @property
    def gpus(self) -> int:
        return self.gpus_per_node * len(self.nodes)

    def as_dict(self) -> dict[str, Any]:
        return {"executor": self.executor, "nodes": list(self.nodes), "gpus_per_node": self.gpus_per_node,
                "gpus": self.gpus, "groups": list(self.groups)}

    def describe(self) -> str:
        return f"{','.join(self.nodes)} x{self.gpus_per_node} GPU"


def placement_text(p: dict[str, Any] | None) -> str:
    """A stored placement (Placement.as_dict()) in words: its nodes and GPUs; "" for the local executor."""
    return f"{', '.join(p.get('nodes', []))} ({p.get('gpus')} GPUs)" if p else ""


@dataclass(frozen=True)
class Finished:
    """A trial the executor is done with: its result, how long it held its resources, where it ran."""

    number: int
    result: TrialResult
    duration_s: float
    placement: Placement | None = None
    fatal: str | None = None  # the runner cannot go on (RunnerFatal): the tuner stops after recording this trial
    extra: dict[str, Any] = field(default_factory=dict)


class Executor(ABC):
    """Runs up to `parallel` trials at once; `submit` never blocks on a trial, `wait` returns finished ones."""

    name: str = "executor"
    found: str = ""  # which resources it found where the user named none, in words (the console says it)

    def __init__(self, parallel: int = 1):
        if parallel < 1:
            raise ValueError(f"--parallel must be at least 1, got {parallel}")
        self.parallel = parallel

    @abstractmethod
    def submit(self, spec: TrialSpec, runner: Runner) -> None:
        """Start (or queue) one trial; the spec's number identifies it in `wait` and `stop`."""

    @abstractmethod
    def wait(self, timeout: float | None = None) -> list[Finished]:
        """Block until at least one trial finished (or `timeout`); return every finished one."""

    def poll(self) -> list[Finished]:
        """Trials finished by now, without blocking: the tuner records them between proposals, so that a finished
        trial never waits as running while the next ones are proposed. The local executor runs its trial in
        `wait`, so it has nothing finished before."""
        return []

    @abstractmethod
    def stop_all(self, reason: str) -> list[Finished]:
        """Stop every running trial (Ctrl-C, a fatal error): each comes back INTERRUPTED with `reason`."""

    @property
    @abstractmethod
    def running(self) -> int: ...

    def check(self, nodes: int, gpus_per_node: int) -> None:  # noqa: B027 - the local node always "fits"
        """Raise when the executor's resources can never hold one trial of this shape (before anything is asked)."""

    def placement_of(self, number: int) -> Placement | None:
        """Where a running trial was placed, once it is (None before, or for the local executor)."""
        return None

    def describe(self) -> str:
        return f"{self.name} (up to {self.parallel} at once)"

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release what the executor holds (its connection to a cluster)."""


def run_trial(runner: Runner, spec: TrialSpec) -> tuple[TrialResult, str | None]:
    """One trial through its runner, never raising for the trial's own failures: (result, fatal reason or None).

    KeyboardInterrupt propagates (the caller records the trial as interrupted).
    """
    try:
        result = runner.run(spec)
        faults.point("ran")
        return result, None
    except RunnerFatal as e:  # the runner cannot go on: this trial is re-queued, the study stops
        return TrialResult(TrialStatus.INTERRUPTED, f"not run: {e}; re-queued on resume",
                           simulated=runner.simulated), str(e)
    except Exception as e:  # a runner bug must not leave the trial running
        return TrialResult(TrialStatus.FAILED, f"runner error: {type(e).__name__}: {e}",
                           simulated=runner.simulated), None


def interrupted(runner: Runner, reason: str) -> TrialResult:
    return TrialResult(TrialStatus.INTERRUPTED, reason, simulated=runner.simulated)


def monotonic() -> float:
    return time.monotonic()
