"""The study: an Optuna study over a search space, driven trial by trial through a runner.

Flow of one trial: ask Optuna -> parameters -> candidate -> constraints -> memory model (pruned before launch
when either says no) -> runner -> result -> our tables + tell Optuna. Optuna's state mirrors ours: ok is
COMPLETE (value = tokens/s/GPU), oom / config_error / pruned are PRUNED (the sampler learns that region is bad),
timeout / failed / interrupted are FAIL (recovery.OPTUNA_STATE). What a study is for lives in autotune/search/setup.py;
closing what dead tuners left, in autotune/study/recovery.py; stopping a running trial early (--prune-slower-than), in
autotune/study/pruning.py.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState
from sqlalchemy.exc import IntegrityError

from autotune import faults
from autotune.candidate import Candidate
from autotune.executors.base import Executor, Placement
from autotune.executors.local import LocalExecutor
from autotune.results.labels import first_launch_words
from autotune.results.report import idle_kind
from autotune.runners import stopping
from autotune.runners.base import MeasuredThenInterrupted, Runner, RunnerFatal, TrialResult, TrialSpec, TrialStatus
from autotune.runners.progress import TrialProgress
from autotune.search.learning import Learning, measured_lengths
from autotune.search.plan import REFERENCES, Plan
from autotune.search.ranking import infeasible_message, make_ranking
from autotune.search.samplers import ModelSampler
from autotune.search.setup import Setup, StudyMismatchError
from autotune.search.split import InfeasibleSpaceError
from autotune.store.access import check_writable, open_storage
from autotune.store.schema import FORCED, REQUESTED, TrialRow, utcnow
from autotune.store.store import Store, StoreError, TrialTaken, safe_url, worker_id
from autotune.store.tuners import OWNER, Registry
from autotune.study.inflight import Heartbeat, Inflight, placement_note
from autotune.study.pruning import slower_than_best
from autotune.study.recovery import OPTUNA_STATE, RECOVER_EVERY_S, Recovery
from autotune.units import OPTUNA_REASON_CHARS, cut

optuna.logging.set_verbosity(optuna.logging.WARNING)

MAX_IDLE_ASKS = 300  # a safety net: the plan proposes its next runnable candidate long before this
NOT_COUNTED = (TrialStatus.INTERRUPTED.value,)  # launched but re-queued: --n-trials counts its re-run instead


class Tuner:
    """Runs (or resumes) one study: seeds it, asks, prunes, launches, records, tells."""

    def __init__(
        self,
        setup: Setup,
        runner: Runner,
        storage_url: str,
        study_name: str | None = None,
        seed: int = 0,
        n_model_seeds: int = 4,
        space_text: str | None = None,
        workdir: Path = Path("trials"),
        prune_slower_than: float | None = None,
        prune_after: int = 5,
        measure_from: int | None = None,
        executor: Executor | None = None,
        requested: list[dict[str, Any]] | None = None,
        learn: bool = True,
        warm_start: bool | list[str] = True,
    ):
        self.setup = setup
        # Configurations the user asked to launch first (--enqueue), full parameter sets: launched even when the
        # memory model predicts OOM (the way to check a verdict), never when a static rule or the runner refuses.
        self.requested = list(requested or [])
        self.executor = executor or LocalExecutor()
        self.prune_slower_than = prune_slower_than  # stop a trial below this fraction of the best at the same step
        self.prune_after = prune_after  # ... once this many trials completed
        self.measure_from = measure_from  # measured window: steps measure_from..measure_step
        self.runner = runner
        self.storage_url = storage_url
        self.study_name = study_name or setup.default_study_name()
        self.seed = seed
        self.n_model_seeds = n_model_seeds
        self.workdir = workdir
        self.on_progress: Callable[[TrialProgress], None] | None = None  # a running trial's progress (live line)
        self.n_trials: int | None = None  # the launch budget of the current run (None: unbounded)
        self.ends_by: float | None = None  # the current run's --deadline, time.monotonic()'s (None: none)
        self.notes: list[str] = []  # what the tuner did that users should hear of (a warm start)
        self.idle = 0  # proposals in a row that launched nothing
        # Refusals first, writing nothing: a node that cannot run the backend (RunnerFatal), a read-only database, a
        # missing warm-start study, an infeasible space; a new database is created only once none of them holds.
        node = runner.node_defaults(setup.model)  # what the node's software needs: the estimates must see it
        if node:
            setup = dataclasses.replace(setup, job=setup.job.with_node_defaults(node))
            if setup.job.node_defaults:
                self.notes.append("this node's software needs " + ", ".join(
                    f"{k.rsplit('.', 1)[-1]}={v}" for k, v in setup.job.node_defaults) + " (`autotune doctor`): "
                    "trials run with it and the estimates count it")
        self.store = Store.peek(storage_url)
        if not self.store.in_memory:
            check_writable(self.store.engine, storage_url)
        new = self.store.get_study(self.study_name) is None
        self.learning = Learning(self.store, self.study_name, setup, enabled=learn)
        if new and warm_start:
            said = self.learning.warm_start(warm_start if isinstance(warm_start, list) else None)
            if said:
                self.notes.append(said)
        self.setup = dataclasses.replace(setup, correction=self.learning.current)
        self._domain = runner.domain(setup.job)
        if new:  # before anything is written: an infeasible space is refused as it is
            if self.ranking().best(self.setup.correction) is None:
                raise InfeasibleSpaceError(infeasible_message(self.setup, self.ranking()))
        self.storage = open_storage(storage_url)  # nothing refused: now a new database is made
        if self.store.in_memory:
            self.store = self.learning.store = Store(storage_url)
        self._check_or_create(space_text)
        if new:
            self.learning.save()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            tpe = optuna.samplers.TPESampler(
                seed=seed, multivariate=True, group=True, constant_liar=True, n_startup_trials=5
            )
        self.sampler = ModelSampler(tpe)
        self.study = optuna.create_study(
            study_name=self.study_name, storage=self.storage, sampler=self.sampler, direction="maximize",
            load_if_exists=True,
        )
        self.registry = Registry(self.store)  # liveness: registered when a run starts, stopped when it ends
        self._asked: dict[int, optuna.Trial] = {}  # Optuna trials this tuner asked and has not told yet
        self.recovery = Recovery(self.study, self.storage, self.store, self.study_name, runner, self.executor,
                                 setup.base, self._enqueue, self.registry)
        self.plan = Plan(self.store, self.study_name, lambda: self.setup, self.ranking, n_model_seeds,
                         self._references(), learn, NOT_COUNTED)
        over = self.plan.passed_over()
        if over:
            self.notes.append(first_launch_words(self.setup, *over))

    def ranking(self) -> Any:
        """The model's exact ranking of the space for the current setup (rebuilt when the known lengths change)."""
        return make_ranking(self.setup, self._domain)

    def _references(self) -> list[tuple[str, dict[str, Any]]]:
        s = self.setup
        refs = [("stock", s.stock.params())]
        if set(s.job.baseline_params()) & set(s.space.names):
            # The job sets keys the space tunes: that is the user's current configuration, their reference.
            refs.insert(0, ("baseline", s.base.params()))
        return refs

    # Set-up and resume
    def _check_or_create(self, space_text: str | None) -> None:
        fp = self.setup.fingerprint()
        row = self.store.get_study(self.study_name)
        if row is None:
            try:
                self._add_study_row(space_text)
                return
            except StoreError as e:
                if not isinstance(e.__cause__, IntegrityError):
                    raise
                row = self.store.get_study(self.study_name)  # another worker made it at the same moment: compare
        diffs = [f"{k}: study has {row.fingerprint.get(k)!r}, this run has {v!r}"
                 for k, v in fp.items() if row.fingerprint.get(k) != v]
        if row.backend != self.runner.name:
            diffs.append(f"backend: study has {row.backend!r}, this run has {self.runner.name!r}")
        if diffs:
            raise StudyMismatchError(
                f"study {self.study_name!r} in {safe_url(self.storage_url)} was made for a different setup ("
                + "; ".join(diffs)
                + "): use another --study name to start a new study, or the study's own options to resume it"
            )

    def _add_study_row(self, space_text: str | None) -> None:
        s = self.setup
        self.store.add_study(s.study_row(self.study_name, self.runner.name, self.runner.simulated,
                                         space_text if space_text is not None else Path(s.space.source).read_text()))

    def recover(self) -> list[int]:
        """Close trials left running by a tuner that died; re-queue them and interrupted ones. Returns numbers."""
        return self.recovery.recover()

    def reclaim(self, numbers: list[int]) -> list[str]:
        """Ray: stop on the cluster what re-queued trials may still hold (a dead tuner's placement groups)."""
        return self.recovery.reclaim(numbers)

    def _enqueue(self, params: dict[str, Any], origin: str, **attrs: Any) -> None:
        ctx = self.setup.context
        projected = self.setup.space.project(params, ctx)
        in_space = self.setup.space.contains(params, ctx) and Candidate.from_params(
            projected, self.setup.base
        ).key() == Candidate.from_params(params, self.setup.base).key()
        self.study.enqueue_trial(
            projected if in_space else {},
            user_attrs={"origin": origin, "candidate": params if not in_space else None, **attrs},
        )

    def enqueue_requested(self) -> list[dict[str, Any]]:
        """Queue the --enqueue configurations this study has not launched or queued yet; returns those queued."""
        if not self.requested:
            return []
        known = {r.candidate_key for r in self.store.trials(self.study_name) if r.launched}
        for t in self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
            if t.user_attrs.get("origin") == REQUESTED:
                known.add(Candidate.from_params(t.user_attrs["candidate"]).key())
        queued = []
        for params in self.requested:
            if Candidate.from_params(params).key() not in known:
                self.study.enqueue_trial({}, user_attrs={"origin": REQUESTED, "candidate": params})
                known.add(Candidate.from_params(params).key())
                queued.append(params)
        return queued

    def seed_study(self) -> None:
        """Nothing to queue: the plan (autotune/search/plan.py) proposes the model's seeds and the references when their
        turn comes, from what the database holds, so a budget spent before them leaves them for the next run."""
        self.plan.refresh()

    def refit(self) -> None:
        """Refit the model's correction on the study's measured trials; later verdicts and rankings use it."""
        corr = self.learning.refit(self.setup)
        if corr is not self.setup.correction:
            self.setup = dataclasses.replace(self.setup, correction=corr)

    # The loop
    def launched_count(self) -> int:
        """Launched trials that count towards --n-trials (an interrupted one is re-queued and counts once re-run)."""
        return self.store.launched_count(self.study_name, exclude=NOT_COUNTED)

    def longest_trial_s(self) -> float | None:
        """The longest wall time of the study's launched trials, of any run and any end: what the next may take."""
        times = [r.duration_s for r in self.store.trials(self.study_name) if r.launched and r.duration_s]
        return max(times) if times else None

    def _waiting(self) -> bool:
        return bool(self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,)))

    def run(
        self,
        n_trials: int,
        timeout_s: float | None = None,
        on_trial: Callable[[TrialRow], None] | None = None,
        deadline_s: float | None = None,
    ) -> dict[str, Any]:
        """Launch trials until the study holds n_trials launched ones, or time runs out, or the space is spent.

        `timeout_s` stops launching once it has passed; `deadline_s` launches a trial only while the longest of the
        study's trials so far would still end within it (the first trial of a study that has none: launched).

        Up to `executor.parallel` trials are in flight: each is proposed (asked, built, pruned or recorded RUNNING)
        and submitted while slots are free, then finished (stored, told) as the executor returns it. Optuna's
        constant liar treats the RUNNING ones as pending, so parallel proposals spread out.
        """
        ex = self.executor
        ex.check(self.setup.cluster.nodes, self.setup.cluster.gpus_per_node)
        self.n_trials = n_trials
        self.ends_by = None if deadline_s is None else time.monotonic() + deadline_s  # recovery and seeding count
        self.registry.register(self.study_name)  # before the first ask: no recovery takes this tuner for dead
        try:
            out = self._run(n_trials, timeout_s, on_trial)
        finally:
            self.registry.deregister()
        self.recovery.after_stop()  # after deregistering: of two tuners stopping at once, the later one closes
        return out

    def _run(self, n_trials: int, timeout_s: float | None, on_trial: Callable[[TrialRow], None] | None
             ) -> dict[str, Any]:
        ex = self.executor
        self.reclaim(self.recover())
        last_recovery = time.monotonic()
        self.refresh_lengths()
        self.enqueue_requested()
        self.refit()
        self.seed_study()
        start = time.monotonic()
        longest = self.longest_trial_s() if self.ends_by is not None else None
        self.idle = 0
        why_idle: dict[str, int] = {}  # prune kinds of the proposals since the last launch
        stop_reason = "reached --n-trials"
        inflight: dict[int, Inflight] = {}
        fatal: str | None = None
        submitted = 0  # this run's own launches: a resumed run that launches nothing must not claim the study's

        def collect(finished: list[Any]) -> str | None:  # record what the executor handed back; its fatal reason
            nonlocal longest
            found = None
            for fin in finished:
                pending = inflight.pop(fin.number)
                if fin.duration_s and self.ends_by is not None:
                    longest = max(longest or 0.0, fin.duration_s)
                self.finish(pending, fin.result, fin.duration_s, fin.placement)  # its lengths, then the refit
                found = found or fin.fatal
                if on_trial:
                    on_trial(pending.row)
            return found

        try:
            while True:
                proposing = fatal is None
                while proposing and len(inflight) < ex.parallel:
                    stopping.check()  # a safe point: nothing half-written
                    if time.monotonic() - last_recovery > RECOVER_EVERY_S:  # another tuner may have died
                        self.reclaim(self.recover())
                        last_recovery = time.monotonic()
                    if inflight:  # trials that ended meanwhile: recorded now, their slots free for this proposal
                        fatal = fatal or collect(ex.poll())
                        if fatal is not None:
                            break
                    if self.launched_count() >= n_trials:
                        stop_reason, proposing = "reached --n-trials", False
                        if not inflight:
                            # Budget met. Trials left by dead workers are closed (which may re-open the budget), and
                            # queued ones drained (recorded as not launched): no Optuna trial is left unfinished.
                            self.recover()
                            proposing = self.launched_count() < n_trials or self._waiting()
                    elif timeout_s is not None and time.monotonic() - start > timeout_s:
                        stop_reason, proposing = "reached --timeout", False
                    elif (why := stopping.past_deadline(self.ends_by, longest)) is not None:
                        stop_reason, proposing = why, False
                    elif self.plan.exhausted:
                        stop_reason, proposing = "the space is exhausted: every runnable candidate was launched", False
                    elif self.idle >= MAX_IDLE_ASKS:
                        top = ", ".join(f"{k} x{n}" for k, n in sorted(why_idle.items(), key=lambda kv: -kv[1])[:4])
                        stop_reason = f"no new runnable candidate in {MAX_IDLE_ASKS} proposals ({top})"
                        proposing = False
                    if not proposing:
                        break
                    row, pending = self.propose(inflight)
                    if pending is None:
                        kind = idle_kind(row.reason or "")
                        why_idle[kind] = why_idle.get(kind, 0) + 1
                        if on_trial:
                            on_trial(row)
                        continue
                    why_idle.clear()
                    inflight[row.number] = pending
                    stopping.check()
                    ex.submit(pending.spec, self.runner)
                    submitted += 1
                if not inflight and fatal is None:
                    break
                with stopping.interruptible():  # a signal stops the running trials at once
                    finished = ex.wait()
                fatal = fatal or collect(finished)
                if fatal is not None and not inflight:
                    raise RunnerFatal(fatal)
        except KeyboardInterrupt as e:
            how = "by SIGTERM" if str(e) == "SIGTERM" else "by the user (Ctrl-C)"
            why = f"interrupted {how}; re-queued on resume"
            for fin in ex.stop_all(why):
                if fin.number in inflight:
                    pending = inflight.pop(fin.number)
                    self.finish(pending, fin.result, fin.duration_s, fin.placement)
            for pending in inflight.values():  # not returned by the executor: still recorded, never left RUNNING
                self.finish(pending, TrialResult(TrialStatus.INTERRUPTED, why, simulated=self.runner.simulated),
                            0.0, None)
            self.recovery.close_own(list(self._asked.values()), why)  # asked, not told: told now
            self._asked.clear()
            raise
        self.store.touch_study(self.study_name)
        self.plan.refresh()  # every tuner's launches, not only those this one saw: tuners of a study agree
        left = self.plan.left()
        stop_reason += f" ({left} runnable candidate{'s' if left != 1 else ''} of the space not launched)"
        return {"study": self.study_name, "launched": self.launched_count(), "launched_this_run": submitted,
                "stopped": stop_reason, "runnable_left": left, "model": self.setup.correction.summary()}

    def step(self) -> TrialRow:
        """One Optuna trial, synchronously: pruned before launch, or launched through the runner in this thread."""
        row, pending = self.propose({})
        if pending is None:
            return row
        t0 = time.monotonic()
        try:
            with stopping.interruptible():
                result = self.runner.run(pending.spec)
            faults.point("ran")
        except KeyboardInterrupt as e:
            how = "by SIGTERM" if str(e) == "SIGTERM" else "by the user (Ctrl-C)"
            self.finish(pending, e.result if isinstance(e, MeasuredThenInterrupted) else TrialResult(
                TrialStatus.INTERRUPTED, f"interrupted {how}; re-queued on resume", simulated=self.runner.simulated),
                time.monotonic() - t0)
            raise
        except RunnerFatal as e:  # the runner cannot go on: this trial is re-queued, the study stops
            self.finish(pending, TrialResult(TrialStatus.INTERRUPTED, f"not run: {e}; re-queued on resume",
                                             simulated=self.runner.simulated), time.monotonic() - t0)
            raise
        except Exception as e:  # a runner bug must not leave the trial running
            result = TrialResult(TrialStatus.FAILED, f"runner error: {type(e).__name__}: {e}",
                                 simulated=self.runner.simulated)
        self.finish(pending, result, time.monotonic() - t0)
        return pending.row

    def propose(self, inflight: dict[int, Inflight]) -> tuple[TrialRow, Inflight | None]:
        """Ask Optuna for one trial and build it: pruned before launch (recorded, told; no pending), or recorded
        RUNNING and returned pending with its spec, for an executor to run. `inflight`: this tuner's running trials.
        """
        self._plan_next()
        trial = self.study.ask()
        self._asked[trial.number] = trial
        self.storage.set_trial_system_attr(trial._trial_id, OWNER, worker_id())  # whose it is, for recoveries
        faults.point("asked")
        try:
            row, pending = self._record(trial)
            self.idle = 0 if pending is not None else self.idle + 1
            self.plan.note(row)
            return row, pending
        except (TrialTaken, optuna.exceptions.UpdateFinishedTrialError):
            # A recovery (another worker starting while we were between ask and record) closed this trial.
            self._asked.pop(trial.number, None)
            return self.store.trial(self.study_name, trial.number) or TrialRow(
                study=self.study_name, number=trial.number, status=TrialStatus.INTERRUPTED.value,
                launched=False), None

    def _plan_next(self) -> None:
        """The plan's proposal for the trial about to be asked: the references go through Optuna's queue (they may
        lie outside the space), the model's proposals through the ModelSampler; none is TPE's turn."""
        nxt = self.plan.next(self.idle)
        self.sampler.hold(None)
        if nxt is None:
            return
        if nxt.origin in REFERENCES:
            waiting = self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
            if not any(t.user_attrs.get("origin") == nxt.origin for t in waiting):
                self._enqueue(nxt.params, origin=nxt.origin)
        else:
            self.sampler.hold(nxt)

    def _record(self, trial: optuna.Trial) -> tuple[TrialRow, Inflight | None]:
        attrs = trial.user_attrs
        s = self.setup
        try:
            if attrs.get("candidate"):
                params = dict(attrs["candidate"])
                cand = Candidate.from_params(params)
            else:
                params = s.space.suggest(trial, s.context)
                cand = Candidate.from_params(params, s.base)
        except (TypeError, ValueError) as e:
            self.study.tell(trial, state=TrialState.FAIL)
            self._asked.pop(trial.number, None)
            raise ValueError(f"trial {trial.number}: cannot build a candidate: {e}") from e
        ev = s.evaluate(cand)
        planned = self.sampler.planned(trial.number)
        origin = attrs.get("origin") or (planned.origin if planned is not None else "sampler")
        row = TrialRow(
            study=self.study_name, number=trial.number, status=TrialStatus.RUNNING.value, origin=origin,
            backend=self.runner.name, simulated=self.runner.simulated, candidate_key=cand.key(),
            params=cand.applied_params(), verl_overrides=cand.verl_overrides(), worker=worker_id(),
            predicted_throughput=ev.throughput.throughput if ev.throughput else None,
            predicted_step_s=ev.throughput.step_time if ev.throughput else None,
            predicted_phases=dict(ev.throughput.phases) if ev.throughput else None,
            predicted_peak_gib=ev.memory.peak / 2**30 if ev.memory else None,
            predicted_memory=s.memory_record(ev),
        )
        refusal = self.runner.refuse(cand, s.job)
        faults.point("evaluated")
        requested = origin == REQUESTED or bool(attrs.get("requested"))
        forced = requested and ev.predicted_oom
        if refusal or not (ev.feasible or forced):
            reason = refusal or ev.prune_reason()
            row.status, row.reason, row.finished_at, row.duration_s = TrialStatus.PRUNED.value, reason, utcnow(), 0.0
            row.id = self.store.add_trial(row)
            faults.point("pruned-recorded")
            self._tell(trial, TrialStatus.PRUNED, None, reason, cand)
            return row, None
        row.extra = {"executor": self.executor.name}
        if forced:
            row.extra[FORCED] = f"launched on request (--enqueue) although {ev.prune_reason()}"
        refused = self._claim_launch(row)  # this tuner's running trials are launched rows too: no duplicate
        faults.point("claimed")
        if refused is not None:
            self._tell(trial, TrialStatus.PRUNED, None, refused, cand)
            return row, None
        spec = TrialSpec(
            study=self.study_name, number=trial.number, model=s.model, cluster=s.cluster, job=s.job,
            candidate=cand, memory=ev.memory, prediction=ev.throughput, measure_step=s.measure_step,
            workdir=self.workdir / self.study_name / f"trial_{trial.number:04d}",
            measure_from=self.measure_from, progress=self.on_progress,
            report=slower_than_best(self.study, trial, self.prune_slower_than, self.prune_after),
        )
        note = placement_note(self.store, self.executor, row) if self.executor.name != "local" else None
        return row, Inflight(row, trial, cand, spec, Heartbeat(self.store, row.id, note))

    def finish(self, pending: Inflight, result: TrialResult, duration: float, placement: Placement | None = None
               ) -> None:
        """Record a launched trial's result and tell Optuna."""
        pending.beat.stop()
        result = dataclasses.replace(result, extra={**(pending.row.extra or {}), "executor": self.executor.name,
                                                    **result.extra})
        if placement is not None:
            pending.row.placement = placement.as_dict()
        self._finish(pending.row, result, duration)
        self._tell(pending.trial, result.status, result.throughput, result.reason, pending.cand)
        self.plan.note(pending.row, finished=True)
        if pending.row.launched and not pending.row.simulated and pending.row.status in ("ok", "oom"):
            if pending.row.status == TrialStatus.OK.value:
                # first the lengths it measured: the refit predicts each trial at them, not at the typical shares
                # of the job's caps (a first fit at those read a 2x error as 6.6x on a real 1.5B study)
                self.refresh_lengths()
            self.refit()  # learn from every measurement

    def refresh_lengths(self) -> None:
        """Fold the measured sequence lengths of this study's trials (at the measured step) into the setup.

        Later verdicts at the measured step use them; the worst case the job allows is judged as before.
        """
        measured = measured_lengths(self.store, self.study_name, self.setup.measure_step)
        if tuple(measured) != self.setup.measured_lengths:
            self.setup = dataclasses.replace(self.setup, measured_lengths=tuple(measured))

    def _claim_launch(self, row: TrialRow) -> str | None:
        """Record the trial as launched unless the budget is spent or its configuration was launched (by any
        worker): one atomic claim, so that two workers proposing the same configuration launch it once."""
        return self.store.claim_launch(row, self.n_trials, exclude=NOT_COUNTED)

    def _finish(self, row: TrialRow, result: TrialResult, duration: float) -> None:
        values = {
            "status": result.status.value, "reason": result.reason, "throughput": result.throughput,
            "phase_timings": result.phase_timings or None, "peak_memory_gib": result.peak_memory_gib,
            "peak_memory_per_gpu": list(result.peak_memory_per_gpu_gib) or None,
            "framework_memory_gib": result.framework_memory_gib, "log_path": result.log_path,
            "log_excerpt": result.log_excerpt, "extra": result.extra or None, "simulated": result.simulated,
            "finished_at": utcnow(), "duration_s": duration, "launched": result.launched,
        }
        if row.placement is not None:
            values["placement"] = row.placement
        self.store.finish_trial(row.id, values, tuple(result.steps))
        faults.point("finished")
        for k, v in values.items():
            setattr(row, k, v)

    def _tell(self, trial: optuna.Trial, status: TrialStatus, value: float | None, reason: str,
              cand: Candidate) -> None:
        trial.set_user_attr("status", status.value)
        trial.set_user_attr("reason", cut(reason, OPTUNA_REASON_CHARS))
        trial.set_user_attr("simulated", self.runner.simulated)
        trial.set_user_attr("layout", cand.layout())
        faults.point("telling")
        state = OPTUNA_STATE[status]
        if state == TrialState.COMPLETE and value is None:
            state = TrialState.FAIL
        self.study.tell(trial, value if state == TrialState.COMPLETE else None, state=state, skip_if_finished=True)
        self._asked.pop(trial.number, None)

