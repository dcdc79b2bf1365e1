"""Recovery of what dead tuners left: trials they left running, Optuna trials they never told, re-queues.

A tuner can die anywhere on the trial write path. Every live tuner (at its start, every RECOVER_EVERY_S of its loop,
and when its budget is met) closes the rows of workers that are dead (autotune/store/tuners.py says which) as
interrupted, tells Optuna what our rows already say, records Optuna trials that have no row, and re-queues
interrupted configurations; a tuner that met its budget looks once more after it deregistered (`after_stop`), so
that of tuners stopping together the last closes what each left to the others. A tuner stopped gracefully closes its
own with `close_own` before it returns.
OPTUNA_STATE, how our statuses map to Optuna's states, is shared with the Tuner's own tell.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass

import optuna
from optuna.trial import TrialState

from autotune import faults
from autotune.candidate import Candidate
from autotune.executors.base import Executor
from autotune.runners.base import Runner, TrialStatus
from autotune.store.schema import REQUESTED, TrialRow, utcnow
from autotune.store.store import Store, TrialTaken, worker_id
from autotune.store.tuners import GRACE_PERIOD_S, OWNER, Liveness, Registry
from autotune.units import OPTUNA_REASON_CHARS, cut

STALE_AFTER_S = 300.0  # a worker the registry never saw (an older autotune): judged from its rows' heartbeat
RECOVER_EVERY_S = 5.0  # how often a running tuner looks for dead ones

OPTUNA_STATE = {
    TrialStatus.OK: TrialState.COMPLETE,
    TrialStatus.OOM: TrialState.PRUNED,
    TrialStatus.CONFIG_ERROR: TrialState.PRUNED,
    TrialStatus.PRUNED: TrialState.PRUNED,
    TrialStatus.TIMEOUT: TrialState.FAIL,
    TrialStatus.FAILED: TrialState.FAIL,
    TrialStatus.INTERRUPTED: TrialState.FAIL,
}


@dataclass(frozen=True)
class Recovery:
    """Closes and re-queues what dead tuners left in one study: the Tuner owns one, made with its study."""

    study: optuna.Study
    storage: optuna.storages.RDBStorage
    store: Store
    study_name: str
    runner: Runner  # the study's backend (name, simulated) for rows recorded here
    executor: Executor
    base: Candidate  # the setup's base: what an untuned dimension is
    enqueue: Callable[..., None]  # Tuner._enqueue: queue a configuration again
    registry: Registry  # who is alive

    def recover(self) -> list[int]:
        """Close trials left running by a tuner that died; re-queue them and interrupted ones. Returns numbers."""
        requeued = self._close_dead_rows()
        self._reconcile_optuna()
        for row in self.store.trials(self.study_name, TrialStatus.INTERRUPTED.value):
            if (row.extra or {}).get("requeued"):
                continue
            self.enqueue(row.params, origin="requeue", requeue_of=row.number, requested=row.origin == REQUESTED)
            faults.point("requeue-enqueued")
            self.store.update_trial(row.id, extra={**(row.extra or {}), "requeued": True})
            if row.number not in requeued:
                requeued.append(row.number)
        return requeued

    def _dead(self, live: Liveness, worker: str, heartbeat_at: dt.datetime | None, now: dt.datetime) -> bool:
        alive = live.alive(worker)
        if alive is None:  # not registered: its rows' heartbeat, as before the registry
            return heartbeat_at is None or (now - heartbeat_at).total_seconds() >= STALE_AFTER_S
        return not alive

    def _close_dead_rows(self) -> list[int]:
        """Our rows left running by a tuner that is dead: interrupted (their Optuna trial FAIL)."""
        closed = []
        now = utcnow()
        live = Liveness.now(self.registry)
        for row in self.store.running(self.study_name):
            if not self._dead(live, row.worker, row.heartbeat_at, now):
                continue
            self.store.update_trial(
                row.id, status=TrialStatus.INTERRUPTED.value, finished_at=max(now, row.started_at),
                reason=f"the tuner ({row.worker}) stopped while this trial ran; re-queued",
            )
            faults.point("recover-row-closed")
            self._close_optuna(row.number, TrialState.FAIL)
            closed.append(row.number)
        return closed

    def _reconcile_optuna(self) -> None:
        """Optuna trials RUNNING whose tuner is dead: told from our row, or closed as orphans.

        A tuner killed after recording a result but before telling Optuna leaves our row final and Optuna's
        RUNNING (told now, from the row); one killed between `ask` and its first write leaves an Optuna trial
        with no row (recorded as interrupted, never launched; re-queued when it was a queued configuration). The
        trial's owner is the worker that marked it (OWNER) or recorded its row; one with neither (killed between
        ask and mark) is closed when no other tuner of the study is alive, or once older than the grace period.
        """
        running = self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        if not running:
            return
        rows = {r.number: r for r in self.store.trials(self.study_name) if r.number >= running[0].number}
        now = utcnow()
        live = Liveness.now(self.registry)
        for t in running:
            row = rows.get(t.number)
            owner = row.worker if row is not None else t.system_attrs.get(OWNER)
            if owner == live.me and row is not None and row.status == TrialStatus.RUNNING.value:
                continue  # this tuner's own trial, running
            if row is None:
                if owner is None:
                    # Optuna stamps trials in local time
                    age = (dt.datetime.now() - t.datetime_start).total_seconds() if t.datetime_start else 0.0
                    if live.others_alive(self.study_name) and age < GRACE_PERIOD_S:
                        continue  # a live tuner may be between its ask and its mark
                elif owner != live.me and not self._dead(live, owner, None, now):
                    continue  # its tuner is alive: between its ask and its first write
                self._close_orphan(t, owner)
            elif row.status != TrialStatus.RUNNING.value and (
                    owner == live.me or self._dead(live, owner, row.heartbeat_at, now)):
                self._tell_from_row(t, row)  # (a live worker is telling it itself, now)

    def after_stop(self) -> None:
        """The last look of a tuner that stopped at its budget, taken after it deregistered. An unmarked trial is left
        while another tuner lives (it may be between its ask and its mark); two tuners stopping at once each saw the
        other alive in their last pass. Each deregisters before this look, so the later of the two sees the other
        gone and closes it. Nothing is re-queued here: the next run does that."""
        self._reconcile_optuna()

    def close_own(self, trials: list[optuna.Trial], why: str) -> None:
        """A graceful stop: every Optuna trial this tuner asked and did not tell is told now, never left RUNNING.
        A row still running is interrupted (`why`); one already final is told as it says; no row: never launched."""
        numbers = {t.number: t for t in trials}
        frozen = [t for t in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
                  if t.number in numbers]
        for t in frozen:
            row = self.store.trial(self.study_name, t.number)
            if row is None:
                self._close_orphan(t, worker_id(), f"{why}; asked but not recorded, never launched")
                continue
            if row.status == TrialStatus.RUNNING.value:
                self.store.update_trial(row.id, status=TrialStatus.INTERRUPTED.value, reason=why,
                                        finished_at=max(utcnow(), row.started_at))
                row = self.store.trial(self.study_name, t.number) or row
            self._tell_from_row(t, row)

    def _close_orphan(self, t: optuna.trial.FrozenTrial, owner: str | None, reason: str | None = None) -> None:
        attrs = t.user_attrs
        queued = t.system_attrs.get("fixed_params")
        params = attrs.get("candidate") or queued or t.params
        # Recorded as the tuner records a trial (every parameter, as verl runs it), so that its label, status line
        # and export are those of the configuration it was; with nothing chosen yet, no configuration at all.
        key, applied, overrides = "", {}, {}
        if params:
            try:
                cand = Candidate.from_params(dict(params), None if attrs.get("candidate") else self.base)
                key, applied, overrides = cand.key(), cand.applied_params(), cand.verl_overrides()
            except (TypeError, ValueError):
                applied = dict(params)
        reason = reason or (f"the tuner{f' ({owner})' if owner else ''} stopped between Optuna's ask and recording "
                            "this trial; never launched")
        now = utcnow()
        asked = t.datetime_start  # Optuna stamps trials in local time
        started = min(now, asked.astimezone(dt.UTC).replace(tzinfo=None)) if asked else now
        row = TrialRow(
            study=self.study_name, number=t.number, status=TrialStatus.INTERRUPTED.value,
            origin=attrs.get("origin", "sampler"), backend=self.runner.name, simulated=self.runner.simulated,
            candidate_key=key, params=applied, verl_overrides=overrides, worker=worker_id(), reason=reason,
            started_at=started, heartbeat_at=started, finished_at=now, duration_s=0.0,
            # a queued configuration (seed, reference, re-queue) is queued again; a sampled one need not be
            extra=None if queued or attrs.get("candidate") else {"requeued": True, "never_launched": True},
        )
        try:
            self.store.add_trial(row)
        except TrialTaken:  # its worker (or another recovery) recorded it meanwhile
            return
        faults.point("recover-orphan-recorded")
        self._tell_from_row(t, row)

    def _tell_from_row(self, t: optuna.trial.FrozenTrial, row: TrialRow) -> None:
        """Finish an Optuna trial as our row says (its tuner died before telling Optuna)."""
        status = TrialStatus(row.status)
        state = OPTUNA_STATE[status]
        value = row.throughput if state == TrialState.COMPLETE else None
        if state == TrialState.COMPLETE and value is None:
            state = TrialState.FAIL
        try:
            reason = cut(row.reason, OPTUNA_REASON_CHARS)
            attrs = (("status", status.value), ("reason", reason), ("simulated", row.simulated))
            for k, v in attrs:
                self.storage.set_trial_user_attr(t._trial_id, k, v)
            self.storage.set_trial_state_values(t._trial_id, state=state, values=None if value is None else [value])
        except optuna.exceptions.UpdateFinishedTrialError:
            pass  # told meanwhile by its own worker or another recovery

    def reclaim(self, numbers: list[int]) -> list[str]:
        """Ray: stop on the cluster what re-queued trials may still hold (a dead tuner's placement groups).

        Ray already removes a dead tuner's groups with its job (they are not detached); this is the safety net
        for a tuner that lost its connection but not its life. Returns the group names removed.
        """
        reclaim = getattr(self.executor, "reclaim", None)
        return reclaim(self.study_name, numbers) if reclaim and numbers else []

    def _close_optuna(self, number: int, state: TrialState) -> None:
        for t in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            if t.number == number:
                try:
                    self.storage.set_trial_state_values(t._trial_id, state=state)
                except optuna.exceptions.UpdateFinishedTrialError:
                    pass
