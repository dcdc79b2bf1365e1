"""The runner interface: a candidate for a job on a cluster in, a trial result out.

One runner per backend (simulate, verl, mcore, replay); the study never knows which one it drives.
"""

from __future__ import annotations

import enum
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune.candidate import Candidate
from autotune.cluster import Cluster
from autotune.estimate.memory import MemoryEstimate
from autotune.estimate.throughput import ThroughputEstimate
from autotune.job import Job
from autotune.model import ModelArch
from autotune.runners.progress import TrialProgress


class StopSignal:
    """Set by an executor to end a running trial early (its Ray node left, the tuner is stopping), with why."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.reason = ""
        self.status = "failed"

    def set(self, reason: str, status: str = "failed") -> None:
        if not self._event.is_set():
            self.reason, self.status = reason, status
            self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._event.wait(timeout)


class TrialStatus(enum.StrEnum):
    OK = "ok"
    OOM = "oom"
    PRUNED = "pruned"  # never launched: a constraint, the memory model, or a duplicate
    TIMEOUT = "timeout"
    FAILED = "failed"
    CONFIG_ERROR = "config_error"
    INTERRUPTED = "interrupted"
    RUNNING = "running"

    @property
    def launched(self) -> bool:
        return self not in (TrialStatus.PRUNED, TrialStatus.RUNNING)


@dataclass(frozen=True)
class TrialSpec:
    """Everything a runner needs for one trial."""

    study: str
    number: int
    model: ModelArch
    cluster: Cluster
    job: Job
    candidate: Candidate
    memory: MemoryEstimate
    prediction: ThroughputEstimate
    measure_step: int = 3
    workdir: Path = Path("trials")
    # First step of the measured window (None: measure_step alone); throughput is the window's mean.
    measure_from: int | None = None
    # Steps to run after the measured one, for the measured noise (None: the runner's own option, e.g. --extra-steps;
    # a confirmation run asks for none).
    extra_steps: int | None = None
    # Called by a runner with (step, tokens/s/GPU) for steps before the window; True means stop: prune the trial.
    report: Callable[[int, float], bool] | None = field(default=None, compare=False, repr=False)
    # Called by a runner, every fraction of a second while the trial runs, with where it is (the CLI's live line).
    progress: Callable[[TrialProgress], None] | None = field(default=None, compare=False, repr=False)
    # Where an executor placed the trial (autotune.executors.Placement.as_dict()); None: the local node.
    placement: dict[str, Any] | None = field(default=None, compare=False)
    # Set by the executor to stop the trial early; runners that run for long poll it.
    stop: StopSignal | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class TrialResult:
    status: TrialStatus
    reason: str = ""
    throughput: float | None = None  # tokens/s/GPU at the measured step
    steps: tuple[dict[str, Any], ...] = ()  # per step: {"step": n, metric name: value, ...}
    phase_timings: dict[str, float] = field(default_factory=dict)  # verl phase -> seconds, measured step
    peak_memory_gib: float | None = None  # max over GPUs (NVML)
    peak_memory_per_gpu_gib: tuple[float, ...] = ()
    framework_memory_gib: float | None = None  # verl's verl.M_MAX_MEM_ALLOCATED, or torch's own
    log_path: str | None = None
    log_excerpt: str = ""
    simulated: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    launched: bool = True  # False when a cheaper stage (the mcore probe) stopped it before the full trial


class MeasuredThenInterrupted(KeyboardInterrupt):
    """A stop (Ctrl-C, SIGTERM) that came after the trial's measured step, in the steps run for its noise: the study
    records `result` (measured, its extra steps missing) instead of re-queueing a trial that already cost its GPU time,
    and stops as for any KeyboardInterrupt (its message is the original's: "SIGTERM" or empty)."""

    def __init__(self, original: BaseException, result: TrialResult):
        super().__init__(*original.args)
        self.result = result


class RunnerFatal(RuntimeError):
    """The runner cannot go on (GPUs still held after a trial, data missing): the study stops and says why."""


class RunnerUnavailable(RuntimeError):
    """A backend that cannot run here (missing package, no GPUs, not built yet)."""


class Runner(ABC):
    """Runs one trial to a result. Implementations own launching, watching, and cleaning up."""

    name: str = "runner"
    simulated: bool = False
    # What a trial measures (estimate.OBJECTIVES): "step", a whole GRPO step, or "train", the training phase alone
    # (the study predicts and prunes for the same thing).
    objective: str = "step"

    @abstractmethod
    def run(self, spec: TrialSpec) -> TrialResult: ...

    def refuse(self, candidate: Candidate, job: Job) -> str | None:
        """Why this runner can never run `candidate` (e.g. replay: not a row of its table); None when it can.

        Asked before launch: a refused candidate is pruned, never launched.
        """
        return None

    def node_defaults(self, model: ModelArch) -> dict[str, Any]:
        """verl keys the node's software needs where the job sets none (the verl runner: `autotune doctor`'s
        findings, e.g. unfused attention). Asked before the study ranks anything: the estimates must see what the
        trials will run with."""
        return {}

    def domain(self, job: Job) -> list[Candidate] | None:
        """Every candidate this runner can run, when it can run only a finite list (replay: its table's rows);
        None when it runs whatever it is given. A runner that refuses candidates must list its domain: the
        exact ranking (autotune/search/ranking.py) ranks the list instead of the space."""
        return None

    def describe(self) -> str:
        return self.name

    def close(self) -> None:  # noqa: B027 - optional hook, most runners hold nothing
        """Release what the runner holds between trials (clusters, processes)."""
