"""The base model against every real verl 0.9.1 trial the project measured: per phase, whole step and memory.

Takes the real trials as cases (benchmarks/real_cases.py: each trial's configuration, what its measured step measured,
what the uncorrected model says of it at the lengths that step logged), fits the engine's fixed costs on them
(benchmarks/cost_fits.py, each model size held out in turn), and reports per model size the median absolute error per
phase and of the step, Spearman's rank correlation of the step times (beside how far a measured step orders itself),
and each memory verdict (an OOM predicted to fit is the failure that matters).

    python -m benchmarks.calibration     # writes benchmarks/results/calibration.md
"""

from __future__ import annotations

import statistics
from pathlib import Path

from autotune.estimate.throughput import (
    SMALL_MICRO_BATCH_TOKENS,
)
from benchmarks import real_studies
from benchmarks.cost_fits import (
    by_count,
    checkpoint_pairs,
    cpu_adam_pairs,
    fit_pass_costs,
    held_out,
    host_cpu_adam_rate,
    host_per_layer,
    logit_costs,
    logit_pairs,
    logprob_micro_batch_residuals,
    micro_batch_costs,
    pass_leftovers,
    recompute_residual,
    small_micro_batch_costs,
)
from benchmarks.host_levels import levels, probe_levels
from benchmarks.real_cases import (
    CHECKPOINT_COST,
    HERE,
    LOGIT_COST,
    LOGPROB_MICRO_BATCH_COST,
    MICRO_BATCH_COST,
    PASS_COSTS,
    PHASE_TARGET,
    PHASES,
    SMALL_COSTS,
    SPEARMAN_TARGET,
    STEP_TARGET,
    ZEROED,
    Case,
    Fit,
    cases,
    errors,
    node_kills,
    ok_cases,
    spearman,
    steady,
)
from benchmarks.step_order import ordering


def summary(all_cases: list[Case], zeroed: list[Case]) -> list[str]:
    """Per model size and overall: median |error| per phase and of the step with the global constants and with the
    fitted ones held out, Spearman per size, and whether issue 23's targets are met."""
    held, fits = held_out(zeroed)
    costs = fit_pass_costs(zeroed)
    update_pass_s = costs["update_pass_s"]
    recompute = recompute_residual(zeroed, update_pass_s) or 0.0
    one = micro_batch_costs(zeroed, update_pass_s)
    per_micro_batch = logprob_micro_batch_residuals(zeroed)
    small = small_micro_batch_costs(zeroed, update_pass_s)
    logit, logit_pair = logit_costs(zeroed), logit_pairs(zeroed)
    pairs = checkpoint_pairs(zeroed)
    sizes = sorted({c.size for c in ok_cases(all_cases)})
    lines = ["## Summary: per model size, leave one size out", "",
             "The fixed costs (" + ", ".join(PASS_COSTS.values()) + ") are fitted on these trials "
             "(`fit_pass_costs`: the median of measured minus predicted with them zeroed; the update's without the "
             "CPU-optimizer, full-recompute and micro-batch-of-one trials and those whose update micro-batches are "
             f"under {SMALL_MICRO_BATCH_TOKENS} tokens and not single sequences, priced apart (below), full "
             "recompute's second forward being "
             f"priced as one more log-prob pass: the full-recompute trials without the CPU optimizer left "
             f"{recompute:.2f} s above update_pass_s, `recompute_residual`; the log-prob pass's with "
             f"{LOGPROB_MICRO_BATCH_COST} a micro-batch, `fit_logprob_micro_batch_cost`: the least-squares slope of "
             f"what each of the {len(per_micro_batch)} trials' pass leaves on its micro-batch count, "
             f"{costs[LOGPROB_MICRO_BATCH_COST]:.3f} s, "
             + ", ".join(f"{n:g} micro-batches {statistics.median(v):+.2f} s ({len(v)})"
                         for n, v in sorted(by_count(per_micro_batch).items()))
             + " before it is priced: the median left at each count, trials in brackets), and so are "
             f"{MICRO_BATCH_COST} (`fit_micro_batch_cost`: what each update micro-batch of one sequence costs, the "
             "median over the trials without dynamic batching at ppo_micro_batch_size_per_gpu=1 of what their update "
             "leaves above update_pass_s per micro-batch: "
             + (", ".join(f"{c.source} {r:.3f} s" for c, r in one) or "no such trial") + "), "
             + " and ".join(SMALL_COSTS.values()) + " (`fit_small_micro_batch_costs`: the host's work a layer of "
             f"an update micro-batch under {SMALL_MICRO_BATCH_TOKENS} tokens of more than one sequence, fixed "
             "micro-batches and those of a dynamic token budget apart, a micro-batch paying what its GPU work does "
             "not hide: each the median over its trials of what their update leaves above update_pass_s per "
             "micro-batch plus the micro-batch's GPU work, per layer of a pipeline stage; left a micro-batch / its "
             "GPU work: "
             + (", ".join(f"{c.source} ({c.small_kind}) {r:.3f} / {c.update_micro_batch_gpu_s:.3f} s"
                          for c, r in small) or "no such trial")
             + "; " + ", ".join(f"{k} {1e3 * v:.2f} ms" for k, v in host_per_layer(small).items()) + "), "
             f"{LOGIT_COST} (`fit_logit_cost`: what a logit materialised without verl's fused kernels costs in "
             "each log-prob pass (the update pays none), the median, at least zero, over the trials without them "
             "that have twins with them on their lease (one host) of what their old_log_prob (step 3) left above "
             "their twins', per logit: "
             + (", ".join(f"{c.source} {r:.0f} ps" for c, _, r in logit_pair) or "no such pair")
             + "; against every host's trials with them of the same size, GPU type and attention backend instead "
             "(`logit_costs`, not fitted on: a host's speed is in it): "
             + (", ".join(f"{c.source} {r:.0f} ps" for c, r in logit) or "no such trial") + "; the "
             f"pass costs are fitted on what is left once it is priced), {CHECKPOINT_COST} (`fit_checkpoint_cost`: "
             "what selective recompute's checkpoint costs a layer and update micro-batch beyond its recomputed "
             "FLOPs, the median over the pairs of trials of one lease and size that differ only in it of what the "
             "pair's update (steps 2 on) differs by beyond the model's difference, per checkpointed layer: "
             + (", ".join(f"{a.source} / {b.source} {1e3 * r:.2f} ms" for a, b, r in pairs)
                or "no such pair") + ") "
             "and the host's overhead a decode step with CUDA graphs, per GPU type, a step taking the longer of "
             "it and the GPU's replay (`fit_decode_overhead`: the median decode step, by the measured gen, of the "
             "trials whose step outlasted their GPU's predicted work; overhead_<gpu>_ms). Held out: each size "
             "predicted with them refitted on the other sizes. One more "
             "constant was read off these trials and is not refitted here: reshard_local_gbps (the weight sync's "
             "rise from 1 to 6 GB of weights). Everything else comes from elsewhere (the verl 0.4-era tables, the CPU "
             "AdamW rate measured on a lease's host). Targets: each phase's median |error| <= "
             f"{PHASE_TARGET:.0%}, the step's <= {STEP_TARGET:.0%}, Spearman >= {SPEARMAN_TARGET} where a size has "
             "3 or more ok trials.", "",
             "| size | trials | refit without it | " + " | ".join(PHASES) + " | step | Spearman | target |",
             "|---" * (6 + len(PHASES)) + "|"]

    def row(name: str, glob: Fit, out: Fit, refit: str | None) -> str:
        """One size's cells; `refit` None: a table without the refit column."""
        cells = [f"{100 * glob.phases[p]:.0f}% / {100 * out.phases[p]:.0f}%" if p in glob.phases else "-"
                 for p in PHASES]
        step = f"{100 * glob.step:.0f}% / {100 * out.step:.0f}%" if glob.step is not None else "-"
        if name == "**all**":  # all sizes: one ordering over every trial
            rho = f"{out.rho:.2f}" if out.rho is not None else "n/a"
            ordered = out.rho is None or out.rho >= SPEARMAN_TARGET
        else:
            rho = ", ".join(f"{g} {r:.2f} ({n})" if r is not None else f"{g} n/a ({n})"
                            for g, (n, r) in out.rho_per_gpu.items()) or "n/a"
            ordered = out.ordered
        met = (all(v <= PHASE_TARGET for v in out.phases.values()) and out.step is not None
               and out.step <= STEP_TARGET and ordered)
        refit_cell = "" if refit is None else f"{refit} | "
        return (f"| {name} | {glob.trials} | {refit_cell}" + " | ".join(cells) + f" | {step} | {rho} | "
                + ("met" if met else "**not met**") + " |")

    for size in sizes:
        refit = ", ".join(f"{k}={v:.4f}" if k == CHECKPOINT_COST or k in SMALL_COSTS.values() else f"{k}={v:.2f}"
                          for k, v in fits[size].items())
        lines.append(row(size, errors(c for c in all_cases if c.size == size),
                         errors(c for c in held if c.size == size), refit))
    lines.append(row("**all**", errors(all_cases), errors(held), ""))
    lines += ["", "Cells: median |error| with the global constants / with the size held out. Spearman: of the step "
              "times, held out, within a size's trials on one GPU type (a study's landscape: the H100 and H200 "
              "nodes differ in their decode overhead; n/a below 3 ok trials, the trials in brackets); over all "
              "sizes, of every trial.", "",
              "The same, each trial measured by its steady steps (the median of each phase over steps 2 to the last, "
              "the extra steps that measure the noise included; step 1 carries start-up work) rather than step 3 "
              "alone: what is left is the model's error, not one step's noise. The targets are judged above, on "
              "step 3 as the study measures it.", "",
              "| size | trials | " + " | ".join(PHASES) + " | step | Spearman | the targets' bounds |",
              "|---" * (5 + len(PHASES)) + "|"]
    steady_held = [steady(c) for c in held]
    for size in sizes:
        lines.append(row(size, errors(steady(c) for c in all_cases if c.size == size),
                         errors(c for c in steady_held if c.size == size), None))
    lines.append(row("**all**", errors(steady(c) for c in all_cases), errors(steady_held), None))
    lines.append("")
    return lines + fixed_costs(zeroed) + cpu_adam_table(zeroed) + ordering(held) + levels(held) + probe_levels(held)


def cpu_adam_table(zeroed: list[Case]) -> list[str]:
    """The CPU optimizer's pairs on one host (`cpu_adam_pairs`), each beside its host's microbenchmark where the lease
    measured one: whether a host's own rate would price its CPU optimizer better than the pairs' median."""
    lines = ["## The CPU optimizer's pairs on one host", "",
             "Each pair: one study's trials whose parameters differ only in Megatron's CPU optimizer; the rate its "
             "update's difference says (`cpu_adam_pairs`; the model takes their median, `fit_cpu_adam_rate`), beside "
             "the rate of torch's AdamW alone on one thread on that lease's host (`benchmarks.cpu_adam_rate`, where "
             "the lease ran it) and the pair's share of it: under 1, the host's microbenchmark alone would price the "
             "CPU step fast; and Megatron's hybrid optimizer's own step on that host (`--hybrid`, where the lease ran "
             "it), which the pair's rate should match if the hybrid optimizer's step is what the CPU optimizer costs.",
             "", "| with / without | size | update s, steps 2 on (with / without) | parameters a second, the pair | "
             "the host's microbenchmark | the pair / the host | the host's hybrid optimizer |",
             "|---|---|---|---|---|---|---|"]

    def rate_or_dash(r: float | None) -> str:
        return f"{r:.2e}" if r else "-"

    for c, other, rate in cpu_adam_pairs(zeroed):
        host = host_cpu_adam_rate(c)
        lines.append(f"| {c.source} / #{other.source.rsplit('#', 1)[1]} | {c.size} | "
                     f"{c.steady_phases['update_actor']:.1f} / {other.steady_phases['update_actor']:.1f} | "
                     f"{rate:.2e} | {rate_or_dash(host)} | {f'{rate / host:.2f}' if host else '-'} | "
                     f"{rate_or_dash(host_cpu_adam_rate(c, hybrid=True))} |")
    lines.append("")
    return lines


def fixed_costs(zeroed: list[Case]) -> list[str]:
    """`pass_leftovers` as a table of medians. The model charges each size the same; this table says where a size pays
    less or more (not its GEMMs' rate, which on the H200 is one for every size: benchmarks/gemm_shapes.py)."""
    lines = ["## What a pass leaves above its FLOPs, by size", "",
             "Each trial predicted with the fixed costs zeroed; the median of measured less predicted (less its "
             "unfused logits and selective recompute's checkpoints; a log-prob pass less its micro-batches at "
             "logprob_micro_batch_s), seconds, the trials in brackets. The model "
             "charges every size one log-prob pass (logprob_pass_s) in old_log_prob, one update_pass_s in the update "
             "and one more log-prob pass for full recompute's second forward: the last column, over the pairs of "
             "trials on one host that differ only in full recompute (`recompute_pairs`: the median of steps 2 on; "
             "hosts differ by more than it), is what that second forward leaves.", "",
             "| size | GPU | old_log_prob | update, no full recompute | update, full recompute | full less the same "
             "without, one host |",
             "|---|---|---|---|---|---|"]

    def med(vs: list[float]) -> str:
        return f"{statistics.median(vs):.2f} ({len(vs)})" if vs else "-"

    for (size, gpu), v in pass_leftovers(zeroed).items():
        lines.append(f"| {size} | {gpu} | " + " | ".join(med(v[k]) for k in (
            "old_log_prob", "update", "update_full", "full_less_others")) + " |")
    lines.append("")
    return lines


def report(all_cases: list[Case], zeroed: list[Case] | None = None, node_kills: list[str] = ()) -> str:
    """`node_kills`: the trials left out as killed for a node that lanes shared (real_cases.node_kills)."""
    lines = ["# The base model against real verl 0.9.1 trials (uncorrected, at the measured lengths)", "",
             "Written by `python -m benchmarks.calibration` from the study databases under "
             "`tests/data/real_verl_gpu/`. Predicted = the model before any correction, at the prompt and response "
             "lengths the measured step logged, with the node's job defaults (the doctor's attention backend). "
             "Times in seconds (verl's `timing_s/*` at the measured step); memory: the predicted peak vs NVML's "
             "(every process on the GPU).", ""]
    if zeroed is not None:
        lines += summary(all_cases, zeroed)
    for model in sorted({c.model for c in all_cases}):
        cs = [c for c in all_cases if c.model == model]
        lines += [f"## {model}", "", "| trial | configuration | status | " + " | ".join(
            f"{p} pred/meas" for p in PHASES) + " | step pred/meas | peak GiB pred/NVML | verdict |",
            "|---" * (5 + len(PHASES)) + "|"]
        for c in cs:
            ph = " | ".join(
                f"{c.predicted_phases.get(p, float('nan')):.1f} / {c.measured_phases[p]:.1f}"
                if p in c.measured_phases else "-" for p in PHASES)
            step = (f"{c.predicted_step_s:.1f} / {c.measured_step_s:.1f}"
                    if c.measured_step_s and c.predicted_step_s else "-")
            peak = (f"{c.predicted_peak_gib:.1f} / {c.measured_peak_gib:.1f}"
                    if c.predicted_peak_gib is not None and c.measured_peak_gib is not None else "-")
            right = (c.status == "ok") == c.predicted_fits
            verdict = ("right" if right else "**wrong**") + (f" (binding: {c.binding})" if c.binding else "")
            status = c.status + (" (cut)" if c.cut else "")
            lines.append(f"| {c.source} | {c.label} | {status} | {ph} | {step} | {peak} | {verdict} |")
        ok = [c for c in cs if c.status == "ok" and c.measured_step_s and c.predicted_step_s]
        lines.append("")
        for p in PHASES:
            errs = [abs(c.predicted_phases[p] / c.measured_phases[p] - 1) for c in ok
                    if c.measured_phases.get(p) and c.predicted_phases.get(p)]
            ratio = [c.measured_phases[p] / c.predicted_phases[p] for c in ok
                     if c.measured_phases.get(p) and c.predicted_phases.get(p)]
            if errs:
                lines.append(f"- {p}: median |error| {100 * statistics.median(errs):.0f}%, measured/predicted "
                             f"median x{statistics.median(ratio):.2f} ({len(errs)} trials)")
        if ok:
            errs = [abs(c.predicted_step_s / c.measured_step_s - 1) for c in ok]
            rho = spearman([c.predicted_step_s for c in ok], [c.measured_step_s for c in ok])
            lines.append(f"- step: median |error| {100 * statistics.median(errs):.0f}%; Spearman (step time) "
                         + (f"{rho:.2f}" if rho is not None else "n/a (fewer than 3 trials)"))
        wrong = [c for c in cs if (c.status == "ok") != c.predicted_fits]
        missed = [c for c in wrong if c.status == "oom"]
        lines.append(f"- memory verdicts: {len(cs) - len(wrong)} of {len(cs)} right; OOMs predicted to fit: "
                     f"{len(missed)}")
        peaks = [abs(c.predicted_peak_gib / c.measured_peak_gib - 1) for c in cs if c.status == "ok"
                 and c.predicted_peak_gib and c.measured_peak_gib]
        if peaks:
            lines.append(f"- peak vs NVML: median |error| {100 * statistics.median(peaks):.0f}%, "
                         f"largest {100 * max(peaks):.0f}%")
        lines += [f"- cut: {c.source}, {c.cut}; measured like the others" for c in cs if c.cut]
        lines.append("")
    if node_kills:
        lines += ["## Not judged: killed for a node that lanes shared", "",
                  "Ray's memory monitor kills for the whole node; on a node whose GPUs ran one study each, which "
                  "lane's workers it picks says nothing of one trial's need (`real_studies.killed_for_the_node`). "
                  "These have no memory verdict and no outcome of their configuration:", "",
                  *(f"- {k}" for k in node_kills), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    def text(data: Path) -> str:
        dbs = list(data.glob("*/*.db"))
        return report(cases(dbs), cases(dbs, ZEROED), node_kills(dbs)) + "\n"

    real_studies.write_report(__doc__, HERE / "results" / "calibration.md", text, argv)



if __name__ == "__main__":
    main()
