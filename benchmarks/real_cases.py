"""The real verl 0.9.1 trials as cases: what each ran, what it measured, what the uncorrected model says of it.

Reads every study database under tests/data/real_verl_gpu/*/ (the trials' own rows: configuration, the node's job
defaults such as the attention backend, verl's per-phase `timing_s/*` and lengths at the measured step, NVML peaks; each
trial once, from the newest copy of a study a later lease resumed: benchmarks/real_studies.py) and predicts each trial
with the uncorrected model at the lengths that step measured, as a study's first launch is predicted before any
correction. The errors of a set of cases (median per phase and of the step, Spearman) are measured here too; the
constants fitted on them and the report are in benchmarks/calibration.py.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune import verl
from autotune.candidate import Candidate
from autotune.cluster import GIB
from autotune.estimate import evaluate
from autotune.estimate.lengths import Lengths, at_step
from autotune.estimate.memory import model_state_bytes
from autotune.estimate.offload import cpu_optimizer_params
from autotune.estimate.throughput import (
    SMALL_MICRO_BATCH_COSTS,
    checkpointed_layers,
    micro_batches_of_one,
    small_micro_batch_kind,
    small_micro_batches,
    unfused_logits_by_phase,
)
from autotune.job import Job
from autotune.model import CATALOG, ModelArch
from autotune.results import rollout_wait
from autotune.results.labels import Labeller
from autotune.search.setup import Setup
from autotune.store.store import Store
from benchmarks import real_studies

HERE = Path(__file__).resolve().parent
DATA = real_studies.DATA
PHASES = ("gen", "old_log_prob", "update_actor", "update_weights")
# The Efficiency constants fitted on these trials, each a fixed cost of one phase (seconds added to it): the summary
# refits them without each model size and predicts that size with the refit (leave one size out).
PASS_COSTS = {"old_log_prob": "logprob_pass_s", "update_actor": "update_pass_s", "update_weights": "reshard_local_s"}
# Full recompute's second forward costs, beyond its FLOPs, what a log-prob pass does (added to update_actor)
RECOMPUTE_COST = "logprob_pass_s"
# ... what an update micro-batch of one sequence costs beyond them (added to update_actor per such micro-batch) ...
MICRO_BATCH_COST = "micro_batch_of_one_s"
# ... and one under SMALL_MICRO_BATCH_TOKENS of more than one sequence, fixed or of a dynamic budget (Case.small_kind)
SMALL_COSTS = SMALL_MICRO_BATCH_COSTS
# ... and what each log-prob micro-batch costs beyond its FLOPs (old_log_prob, Case.log_prob_micro_batches) ...
LOGPROB_MICRO_BATCH_COST = "logprob_micro_batch_s"
# ... and the host's overhead a decode step with CUDA graphs, per GPU type (gen: seconds per decode step, hidden
# under a longer GPU replay: decode_step_seconds)
ZERO_OVERHEAD = {"decode_step_overhead_graph_s": 0.0, "decode_step_overhead_graph_by_gpu": ()}
# ... what a logit costs that a log-prob pass without verl's fused kernels materialises (old_log_prob: ps per logit,
# Case.unfused_logits; the update pays none) ...
LOGIT_COST = "unfused_logit_ps"
# ... and what selective recompute's checkpoint costs a layer and micro-batch (update_actor, Case.checkpointed_layers)
CHECKPOINT_COST = "selective_checkpoint_s"
# ... and the rate of Megatron's CPU optimizer step (update_actor: parameters a second, Case.cpu_adam_params; not
# zeroed: a case is predicted at the model's rate, a refit's rate replaces it)
CPU_ADAM_RATE = "cpu_adam_params_per_s"
ZEROED = {**{name: 0.0 for name in PASS_COSTS.values()}, MICRO_BATCH_COST: 0.0, LOGPROB_MICRO_BATCH_COST: 0.0,
          **{name: 0.0 for name in SMALL_COSTS.values()}, LOGIT_COST: 0.0, CHECKPOINT_COST: 0.0,
          **ZERO_OVERHEAD}  # the refit's
# Update micro-batches under SMALL_MICRO_BATCH_TOKENS that are not single sequences (micro-batches of 2 sequences, a 4k
# dynamic budget: fewer than the 4 sequences of ~1.2k tokens every trial the update's fit holds has at least) cost
# something per micro-batch, as those of one sequence do: lease 26's 1.5B, lease 29's 0.5B and lease 32's 3B left
# 4-7.5 s above update_pass_s with micro-batches of 2 and of a 4k budget (64 and 38 a step). Priced per micro-batch,
# the two kinds apart (SMALL_COSTS, `fit_small_micro_batch_costs`), they are kept out of update_pass_s's fit, as
# micro-batches of one are: their cost is fitted against it.
PHASE_TARGET, STEP_TARGET, SPEARMAN_TARGET = 0.25, 0.20, 0.8  # issue 23's targets for the base time model


@dataclass(frozen=True)
class Case:
    """One real trial: what ran, what it measured, what the uncorrected model says of it."""

    source: str  # database / study / trial
    model: str
    label: str
    status: str
    measured_step_s: float | None
    measured_phases: dict[str, float]
    predicted_step_s: float | None
    predicted_phases: dict[str, float]
    measured_peak_gib: float | None
    predicted_peak_gib: float | None
    predicted_fits: bool
    binding: str
    size: str = ""  # the catalog model of the same shape
    full_recompute: bool = False  # the update recomputes every layer's forward
    # The median of each phase and of the step over the trial's steps from 2 on (step 1 carries start-up work): what
    # the model predicts, one step's noise (11-18% step to step) taken out
    steady_phases: dict[str, float] = dataclasses.field(default_factory=dict)
    steady_step_s: float | None = None
    # The step again: the median of the trial's other steps from 2 on (its extra steps and step 2), a repeat of the
    # measurement that orders the trials as far as one step's noise lets it
    retest_step_s: float | None = None
    gpu: str = ""  # the GPU type it ran on
    decode_steps: float = 0.0  # the predicted gen's decode steps: seconds gen gains per second of per-step overhead
    decode_gpu_step_s: float = 0.0  # the GPU's work a decode step (CUDA graphs): a shorter host overhead hides under it
    update_micro_batch_gpu_s: float = 0.0  # the GPU's work an update micro-batch: a small one's host work hides in it
    stage_layers: float = 0.0  # layers of a pipeline stage: what SMALL_COSTS (host seconds a layer) are paid on
    micro_batches_of_one: float = 0.0  # update micro-batches of one sequence: what MICRO_BATCH_COST is paid on
    log_prob_micro_batches: float = 0.0  # a log-prob pass's micro-batches: what LOGPROB_MICRO_BATCH_COST is paid on
    update_micro_batch_tokens: float = 0.0  # tokens of a typical update micro-batch (the time model's)
    small_micro_batches: float = 0.0  # small update micro-batches (throughput.small_micro_batches): SMALL_COSTS's
    small_kind: str = ""  # which of SMALL_COSTS they pay: "dynamic" (a token budget) or "fixed"; "" without them
    checkpointed_layers: float = 0.0  # layers x update micro-batches under selective recompute: CHECKPOINT_COST's
    # Parameters Megatron's CPU optimizer steps a training step, CPU_ADAM_RATE's (its step is the CPU's, not the
    # copies': on the campaign's hosts the copies take a sixth of it)
    cpu_adam_params: float = 0.0
    params: dict[str, Any] = dataclasses.field(default_factory=dict)  # the trial's parameters, as stored
    cut: str = ""  # what stopped it after its measured step, read in from its log (benchmarks/real_studies.py)
    # Logits a GPU materialises without fused kernels, per phase that pays LOGIT_COST on them (none with them)
    unfused_logits: dict[str, float] = dataclasses.field(default_factory=dict)
    # How long its measured step's rollout left the GPU idle before vLLM slept (NVML's utilization: verl's host work
    # after the last token, then the wait for the trainer's poll; autotune/results/rollout_wait.py; None: its trace
    # has no utilization, as none before lease 61)
    rollout_idle_s: float | None = None

    @property
    def lease(self) -> str:
        """The lease folder it came from (one host, or one multi-lane node)."""
        return self.source.split("/", 1)[0]

    @property
    def recompiled(self) -> tuple[int, ...] | None:
        """The steps its verl worker compiled a graph anew in, from its committed console (None: none kept)."""
        lease, db, rest = self.source.split("/", 2)
        study, n = rest.rsplit("#", 1)
        return real_studies.recompiled(lease, study, int(n), db.removesuffix(".db"))

    @property
    def compiled_at_step_3(self) -> bool:
        """Its measured step 3 compiled a graph anew (a study's first trial on cold compile caches, mostly; issue
        24.3): that step timed the compile's one-off seconds beside its configuration's."""
        return 3 in (self.recompiled or ())

    def measured_past_a_recompile(self) -> float | None:
        """Its step as the model predicts one, a compile's one-off seconds not in it: step 3, or where step 3
        compiled a graph anew its repeat, the median of its other steps from 2 on."""
        return self.retest_step_s if self.retest_step_s and self.compiled_at_step_3 else self.measured_step_s

    def measured_less_the_idle(self) -> float | None:
        """Its step 3 less its rollout's idle tail: the poll's rounding (up to 2 s, no configuration's doing) taken
        out with the host's work after the last token (0.9-1.9 s on lease 61's H100 1.5B, the same job's in every
        configuration), which the trace cannot tell apart (None where the idle was not measured)."""
        if self.measured_step_s is None or self.rollout_idle_s is None:
            return None
        return self.measured_step_s - self.rollout_idle_s

    @property
    def cpu_optimizer(self) -> bool:
        """Megatron's CPU optimizer steps a share of the parameters."""
        return self.cpu_adam_params > 0


@dataclass(frozen=True)
class Fit:
    """Errors of the ok trials of one model size (or all): median |error| per phase and of the step, Spearman over
    them all and within each GPU type (a study's landscape is one GPU type: what its ranking orders)."""

    trials: int
    phases: dict[str, float]
    step: float | None
    rho: float | None
    rho_per_gpu: dict[str, tuple[int, float | None]] = dataclasses.field(default_factory=dict)  # gpu -> (n, rho)

    @property
    def ordered(self) -> bool:
        """Spearman meets the target on every GPU type's trials (n/a below 3 ok trials)."""
        return all(r is None or r >= SPEARMAN_TARGET for _, r in self.rho_per_gpu.values())


def measured_trials(dbs: Iterable[Path]) -> Iterator[tuple[Path, Store, Setup, Any]]:
    """(database, its store, the study's setup, trial row) of every real trial with a verdict: launched, not
    simulated, ok or out of memory, not killed for a node that lanes shared (`real_studies.killed_for_the_node`);
    each trial once, from the newest copy of its study (benchmarks/real_studies.py)."""
    for db, store, setup, row in launched_trials(dbs):
        if row.status in ("ok", "oom") and not real_studies.killed_for_the_node(setup, row):
            yield db, store, setup, row


def launched_trials(dbs: Iterable[Path]) -> Iterator[tuple[Path, Store, Setup, Any]]:
    """(database, its store, the study's setup, trial row) of every real trial launched, not simulated, whatever
    its end."""
    for db, store, study in real_studies.studies(dbs):
        setup = real_studies.setup(study)
        for row in store.trials(study.name):
            if row.launched and not row.simulated and row.params:
                yield db, store, setup, row


def node_kills(dbs: Iterable[Path]) -> list[str]:
    """The trials `measured_trials` leaves out as killed for a node that lanes shared, as database/study#number."""
    return [f"{db.parent.name}/{db.name}/{row.study}#{row.number}" for db, _, setup, row in launched_trials(dbs)
            if real_studies.killed_for_the_node(setup, row)]


def cases(dbs: Iterable[Path], efficiency: dict[str, float] | None = None) -> list[Case]:
    """`efficiency`: Efficiency constants to replace (the leave-one-size-out refit predicts with them zeroed)."""
    return [_case(db, setup, row, store, efficiency or {}) for db, store, setup, row in measured_trials(dbs)]


def as_measured(setup: Setup, row: Any, store: Store) -> tuple[Job, dict[str, Any], Lengths | None]:
    """A real trial as its measured step saw it: the job with the node's defaults it ran with (the doctor's attention
    backend), verl's metrics at the measured step, and the sequence lengths that step logged (None: not logged)."""
    job = setup.job.with_node_defaults((row.extra or {}).get("job_defaults") or {})
    at = next((dict(s.metrics) for s in store.steps(row.id) if s.step == setup.measure_step), {})
    lengths = at_step(job, measured=[at]) if at.get(verl.M_RESPONSE_LENGTH_MEAN) is not None else None
    return job, at, lengths


def _case(db: Path, setup: Setup, row: Any, store: Store, efficiency: dict[str, float]) -> Case:
    job, at, lengths = as_measured(setup, row, store)
    cand = Candidate(**row.params)
    constants = dataclasses.replace(
        setup.constants, efficiency=dataclasses.replace(setup.constants.efficiency, **efficiency))
    ev = evaluate(setup.model, setup.cluster, job, cand, setup.objective, lengths, constants)
    mem = ev.memory
    thr = ev.throughput
    measured = {p: float(v) for p, v in (row.phase_timings or {}).items() if p in PHASES}
    step_metric = verl.PHASE_TIMINGS["step"]
    step_s = float(at[step_metric]) if at.get(step_metric) is not None else None
    later = {s.step: dict(s.metrics) for s in store.steps(row.id) if s.step >= 2}
    steady = list(later.values())
    retest = [float(m[step_metric]) for n, m in later.items()
              if n != setup.measure_step and m.get(step_metric) is not None]
    plan = thr.batching if thr else None  # how verl cuts the step's passes into micro-batches (the time model's)
    small = small_micro_batches(job, cand, plan) if plan else 0.0
    steady_phases = {p: statistics.median(vs) for p in (*PHASES, "step")
                     if (vs := [float(m[verl.PHASE_TIMINGS[p]]) for m in steady
                                if m.get(verl.PHASE_TIMINGS[p]) is not None])}
    return Case(
        source=f"{db.parent.name}/{db.name}/{row.study}#{row.number}",
        model=f"{catalog_size(setup.model)}, attention {job.get(verl.ATTENTION_BACKEND) or 'as verl chooses'}",
        label=Labeller(setup.stock)(row.params), status=row.status,
        measured_step_s=step_s, measured_phases=measured,
        predicted_step_s=thr.step_time if thr else None,
        predicted_phases={p: v for p, v in (thr.phases if thr else ()) if p in PHASES},
        measured_peak_gib=row.peak_memory_gib,
        predicted_peak_gib=mem.peak / GIB if mem else None,
        predicted_fits=bool(mem and mem.fits and not ev.violations),
        binding=mem.binding.name if mem else "",
        size=catalog_size(setup.model), full_recompute=cand.recompute == "full",
        steady_phases={p: v for p, v in steady_phases.items() if p != "step"},
        steady_step_s=steady_phases.get("step"), retest_step_s=statistics.median(retest) if retest else None,
        gpu=setup.cluster.gpu.name,
        decode_steps=thr.decode_steps if thr else 0.0, decode_gpu_step_s=thr.decode_gpu_step_s if thr else 0.0,
        update_micro_batch_gpu_s=thr.update_micro_batch_gpu_s if thr else 0.0,
        stage_layers=setup.model.num_layers / cand.pp,
        micro_batches_of_one=micro_batches_of_one(job, cand, plan) if plan else 0.0,
        log_prob_micro_batches=plan.log_prob_micro_batches if plan else 0.0,
        update_micro_batch_tokens=plan.update_tokens_typical if plan else 0.0,
        small_micro_batches=small, small_kind=small_micro_batch_kind(cand) if small else "",
        checkpointed_layers=checkpointed_layers(setup.model, job, cand, plan) if plan else 0.0,
        cpu_adam_params=job.optimizer_steps * cpu_optimizer_params(
            model_state_bytes(setup.model, setup.cluster, cand), cand),
        params=dict(row.params), cut=(row.extra or {}).get(real_studies.CUT, ""),
        unfused_logits=(unfused_logits_by_phase(setup.model, setup.cluster, job, cand, thr.tokens_per_step)
                        if thr else {}),
        rollout_idle_s=((row.extra or {}).get(rollout_wait.EXTRA) or {}).get(str(setup.measure_step)),
    )


def catalog_size(arch: ModelArch) -> str:
    """The catalog model of the same shape (the trials' random-weight checkpoints are named after their folder)."""
    shape = (arch.num_layers, arch.hidden_size, arch.num_attention_heads, arch.ffn_hidden_size)
    for name, m in CATALOG.items():
        if (m.num_layers, m.hidden_size, m.num_attention_heads, m.ffn_hidden_size) == shape:
            return name
    return arch.name


def spearman(xs: list[float], ys: list[float]) -> float | None:
    """Spearman's rank correlation; None below three points."""
    from scipy.stats import spearmanr

    return float(spearmanr(xs, ys).statistic) if len(xs) >= 3 else None


def ok_cases(cs: Iterable[Case]) -> list[Case]:
    return [c for c in cs if c.status == "ok" and c.measured_step_s and c.predicted_step_s]


def steady(c: Case) -> Case:
    """The case measured by its steady steps (the median of steps 2 on) instead of the measured step alone."""
    return dataclasses.replace(c, measured_phases=c.steady_phases or c.measured_phases,
                               measured_step_s=c.steady_step_s or c.measured_step_s)


def errors(cs: Iterable[Case]) -> Fit:
    """Median |predicted / measured - 1| per phase and of the step over the ok trials, and Spearman of the steps."""
    ok = ok_cases(cs)
    med = {p: statistics.median(e) for p in PHASES if (e := [abs(c.predicted_phases[p] / c.measured_phases[p] - 1)
                                                              for c in ok if c.measured_phases.get(p)])}
    step = statistics.median(abs(c.predicted_step_s / c.measured_step_s - 1) for c in ok) if ok else None
    rho = spearman([c.predicted_step_s for c in ok], [c.measured_step_s for c in ok])
    per_gpu = {g: [c for c in ok if c.gpu == g] for g in sorted({c.gpu for c in ok})}
    return Fit(len(ok), med, step, rho, {g: (len(cs), spearman([c.predicted_step_s for c in cs],
                                                                [c.measured_step_s for c in cs]))
                                         for g, cs in per_gpu.items()})
