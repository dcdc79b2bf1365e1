"""One or two changes that follow from a profile, each checked by the model before it is said.

A rule reads a measured number (a pipeline bubble, exposed communication, host copies, an idle device) and proposes
the knobs that act on it; the memory and throughput models then judge every proposal for this job and cluster. Only a
change predicted to fit (at the measured step's lengths) and to be faster is advised; the rest are kept with why
they were not (the model predicts it slower, an OOM, a broken constraint), so nothing is advised on a rule alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from autotune.candidate import Candidate
from autotune.estimate import MOMENT_WORDS
from autotune.estimate.batching import update_micro_batches
from autotune.estimate.throughput import DEFAULT_WORKLOAD
from autotune.profile import kinds as K
from autotune.profile.analysis import Phase, ProfileAnalysis
from autotune.search.setup import Setup

# What makes a number worth acting on (fractions of the phase's time).
BUBBLE = 0.15
EXPOSED_COMM = 0.15
HOST_COPIES = 0.10
IDLE = 0.25
MIN_SPEEDUP = 1.005  # a predicted step speed-up below this is rounding, not a prediction
MAX_ADVICE = 2
TRAIN_PHASES = ("update_actor", "old_log_prob", "ref")


@dataclass(frozen=True)
class Proposal:
    """A change a measured number suggests, before the model has judged it."""

    phase: str
    finding: str
    change: dict[str, Any]


@dataclass(frozen=True)
class Advice:
    phase: str
    finding: str  # the measured number, in words
    change: dict[str, Any]
    speedup: float | None  # predicted throughput of the change / of the profiled configuration
    fits: bool
    verdict: str  # the model's memory verdict in words, or why the change was not advised
    advised: bool = False
    details: dict[str, Any] = field(default_factory=dict)

    def change_text(self) -> str:
        return " ".join(f"{k}={_fmt(v)}" for k, v in self.change.items())

    def line(self) -> str:
        if self.advised:
            phase = self.details.get("phase_speedup")
            what = f"{self.phase} {phase:.2f}x, step {self.speedup:.3f}x" if phase else f"step {self.speedup:.3f}x"
            return f"{self.finding}: try {self.change_text()} (predicted faster: {what}; {self.verdict})"
        return f"{self.finding}: {self.change_text()} not advised ({self.verdict})"

    def as_dict(self) -> dict[str, Any]:
        return {"phase": self.phase, "finding": self.finding, "change": dict(self.change),
                "predicted_speedup": None if self.speedup is None else round(self.speedup, 4), "fits": self.fits,
                "verdict": self.verdict, "advised": self.advised, "line": self.line(), **self.details}


def _fmt(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return str(v).lower()
    return str(v)


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def model_bubble(setup: Setup, cand: Candidate, micro_batches: int | None = None) -> tuple[float, int]:
    """The throughput model's pipeline bubble (PP-1)/(VPP*M) and the M it assumes (per mini-batch)."""
    if micro_batches is None:
        job = setup.job
        seq = DEFAULT_WORKLOAD.prompt_fraction * job.max_prompt_length + \
            DEFAULT_WORKLOAD.response_fraction * job.max_response_length
        micro_batches = update_micro_batches(job, setup.cluster, cand, seq)
    return (cand.pp - 1) / (cand.vpp_or_1 * micro_batches) if cand.pp > 1 else 0.0, micro_batches


def proposals(analysis: ProfileAnalysis, setup: Setup, cand: Candidate,
              micro_batches: int | None = None) -> list[Proposal]:
    """The changes the profile's numbers point at, most telling first."""
    out: list[Proposal] = []
    for ph in analysis.phases:
        if ph.name in TRAIN_PHASES:
            out += _training(ph, setup, cand, micro_batches)
        elif ph.name == "gen":
            out += _rollout(ph, cand)
        host = ph.host_copy_fraction
        if host >= HOST_COPIES and (cand.param_offload or cand.optimizer_offload):
            finding = f"{ph.name}: {_pct(host)} of the time copying between host and GPU (offload on)"
            for change in ({"param_offload": False}, {"optimizer_offload": False},
                           {"param_offload": False, "optimizer_offload": False}):
                if all(getattr(cand, k) != v for k, v in change.items()):
                    out.append(Proposal(ph.name, finding, change))
    seen, unique = set(), []
    for p in out:
        key = tuple(sorted(p.change.items()))
        if key not in seen:
            seen.add(key)
            unique.append(p)
    return unique


def _training(ph: Phase, setup: Setup, cand: Candidate, micro_batches: int | None) -> list[Proposal]:
    out = []
    bubble = ph.bubble_fraction
    if cand.pp > 1 and bubble is not None and bubble >= BUBBLE:
        modelled, m = model_bubble(setup, cand, micro_batches)
        finding = (f"{ph.name}: {_pct(bubble)} idle or waiting on pipeline neighbours with PP={cand.pp}"
                   f"{f' VPP={cand.vpp}' if cand.vpp else ''} and {m} micro-batches (model: {_pct(modelled)})")
        layers = setup.model.num_layers
        for v in (2, 3, 4):
            if v > cand.vpp_or_1 and layers % (cand.pp * v) == 0:
                out.append(Proposal(ph.name, finding, {"vpp": v}))
        if cand.use_dynamic_bsz and cand.ppo_max_token_len_per_gpu and ph.name == "update_actor":
            out.append(Proposal(ph.name, finding, {"ppo_max_token_len_per_gpu": cand.ppo_max_token_len_per_gpu // 2}))
        out.append(Proposal(ph.name, finding, {"pp": cand.pp // 2, **({"vpp": None} if cand.vpp else {})}))
    exposed = ph.share(K.COMMUNICATION)
    if exposed >= EXPOSED_COMM and (cand.tp > 1 or cand.cp > 1):
        hidden = ph.communication_hidden_fraction
        finding = (f"{ph.name}: {_pct(exposed)} exposed communication ({_pct(hidden or 0)} of all communication "
                   f"hidden under compute) with TP={cand.tp}{f' CP={cand.cp}' if cand.cp > 1 else ''}")
        if cand.tp > 1 and not cand.sequence_parallel:
            out.append(Proposal(ph.name, finding, {"sequence_parallel": True}))
        if cand.tp > 1:
            out.append(Proposal(ph.name, finding, {"tp": cand.tp // 2}))
        if cand.cp > 1:
            out.append(Proposal(ph.name, finding, {"cp": cand.cp // 2}))
    idle = ph.share(K.IDLE)
    if idle >= IDLE and cand.pp == 1:
        finding = f"{ph.name}: the GPU idle {_pct(idle)} of the phase (small micro-batches keep it launch-bound)"
        if cand.use_dynamic_bsz:
            key = "ppo_max_token_len_per_gpu" if ph.name == "update_actor" else "log_prob_max_token_len_per_gpu"
            if getattr(cand, key):
                out.append(Proposal(ph.name, finding, {key: getattr(cand, key) * 2}))
        else:
            key = "ppo_micro_batch_size_per_gpu" if ph.name == "update_actor" else "log_prob_micro_batch_size_per_gpu"
            out.append(Proposal(ph.name, finding, {key: (getattr(cand, key) or 1) * 2}))
    return out


def _rollout(ph: Phase, cand: Candidate) -> list[Proposal]:
    out = []
    exposed, idle = ph.share(K.COMMUNICATION), ph.share(K.IDLE)
    if cand.rollout_tp > 1 and exposed >= EXPOSED_COMM:
        finding = (f"gen: {_pct(exposed)} exposed communication (tensor-parallel all-reduces, "
                   f"rollout TP={cand.rollout_tp})")
        out.append(Proposal("gen", finding, {"rollout_tp": cand.rollout_tp // 2}))
    if idle >= IDLE:
        finding = f"gen: the GPU idle {_pct(idle)} of the rollout (batches too small to keep it busy)"
        if cand.gpu_memory_utilization < 0.9:
            out.append(Proposal("gen", finding, {"gpu_memory_utilization": round(cand.gpu_memory_utilization + 0.1,
                                                                                  2)}))
        if cand.rollout_tp > 1:
            out.append(Proposal("gen", finding, {"rollout_tp": cand.rollout_tp // 2}))
    return out


def judge(p: Proposal, setup: Setup, cand: Candidate, base: Any) -> Advice:
    """The model's verdict on one proposal: a candidate that breaks no rule, fits and is predicted faster (its step;
    the phase the finding is about is reported too). `base`: the model's throughput estimate of `cand`."""
    try:
        new = Candidate.from_params(p.change, cand)
    except (TypeError, ValueError) as e:
        return Advice(p.phase, p.finding, p.change, None, False, f"not a valid setting: {e}")
    ev = setup.evaluate(new)
    if ev.violations:
        return Advice(p.phase, p.finding, p.change, None, False,
                      "breaks " + "; ".join(f"{v.rule}: {v.message}" for v in ev.violations))
    if not ev.feasible:
        return Advice(p.phase, p.finding, p.change, None, False, "predicted OOM: " + "; ".join(ev.memory.reasons()))
    speed = ev.throughput.throughput / base.throughput if base is not None and base.throughput else None
    old_phase, new_phase = (dict(base.phases).get(p.phase) if base is not None else None), \
        dict(ev.throughput.phases).get(p.phase)
    phase_speed = old_phase / new_phase if old_phase and new_phase else None
    verdict = f"fits at step {setup.measure_step}"
    if not ev.worst_fits:
        bad = [m.name for m in ev.worst_memory.moments if not m.fits] if ev.worst_memory else []
        verdict += f"; OOM in {MOMENT_WORDS.get(bad[0], bad[0]) if bad else 'a later step'} at the longest " \
                   "sequences the job allows"
    advised = speed is not None and speed >= MIN_SPEEDUP
    if speed is not None and not advised:
        verdict = f"predicted {speed:.2f}x: not faster by the model; {verdict}"
    return Advice(p.phase, p.finding, p.change, speed, True, verdict, advised,
                  {"predicted_throughput": round(ev.throughput.throughput, 1), "layout": new.layout(),
                   "phase_speedup": round(phase_speed, 4) if phase_speed else None})


def advise(analysis: ProfileAnalysis, setup: Setup, cand: Candidate, micro_batches: int | None = None,
           limit: int = MAX_ADVICE) -> list[Advice]:
    """Every proposal with the model's verdict; the best `limit` that pass are marked advised (first)."""
    base = setup.evaluate(cand).throughput
    judged = [judge(p, setup, cand, base) for p in proposals(analysis, setup, cand, micro_batches)]
    good = sorted((a for a in judged if a.advised), key=lambda a: -(a.speedup or 0))
    keep = good[:limit]
    kept = {id(a) for a in keep}
    rest = [replace(a, advised=False, verdict=f"{a.verdict}; a faster change was advised") if a.advised else a
            for a in judged if id(a) not in kept]
    return keep + rest
