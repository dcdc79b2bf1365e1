"""A launched trial while it runs, as the Tuner (study/study.py) holds it between propose and finish: its record
(Inflight), the heartbeat that keeps its row alive, so that another tuner does not close it as stale (Heartbeat), and
the note of where an executor placed it (placement_note).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import optuna

from autotune.candidate import Candidate
from autotune.executors.base import Executor
from autotune.runners.base import TrialSpec
from autotune.store.schema import TrialRow
from autotune.store.store import Store, StoreError

HEARTBEAT_S = 30.0
PLACEMENT_POLL_S = 0.5


@dataclass
class Inflight:
    """A launched trial between propose and finish."""

    row: TrialRow
    trial: optuna.Trial
    cand: Candidate
    spec: TrialSpec
    beat: Heartbeat


class Heartbeat:
    """Marks a running trial alive every HEARTBEAT_S so that another tuner does not close it as stale; `also` runs
    every PLACEMENT_POLL_S (the placement note)."""

    def __init__(self, store: Store, trial_id: int, also: Callable[[], None] | None = None):
        self._stop = threading.Event()
        self._also = also
        self._thread = threading.Thread(target=self._loop, args=(store, trial_id), daemon=True)
        self._thread.start()

    def _loop(self, store: Store, trial_id: int) -> None:
        last = time.monotonic()
        while not self._stop.wait(PLACEMENT_POLL_S if self._also else HEARTBEAT_S):
            try:
                if self._also:
                    self._also()
                if time.monotonic() - last >= HEARTBEAT_S:
                    store.heartbeat(trial_id)
                    last = time.monotonic()
            except StoreError:
                pass  # a missed beat only risks the trial being re-queued later

    def stop(self) -> None:
        self._stop.set()


def placement_note(store: Store, executor: Executor, row: TrialRow) -> Callable[[], None]:
    """Writes where a running trial was placed, once the executor knows (status and the dashboard show it)."""
    done: list[bool] = []

    def note() -> None:
        if done:
            return
        placement = executor.placement_of(row.number)
        if placement is not None:
            store.update_trial(row.id, placement=placement.as_dict())
            done.append(True)

    return note
