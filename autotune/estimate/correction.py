"""A small Bayesian correction of the physical model, fitted to what a study measured.

The time and memory models stay what they are (autotune/estimate/throughput/, memory.py); a correction
multiplies them:

- each phase's time (gen, old_log_prob, ref, update_actor, update_weights) by exp(x . beta), x a few features of the
  configuration that the phase itself depends on (an intercept, log2 of TP, CP, PP, the micro-batch's tokens, the
  rollout's TP), fitted on log(measured / predicted) so that a few trials cannot over-correct it (issue 23): the
  level's prior robust (the model right within its error, or off by anything), a slope free only once its feature
  took two values among three measurements, a factor only for a measured phase (`Priors`; the evidence:
  benchmarks/results/correction_accuracy.md);
- the memory the model is least sure of (each moment's activations, logits and allocator reserve: what the probes
  showed to be wrong, not the weights or vLLM's exact share) by exp(delta), delta's posterior on a grid from every
  measured peak (the measured step's, autotune/search/learning.py: not step 1's allocator cache), every OOM (the
  peak was above the capacity) and every run that fitted without a measured peak.

Simulated trials never teach it (they are the model). Everything here is a pure function of its inputs.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from autotune import units
from autotune.candidate import Candidate
from autotune.cluster import GIB
from autotune.estimate.memory import MemoryEstimate, Moment
from autotune.estimate.throughput import ThroughputEstimate
from autotune.job import Job

CORRECTED_PHASES = ("gen", "old_log_prob", "ref", "update_actor", "update_weights")
UNCERTAIN_TERMS = ("activations", "logits", "fragmentation")  # the terms the memory correction scales
CORRECTION_TERM = "learned_correction"  # the term a correction adds to each moment
FEATURES = {
    "update_actor": ("level", "log2 TP", "log2 CP", "log2 PP", "log2 micro-batch tokens"),
    "old_log_prob": ("level", "log2 TP", "log2 CP", "log2 PP", "log2 micro-batch tokens"),
    "ref": ("level", "log2 TP", "log2 CP", "log2 PP", "log2 micro-batch tokens"),
    "gen": ("level", "log2 rollout TP"),
    "update_weights": ("level", "log2 rollout TP"),
}


@dataclass(frozen=True)
class Priors:
    """What the correction believes before a study measures anything (benchmarks/correction_proof.py chose them on
    the real verl trials, the replay landscapes and the verl tables: results/correction_accuracy.md).

    The level of a phase is either about right (the spike: the model's held-out error per phase is 22-27%,
    benchmarks/results/step_time_error.md) or off by anything (the slab: on small real models the Megatron passes
    measured 10-60x slower than predicted, generation 2-3x); `noise_sd` is what one configuration's ratio misses of
    its study's level (the model's shape and run-to-run noise: ratios within one study spread by 0.15-0.6). Measured
    factors (identical trials, 1/2/3/8 of them): 10x -> x8.7/9.3/9.5/9.8, 4x -> x1.9/3.7/3.9/4.0, 2x ->
    x1.05/1.09/1.16/1.9, 1.5x -> about x1.0 until many agree: one CP layout's 1.8x says little of a TP layout that
    the model predicts right (the landscapes' worst case before)."""

    spike_p: float = 0.9
    spike_sd: float = 0.05
    level_sd: float = 2.0
    slope_sd: float = 0.04  # per doubling of a knob
    noise_sd: float = 0.5  # what a measurement of one phase misses of its study's level
    # Noise sds the ratios' spread chooses among instead (empty: noise_sd). Rejected: two trials that share the
    # model's error (two CP layouts) agree, and the level follows them all the way.
    noise_grid: tuple[float, ...] = ()
    slopes_after: int = 3  # measurements of a phase before a slope moves (and its feature took two values)


PRIORS = Priors()

# Memory: log-factor on the uncertain terms, prior sd 0.25; a measured peak's noise 4% (NVML vs the allocator).
MEMORY_PRIOR_SD = 0.25
MEMORY_NOISE_SD = 0.04
_GRID = np.linspace(-1.5, 1.5, 601)
_LEVEL_GRID = np.linspace(-6.0, 6.0, 2401)  # a phase level's log-factor: x0.0025 to x400
WARM_INFLATION = 2.0  # an earlier study's posterior seeds a new one with its sd doubled (another job, other sizes)


def features(phase: str, cand: Candidate, job: Job) -> np.ndarray:
    """The regression's features of one phase. Each reads only knobs its phase reads (estimate/reads.py)."""
    if phase in ("gen", "update_weights"):
        return np.array([1.0, math.log2(cand.rollout_tp)])
    if phase == "update_actor":
        tokens = (cand.ppo_max_token_len_per_gpu if cand.use_dynamic_bsz
                  else (cand.ppo_micro_batch_size_per_gpu or 1) * job.max_seq_len / cand.cp)
    else:
        tokens = (cand.log_prob_max_token_len_per_gpu if cand.use_dynamic_bsz
                  else (cand.log_prob_micro_batch_size_per_gpu or 1) * job.max_seq_len / cand.cp)
    return np.array([1.0, math.log2(cand.tp), math.log2(cand.cp), math.log2(cand.pp),
                     math.log2(max(float(tokens or 1), 1.0) / 8192.0)])


def prior(phase: str, pr: Priors = PRIORS) -> tuple[np.ndarray, np.ndarray]:
    """(mean, covariance) of a phase's coefficients before any measurement (the level's as one Gaussian of the
    spike and slab's variance)."""
    k = len(FEATURES[phase])
    level_var = pr.spike_p * pr.spike_sd**2 + (1 - pr.spike_p) * pr.level_sd**2
    sd = np.array([math.sqrt(level_var)] + [pr.slope_sd] * (k - 1))
    return np.zeros(k), np.diag(sd**2)


@dataclass(frozen=True)
class PhaseFit:
    """Posterior of one phase's coefficients (Gaussian): mean, covariance, and how many measurements it holds."""

    mean: tuple[float, ...]
    cov: tuple[tuple[float, ...], ...]
    n: int = 0
    shown: float = 1.0  # the factor at the measured configurations (geometric mean), for people
    shown_sd: float = 0.0  # its posterior sd, in log

    def factor(self, x: np.ndarray) -> float:
        return float(math.exp(float(np.dot(x, self.mean))))

    def sd(self, x: np.ndarray) -> float:
        return float(math.sqrt(max(float(x @ np.array(self.cov) @ x), 0.0)))


@dataclass(frozen=True)
class Observation:
    """One measured trial as the correction sees it (built by autotune/search/learning.py from a trial row)."""

    candidate: Candidate
    predicted_phases: Mapping[str, float]  # the uncorrected model's seconds per phase
    measured_phases: Mapping[str, float]  # seconds per phase that were measured (may be empty)
    predicted_throughput: float | None = None
    measured_throughput: float | None = None
    moments: tuple[tuple[float, float, float], ...] = ()  # (peak, uncertain, capacity) bytes per moment
    measured_peak: float | None = None  # bytes
    oom: bool = False
    fitted: bool = False  # ran without running out of memory (a weak memory observation without a peak)
    trial: int | None = None


@dataclass(frozen=True)
class Correction:
    """Fitted factors of the model for one study (identity before any measurement)."""

    phases: Mapping[str, PhaseFit] = field(default_factory=dict)
    memory_log: float = 0.0
    memory_sd: float = MEMORY_PRIOR_SD
    memory_n: int = 0
    trials: int = 0  # measured trials of this study it was fitted on
    warm: tuple[tuple[str, int], ...] = ()  # earlier studies whose fits seeded it: (study, measured trials)

    @property
    def active(self) -> bool:
        return bool(self.trials or self.warm)

    def phase_fit(self, phase: str) -> PhaseFit | None:
        return self.phases.get(phase)

    def time_factor(self, phase: str, cand: Candidate, job: Job) -> float:
        fit = self.phases.get(phase)
        return fit.factor(features(phase, cand, job)) if fit is not None else 1.0

    @property
    def memory_factor(self) -> float:
        """The fitted factor on the uncertain memory terms (posterior mean), as shown."""
        return math.exp(self.memory_log)

    @property
    def memory_factor_used(self) -> float:
        """The factor verdicts use. Measurements that raise the memory raise it to the posterior mean; those that
        lower it lower it only as far as one sd above the mean still does, so that a few low peaks do not talk the
        study into launching what the model predicted to run out of memory. A doubt alone raises nothing: the
        uncorrected model's verdicts stand with the prior's whole sd, and one sd above the mean after a trial whose
        binding moment held none of the uncertain terms (x1.28) pruned 15 configurations of the real studies that
        then ran (benchmarks/results/memory_verdicts.md)."""
        if not (self.memory_n or self.warm):
            return 1.0
        return math.exp(max(self.memory_log, min(0.0, self.memory_log + self.memory_sd)))

    def log_sd(self, phase: str, cand: Candidate, job: Job) -> float:
        """Posterior sd of log(true / corrected) for a phase's time of this candidate (the model's doubt)."""
        fit = self.phases.get(phase)
        if fit is None:
            mean, cov = prior(phase) if phase in FEATURES else (np.zeros(1), prior("gen")[1][:1, :1])
            x = features(phase, cand, job) if phase in FEATURES else np.ones(1)
            return float(math.sqrt(x @ cov @ x))
        return fit.sd(features(phase, cand, job))

    # Applying it
    def apply(self, ev: Any, job: Job) -> Any:
        """The Evaluation `ev` with corrected phase times and memory (a term added to each moment)."""
        if not self.active or ev.memory is None:
            return ev
        thr = self.correct_throughput(ev.throughput, ev.candidate, job) if ev.throughput else None
        mem = self.correct_memory(ev.memory)
        worst = self.correct_memory(ev.worst) if ev.worst is not None else None
        return replace(ev, memory=mem, throughput=thr, worst=worst)

    def correct_throughput(self, t: ThroughputEstimate, cand: Candidate, job: Job) -> ThroughputEstimate:
        phases = tuple((name, s * self.time_factor(name, cand, job)) for name, s in t.phases)
        return replace(t, phases=phases)

    def memory_delta(self, moment: Moment) -> float:
        unc = sum(v for k, v in moment.terms if k in UNCERTAIN_TERMS)
        return (self.memory_factor_used - 1.0) * unc

    def correct_memory(self, mem: MemoryEstimate) -> MemoryEstimate:
        if self.memory_n == 0 and not self.warm:
            return mem
        moments = tuple(replace(m, terms=(*m.terms, (CORRECTION_TERM, self.memory_delta(m)))) for m in mem.moments)
        return replace(mem, moments=moments)

    # Words and data
    def factors_text(self) -> str:
        parts = [f"{name} {units.factor(fit.shown, fit.shown_sd)}" for name, fit in self.phases.items()
                 if fit.n or self.warm]
        if self.memory_n or self.warm:
            parts.append(f"memory {units.factor(self.memory_factor, self.memory_sd)} (activations, logits)")
        return ", ".join(parts)

    def summary(self) -> str:
        """"model corrected on 3 measured trials: update_actor x0.82, gen x1.31" (or why it is not corrected)."""
        warm = ""
        if self.warm:
            n = sum(k for _, k in self.warm)
            warm = (f" (seeded by {len(self.warm)} earlier stud{'y' if len(self.warm) == 1 else 'ies'}: "
                    f"{', '.join(s for s, _ in self.warm)}, {n} measured trials)")
        if not self.active:
            return "model not corrected: no measured trial yet (simulated trials do not count)"
        factors = self.factors_text() or "no factor moved"
        return f"model corrected on {self.trials} measured trial{'s' if self.trials != 1 else ''}{warm}: {factors}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "trials": self.trials,
            "phases": {k: {"mean": list(v.mean), "cov": [list(r) for r in v.cov], "n": v.n, "factor": v.shown,
                           "factor_log_sd": v.shown_sd,
                           "features": list(FEATURES.get(k, ()))} for k, v in self.phases.items()},
            "memory": {"log_factor": self.memory_log, "sd": self.memory_sd, "n": self.memory_n,
                       "factor": self.memory_factor, "terms": list(UNCERTAIN_TERMS)},
            "warm_start": [{"study": s, "trials": n} for s, n in self.warm],
            "summary": self.summary(),
        }

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any] | None) -> Correction:
        if not doc:
            return NO_CORRECTION
        phases = {k: PhaseFit(tuple(v["mean"]), tuple(tuple(r) for r in v["cov"]), int(v.get("n", 0)),
                              float(v.get("factor", 1.0)), float(v.get("factor_log_sd", 0.0)))
                  for k, v in (doc.get("phases") or {}).items() if k in FEATURES}
        mem = doc.get("memory") or {}
        return cls(phases, float(mem.get("log_factor", 0.0)), float(mem.get("sd", MEMORY_PRIOR_SD)),
                   int(mem.get("n", 0)), int(doc.get("trials", 0)),
                   tuple((w["study"], int(w["trials"])) for w in doc.get("warm_start") or ()))


NO_CORRECTION = Correction()


def warm_prior(earlier: Sequence[tuple[str, Correction]]) -> Correction:
    """What earlier studies' fits say before this study measures anything: their precision-weighted coefficients,
    each covariance inflated (another job and other sizes), shown as a correction with 0 trials of its own."""
    fitted = [(name, c) for name, c in earlier if c.trials]
    if not fitted:
        return NO_CORRECTION
    phases: dict[str, PhaseFit] = {}
    for phase in FEATURES:
        fits = [c.phases[phase] for _, c in fitted if phase in c.phases and c.phases[phase].n]
        if not fits:
            continue
        precision = sum(np.linalg.inv(np.array(f.cov) * WARM_INFLATION**2) for f in fits)
        cov = np.linalg.inv(precision)
        mean = cov @ sum(np.linalg.inv(np.array(f.cov) * WARM_INFLATION**2) @ np.array(f.mean) for f in fits)
        p0m, p0c = prior(phase)
        cov = np.minimum(cov, p0c) if cov.shape == p0c.shape else cov
        phases[phase] = PhaseFit(tuple(mean), tuple(map(tuple, cov)), 0, float(np.exp(mean[0])),
                                 float(math.sqrt(cov[0, 0])))
    mems = [c for _, c in fitted if c.memory_n]
    if mems:
        w = [1 / (c.memory_sd * WARM_INFLATION) ** 2 for c in mems]
        mlog = sum(wi * c.memory_log for wi, c in zip(w, mems, strict=True)) / sum(w)
        msd = min(math.sqrt(1 / sum(w)), MEMORY_PRIOR_SD)
    else:
        mlog, msd = 0.0, MEMORY_PRIOR_SD
    return Correction(phases, mlog, msd, 0, 0, tuple((name, c.trials) for name, c in fitted))


def fit(observations: Iterable[Observation], job: Job, start: Correction = NO_CORRECTION,
        priors: Priors | None = None) -> Correction:
    """The posterior after `observations`, from `start` (the plain prior, or a warm start from earlier studies).

    Only a phase that was measured gets a factor (or one a warm start brought). Its level's posterior is robust
    (spike and slab, on a grid): a deviation within the model's usual error is mostly put down to this configuration
    and shrunk towards the model, a large one or several that agree move the level as far as they say. A slope moves
    only once its feature took two values among `slopes_after` measurements: two trials that differ in several knobs
    at once cannot tell which knob the model has wrong."""
    pr = priors or PRIORS
    obs = list(observations)
    phases: dict[str, PhaseFit] = {}
    for phase in FEATURES:
        rows = [(features(phase, o.candidate, job), math.log(m[0] / o.predicted_phases[phase]), m[1])
                for o in obs if (o.predicted_phases.get(phase) or 0) > 0
                for m in [_measured_phase(o, phase, pr.noise_sd)] if m is not None]
        base = start.phases.get(phase)
        if not rows:
            if base is not None:
                phases[phase] = base
            continue
        phases[phase] = _fit_phase(phase, rows, base, pr)
    mlog, msd, mn = _fit_memory(obs, start)
    trials = len({o.trial if o.trial is not None else id(o) for o in obs})
    return Correction(phases, mlog, msd, mn, trials, start.warm)


def _fit_phase(phase: str, rows: list[tuple[np.ndarray, float, float]], base: PhaseFit | None,
               pr: Priors) -> PhaseFit:
    """Level on a grid (its prior robust, or the warm start's Gaussian) and the noise on a grid (ratios that agree
    say the model's error here is small, so they move the level further), the free slopes Gaussian and integrated
    out exactly: given the level and the noise, y - level is a Gaussian linear model of the slopes."""
    X = np.array([r[0] for r in rows])
    y = np.array([r[1] for r in rows])
    n, k = X.shape
    m0, c0 = (np.array(base.mean), np.array(base.cov)) if base is not None else prior(phase, pr)
    free = [j for j in range(1, k) if n >= pr.slopes_after and len(set(np.round(X[:, j], 6))) >= 2]
    fixed = [j for j in range(1, k) if j not in free]
    Xs, ms, cs = X[:, free], m0[free], c0[np.ix_(free, free)]
    resid = y - X[:, fixed] @ m0[fixed] - Xs @ ms  # what the level and the free slopes must explain
    grid = _LEVEL_GRID
    log_prior = (-0.5 * (grid - m0[0]) ** 2 / c0[0, 0]) if base is not None else _spike_slab(grid, pr)
    parts = []
    for sd in pr.noise_grid or (pr.noise_sd,):
        Si = np.linalg.inv(Xs @ cs @ Xs.T + sd**2 * np.eye(n))
        a, b, c = float(np.sum(Si)), float(np.sum(Si @ resid)), float(resid @ Si @ resid)
        logdet = float(np.linalg.slogdet(Si)[1])
        parts.append((Si, log_prior + 0.5 * logdet - 0.5 * (a * grid**2 - 2 * b * grid + c)))
    top = max(float(lp.max()) for _, lp in parts)
    weights = [np.exp(lp - top) for _, lp in parts]
    total = sum(float(w.sum()) for w in weights)
    level = sum(float(np.sum(w * grid)) for w in weights) / total
    level_var = max(sum(float(np.sum(w * (grid - level) ** 2)) for w in weights) / total, 1e-8)
    mean, cov = m0.astype(float).copy(), np.diag(np.diag(c0)).astype(float)
    mean[0], cov[0, 0] = level, level_var
    if free:  # E[slopes | level, noise] = g - level * h: averaged over the joint posterior of both
        moments = []
        for (Si, _), w in zip(parts, weights, strict=True):
            ws = float(w.sum()) / total
            g, h = ms + cs @ Xs.T @ Si @ resid, cs @ Xs.T @ Si @ np.ones(n)
            lm = float(np.sum(w * grid)) / max(float(w.sum()), 1e-300)
            lv = float(np.sum(w * (grid - lm) ** 2)) / max(float(w.sum()), 1e-300)
            moments.append((ws, g - lm * h, cs - cs @ Xs.T @ Si @ Xs @ cs + lv * np.outer(h, h), h, lv))
        bm = sum(ws * m for ws, m, _, _, _ in moments)
        mean[free] = bm
        cov[np.ix_(free, free)] = sum(ws * (v + np.outer(m - bm, m - bm)) for ws, m, v, _, _ in moments)
        cov[0, free] = cov[free, 0] = -sum(ws * lv * h for ws, _, _, h, lv in moments)
    xbar = X.mean(axis=0)
    return PhaseFit(tuple(float(v) for v in mean), tuple(tuple(float(v) for v in r) for r in cov), n,
                    float(np.exp(np.mean(X @ mean))), float(math.sqrt(max(float(xbar @ cov @ xbar), 0.0))))


def _spike_slab(grid: np.ndarray, pr: Priors) -> np.ndarray:
    """log prior of a level: the model right within its usual error (the spike), or off by anything (the slab)."""
    spike = pr.spike_p / pr.spike_sd * np.exp(-0.5 * (grid / pr.spike_sd) ** 2)
    slab = (1 - pr.spike_p) / pr.level_sd * np.exp(-0.5 * (grid / pr.level_sd) ** 2)
    return np.log(spike + slab)


def _measured_phase(o: Observation, phase: str, noise: float = 0.0) -> tuple[float, float] | None:
    """(measured seconds, noise sd) of one phase: measured directly; for a single-phase objective, its time from
    the measured throughput. None for a phase not measured: the whole step's ratio says nothing of one phase (and
    a throughput ratio counts tokens as verl does, not as the model does: 1.00 where the step was 4.7x slower)."""
    noise = noise or PRIORS.noise_sd
    if len(o.predicted_phases) == 1 and o.measured_throughput and o.predicted_throughput:
        # One phase is the whole objective (the training step of mcore probes and train tables): the measured
        # throughput says its time exactly for the model's tokens per step, whatever the probe's own batch was.
        return o.predicted_phases[phase] * o.predicted_throughput / o.measured_throughput, noise
    if o.measured_phases.get(phase):
        return float(o.measured_phases[phase]), noise
    if len(o.predicted_phases) == 1 and o.measured_phases.get("step"):  # a training-only step is the one phase
        return float(o.measured_phases["step"]), noise
    return None


def _fit_memory(obs: list[Observation], start: Correction) -> tuple[float, float, int]:
    """Grid posterior of the memory log-factor: measured peaks (Gaussian in log), OOMs and fits (censored)."""
    log_post = -0.5 * ((_GRID - start.memory_log) / start.memory_sd) ** 2
    n = 0
    factor = np.exp(_GRID)
    for o in obs:
        if not o.moments:
            continue
        peaks = np.max(np.array([[p + (f - 1.0) * u for p, u, _ in o.moments] for f in factor]), axis=1)
        peaks = np.maximum(peaks, 1.0)
        cap = min(c for _, _, c in o.moments)
        if o.measured_peak and not o.oom:
            log_post += -0.5 * ((np.log(o.measured_peak) - np.log(peaks)) / MEMORY_NOISE_SD) ** 2
        elif o.oom:
            log_post += _log_ndtr((np.log(peaks) - math.log(cap)) / MEMORY_NOISE_SD)
        elif o.fitted:
            log_post += _log_ndtr((math.log(cap) - np.log(peaks)) / MEMORY_NOISE_SD)
        else:
            continue
        n += 1
    if n == 0:
        return start.memory_log, start.memory_sd, 0
    w = np.exp(log_post - log_post.max())
    w /= w.sum()
    mean = float(np.sum(w * _GRID))
    sd = float(math.sqrt(max(np.sum(w * (_GRID - mean) ** 2), 1e-8)))
    return mean, sd, n


def _log_ndtr(x: np.ndarray) -> np.ndarray:
    """log of the standard normal CDF, elementwise, with the asymptotic form far in the left tail."""
    return np.array([math.log(0.5 * math.erfc(-v / math.sqrt(2))) if v > -8
                     else -0.5 * v * v - math.log(-v) - 0.5 * math.log(2 * math.pi) for v in x])


def moment_terms(mem: MemoryEstimate) -> tuple[tuple[float, float, float], ...]:
    """(peak, uncertain part, capacity) of each moment, for an observation."""
    return tuple((m.peak, sum(v for k, v in m.terms if k in UNCERTAIN_TERMS), m.capacity) for m in mem.moments)


__all__ = ["GIB", "Correction", "NO_CORRECTION", "Observation", "fit", "warm_prior"]
