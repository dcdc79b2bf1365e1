"""What a study is worth, for the end of `autotune run`: the best trial's speed-up over verl's example configuration
(candidate.STOCK) and over the user's own (the baseline trial), the GPU time the study spent, and what pruned the
candidates it never launched. A pure function of the study's trial rows.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from autotune import units
from autotune.candidate import DEFAULTS_NAME, STOCK_NAME
from autotune.estimate import PREDICTED_OOM
from autotune.results.labels import provenance
from autotune.results.noise import leaders_tie, noise_words
from autotune.results.timeline import Timeline, study_time
from autotune.store.schema import TrialRow

# How the tuner words a prune (the reasons' first words): store.Store.claim_launch, Evaluation.prune_reason,
# ProbedRunner, ReplayRunner.refuse and the verl runner's --prune-slower-than stop. tests/test_report.py checks
# each against its producer.
PRUNE_KINDS: tuple[tuple[str, str], ...] = (
    ("constraint ", "static constraint"),
    (PREDICTED_OOM, "memory model"),
    ("duplicate of trial", "duplicate"),
    ("probe OOM", "probe OOM"),
    ("not in the table", "not in the replay table"),
)
SLOWER = "--prune-slower-than"


def prune_kind(reason: str) -> tuple[str, str]:
    """(kind, detail) of a pruned trial's reason: ("static constraint", "tp_heads"), ("memory model", "update")."""
    for prefix, kind in PRUNE_KINDS:
        if reason.startswith(prefix):
            rest = reason[len(prefix):]
            if kind in ("static constraint", "memory model"):
                return kind, rest.split(":", 1)[0].strip()
            return kind, ""
    if SLOWER in reason:
        return "slower than the best (early stop)", ""
    return "other", ""


def idle_kind(reason: str) -> str:
    """A prune reason's kind, for counting the proposals that launched nothing (`autotune run`'s idle stop):
    'duplicate', 'predicted OOM (update)', or the constraint rule broken."""
    kind, detail = prune_kind(reason)
    if kind == "static constraint":
        return detail
    if kind == "memory model":
        return f"predicted OOM ({detail})"
    return reason.split(":", 1)[0][:40] if kind == "other" else kind


# Launched, but stopped and re-queued: --n-trials counts the re-run instead (study.NOT_COUNTED); their wall time
# was spent all the same.
INTERRUPTED = "interrupted"


def _how(row: TrialRow) -> str:
    how = provenance(row.simulated, row.backend)
    return "SIMULATED" if how == "simulated" else how


def _at_measured_step(row: TrialRow) -> float | None:
    """Throughput at the study's measured step (a confirmation replaces `throughput` with a later window's mean)."""
    return (row.extra or {}).get("measured_step_throughput", row.throughput)


@dataclass(frozen=True)
class Reference:
    """verl's example configuration or the user's own, as this study ran it."""

    what: str  # STOCK_NAME | "your configuration (baseline)"
    trial: int  # the trial that seeded it
    label: str
    status: str
    throughput: float | None = None  # at the measured step, from the trial that ran it (maybe a duplicate's)
    ran_as: int | None = None  # the trial that ran this configuration, when it is not `trial` itself
    how: str = ""
    speedup: float | None = None  # best / this, both at the measured step
    note: str = ""


@dataclass(frozen=True)
class StudyReport:
    best_trial: int | None
    best_label: str
    best_throughput: float | None  # at the measured step (like the references)
    best_how: str
    references: tuple[Reference, ...]
    launched: int  # launched trials that count towards --n-trials (the run's first line says the same number)
    gpus: int
    gpu_hours: float  # 0.0 when nothing ran on a GPU now (simulated or replayed)
    simulated: bool
    replayed: bool = False  # every launched trial looked up in a table of earlier measurements
    pruned: dict[str, int] = field(default_factory=dict)  # kind -> count
    pruned_detail: dict[str, dict[str, int]] = field(default_factory=dict)  # kind -> detail -> count
    no_baseline: bool = True
    interrupted: int = 0  # launched runs stopped and re-queued (not counted in `launched`; their time is)
    model: str = ""  # what the study learned of the model's errors (autotune/search/learning.py), in words
    best_noise: str = ""  # the best trial's measured noise in words ("noise not measured ..." where none)
    best_timeline: str = ""  # the best trial's "GPU busy x% of this trial: ..." (real runs only)
    time: str = ""  # the study's runs: start-up vs step GPU-hours (real runs only)
    tie: dict[str, Any] | None = None  # the leaders within the measured noise (autotune/results/noise.py Tie.as_dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def study_report(rows: Sequence[TrialRow], best: TrialRow | None, gpus: int,
                 label: Callable[[dict[str, Any]], str], model: str = "") -> StudyReport:
    """The report of a study from its trial rows (any order), its best trial and its GPU count."""
    ordered = sorted(rows, key=lambda r: r.number)
    best_thr = _at_measured_step(best) if best else None
    refs = []
    for origin, what in (("baseline", "your configuration (baseline)"), ("stock", STOCK_NAME)):
        seed = next((r for r in ordered if r.origin == origin), None)
        if seed is not None:
            refs.append(_reference(seed, what, ordered, best_thr, label))
    ran = [r for r in ordered if r.launched]
    launched = [r for r in ran if r.status != INTERRUPTED]
    simulated = any(r.simulated for r in ran)
    replayed = bool(ran) and all(r.backend == "replay" for r in ran)
    # GPU time is wall time x GPUs of what ran on GPUs now: a simulated or replayed trial's wall time is not.
    seconds = 0.0 if simulated or replayed else sum((r.duration_s or 0.0) + _confirm_s(r) for r in ran)
    spent = study_time(ran)
    best_tl = Timeline.from_extra(best.extra) if best and not best.simulated and best.backend != "replay" else None
    tie = leaders_tie(r for r in ordered if r.status == "ok")
    kinds: Counter[str] = Counter()
    detail: dict[str, Counter[str]] = {}
    for r in ordered:
        if r.status != "pruned":
            continue
        kind, what = prune_kind(r.reason)
        kinds[kind] += 1
        if what:
            detail.setdefault(kind, Counter())[what] += 1
    return StudyReport(
        best_trial=best.number if best else None, best_label=label(best.params) if best else "",
        best_throughput=best_thr, best_how=_how(best) if best else "", references=tuple(refs),
        launched=len(launched), gpus=gpus, gpu_hours=seconds * gpus / 3600.0, simulated=simulated,
        replayed=replayed, pruned=dict(kinds.most_common()),
        pruned_detail={k: dict(v.most_common()) for k, v in detail.items()},
        no_baseline=not any(r.what.startswith("your") for r in refs), interrupted=len(ran) - len(launched), model=model,
        best_noise=noise_words(best) if best else "", best_timeline=best_tl.summary() if best_tl else "",
        time=spent.words(gpus) if spent and not simulated and not replayed else "",
        tie=tie.as_dict() if tie else None,
    )


def _confirm_s(row: TrialRow) -> float:
    return float(((row.extra or {}).get("confirm") or {}).get("wall_s") or 0.0)


def _reference(seed: TrialRow, what: str, rows: Sequence[TrialRow], best_thr: float | None,
               label: Callable[[dict[str, Any]], str]) -> Reference:
    """The seeded reference trial, followed to the trial that ran its configuration (a duplicate, a re-queue)."""
    same = [r for r in rows if r.candidate_key == seed.candidate_key and r.launched]
    ran = next((r for r in same if r.status == "ok" and r.throughput is not None), None)
    lab = label(seed.params)
    if ran is None:
        last = same[-1] if same else seed
        why = units.clip(last.reason, 160)
        note = ("pruned before launch: " if last.status == "pruned" else f"{last.status}: ") + why
        return Reference(what, seed.number, lab, last.status,
                         ran_as=last.number if last.number != seed.number else None, note=note)
    thr = _at_measured_step(ran)
    speedup = best_thr / thr if best_thr and thr else None
    return Reference(what, seed.number, lab, "ok", thr, ran.number if ran.number != seed.number else None,
                     _how(ran), speedup)


def report_lines(rep: StudyReport) -> list[str]:
    """The report in words, one line per fact (rich markup free)."""
    lines = []
    if rep.best_trial is not None:
        for ref in rep.references:
            trial = f"trial {ref.trial}" + (f", ran as trial {ref.ran_as}" if ref.ran_as is not None else "")
            if ref.speedup is not None:
                lines.append(f"  {units.speedup(ref.speedup)} over {ref.what} ({trial}: {ref.label}, "
                             f"{units.throughput(ref.throughput)} tokens/s/GPU {ref.how}; best "
                             f"{units.throughput(rep.best_throughput)} {rep.best_how}, both at the measured step of "
                             "this study)")
            else:
                lines.append(f"  no speed-up over {ref.what}: {trial} ({ref.label}) did not run to its measured "
                             f"step: {ref.note}")
        if rep.no_baseline:
            lines.append(f"  no baseline trial: your job sets none of the tuned keys, so your configuration is "
                         f"{DEFAULTS_NAME} (not the example's)")
    runs = f"{rep.launched} launched trials" + (
        f" and {rep.interrupted} interrupted, re-queued run{'s' if rep.interrupted != 1 else ''}"
        if rep.interrupted else "")
    if rep.simulated:
        lines.append(f"GPU time: none spent (SIMULATED); {runs}")
    elif rep.replayed:
        lines.append(f"GPU time: none spent now (REPLAYED from earlier measurements); {runs}")
    else:
        lines.append(f"GPU time: {rep.gpu_hours:.2f} GPU-hours ({runs}, {rep.gpus} GPUs each; wall time launch to "
                     "recorded, confirmations included)")
        if rep.time:
            lines.append(f"  {rep.time}")
    if rep.best_trial is not None:
        lines.append(f"best trial {rep.best_trial}: {rep.best_noise}"
                     + (f"; {rep.best_timeline}" if rep.best_timeline else ""))
    if rep.tie:
        lines.append(rep.tie["words"])
    if rep.pruned:
        parts = []
        for kind, n in rep.pruned.items():
            sub = rep.pruned_detail.get(kind)
            parts.append(f"{kind} {n}" + (" (" + ", ".join(f"{k} {v}" for k, v in sub.items()) + ")" if sub else ""))
        lines.append(f"pruned in this study, by kind: {'; '.join(parts)}")
    if rep.model:
        lines.append(rep.model)
    return lines
