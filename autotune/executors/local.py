"""The local executor: today's behaviour, one trial at a time on this node, run in the tuner's own thread.

No Ray is imported: `autotune run` without `--executor` needs nothing more than before.
"""

from __future__ import annotations

import time

from autotune.executors.base import Executor, Finished, interrupted, run_trial
from autotune.runners.base import MeasuredThenInterrupted, Runner, TrialResult, TrialSpec


class LocalExecutor(Executor):
    """Runs the submitted trial when `wait` is called, in the calling thread (Ctrl-C reaches the runner directly)."""

    name = "local"

    def __init__(self, parallel: int = 1):
        if parallel != 1:
            raise ValueError("the local executor runs one trial at a time; use --executor ray for --parallel > 1")
        super().__init__(1)
        self._queued: tuple[TrialSpec, Runner] | None = None
        self._t0 = 0.0
        self._measured: TrialResult | None = None  # the running trial's, where a stop came after its measured step

    def submit(self, spec: TrialSpec, runner: Runner) -> None:
        if self._queued is not None:
            raise RuntimeError("the local executor holds a trial already")
        self._queued = (spec, runner)

    def wait(self, timeout: float | None = None) -> list[Finished]:
        if self._queued is None:
            return []
        spec, runner = self._queued
        self._t0 = time.monotonic()
        try:
            result, fatal = run_trial(runner, spec)  # KeyboardInterrupt: the trial stays queued for stop_all
        except MeasuredThenInterrupted as e:  # stopped after its measured step: stop_all returns it measured
            self._measured = e.result
            raise
        self._queued = None
        return [Finished(spec.number, result, time.monotonic() - self._t0, None, fatal)]

    def stop_all(self, reason: str) -> list[Finished]:
        if self._queued is None:
            return []
        spec, runner = self._queued
        self._queued = None  # the runner cleaned up on its way out (it saw the interrupt first)
        result, self._measured = self._measured or interrupted(runner, reason), None
        return [Finished(spec.number, result, time.monotonic() - self._t0)]

    @property
    def running(self) -> int:
        return int(self._queued is not None)
