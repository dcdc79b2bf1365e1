"""The study: an Optuna study over a search space, driven trial by trial through a runner.

Flow of one trial: ask Optuna -> parameters -> candidate -> constraints -> memory model (pruned before launch
when either says no) -> runner -> result -> our tables + tell Optuna. Optuna's state mirrors ours: ok is
COMPLETE (value = tokens/s/GPU), oom / config_error / pruned are PRUNED (the sampler learns that region is bad),
timeout / failed / interrupted are FAIL.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from autotune.candidate import STOCK, Candidate
from autotune.cluster import Cluster, GPUType
from autotune.estimate import Evaluation, evaluate
from autotune.executors.base import Executor, Placement
from autotune.executors.local import LocalExecutor
from autotune.job import Job
from autotune.model import ModelArch
from autotune.ranking import rank_candidates
from autotune.runners.base import Runner, RunnerFatal, TrialResult, TrialSpec, TrialStatus
from autotune.space import SearchSpace, parse_space, space_context
from autotune.store import Store, StoreError, StudyRow, TrialRow, unreachable_message, utcnow, worker_id

optuna.logging.set_verbosity(optuna.logging.WARNING)

HEARTBEAT_S = 30.0
PLACEMENT_POLL_S = 0.5
STALE_AFTER_S = 300.0
MAX_IDLE_ASKS = 300  # asks in a row that launch nothing: the space holds nothing new that can run

_OPTUNA_STATE = {
    TrialStatus.OK: TrialState.COMPLETE,
    TrialStatus.OOM: TrialState.PRUNED,
    TrialStatus.CONFIG_ERROR: TrialState.PRUNED,
    TrialStatus.PRUNED: TrialState.PRUNED,
    TrialStatus.TIMEOUT: TrialState.FAIL,
    TrialStatus.FAILED: TrialState.FAIL,
    TrialStatus.INTERRUPTED: TrialState.FAIL,
}


class StudyMismatchError(ValueError):
    """A study name reused for a different model, cluster, job or space."""


@dataclass(frozen=True)
class Setup:
    """What a study is for. Two runs with equal setups share a study; unequal ones are refused."""

    model: ModelArch
    cluster: Cluster
    job: Job
    space: SearchSpace
    measure_step: int = 3
    objective: str = "step"  # "step": a whole GRPO step; "train": the training phase only (estimate.OBJECTIVES)

    @property
    def context(self) -> dict[str, Any]:
        return space_context(self.model.is_moe, self.cluster.world_size, self.cluster.gpus_per_node)

    @property
    def base(self) -> Candidate:
        """What an untuned dimension is: the job's own setting, else verl's default."""
        return self.job.candidate(Candidate())

    def fingerprint(self) -> dict[str, str]:
        def h(obj: Any) -> str:
            return hashlib.sha1(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:10]

        fp = {
            "model": f"{self.model.name}:{h(dataclasses.asdict(self.model))}",
            "cluster": f"{self.cluster.describe()}:{h(dataclasses.asdict(self.cluster.gpu))}",
            "job": self.job.fingerprint(),
            "space": f"{self.space.name}:{self.space.text_hash}",
            "measure_step": str(self.measure_step),
        }
        if self.objective != "step":  # studies of whole steps keep the fingerprint they always had
            fp["objective"] = self.objective
        return fp

    def default_study_name(self) -> str:
        return f"{self.model.name}-{self.cluster.describe()}-{self.job.fingerprint()}"

    def evaluate(self, cand: Candidate) -> Evaluation:
        return evaluate(self.model, self.cluster, self.job, cand, self.objective)


def setup_from_row(row: StudyRow) -> Setup:
    """Rebuild a study's setup from the database alone (export and dashboard need nothing else)."""
    cl = dict(row.cluster)
    cluster = Cluster(GPUType(**cl.pop("gpu")), **cl)
    job = Job(tuple((k, v) for k, v in row.job), row.job_source)
    return Setup(ModelArch(**row.model), cluster, job, parse_space(row.space_text, row.space_name), row.measure_step,
                 objective=(row.fingerprint or {}).get("objective", "step"))


def open_storage(url: str) -> optuna.storages.RDBStorage:
    try:
        if url.startswith("sqlite:///"):
            Path(url.removeprefix("sqlite:///")).expanduser().parent.mkdir(parents=True, exist_ok=True)
        engine_kwargs = {"connect_args": {"timeout": 30}} if url.startswith("sqlite") else {"pool_pre_ping": True}
        for attempt in range(3):
            try:
                return optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs)
            except Exception as e:  # several workers creating Optuna's tables at once (PostgreSQL): try again
                if attempt == 2 or "already exists" not in str(e) and "UniqueViolation" not in type(e).__name__ \
                        and "UniqueViolation" not in str(e):
                    raise
                time.sleep(0.5 + attempt)
        raise AssertionError("unreachable")
    except Exception as e:  # OSError, sqlalchemy OperationalError / ArgumentError, a missing driver...
        raise StoreError(unreachable_message(url, e)) from None


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
    ):
        self.setup = setup
        self.executor = executor or LocalExecutor()
        self._limit: int | None = None  # --n-trials while run() runs: checked atomically at launch
        self.prune_slower_than = prune_slower_than  # stop a trial below this fraction of the best at the same step
        self.prune_after = prune_after  # ... once this many trials completed
        self.measure_from = measure_from  # measured window: steps measure_from..measure_step
        self.runner = runner
        self.storage_url = storage_url
        self.study_name = study_name or setup.default_study_name()
        self.seed = seed
        self.n_model_seeds = n_model_seeds
        self.workdir = workdir
        self.storage = open_storage(storage_url)
        self.store = Store(storage_url)
        self._check_or_create(space_text)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            sampler = optuna.samplers.TPESampler(
                seed=seed, multivariate=True, group=True, constant_liar=True, n_startup_trials=5
            )
        self.study = optuna.create_study(
            study_name=self.study_name, storage=self.storage, sampler=sampler, direction="maximize",
            load_if_exists=True,
        )

    # Set-up and resume
    def _check_or_create(self, space_text: str | None) -> None:
        fp = self.setup.fingerprint()
        row = self.store.get_study(self.study_name)
        if row is None:
            try:
                self._add_study(space_text, fp)
                return
            except StoreError:  # another worker created it at the same moment: compare with theirs
                row = self.store.get_study(self.study_name)
                if row is None:
                    raise
        diffs = [f"{k}: study has {row.fingerprint.get(k)!r}, this run has {v!r}"
                 for k, v in fp.items() if row.fingerprint.get(k) != v]
        if row.backend != self.runner.name:
            diffs.append(f"backend: study has {row.backend!r}, this run has {self.runner.name!r}")
        if diffs:
            raise StudyMismatchError(
                f"study {self.study_name!r} in {self.storage_url} was made for a different setup:\n  "
                + "\n  ".join(diffs)
                + "\nUse another --study name to start a new study, or run with the study's own options to resume it."
            )

    def _add_study(self, space_text: str | None, fp: dict[str, str]) -> None:
        s = self.setup
        self.store.add_study(StudyRow(
            name=self.study_name, model_name=s.model.name, model=dataclasses.asdict(s.model),
            cluster=dataclasses.asdict(s.cluster), job=[list(kv) for kv in s.job.overrides],
            job_source=s.job.source, space_name=s.space.name,
            space_text=space_text if space_text is not None else Path(s.space.source).read_text(),
            backend=self.runner.name, simulated=self.runner.simulated, fingerprint=fp,
            measure_step=s.measure_step,
        ))

    def recover(self) -> list[int]:
        """Close trials left running by a tuner that died; re-queue them and interrupted ones. Returns numbers."""
        requeued = []
        now = utcnow()
        me = worker_id()
        for row in self.store.running(self.study_name):
            host_pid = row.worker.rsplit(":", 1)
            alive = row.worker == me or (
                (now - row.heartbeat_at).total_seconds() < STALE_AFTER_S and not _dead_local(host_pid)
            )
            if alive:
                continue
            self._close_optuna(row.number, TrialState.FAIL)
            self.store.update_trial(
                row.id, status=TrialStatus.INTERRUPTED.value, finished_at=now,
                reason=f"the tuner ({row.worker}) stopped while this trial ran; re-queued",
            )
            requeued.append(row.number)
        for row in self.store.trials(self.study_name, TrialStatus.INTERRUPTED.value):
            if (row.extra or {}).get("requeued"):
                continue
            self._enqueue(row.params, origin="requeue", requeue_of=row.number)
            self.store.update_trial(row.id, extra={**(row.extra or {}), "requeued": True})
            if row.number not in requeued:
                requeued.append(row.number)
        return requeued

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
                self.storage.set_trial_state_values(t._trial_id, state=state)

    def _enqueue(self, params: dict[str, Any], origin: str, **attrs: Any) -> None:
        ctx = self.setup.context
        projected = self.setup.space.project(params, ctx)
        in_space = self.setup.space.contains(params, ctx) and Candidate.from_params(
            projected, self.setup.base
        ) == Candidate.from_params(params, self.setup.base)
        self.study.enqueue_trial(
            projected if in_space else {},
            user_attrs={"origin": origin, "candidate": params if not in_space else None, **attrs},
        )

    def seed_study(self) -> None:
        """First run of a study: the reference configurations, then the model's best candidates."""
        if self.study.get_trials(deepcopy=False):
            return
        s = self.setup
        ranked = rank_candidates(s.model, s.cluster, s.job, s.space, s.base, k=self.n_model_seeds, seed=self.seed,
                                 objective=s.objective, refuse=lambda c: self.runner.refuse(c, s.job))
        # verl's stock values for what the space tunes; the job's fixed keys stay as the job sets them.
        stock = {**s.base.params(), **{k: v for k, v in STOCK.params().items() if k in s.space.names}}
        refs = [("stock", Candidate.from_params(stock).params())]
        if set(s.job.baseline_params()) & set(s.space.names):
            # The job sets keys the space tunes: that is the user's current configuration, their reference.
            refs.insert(0, ("baseline", s.base.params()))
        seeds = [("model-seed", s.space.project(p, s.context)) for p, _ in ranked]
        # The model's favourite first, then the references (the user's and verl's stock), then the other seeds.
        for origin, params in seeds[:1] + refs + seeds[1:]:
            if origin == "model-seed":
                self.study.enqueue_trial(params, user_attrs={"origin": origin})
            else:
                self._enqueue(params, origin=origin)

    # The loop
    def launched_count(self) -> int:
        return self.store.launched_count(self.study_name)

    def run(
        self,
        n_trials: int,
        timeout_s: float | None = None,
        on_trial: Callable[[TrialRow], None] | None = None,
    ) -> dict[str, Any]:
        """Launch trials until the study holds n_trials launched ones, or time runs out, or the space is spent.

        Up to `executor.parallel` trials are in flight: each is proposed (asked, built, pruned or recorded RUNNING)
        and submitted while slots are free, then finished (stored, told) as the executor returns it. Optuna's
        constant liar treats the RUNNING ones as pending, so parallel proposals spread out.
        """
        ex = self.executor
        ex.check(self.setup.cluster.nodes, self.setup.cluster.gpus_per_node)
        self.reclaim(self.recover())
        self.seed_study()
        self._limit = n_trials
        start = time.monotonic()
        idle = 0
        stop_reason = "reached --n-trials"
        inflight: dict[int, _Inflight] = {}
        fatal: str | None = None
        try:
            while True:
                proposing = fatal is None
                while proposing and len(inflight) < ex.parallel:
                    if self.launched_count() >= n_trials:
                        stop_reason, proposing = "reached --n-trials", False
                    elif timeout_s is not None and time.monotonic() - start > timeout_s:
                        stop_reason, proposing = "reached --timeout", False
                    elif idle >= MAX_IDLE_ASKS:
                        stop_reason = f"no new runnable candidate in {MAX_IDLE_ASKS} proposals: the space is exhausted"
                        proposing = False
                    else:
                        row, pending = self.propose(inflight)
                        if pending is None:
                            idle += 1
                            if on_trial:
                                on_trial(row)
                            continue
                        idle = 0
                        inflight[row.number] = pending
                        ex.submit(pending.spec, self.runner)
                if not inflight:
                    break
                for fin in ex.wait():
                    pending = inflight.pop(fin.number)
                    self.finish(pending, fin.result, fin.duration_s, fin.placement)
                    fatal = fatal or fin.fatal
                    if on_trial:
                        on_trial(pending.row)
                if fatal is not None and not inflight:
                    raise RunnerFatal(fatal)
        except KeyboardInterrupt:
            for fin in ex.stop_all("interrupted by the user (Ctrl-C); re-queued on resume"):
                if fin.number in inflight:
                    pending = inflight.pop(fin.number)
                    self.finish(pending, fin.result, fin.duration_s, fin.placement)
            for pending in inflight.values():  # not returned by the executor: still recorded, never left RUNNING
                self.finish(pending, TrialResult(TrialStatus.INTERRUPTED, "interrupted by the user (Ctrl-C); "
                                                 "re-queued on resume", simulated=self.runner.simulated), 0.0, None)
            raise
        self.store.touch_study(self.study_name)
        return {"study": self.study_name, "launched": self.launched_count(), "stopped": stop_reason}

    def step(self) -> TrialRow:
        """One Optuna trial, synchronously: pruned before launch, or launched through the runner in this thread."""
        row, pending = self.propose({})
        if pending is None:
            return row
        t0 = time.monotonic()
        try:
            result = self.runner.run(pending.spec)
        except KeyboardInterrupt:
            self.finish(pending, TrialResult(TrialStatus.INTERRUPTED, "interrupted by the user (Ctrl-C); re-queued "
                                             "on resume", simulated=self.runner.simulated), time.monotonic() - t0)
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

    def propose(self, inflight: dict[int, _Inflight]) -> tuple[TrialRow, _Inflight | None]:
        """Ask Optuna for one trial and build it: pruned before launch (recorded, told; no pending), or recorded
        RUNNING and returned pending with its spec, for an executor to run. `inflight`: this tuner's running trials.
        """
        trial = self.study.ask()
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
            raise ValueError(f"trial {trial.number}: cannot build a candidate: {e}") from e
        ev = s.evaluate(cand)
        origin = attrs.get("origin", "sampler")
        row = TrialRow(
            study=self.study_name, number=trial.number, status=TrialStatus.RUNNING.value, origin=origin,
            backend=self.runner.name, simulated=self.runner.simulated, candidate_key=cand.key(),
            params=cand.params(), verl_overrides=cand.verl_overrides(), worker=worker_id(),
            predicted_throughput=ev.throughput.throughput if ev.throughput else None,
            predicted_step_s=ev.throughput.step_time if ev.throughput else None,
            predicted_phases=dict(ev.throughput.phases) if ev.throughput else None,
            predicted_peak_gib=ev.memory.peak / 2**30 if ev.memory else None,
            predicted_memory=ev.memory.as_dict() if ev.memory else None,
        )
        duplicate = self._launched_duplicate(cand.key())
        if duplicate is None:  # this tuner's own trials still running count too
            duplicate = next((n for n, p in inflight.items() if p.row.candidate_key == cand.key()), None)
        refusal = self.runner.refuse(cand, s.job)
        if refusal or not ev.feasible or duplicate is not None:
            reason = refusal or ev.prune_reason() or (
                f"duplicate of trial {duplicate}: same configuration, not launched again")
            row.status, row.reason, row.finished_at, row.duration_s = TrialStatus.PRUNED.value, reason, utcnow(), 0.0
            row.id = self.store.add_trial(row)
            self._tell(trial, TrialStatus.PRUNED, None, reason, cand)
            return row, None
        row.launched = True
        row.extra = {"executor": self.executor.name}
        row.id, refused = self.store.add_launched(row, self._limit)
        if row.id is None:  # another worker launched the last trial, or this configuration, meanwhile
            row.launched, row.extra = False, None
            row.status, row.reason, row.finished_at, row.duration_s = TrialStatus.PRUNED.value, refused, utcnow(), 0.0
            row.id = self.store.add_trial(row)
            self._tell(trial, TrialStatus.PRUNED, None, refused, cand)
            return row, None
        spec = TrialSpec(
            study=self.study_name, number=trial.number, model=s.model, cluster=s.cluster, job=s.job,
            candidate=cand, memory=ev.memory, prediction=ev.throughput, measure_step=s.measure_step,
            workdir=self.workdir / self.study_name / f"trial_{trial.number:04d}",
            measure_from=self.measure_from, report=self._reporter(trial),
        )
        return row, _Inflight(row, trial, cand, spec, _Heartbeat(
            self.store, row.id, self._placement_note(row) if self.executor.name != "local" else None))

    def _placement_note(self, row: TrialRow) -> Callable[[], None]:
        """Writes where a running trial was placed, once the executor knows (status and the dashboard show it)."""
        done: list[bool] = []

        def note() -> None:
            if done:
                return
            placement = self.executor.placement_of(row.number)
            if placement is not None:
                self.store.update_trial(row.id, placement=placement.as_dict())
                done.append(True)

        return note

    def finish(self, pending: _Inflight, result: TrialResult, duration: float, placement: Placement | None = None
               ) -> None:
        """Record a launched trial's result and tell Optuna."""
        pending.beat.stop()
        result = dataclasses.replace(result, extra={"executor": self.executor.name, **result.extra})
        if placement is not None:
            self.store.update_trial(pending.row.id, placement=placement.as_dict())
            pending.row.placement = placement.as_dict()
        self._finish(pending.row, result, duration)
        self._tell(pending.trial, result.status, result.throughput, result.reason, pending.cand)

    def _reporter(self, trial: optuna.Trial) -> Callable[[int, float], bool]:
        """A runner's per-step callback: Optuna's intermediate value; True when the trial is clearly slower."""

        def report(step: int, value: float) -> bool:
            trial.report(value, step)
            if self.prune_slower_than is None:
                return False
            done = self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if len(done) < self.prune_after:
                return False
            same_step = [t.intermediate_values[step] for t in done if step in t.intermediate_values]
            best = max(same_step) if same_step else max(t.value for t in done if t.value is not None)
            return value < self.prune_slower_than * best

        return report

    def _launched_duplicate(self, key: str) -> int | None:
        return self.store.launched_with_key(
            self.study_name, key, exclude=(TrialStatus.INTERRUPTED.value, TrialStatus.RUNNING.value))

    def _finish(self, row: TrialRow, result: TrialResult, duration: float) -> None:
        values = {
            "status": result.status.value, "reason": result.reason, "throughput": result.throughput,
            "phase_timings": result.phase_timings or None, "peak_memory_gib": result.peak_memory_gib,
            "peak_memory_per_gpu": list(result.peak_memory_per_gpu_gib) or None,
            "framework_memory_gib": result.framework_memory_gib, "log_path": result.log_path,
            "log_excerpt": result.log_excerpt, "extra": result.extra or None, "simulated": result.simulated,
            "finished_at": utcnow(), "duration_s": duration, "launched": result.launched,
        }
        self.store.update_trial(row.id, **values)
        if result.steps:
            self.store.add_steps(row.id, result.steps)
        for k, v in values.items():
            setattr(row, k, v)

    def _tell(self, trial: optuna.Trial, status: TrialStatus, value: float | None, reason: str,
              cand: Candidate) -> None:
        trial.set_user_attr("status", status.value)
        trial.set_user_attr("reason", reason[:2000])
        trial.set_user_attr("simulated", self.runner.simulated)
        trial.set_user_attr("layout", cand.layout())
        state = _OPTUNA_STATE[status]
        if state == TrialState.COMPLETE and value is None:
            state = TrialState.FAIL
        self.study.tell(trial, value if state == TrialState.COMPLETE else None, state=state)


@dataclass
class _Inflight:
    """A launched trial between propose and finish."""

    row: TrialRow
    trial: optuna.Trial
    cand: Candidate
    spec: TrialSpec
    beat: _Heartbeat


class _Heartbeat:
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


def _dead_local(host_pid: list[str]) -> bool:
    """True when the worker ran on this host and its process is gone."""
    import os
    import socket

    if len(host_pid) != 2 or host_pid[0] != socket.gethostname():
        return False
    try:
        os.kill(int(host_pid[1]), 0)
    except (ProcessLookupError, ValueError):
        return True
    except PermissionError:
        return False
    return False
