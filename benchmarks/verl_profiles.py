"""Where a real verl 0.9.1 step's phase time goes, per model size: the campaign's `autotune profile` runs.

Reads every profile database under tests/data/real_verl_gpu/*/p-<model>.db (`autotune profile --backend verl` on a
lent GPU: verl's own torch profiler at the measured step, its traces analysed on the device). Per size: verl's phase
times in the profiled run (the profiler slows it), and per traced phase the GPU's busy and idle seconds and what the
busy time ran (GEMMs, attention, other kernels, copies). Set beside the time model's fixed cost per Megatron pass
(`Efficiency.logprob_pass_s`, `update_pass_s`, fitted on the measured steps as what a pass costs beyond its FLOPs):
that cost is the time the GPU waits on the host in a pass, and the traces show it as idle time of about that size,
whatever the model size, while the busy time grows with the model.

    python -m benchmarks.verl_profiles      # writes benchmarks/results/verl_profiles.md
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.candidate import Candidate
from autotune.estimate.offload import cpu_fraction
from autotune.estimate.throughput import DEFAULT_EFFICIENCY
from autotune.results.labels import label
from autotune.store.store import Store
from benchmarks import real_studies

HERE = Path(__file__).resolve().parent
DATA = real_studies.DATA
RESULTS = HERE / "results" / "verl_profiles.md"
PASSES = {"old_log_prob": "logprob_pass_s", "update_actor": "update_pass_s"}  # the pass costs the traces explain
KINDS = ("gemm", "attention", "other", "memory", "communication")


@dataclass(frozen=True)
class Phase:
    name: str
    traced_s: float  # the trace's window of the phase (gen: a sample of the rollout's engine iterations)
    verl_s: float | None  # verl's timing_s/<phase> of the profiled run
    shares: dict[str, float]  # kind -> share of the traced rank-seconds (idle included)
    top: str  # the kernel that took the most time, and its share of the phase's top kernels

    @property
    def idle_s(self) -> float:
        return self.traced_s * self.shares.get("idle", 0.0)

    @property
    def busy_s(self) -> float:
        return self.traced_s - self.idle_s


@dataclass(frozen=True)
class Profile:
    source: str  # lease folder / database
    model: str
    gpu: str
    configuration: str
    status: str  # ok | failed (the run gave no traces)
    reason: str
    phases: tuple[Phase, ...]
    cpu_optimizer: bool = False  # Megatron's CPU optimizer steps a share of the parameters

    def phase(self, name: str) -> Phase | None:
        return next((p for p in self.phases if p.name == name), None)


def _phases(analysis: dict[str, Any], timings: dict[str, float]) -> tuple[Phase, ...]:
    out = []
    for ph in analysis.get("phases", []):
        if ph["phase"] == "outside":
            continue
        top = ph.get("top") or []
        total = sum(t["seconds"] for t in top) or 1.0
        lead = max(top, key=lambda t: t["seconds"], default=None)
        out.append(Phase(ph["phase"], float(ph["seconds"]), timings.get(ph["phase"]), dict(ph["shares"]),
                         f"{lead['kind']} {lead['name'][:60]} ({lead['seconds'] / total:.0%})" if lead else "-"))
    return tuple(out)


def profiles(data: Path = DATA) -> list[Profile]:
    """Every committed verl profile, by lease folder and model."""
    out = []
    for db in sorted(data.glob("*/p-*.db")):
        store = Store(f"sqlite:///{db}")
        for pid in store.profile_ids():
            row = store.profile(pid)
            if row is None or row.backend != "verl":
                continue
            run = row.run or {}
            out.append(Profile(
                source=f"{db.parent.name}/{db.name}", model=db.stem.removeprefix("p-"),
                gpu=db.parent.name.split("_")[0],
                configuration=label(row.params or {}, None), status=row.status, reason=row.reason or "",
                phases=_phases(row.analysis or {}, {k: float(v) for k, v in (run.get("phase_timings") or {}).items()}),
                cpu_optimizer=bool(row.params and cpu_fraction(Candidate(**row.params)))))
    return out


def waits_on_cpu_optimizer(p: Profile, phase: str) -> bool:
    """The update of a configuration whose optimizer steps (a share of) the parameters on the CPU: its GPU idles
    through that step and the parameters' copies back, not only the pass's fixed cost."""
    return phase == "update_actor" and p.cpu_optimizer


def report(ps: list[Profile]) -> str:
    eff = DEFAULT_EFFICIENCY
    lines = ["# Where a real verl 0.9.1 step's time goes: the campaign's profiles", "",
             "Written by `python -m benchmarks.verl_profiles` from the `autotune profile --backend verl` databases "
             "under `tests/data/real_verl_gpu/` (verl's torch profiler at step 3 of a real GRPO run on one lent GPU, "
             "the traces analysed on the device). The profiled run is slowed by the profiler: its times explain "
             "where the time goes, they are not the configuration's speed. gen's trace is a sample of the rollout "
             "(vLLM's first engine iterations): its shares, not its length.", "",
             "## Per size and phase", "",
             "| profile | model | configuration | phase | verl s | traced s | GPU busy s | GPU idle s | "
             + " | ".join(KINDS) + " | top kernel |",
             "|---" * (9 + len(KINDS)) + "|"]
    for p in ps:
        if p.status != "ok":
            lines.append(f"| {p.source} | {p.model} ({p.gpu}) | {p.configuration} | {p.status}: "
                         f"{p.reason[:160]} |" + " |" * (5 + len(KINDS)))
        for ph in p.phases:
            verl_s = f"{ph.verl_s:.1f}" if ph.verl_s is not None else "-"
            lines.append(f"| {p.source} | {p.model} ({p.gpu}) | {p.configuration} | {ph.name} | {verl_s} | "
                         f"{ph.traced_s:.2f} | {ph.busy_s:.2f} | {ph.idle_s:.2f} | "
                         + " | ".join(f"{ph.shares.get(k, 0.0):.0%}" for k in KINDS) + f" | {ph.top} |")
    rows = [(p, phase, ph, getattr(eff, const)) for p in ps for phase, const in PASSES.items()
            if p.status == "ok" and (ph := p.phase(phase)) is not None]
    ratios = [ph.idle_s / cost for p, phase, ph, cost in rows if not waits_on_cpu_optimizer(p, phase)]
    lines += ["", "## The fixed cost per Megatron pass, seen in the traces", "",
              "The time model prices a log-prob pass and an update at their FLOPs plus a fixed cost fitted on the "
              f"measured steps (`logprob_pass_s` {eff.logprob_pass_s:.2f} s, `update_pass_s` "
              f"{eff.update_pass_s:.2f} s), the same for every model size. In the traces a pass's GPU waits on the "
              "host (packing micro-batches, Megatron's schedule, the log-prob and entropy post-processing, the "
              "results' gather) for "
              + (f"{min(ratios):.1f}-{max(ratios):.1f}x that cost at every size profiled (the profiler slows the "
                 "host's side too)" if ratios else "no pass profiled yet")
              + ", while the GPU's busy time grows with the model. An update whose optimizer steps on the CPU "
              "(cpu-adam) also waits on that step and its copies: marked, and not in that range.", "",
              "| model | pass | GPU idle s (profiled) | the model's fixed cost s | idle / cost | GPU busy s |",
              "|---|---|---|---|---|---|"]
    for p, phase, ph, cost in rows:
        cpu = " (the CPU optimizer's step too)" if waits_on_cpu_optimizer(p, phase) else ""
        lines.append(f"| {p.model} ({p.gpu}) | {phase}{cpu} | {ph.idle_s:.2f} | {cost:.2f} | {ph.idle_s / cost:.1f}x | "
                     f"{ph.busy_s:.2f} |")
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    real_studies.write_report(__doc__, RESULTS, lambda data: report(profiles(data)) + "\n", argv)


if __name__ == "__main__":
    main()
