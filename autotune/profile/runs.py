"""Re-run a configuration with the profiler on, through the same runners the study uses, and keep the result.

verl: the verl runner's own short run, with verl's profiler switched on for the measured step (`profiler_overrides`:
torch profiler, every rank of the training workers, the vLLM engines in discrete mode for a bounded number of engine
iterations); the traces land in the trial's folder. mcore: the probe runs its timed steps as always, then one more
step under torch.profiler (autotune/runners/mcore/profile.py). Either way the profiled run's speed is not a
measurement of the configuration (the profiler slows it): it is kept with the profile, never as the trial's result.
"""

from __future__ import annotations

import dataclasses
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune import verl
from autotune.candidate import Candidate
from autotune.profile.advice import Advice, advise
from autotune.profile.analysis import ProfileAnalysis, analyse
from autotune.profile.traces import TraceError, discover
from autotune.runners.base import Runner, TrialResult, TrialSpec, TrialStatus
from autotune.runners.mcore import McoreRunner
from autotune.runners.verl import VerlRunner
from autotune.search.setup import Setup
from autotune.store.schema import ProfileRow
from autotune.store.store import Store

ROLLOUT_ITERATIONS = 100  # vLLM engine iterations traced per replica: a whole rollout's trace runs to gigabytes
TRACES = "traces"


def profiler_overrides(save_path: str | Path, step: int, rollout_iterations: int | None = ROLLOUT_ITERATIONS,
                       update_mini_batches: int | None = None) -> dict[str, Any]:
    """verl's keys that trace training step `step` on every rank into `save_path` (torch profiler)."""
    out: dict[str, Any] = {verl.PROFILER_TOOL: "torch", verl.PROFILER_STEPS: [int(step)],
                           verl.PROFILER_SAVE_PATH: str(save_path)}
    for prefix in verl.PROFILER_ROLES.values():
        out[f"{prefix}.{verl.PROFILER_ENABLE}"] = True
        out[f"{prefix}.{verl.PROFILER_ALL_RANKS}"] = True
    rollout, actor = verl.PROFILER_ROLES["rollout"], verl.PROFILER_ROLES["actor"]
    out[f"{rollout}.{verl.PROFILER_DISCRETE}"] = True  # the vLLM servers profile only in discrete mode
    if rollout_iterations:
        out[f"{rollout}.{verl.PROFILER_ROLLOUT_ITERATIONS}"] = int(rollout_iterations)
    if update_mini_batches:
        out[f"{actor}.{verl.PROFILER_UPDATE_MINI_BATCHES}"] = int(update_mini_batches)
    return out


def trace_dir(workdir: Path, attempt: int) -> Path:
    return workdir.resolve() / (TRACES if attempt == 1 else f"{TRACES}.attempt{attempt}")


class ProfilingVerlRunner(VerlRunner):
    """The verl runner with verl's profiler on for the measured step (each attempt traces into its own folder)."""

    name = "verl"

    def __init__(self, *args: Any, rollout_iterations: int | None = ROLLOUT_ITERATIONS,
                 update_mini_batches: int | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.rollout_iterations = rollout_iterations
        self.update_mini_batches = update_mini_batches

    def extra_steps(self, spec: TrialSpec) -> int:
        return 0  # a profile traces the measured step and stops there; the noise is the study trial's

    def short_run_overrides(self, spec: TrialSpec, log_jsonl: Path, ray_tmp: str, attempt: int) -> dict[str, Any]:
        extra = super().short_run_overrides(spec, log_jsonl, ray_tmp, attempt)
        where = trace_dir(spec.workdir, attempt)
        shutil.rmtree(where, ignore_errors=True)
        extra.update(profiler_overrides(where, spec.measure_step, self.rollout_iterations, self.update_mini_batches))
        return extra


class ProfilingMcoreRunner(McoreRunner):
    """The probe with one more step under torch.profiler after its timed steps."""

    def run(self, spec: TrialSpec) -> TrialResult:
        probe = self.trial_probe(spec)
        if isinstance(probe, TrialResult):
            return probe
        world, pspec = probe
        where = trace_dir(spec.workdir, 1)
        shutil.rmtree(where, ignore_errors=True)
        pspec["profile_dir"] = str(where)
        return self.run_specs(spec.workdir, [pspec], world)[0]


@dataclass(frozen=True)
class Profile:
    """A profiled configuration: the run, the analysis of its traces, the advice."""

    result: TrialResult | None  # None when traces were given (analysed as found)
    trace_dir: str
    step: int | None
    analysis: ProfileAnalysis | None
    advice: tuple[Advice, ...] = ()
    error: str = ""
    micro_batches: int | None = None

    @property
    def ok(self) -> bool:
        return self.analysis is not None and not self.error

    def run_doc(self) -> dict[str, Any] | None:
        r = self.result
        if r is None:
            return None
        return {"status": r.status.value, "reason": r.reason, "throughput_profiled": r.throughput,
                "phase_timings": dict(r.phase_timings), "log": r.log_path, "simulated": r.simulated,
                "note": "the profiled run (slowed by the profiler): not the configuration's measured speed"}

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "error": self.error, "trace_dir": self.trace_dir, "step": self.step,
                "run": self.run_doc(), "analysis": self.analysis.as_dict() if self.analysis else None,
                "advice": [a.as_dict() for a in self.advice],
                "advised": [a.line() for a in self.advice if a.advised]}


def analyse_dir(where: str | Path, setup: Setup | None, cand: Candidate | None, micro_batches: int | None = None,
                result: TrialResult | None = None, step: int | None = None) -> Profile:
    """Analyse the traces in `where` (and advise when the configuration is known)."""
    try:
        files, _ = discover(where)
        if not files:
            raise TraceError(f"{where}: no trace written there; give the folder verl's global_profiler.save_path "
                             "pointed at (its *.json.gz traces), or the one autotune profile wrote")
        pp = cand.pp if cand else None
        analysis = analyse(files, pp=pp)
    except TraceError as e:
        return Profile(result, str(where), step, None, error=str(e), micro_batches=micro_batches)
    advice: tuple[Advice, ...] = ()
    if setup is not None and cand is not None:
        advice = tuple(advise(analysis, setup, cand, micro_batches))
    step = step if step is not None else next((f.step for f in files if f.step is not None), None)
    return Profile(result, str(where), step, analysis, advice, micro_batches=micro_batches)


def profile_configuration(runner: Runner, setup: Setup, cand: Candidate, workdir: Path, study: str = "profile",
                          number: int = 0) -> Profile:
    """Run `cand` once through `runner` (a profiling runner) and analyse what it traced."""
    ev = setup.evaluate(cand)
    if ev.memory is None or ev.throughput is None:
        raise ValueError("the configuration breaks a static constraint: " + ev.prune_reason())
    spec = TrialSpec(study, number, setup.model, setup.cluster, setup.job, cand, ev.memory, ev.throughput,
                     measure_step=setup.measure_step, workdir=workdir)
    result = runner.run(spec)
    attempts = len((result.extra or {}).get("attempts") or [1])
    where = trace_dir(workdir, attempts)
    micro = None
    probe = (result.extra or {}).get("probe") or {}
    if probe.get("num_microbatches"):
        micro = int(probe["num_microbatches"])
    if result.status != TrialStatus.OK and not (where.exists() and any(where.rglob("*.json*"))):
        return Profile(result, str(where), setup.measure_step, None,
                       error=f"the profiled run ended {result.status.value}: {result.reason}", micro_batches=micro)
    # verl profiles the measured step; the probe the step after its timed ones (its traces' names say which)
    step = None if isinstance(runner, McoreRunner) else setup.measure_step
    prof = analyse_dir(where, setup, cand, micro, result, step)
    if not prof.ok and probe.get("profile_error"):
        prof = dataclasses.replace(prof, error=f"the probe's traced step failed: {probe['profile_error']}")
    iterations = getattr(runner, "rollout_iterations", None)
    if prof.analysis is not None and iterations and prof.analysis.phase(verl.ROLLOUT_PHASE) is not None:
        note = (f"{verl.ROLLOUT_PHASE}: the first {iterations} engine iterations of each replica "
                f"(--rollout-iterations), a sample of the rollout: its shares, not its length; verl's "
                f"{verl.PHASE_TIMINGS[verl.ROLLOUT_PHASE]} is the phase's time")
        prof = dataclasses.replace(prof, analysis=dataclasses.replace(prof.analysis,
                                                                      notes=(*prof.analysis.notes, note)))
    return prof


def store_profile(store: Store, prof: Profile, backend: str, cand: Candidate | None, study: str | None = None,
                  number: int | None = None) -> int:
    """Keep a profile in the database (with its trial when it profiles one)."""
    row = ProfileRow(study=study, trial_number=number, backend=backend, tool="torch", step=prof.step,
                     status="ok" if prof.ok else "failed", reason=prof.error,
                     params=cand.applied_params() if cand else None, trace_dir=prof.trace_dir,
                     analysis=prof.analysis.as_dict() if prof.analysis else None,
                     advice=[a.as_dict() for a in prof.advice], run=prof.run_doc())
    return store.add_profile(row)
