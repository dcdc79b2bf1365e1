"""How far a measured step can be ordered: the model's rank correlation per size and GPU type beside the measurement's
own (step 3 against the same trial's other steps), without gen (rounded to verl's poll), within one study (one
host) and over configurations (a configuration run on several hosts, once each). A section of
benchmarks/results/calibration.md (benchmarks/calibration.py)."""

from __future__ import annotations

import statistics
from collections import defaultdict
from itertools import combinations

from benchmarks.real_cases import Case, ok_cases, spearman

MODEL_TIE = 0.01  # two predictions this close are a tie the model cannot order


def study_of(c: Case) -> str:
    """The study a case ran in (one host: a study's trials run on one node)."""
    return c.source.rsplit("#", 1)[0]


def rho_text(r: float | None) -> str:
    """A rank correlation as the reports write it: "n/a" where there is none (too few points, or a side constant)."""
    return f"{r:.2f}" if r is not None and r == r else "n/a"


def without_gen(step: float | None, phases: dict[str, float]) -> float | None:
    """A step (predicted or measured) less its gen: what is left once verl's 2 s poll, which rounds each rollout up to
    6.1, 8.1, 10.1 s ..., and the host's decode overhead are taken out (None without a gen)."""
    return step - phases["gen"] if step is not None and "gen" in phases else None


def by_configuration(cs: list[Case]) -> list[tuple[float, float, int]]:
    """(predicted, measured step 3, runs) per configuration (its label), each the median over its runs: a
    configuration re-run on other hosts is one point of the landscape, as a replay table's row merges its runs, where
    as trials it is several points the model predicts alike and the hosts measure apart."""
    runs: dict[str, list[Case]] = defaultdict(list)
    for c in cs:
        runs[c.label].append(c)
    return [(statistics.median(c.predicted_step_s for c in g), statistics.median(c.measured_step_s for c in g), len(g))
            for _, g in sorted(runs.items())]


def one_host_pairs(cs: list[Case]) -> tuple[int, int]:
    """(pairs the model orders as step 3 measured them, pairs): every two trials of one study (one host, as a user's
    study runs; a study of two counts), leaving out those the model predicts within MODEL_TIE of each other. The
    7B's trials ran on fifteen hosts, most studies of two: over single runs the hosts decide its order, on one host
    the model does."""
    right = total = 0
    for st in sorted({study_of(c) for c in cs}):
        for a, b in combinations([c for c in cs if study_of(c) == st], 2):
            if abs(a.predicted_step_s / b.predicted_step_s - 1) < MODEL_TIE:
                continue
            total += 1
            right += (a.predicted_step_s < b.predicted_step_s) == (a.measured_step_s < b.measured_step_s)
    return right, total


def ordering(held: list[Case]) -> list[str]:
    """Per size and GPU type: the model's Spearman (held out) beside how well the measurement orders itself (step 3
    against the same trials' other steps), the model's Spearman of the step without gen (the phase a configuration
    hardly moves, whose measure is rounded to verl's poll and follows the host) and within each study of 3 or more ok
    trials (one host), their mean weighted by trials, over configurations (each its runs' median), and with a step 3
    that compiled a graph anew measured by its repeat: what part of the landscape's disorder is one step's noise, the
    poll's, the hosts' and a compile's."""
    lines = ["## How far a measured step can be ordered", "",
             "Spearman's rank correlation per size and GPU type: the model's (held out, as above) against step 3; "
             "step 3 against its repeat (the median of the same trial's other steps from 2 on: no model, only "
             "one step's noise between them); the model's of the step without gen, predicted and measured (gen's "
             "measure is the rollout rounded up to verl's 2 s poll, and it follows the host's decode overhead, "
             "where the configurations of a size differ little); and the model's within each study of 3 or more ok "
             "trials (one host, as a user's study runs), the mean weighted by the study's trials; and the model's over "
             "the configurations (each its runs' median, predicted and measured: a configuration re-run on other hosts "
             "is one point, as a replay table's row merges its runs; `by_configuration`); and the model's with each "
             "step 3 that compiled a graph anew (the worker's warning: trial_cost.md, \"Steps that recompiled\") "
             "measured by its repeat, as the model predicts a step without a compile's one-off seconds "
             "(`Case.measured_past_a_recompile`; the trials so measured in brackets); and the model's against step 3 "
             "less its rollout's idle tail (the GPU idle from the rollout's last kernel to vLLM's sleep, by NVML's "
             "utilization: verl's host work after the last token, then the trainer's wait for its next 2 s poll; "
             "autotune/results/rollout_wait.py; `Case.measured_less_the_idle`; only trials whose trace has the "
             "utilization, lease 61's on, in brackets, beside the model's against step 3 over the same trials); and "
             "the pairs of trials of one study, a study of two too, that the model orders as step 3 measured them "
             "(`one_host_pairs`: pairs it predicts within 1 % of each other left out).", "",
             "| size | GPU | ok trials | model | step 3 vs its repeat | model, the step without gen | studies (trials) "
             "| model within one study | model over configurations (configurations) | model, past a recompile "
             "(trials) | model, the step less its rollout's idle tail (trials; at step 3) | pairs of one study "
             "ordered as measured |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    ok = ok_cases(held)
    for size, gpu in sorted({(c.size, c.gpu) for c in ok}):
        cs = [c for c in ok if c.size == size and c.gpu == gpu]
        if len(cs) < 3:
            continue
        model = spearman([c.predicted_step_s for c in cs], [c.measured_step_s for c in cs])
        both = [c for c in cs if c.retest_step_s]
        retest = spearman([c.measured_step_s for c in both], [c.retest_step_s for c in both])
        gens = [(p, m) for c in cs if (p := without_gen(c.predicted_step_s, c.predicted_phases)) is not None
                and (m := without_gen(c.measured_step_s, c.measured_phases)) is not None]
        no_gen = spearman([p for p, _ in gens], [m for _, m in gens])
        studies = [g for st in sorted({study_of(c) for c in cs}) if len(g := [c for c in cs if study_of(c) == st]) >= 3]
        rhos = [(len(g), r) for g in studies
                if (r := spearman([c.predicted_step_s for c in g], [c.measured_step_s for c in g])) is not None
                and r == r]  # nan where a study's steps tie
        within = sum(n * r for n, r in rhos) / sum(n for n, _ in rhos) if rhos else None
        confs = by_configuration(cs)
        over = spearman([p for p, _, _ in confs], [m for _, m, _ in confs])
        past = spearman([c.predicted_step_s for c in cs], [c.measured_past_a_recompile() for c in cs])
        moved = sum(c.measured_past_a_recompile() != c.measured_step_s for c in cs)
        waited = [c for c in cs if c.measured_less_the_idle() is not None]
        less = spearman([c.predicted_step_s for c in waited], [c.measured_less_the_idle() for c in waited])
        same = spearman([c.predicted_step_s for c in waited], [c.measured_step_s for c in waited])
        right, pairs = one_host_pairs(cs)
        lines.append(f"| {size} | {gpu} | {len(cs)} | {rho_text(model)} | {rho_text(retest)} ({len(both)}) | "
                     f"{rho_text(no_gen)} ({len(gens)}) | {len(rhos)} ({sum(n for n, _ in rhos)}) | "
                     f"{rho_text(within)} | {rho_text(over)} ({len(confs)}) | {rho_text(past)} ({moved}) | "
                     f"{rho_text(less)} ({len(waited)}; {rho_text(same)}) | {right} of {pairs} |")
    lines.append("")
    return lines
