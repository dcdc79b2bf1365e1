"""The verl runner: one short verl Megatron GRPO run per candidate, watched live, stopped at the measured step.

A trial: pre-flight (verl's own config validation where verl is importable; the job's data) -> launch `python -m
verl.trainer.main_ppo ...` (argv from autotune.results.export.launch_argv, the same code as `autotune export`) in its
own session with its own Ray -> parse console step lines and the JSONL file logger as they appear -> stop the process
group as soon as the measured step is in -> classify a failure from the exit code and the log -> wait until no process
of the trial is left and the GPUs hold what they held before.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune import units, verl
from autotune.model import ModelArch
from autotune.results.export import launch_argv
from autotune.runners import base, stopping
from autotune.runners.base import Runner, RunnerFatal, RunnerUnavailable, TrialResult, TrialSpec, TrialStatus
from autotune.runners.node import ray_head
from autotune.runners.node.gpu_monitor import GpuMonitor, RemoteGpus
from autotune.runners.node.procs import RECORD, ProcessTracker, reap_orphans, spawn, write_record
from autotune.runners.progress import estimate
from autotune.runners.verl_attempt import Attempt, trial_result
from autotune.verl.caches import share_caches
from autotune.verl.doctor import Diagnosis, has_bytecode, run_doctor, stack_env
from autotune.verl.log import LineTail, RunLog, classify
from autotune.verl.preflight import check_data, hydra_overrides, validate_overrides

_LOOP_RE = re.compile(verl.ROLLOUT_FAILURE_LOOP_RE)
# Failures not caused by the configuration and not deterministic: tried once more. Every other class (OOMs, config
# errors, import/attention/tokenizer errors: the same again on a retry) is recorded at once.
RETRYABLE = ("crash", "nccl_error")
# Failures every later candidate would repeat (the node's GPUs, its software stack, the model's tokenizer): the study
# stops before the next launch, saying what to fix.
FATAL = ("gpus_unavailable", "import_error", "tokenizer_error")


@dataclass(frozen=True)
class VerlOptions:
    """Watchdogs and clean-up of the verl runner (the CLI's --trial-timeout, --stall-timeout, --measure-steps)."""

    trial_timeout_s: float = 3600.0  # whole trial, launch to measured step
    stall_timeout_s: float = 1200.0  # without a new training step, once the first step is in
    startup_timeout_s: float = 1800.0  # launch to the first training step (Ray, model build, vLLM start, step 1)
    fatal_grace_s: float = verl.FATAL_GRACE_S  # after a line no run recovers from, before autotune stops the run
    grace_s: float = 30.0  # SIGTERM -> SIGKILL
    measure_from: int | None = None  # first step of the measured window (default: the measured step alone)
    # steps run after the measured one (the CLI's --extra-steps): each step's throughput is recorded and their spread
    # is the trial's measured noise (autotune/results/noise.py); the objective stays the measured step's
    extra_steps: int = 1
    retries: int = 1  # extra attempts for a crash or NCCL error
    preflight: bool = True
    own_ray: bool = True  # autotune's own local Ray on a single node; several nodes use RAY_ADDRESS's cluster
    # one Ray head per node kept across trials (--keep-ray/--no-keep-ray; None: on for real verl, off for a test entry
    # point), else a private Ray per trial: Ray's start and stop are paid once per run (runners/node/ray_head.py)
    keep_ray: bool | None = None
    ray_address: str | None = None  # the Ray executor's cluster: verl's driver joins it (never a private Ray)
    cleanup_timeout_s: float = 120.0  # for the GPUs to return to their memory before the trial
    gpu_tolerance_gib: float = 1.0
    poll_s: float = 0.2
    gpu_sample_s: float = 0.5
    keep_ray_tmp: bool = False  # Ray's session dir (worker logs) is kept after failures regardless
    # compile and dataset caches shared by the trials of a node, under the work dir (`<workdir>/cache`): start-up
    # paid once, not per trial; what a step runs and measures is the same (the caches hold compiled code and data)
    shared_caches: bool = True
    # `autotune doctor`'s checks before the first trial (None: on for real verl on this node; off for a test entry
    # point, and on a Ray cluster, whose trials run on other nodes: run `autotune doctor` there)
    doctor: bool | None = None
    doctor_timeout_s: float = 300.0


class VerlRunner(Runner):
    name = "verl"
    simulated = False

    def __init__(
        self,
        options: VerlOptions | None = None,
        *,
        entry: Sequence[str] | None = None,
        env: Mapping[str, str] | None = None,
        gpu_monitor: type[GpuMonitor] | Any = GpuMonitor,
    ):
        """`entry` replaces `python -m verl.trainer.main_ppo` (tests only: never reachable from the CLI)."""
        self.options = options or VerlOptions()
        self.entry = tuple(entry) if entry else None
        self.env = dict(env or {})
        self._gpu_factory = gpu_monitor
        self._monitor: GpuMonitor | None = None
        self._dirty: tuple[tuple[float, ...], str] | None = None  # (baseline, what) when GPUs stayed busy
        self._data_checked: set[str] = set()
        self._reaped = False
        self._orphans: list[str] = []
        self._fatal = ""  # why no further trial can run here (a FATAL failure of the previous trial)
        self._ray = ray_head.KeptRay(self.options.grace_s)
        self.diagnosis: Diagnosis | None = None  # the doctor's, before the first trial

    def describe(self) -> str:
        what = "verl " + verl.VERL_VERSION
        if self.entry:
            what += f" via test entry {' '.join(self.entry)}"
        return what

    # argv -----------------------------------------------------------------------------------------------------
    def extra_steps(self, spec: TrialSpec) -> int:
        """Steps the run goes on for after the measured one (the spec's, else the runner's option)."""
        return max(0, spec.extra_steps if spec.extra_steps is not None else self.options.extra_steps)

    def short_run_overrides(self, spec: TrialSpec, log_jsonl: Path, ray_tmp: str, attempt: int) -> dict[str, Any]:
        last = spec.measure_step + self.extra_steps(spec)
        name = self._name(spec, attempt)
        extra: dict[str, Any] = {
            **verl.SHORT_RUN,
            verl.TOTAL_TRAINING_STEPS: last,
            verl.EXPERIMENT_NAME: name,
            verl.RAY_ENV_VAR_PREFIX + verl.FILE_LOGGER_ENV: str(log_jsonl),
        }
        head = self._ray.head  # none yet at the pre-flight check: the address is a placeholder there
        extra.update(ray_head.overrides(self._ray_mode(spec)[0], self.options.ray_address or (
            head.address if head else "local"), ray_tmp, ray_head.mark(name), (spec.placement or {}).get("groups")))
        # what the node's software needs (the doctor's findings), where the job says nothing
        for key, value in self.job_defaults(spec).items():
            extra[key] = value
        # verl runs in the trial's folder: paths the user gave relative to here must still point at the same files
        for key in (verl.TRAIN_FILES, verl.VAL_FILES, verl.MODEL_PATH):
            value = spec.job.get(key)
            if isinstance(value, str) and value and not os.path.isabs(os.path.expanduser(value)) \
                    and "://" not in value and Path(value).exists():
                extra[key] = str(Path(value).resolve())
        return extra

    def job_defaults(self, spec: TrialSpec) -> dict[str, Any]:
        """The doctor's job defaults (attention backend, vanilla_mbridge) for keys the job does not set."""
        found = self.diagnosis.job_defaults if self.diagnosis else {}
        return dict(spec.job.with_node_defaults(found).node_defaults)

    def node_defaults(self, model: ModelArch) -> dict[str, Any]:
        """Asked before the study writes anything: a node that cannot run verl is refused here (RunnerFatal)."""
        self._diagnose(model.head_dim)
        if self._fatal:
            raise RunnerFatal(self._fatal)
        return dict(self.diagnosis.job_defaults) if self.diagnosis else {}

    def _diagnose(self, head_dim: int) -> None:
        """`autotune doctor` once, before the first launch: a node that cannot run verl is refused in a minute,
        with what to fix, instead of after a 5-minute launch (at the first trial: `_fatal`)."""
        auto = self.entry is None and not self.options.ray_address  # on a Ray cluster the trials run elsewhere
        if self.diagnosis is not None or self._fatal or not (
                self.options.doctor if self.options.doctor is not None else auto):
            return
        diagnosis = run_doctor(head_dim, sys.executable, {**os.environ, **self.env}, self.options.doctor_timeout_s)
        if not diagnosis.ok:
            self._fatal = "\n".join(["this node cannot run a verl trial; `autotune doctor` says what to fix:",
                                      *(f"  {p}" for p in diagnosis.problems())])
            return
        self.diagnosis = diagnosis

    def _check_node(self, spec: TrialSpec) -> None:
        self._diagnose(spec.model.head_dim)
        if self._fatal:
            raise RunnerFatal(self._fatal)

    def argv(self, spec: TrialSpec, extra: Mapping[str, Any]) -> list[str]:
        argv = launch_argv(spec.job, spec.cluster, spec.candidate, extra=extra)
        if self.entry:
            return [*self.entry, *argv[len(verl.ENTRY):]]
        if argv[0] == "python":
            argv[0] = sys.executable  # the environment autotune runs in is the one with verl
        return argv

    # the trial ------------------------------------------------------------------------------------------------
    def run(self, spec: TrialSpec) -> TrialResult:
        if not self._reaped:  # trials a killed tuner left running would hold the GPUs
            self._reaped = True
            self._orphans = reap_orphans(spec.workdir.parent, self.options.grace_s)
        if self._fatal:
            raise RunnerFatal(self._fatal)
        self._check_node(spec)
        self._ensure_gpus_free()
        self._check_data(spec)
        trial_dir = spec.workdir.resolve()
        trial_dir.mkdir(parents=True, exist_ok=True)
        first = spec.measure_from or self.options.measure_from or spec.measure_step
        if not verl.FIRST_STEP <= first <= spec.measure_step:
            raise ValueError(f"measured window {first}-{spec.measure_step} is empty")
        extra_info: dict[str, Any] = {"measured_steps": [first, spec.measure_step], "attempts": []}
        if self.job_defaults(spec):  # what the node needed beyond the job (the doctor's findings)
            extra_info["job_defaults"] = self.job_defaults(spec)

        t0 = time.monotonic()
        if self.options.preflight:
            argv = self.argv(spec, self.short_run_overrides(spec, trial_dir / "metrics.jsonl", "/tmp/ray", 1))
            pre = validate_overrides(hydra_overrides(argv))
            extra_info["preflight"] = {"ok": pre.ok, "skipped": pre.skipped, "seconds": round(time.monotonic() - t0, 3)}
            if not pre.ok:
                (trial_dir / "preflight.txt").write_text(pre.message + "\n")
                return TrialResult(TrialStatus.CONFIG_ERROR, f"verl config check (before launch): {pre.message}",
                                   log_excerpt=pre.message, log_path=str(trial_dir / "preflight.txt"),
                                   extra={**extra_info, "failure": "config_error"})

        att: Attempt | None = None
        reported: set[int] = set()
        for attempt in range(1, self.options.retries + 2):
            if attempt > 1:
                stopping.check()  # a stop asked in the last attempt's clean-up: no retry, the trial is re-queued
            att = self._attempt(spec, trial_dir, attempt, first, reported)
            extra_info["attempts"].append({"status": att.status.value, "failure": att.failure,
                                           "reason": att.reason[:500], "returncode": att.returncode,
                                           "log": str(att.log_path), **att.timings})
            if not (att.status == TrialStatus.FAILED and att.failure in RETRYABLE):
                break
        assert att is not None
        if att.failure == "gpus_unavailable":
            self._fatal = (f"trial {spec.number} found {att.reason[:300]}; every candidate asks for the same "
                           f"{spec.cluster.world_size} GPUs. Check --gpus/--nodes, CUDA_VISIBLE_DEVICES and the GPUs "
                           "Ray sees (`ray status`), then re-run the same command to resume the study")
        elif att.failure in FATAL:
            self._fatal = (f"trial {spec.number} failed: {att.reason[:300]}; every other candidate would fail the "
                           "same way. Fix it (`autotune doctor` checks the node's stack; the trial's log: "
                           f"{att.log_path}), then re-run the same command to resume the study")
        if self._orphans:
            extra_info["orphans_stopped_before"], self._orphans = self._orphans, []
        with stopping.deferred():
            result = trial_result(spec, att, first, self.extra_steps(spec), extra_info)
        stopped_by = att.stopped_by
        if stopped_by is None and att.status == TrialStatus.OK and stopping.requested():  # came in the clean-up
            stopped_by = stopping.Stopped(stopping.requested())
        if stopped_by is not None:  # measured, then stopped: the study records it and stops
            raise base.MeasuredThenInterrupted(stopped_by, result)
        return result

    def _attempt(self, spec: TrialSpec, trial_dir: Path, attempt: int, first: int, reported: set[int]) -> Attempt:
        opts = self.options
        sfx = "" if attempt == 1 else f".attempt{attempt}"
        log_path, jsonl = trial_dir / f"verl{sfx}.log", trial_dir / f"metrics{sfx}.jsonl"
        for p in (log_path, jsonl):
            p.unlink(missing_ok=True)
        how, ray_note = self._ray_mode(spec)
        env = ray_head.trial_env(self._env(jsonl), how, "")
        caches, bytecode = self._caches(spec, env)  # "warm", "cold", or "" (off); bytecode kept there
        paid = 0.0  # seconds this attempt spent starting the kept head: the first trial that needs it starts it
        if how == "kept":
            how, paid, ray_note = self._ray.join(env, spec.cluster.gpus_per_node, spec.job.get(verl.RAY_NUM_CPUS),
                                                 self._study_dir(spec))
        timings: dict[str, float] = {"ray_head_start_s": paid} if paid else {}
        mark = ray_head.mark(self._name(spec, attempt)) if how in ("kept", "fresh") else ""
        head_tmp = self._ray.head.temp_dir if mark and self._ray.head else ""
        ray_tmp = "" if mark else ray_head.private_tmp()
        ray_head.trial_env(env, how, ray_tmp)
        argv = self.argv(spec, self.short_run_overrides(spec, jsonl, ray_tmp, attempt))
        (trial_dir / f"command{sfx}.json").write_text(json.dumps({"argv": argv, "cwd": str(trial_dir), "env": {
            k: env[k] for k in (verl.FILE_LOGGER_ENV, "RAY_TMPDIR", "HYDRA_FULL_ERROR", "CUDNN_PATH",
                                verl.VLLM_COMPILE_CACHE_OFF_ENV, *verl.SHARED_CACHE_ENV, verl.BYTECODE_PREFIX_ENV)
            if k in env}}, indent=1))
        (trial_dir / f"command{sfx}.sh").write_text(
            "#!/usr/bin/env bash\n# autotune trial command (argv of the launched process)\n"
            f"cd {shlex.quote(str(trial_dir))}\n"
            f"{verl.FILE_LOGGER_ENV}={shlex.quote(str(jsonl))} " + " ".join(shlex.quote(a) for a in argv) + "\n")

        monitor = self._gpu()
        monitor.trace = trial_dir / f"gpu{sfx}.csv"
        monitor.start()
        started = time.monotonic()
        log = RunLog(LineTail(log_path), LineTail(jsonl), stamps=trial_dir / f"verl{sfx}.ts.log", started=started)
        proc = spawn(argv, trial_dir, env, log_path)
        tracker = ProcessTracker(proc)
        write_record(trial_dir / RECORD, tracker)
        last_progress, last_scan, last_shown = started, 0.0, 0.0
        seen_at: dict[int, float] = {}  # step -> seconds after launch it appeared (the live line's estimate)
        status: TrialStatus | None = None
        reason, failure, excerpt = "", "", ""
        hung_after_fatal = False
        stopped_by: KeyboardInterrupt | None = None  # a stop after the measured step (run() re-raises it)
        measured = False  # the measured window is in: the run goes on for its extra steps (the noise)
        last = spec.measure_step + self.extra_steps(spec)
        try:
            while True:
                rc = proc.poll()
                new = log.poll(final=rc is not None)
                now = time.monotonic()
                if new:
                    last_progress = now
                    timings.setdefault("first_step_s", round(now - started, 3))
                    for step in new:
                        seen_at[step] = now - started
                if spec.progress is not None and (new or now - last_shown >= 0.5):
                    last_shown = now
                    self._show(spec, log, seen_at, now - started, monitor, attempt, last)
                for step in sorted(new):
                    thr = log.steps[step].get(verl.M_THROUGHPUT)
                    if step < first and thr is not None and spec.report is not None and step not in reported:
                        reported.add(step)  # once per step, also across a retry
                        if not spec.report(step, thr):
                            continue
                        status, failure = TrialStatus.PRUNED, "pruned"
                        reason = (f"stopped at step {step}: {thr:.1f} tokens/s/GPU is clearly below the best trial "
                                  "at that step (--prune-slower-than)")
                        break
                if status is None and not measured and self._window_done(log, first, spec.measure_step):
                    measured = True
                    timings["measured_s"] = round(now - started, 3)
                if status is None and measured and self._window_done(log, spec.measure_step + 1, last):
                    status = TrialStatus.OK
                if status is None and spec.stop is not None and spec.stop.is_set():  # the executor stops it
                    status, failure, reason = TrialStatus(spec.stop.status), "stopped", spec.stop.reason
                if status is not None:
                    break
                if rc is not None:
                    break
                if log.fatal_at is not None and now - started - log.fatal_at > opts.fatal_grace_s:
                    hung_after_fatal = True  # classified from its log below, as if it had exited
                    break
                if now - started > opts.trial_timeout_s:
                    status, failure = TrialStatus.TIMEOUT, "timeout"
                    reason = (f"trial time limit: no measured step {spec.measure_step} after {opts.trial_timeout_s:g}"
                              f" s (--trial-timeout); {len(log.steps)} steps done")
                    break
                limit = opts.stall_timeout_s if log.steps else opts.startup_timeout_s
                if now - last_progress > limit:
                    status, failure = TrialStatus.TIMEOUT, "stall"
                    what = f"after step {max(log.steps)}" if log.steps else "since launch, before the first step"
                    flag = "--stall-timeout" if log.steps else "--startup-timeout"
                    looping = [ln for ln in log.last if _LOOP_RE.search(ln)]
                    why = (f"the rollout keeps failing: {looping[-1].strip()[:200]!r}" if looping else
                           "a placement group never ready, an NCCL hang, or a rollout failing in a loop")
                    reason = f"no progress: no new training step for {limit:g} s {what} ({flag}); {why}"

                    break
                if now - last_scan > 0.5:
                    tracker.scan()  # remember every process of the trial while its tree is intact
                    last_scan = now
                time.sleep(opts.poll_s)
        except KeyboardInterrupt as e:
            if not measured:
                with stopping.deferred():
                    self._abandon(log, tracker, monitor, trial_dir, mark, ray_tmp)
                raise
            # the measured step is in: stop the run as after it, record it measured, then stop the study (run())
            stopped_by = e
            by = "by SIGTERM" if str(e) == "SIGTERM" else "by the user (Ctrl-C)"
            status, failure, reason = TrialStatus.INTERRUPTED, "interrupted", f"interrupted {by}"
        except BaseException:  # a bug here: nothing of the trial may outlive this call
            self._abandon(log, tracker, monitor, trial_dir, mark, ray_tmp)
            raise
        # a signal from here on waits for the clean-up and the record: cut here, a trial measured by then was lost
        with stopping.deferred():
            rc = proc.poll()
            killed_by_us = rc is None
            cleanup = self._stop_and_clean(tracker, monitor, log, trial_dir, mark)
            gpu = monitor.stop()
            rc = proc.returncode
            log.poll(final=True)
            log.close()
            timings["wall_s"] = round(time.monotonic() - started, 3)
            timings.update({f"{k}_s": v for k, v in log.milestones.items() if f"{k}_s" not in timings})
            if status is None:  # the process ended by itself before its measured step
                if rc == 0:
                    status, failure = TrialStatus.FAILED, "early_exit"
                    reason = (f"verl exited normally after {len(log.steps)} steps without reaching measured step "
                              f"{spec.measure_step} (too few prompts for that many steps?)")
                    excerpt = log.tail()
                else:
                    f = classify(log_path.read_text(errors="replace") if log_path.exists() else "", rc, killed_by_us)
                    status, failure, reason, excerpt = TrialStatus(f.status), f.kind, f.message, f.excerpt
                    if hung_after_fatal:
                        reason += (f" (verl did not exit {opts.fatal_grace_s:g} s after it; autotune stopped the run "
                                   "instead of waiting for --startup-timeout)")
            elif status in (TrialStatus.TIMEOUT,):
                excerpt = log.tail()
            elif status == TrialStatus.OK:
                excerpt = log.tail(12)
            else:
                excerpt = log.tail(20)
            missed = ""  # why the extra steps are missing: the measured step is in, so the trial is measured
            if measured and status != TrialStatus.OK:
                missed = f"{failure or status.value}: {units.clip(reason, 300)}"
                status, failure, reason = TrialStatus.OK, "", ""
            kept = self._ray.logs_kept(ray_tmp, head_tmp, status != TrialStatus.OK or opts.keep_ray_tmp)
            return Attempt(status, reason, log, log_path, rc, excerpt, failure, gpu, cleanup, timings, kept, how,
                            ray_note, caches, missed, monitor.trace if gpu.available else None, bytecode, stopped_by)

    def _abandon(self, log: RunLog, tracker: ProcessTracker, monitor: GpuMonitor, trial_dir: Path, mark: str,
                 ray_tmp: str) -> None:
        """A trial left before its measured step (Ctrl-C, or a bug here): nothing of it may outlive the call."""
        log.close()
        self._stop_and_clean(tracker, monitor, log, trial_dir, mark)
        monitor.stop()
        self._ray.logs_kept(ray_tmp, "", True)

    @staticmethod
    def _show(spec: TrialSpec, log: RunLog, seen_at: dict[int, float], elapsed: float, monitor: GpuMonitor,
              attempt: int, last: int) -> None:
        """Hand the trial's progress to spec.progress; a failing display never stops the trial."""
        done = [(s, seen_at.get(s, elapsed), log.steps[s]) for s in sorted(log.steps)]
        peak, source = monitor.peak_so_far(), "NVML"
        if peak is None:
            torch_peaks = [m[verl.M_MAX_MEM_RESERVED] for m in log.steps.values() if verl.M_MAX_MEM_RESERVED in m]
            peak, source = (max(torch_peaks), "torch, actor") if torch_peaks else (None, "")
        pred = spec.prediction
        try:
            spec.progress(estimate(spec.number, last, elapsed, done,  # to the run's last step (the extra ones)
                                   pred.step_time if pred else None, dict(pred.phases) if pred else None,
                                   peak, source, attempt))
        except Exception:
            pass

    @staticmethod
    def _window_done(log: RunLog, first: int, last: int) -> bool:
        return all(s in log.steps and verl.M_THROUGHPUT in log.steps[s] for s in range(first, last + 1))

    def _ray_mode(self, spec: TrialSpec) -> tuple[str, str]:
        """Autotune's own local Ray on one node (a kept head, or a private one per trial); several nodes use the Ray
        cluster in RAY_ADDRESS (ray_head.mode)."""
        keep = self.options.keep_ray if self.options.keep_ray is not None else self.entry is None
        own = self.options.own_ray and spec.cluster.nodes == 1
        how, why = ray_head.mode(keep and not self._ray.failed, own, self.options.ray_address, spec.job)
        return how, why or (self._ray.failed if how == "private" else "")

    @staticmethod
    def _name(spec: TrialSpec, attempt: int) -> str:
        return re.sub(r"[^A-Za-z0-9_.-]+", "-", f"autotune-{spec.study}-t{spec.number:04d}-a{attempt}")[:120]

    @staticmethod
    def _study_dir(spec: TrialSpec) -> Path:
        here = spec.workdir.resolve()  # <workdir>/<study>/trial_NNNN, or deeper for a confirmation run
        return next((p for p in here.parents if p.name == spec.study), here.parent)

    def _env(self, jsonl: Path) -> dict[str, str]:
        env = stack_env({**os.environ, **self.env})  # autotune's Ray hook importable; torch's cuDNN first
        env[verl.FILE_LOGGER_ENV] = str(jsonl)
        env["PYTHONUNBUFFERED"] = "1"
        env["HYDRA_FULL_ERROR"] = "1"  # whole tracebacks: the failure classes read them
        return env

    def _caches(self, spec: TrialSpec, env: dict[str, str]) -> tuple[str, bool]:
        """Point the compile, dataset and bytecode caches at `<study's workdir>/../cache` and let vLLM keep its
        compiled graphs (verl turns that off: `verl.VLLM_COMPILE_CACHE_OFF_ENV`), where the user's environment has
        not chosen (autotune.verl.caches). Says "warm" when vLLM's cache already held something, "cold" when not,
        "" when shared caches are off, and whether the trial keeps its bytecode there."""
        if not self.options.shared_caches:
            return "", False
        return share_caches(env, self._study_dir(spec).parent / "cache", has_bytecode)

    def _gpu(self) -> GpuMonitor:
        if self.options.ray_address:  # the GPUs are on the cluster's nodes; Ray's accounting frees them
            return RemoteGpus(interval_s=self.options.gpu_sample_s)
        if self._monitor is None:
            self._monitor = self._gpu_factory(interval_s=self.options.gpu_sample_s)
        return self._monitor

    # clean-up -------------------------------------------------------------------------------------------------
    def _stop_and_clean(self, tracker: ProcessTracker, monitor: GpuMonitor, log: RunLog, trial_dir: Path,
                        mark: str) -> dict[str, Any]:
        info = tracker.stop(self.options.grace_s)
        if not info["remaining"]:
            (trial_dir / RECORD).unlink(missing_ok=True)
        if mark:  # its Ray workers on the kept head go with its job; those that stay stop the head (node/ray_head.py)
            info.update(self._ray.settle(mark, self.options.cleanup_timeout_s))
        log.poll()
        baseline = monitor.baseline
        if monitor.available:
            t0 = time.monotonic()
            busy = monitor.wait_released(baseline, self.options.gpu_tolerance_gib, self.options.cleanup_timeout_s)
            info["gpu_release_s"] = round(time.monotonic() - t0, 3)
            if busy:
                info["gpu_busy"] = busy
                self._dirty = (baseline, "; ".join(busy))
        if info["remaining"] or info.get("ray_workers_remaining"):
            left = info["remaining"] + info.get("ray_workers_remaining", [])
            self._dirty = (baseline, f"processes of the trial still alive after SIGKILL: {left}")
        return info

    def _ensure_gpus_free(self) -> None:
        """Refuse to launch on GPUs a previous trial has not given back (results would be wrong, or OOM)."""
        if self._dirty is None:
            return
        baseline, what = self._dirty
        monitor = self._gpu()
        busy = monitor.wait_released(baseline, self.options.gpu_tolerance_gib, self.options.cleanup_timeout_s) \
            if monitor.available else []
        if busy or "still alive" in what:
            raise RunnerFatal(
                f"the previous trial did not give its GPUs back ({'; '.join(busy) or what}). Find the processes "
                "with `nvidia-smi`, stop them, then re-run the same command to resume the study")
        self._dirty = None

    def _check_data(self, spec: TrialSpec) -> None:
        key = spec.job.fingerprint()
        if key in self._data_checked:
            return
        res = check_data(spec.job.get(verl.TRAIN_FILES), spec.job.train_batch_size)
        if not res.ok:
            raise RunnerFatal(f"job {spec.job.source}: {res.message}")
        self._data_checked.add(key)

    def close(self) -> None:
        self._monitor = None
        self._ray.stop()


_CLI_OPTIONS = {f for f in VerlOptions.__dataclass_fields__}


def make_verl_runner(**options: Any) -> VerlRunner:
    """The CLI's factory: VerlOptions fields only (a test entry point cannot be chosen from the command line)."""
    from autotune.verl.preflight import verl_importable

    unknown = set(options) - _CLI_OPTIONS
    opts = {k: v for k, v in options.items() if k in _CLI_OPTIONS and v is not None}
    if unknown - {"table"}:
        raise RunnerUnavailable(f"the verl backend does not take option(s) {sorted(unknown)}")
    if not verl_importable():
        raise RunnerUnavailable(
            "--backend verl: verl is not importable here; install it on the GPU node: "
            f"pip install verl=={verl.VERL_VERSION} (with vLLM and Megatron-core as verl's installation guide says), "
            "or use --backend simulate")
    if sys.platform != "linux":
        raise RunnerUnavailable("--backend verl needs Linux (it tracks the trial's processes through /proc)")
    return VerlRunner(VerlOptions(**opts))
