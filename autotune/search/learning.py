"""What a study learns from its measurements: the model's correction (autotune/estimate/correction.py), refitted
after every measured trial (verl, mcore, replayed and imported ones alike; simulated trials are the model itself and
teach it nothing), kept in the database (store.CorrectionRow) so that `status`, the dashboard and `estimate --study`
read it without refitting, and offered to later studies of the same GPU type and model family as a warm start.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from autotune import verl
from autotune.candidate import Candidate
from autotune.cluster import GIB
from autotune.estimate import estimate_unchecked
from autotune.estimate.correction import NO_CORRECTION, Correction, Observation, fit, moment_terms, warm_prior
from autotune.model import ModelArch
from autotune.search.setup import Setup, setup_from_row
from autotune.store.schema import NVML_MOMENTS, CorrectionRow, StudyRow, TrialRow
from autotune.store.store import Store

MEASURED_STATUSES = ("ok", "oom")


def model_family(model: ModelArch) -> str:
    """Models that share an architecture share the model's errors best (Qwen2ForCausalLM: Qwen2.5 of every size)."""
    return model.hf_architecture or model.name.rsplit("-", 1)[0]


def observation(row: TrialRow, setup: Setup, steps: Sequence[Any] = ()) -> Observation | None:
    """A measured trial as the correction sees it; None when it measured nothing the model predicts."""
    if row.simulated or not row.launched or row.status not in MEASURED_STATUSES:
        return None
    if (row.extra or {}).get("failure") == verl.HOST_OOM:
        return None  # the host's memory ran out: it says nothing of the GPU's, which the correction fits
    try:
        cand = Candidate.from_params(dict(row.params))
        s = setup
        ev = estimate_unchecked(s.model, s.cluster, s.job, cand, s.objective, s.lengths, s.constants)
    except (TypeError, ValueError, ZeroDivisionError):
        return None  # an imported configuration the model cannot describe
    measured = {k: float(v) for k, v in (row.phase_timings or {}).items() if isinstance(v, int | float) and v > 0}
    if not measured:  # imported trials may carry their timings only in their steps
        for st in steps:
            if st.step == setup.measure_step:
                measured = {p: float(st.metrics[m]) for p, m in verl.PHASE_TIMINGS.items()
                            if isinstance(st.metrics.get(m), int | float) and st.metrics[m] > 0}
    thr = (row.extra or {}).get("measured_step_throughput", row.throughput)
    return Observation(
        candidate=cand, predicted_phases=dict(ev.throughput.phases), measured_phases=measured,
        predicted_throughput=ev.throughput.throughput, measured_throughput=thr if row.status == "ok" else None,
        moments=moment_terms(ev.memory),
        measured_peak=peak * GIB if (peak := measured_step_peak_gib(row)) and row.status == "ok" else None,
        oom=row.status == "oom", fitted=row.status == "ok", trial=row.number)


def measured_step_peak_gib(row: TrialRow) -> float | None:
    """The memory a trial's peak teaches the correction: the largest moment NVML saw in its measured step (the
    runner's, autotune/results/memory_trace.py), else its whole run's peak. Not step 1's: verl 0.9.1 turns the
    allocator's expandable segments on at the end of each weight sync, the first of which ends step 1, so step 1's
    log-prob pass can hold a cache the allocator frees before it runs out of memory (lease 68's offloaded 0.5B
    without fused kernels: 73.7 GiB at step 1, 60.0 at step 3, 65.2 predicted), which the model does not predict
    and a correction must not learn as its shortfall."""
    seen = [v for v in ((row.extra or {}).get(NVML_MOMENTS) or {}).values() if isinstance(v, int | float) and v > 0]
    return max(seen) if seen else row.peak_memory_gib


class Learning:
    """Refits one study's correction from its measured trials and keeps it in the database."""

    def __init__(self, store: Store, study: str, setup: Setup, enabled: bool = True):
        self.store, self.study, self.enabled = store, study, enabled
        self.gpu, self.family, self.objective = setup.cluster.gpu.name, model_family(setup.model), setup.objective
        saved = store.correction(study)
        self.prior = Correction.from_dict((saved.doc or {}).get("prior")) if saved is not None else NO_CORRECTION
        self.current = Correction.from_dict(saved.doc) if saved is not None and enabled else NO_CORRECTION
        self.measured = -1  # measured trials the current fit holds (-1: not fitted in this process yet)

    def warm_start(self, names: Sequence[str] | None = None) -> str | None:
        """Seed a new study's correction with earlier studies' (named ones, else those of this database with the
        same GPU type, model family and objective). Returns what was done, in words, or None. Nothing is written
        before save() (the study row may not exist yet)."""
        if not self.enabled:
            return None
        if names:
            missing = [n for n in names if self.store.get_study(n) is None]
            if missing:
                raise ValueError(f"--warm-start {missing[0]}: no such study in this database; studies there: "
                                 f"{', '.join(s.name for s in self.store.list_studies()) or 'none'}")
            rows = [r for r in (self.store.correction(n) for n in names) if r is not None and r.trials > 0]
        else:
            rows = [r for r in self.store.corrections(self.gpu, self.family, self.objective) if r.study != self.study]
        earlier = [(r.study, Correction.from_dict(r.doc)) for r in rows if r.study != self.study]
        self.prior = warm_prior(earlier)
        if not self.prior.warm:
            return None
        self.current = self.prior
        n = sum(k for _, k in self.prior.warm)
        return (f"warm start: the model starts with the corrections of {len(self.prior.warm)} earlier "
                f"stud{'y' if len(self.prior.warm) == 1 else 'ies'} ({', '.join(s for s, _ in self.prior.warm)}; "
                f"{n} measured trials, same GPU type and model family): {self.prior.factors_text()}")

    def refit(self, setup: Setup) -> Correction:
        """The correction fitted on every measured trial of the study so far (saved when it changed)."""
        if not self.enabled:
            return NO_CORRECTION
        rows = self.store.measured_trials(self.study)
        obs = [o for r in rows for o in [observation(r, setup, self.store.steps(r.id) if not r.phase_timings else ())]
               if o is not None]
        if len(obs) == self.measured:
            return self.current
        self.current = fit(obs, setup.job, self.prior) if obs else self.prior
        self.measured = len(obs)
        self._save(self.current, len(obs))
        return self.current

    def save(self) -> None:
        """Write the current correction (a new study's warm start) if there is one."""
        if self.enabled and self.current.active:
            self._save(self.current, self.current.trials)

    def _save(self, corr: Correction, trials: int) -> None:
        doc = corr.as_dict()
        if self.prior.warm:
            doc["prior"] = self.prior.as_dict()
        self.store.save_correction(CorrectionRow(study=self.study, gpu=self.gpu, family=self.family,
                                                 objective=self.objective, trials=trials, doc=doc))


def saved_correction(store: Store, study: str) -> Correction:
    """A study's correction as last saved (identity when it never measured anything)."""
    row = store.correction(study)
    return Correction.from_dict(row.doc) if row is not None else NO_CORRECTION


Lengths = tuple[tuple[tuple[str, float], ...], ...]  # Setup.measured_lengths: each trial's length metrics


def step_lengths(metrics: Mapping[str, Any]) -> tuple[tuple[str, float], ...] | None:
    """A step's sequence-length metrics (verl.LENGTH_METRICS); None when it logged no response length."""
    if metrics.get(verl.M_RESPONSE_LENGTH_MEAN) is None:
        return None
    return tuple((k, float(metrics[k])) for k in verl.LENGTH_METRICS if metrics.get(k) is not None)


def measured_lengths(store: Store, study: str, measure_step: int) -> Lengths:
    """The lengths the study's measured trials saw at the measured step: what its verdicts at that step assume
    (the tuner after each trial, `import` and `estimate --study` alike)."""
    found = []
    for r in store.trials(study, "ok"):
        if r.simulated:
            continue
        for st in store.steps(r.id):
            got = step_lengths(st.metrics) if st.step == measure_step else None
            if got:
                found.append(got)
    return tuple(found)


def study_setup(store: Store, row: StudyRow) -> Setup:
    """A recorded study's setup as its tuner last saw it: measured lengths and the saved correction."""
    setup = setup_from_row(row)
    return dataclasses.replace(setup, measured_lengths=measured_lengths(store, row.name, setup.measure_step),
                               correction=saved_correction(store, row.name))
