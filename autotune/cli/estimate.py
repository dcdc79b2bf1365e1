"""One configuration looked at closely: `autotune estimate` (the model's memory and throughput estimate) and
`autotune probe` (its training step measured with Megatron-core on the local GPUs); the configuration is the job's
own, changed by `--set NAME=VALUE`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path
from typing import Any

from rich.table import Table

from autotune import units
from autotune.candidate import Candidate
from autotune.cli.options import CLIError, make_setup, out, parse_params
from autotune.estimate import evaluate
from autotune.estimate.throughput import error_band, step_time_label


def _study_setup(args: argparse.Namespace) -> Any:
    """--study NAME: that study's correction of the model applied, on the study's own setup (its job and the lengths
    its trials measured) unless --model (and the other setup options) describe another one."""
    from autotune.search.learning import saved_correction, study_setup
    from autotune.store.store import Store, safe_url

    store = Store(args.storage)
    row = store.get_study(args.study)
    if row is None:
        names = ", ".join(s.name for s in store.list_studies()) or "none"
        raise CLIError(f"no study {args.study!r} in {safe_url(args.storage)}; studies there: {names}")
    setup = make_setup(args)[0] if args.model else study_setup(store, row)  # its runs' lengths, not typical ones
    corr = saved_correction(store, args.study)
    return dataclasses.replace(setup, correction=corr), corr


INVALID = 2  # exit code of a configuration that breaks a static rule: bad input, like any other


def cmd_estimate(args: argparse.Namespace) -> int:
    if not args.model and not getattr(args, "study", None):
        raise CLIError("--model is required (or --study NAME: a recorded study's model, cluster and job, with what it "
                       "learned of the model's errors)")
    if getattr(args, "study", None):
        setup, corr = _study_setup(args)
    else:
        setup, corr = make_setup(args)[0], None
    cand = setup.job.with_settings(parse_params(args.set))
    ev = setup.evaluate(cand)
    record = setup.memory_record(ev)
    doc: dict[str, Any] = {
        "model": setup.model.name, "cluster": setup.cluster.describe(), "job": setup.job.source,
        "layout": cand.layout(), "params": cand.applied_params(),
        "fits": ev.feasible,  # at the lengths of the measured step
        "worst_case_fits": ev.worst_fits,  # at the longest sequences the job allows
        "verdict": record["verdict"] if record else "breaks a constraint: " + ev.prune_reason(),
        "moment_peaks_gib": record["moment_peaks_gib"] if record else None,
        "worst_case_moment_peaks_gib": record["worst_case"]["moment_peaks_gib"] if record else None,
        "lengths": {"at_step": record["lengths"], "worst_case": record["worst_case"]["lengths"]} if record else None,
        "micro_batch_bound": record["micro_batch_bound"] if record else None,
        "violations": [dataclasses.asdict(v) for v in ev.violations],
        "memory": record,
        "throughput": ev.throughput.as_dict() | error_band(ev.throughput.step_time, setup.model.is_moe)
        if ev.throughput else None,
        "estimate": "model estimate, not a measurement",
    }
    if corr is not None:
        doc["model_correction"] = {"study": args.study, **corr.as_dict()}
    if args.json:
        print(json.dumps(doc, indent=2))
        return INVALID if ev.violations else 0
    out.print(f"{setup.model.name} on {setup.cluster.describe()}, job {setup.job.source}: {cand.layout()}")
    if corr is not None:
        out.print(f"with study {args.study}'s correction: {corr.summary()}", markup=False)
    if ev.violations:
        for v in ev.violations:
            out.print(f"[red]breaks {v.rule}:[/] {v.message}")
        out.print("not a configuration verl runs, so no memory verdict: change what the rule names with --set "
                  "NAME=VALUE", markup=False)
        return INVALID
    if ev.memory:
        mem = ev.memory
        table = Table(title="predicted per-GPU memory (GiB)")
        table.add_column("term")
        for m in mem.moments:
            table.add_column(m.name, justify="right")
        terms = list(dict.fromkeys(k for m in mem.moments for k, _ in m.terms))
        for term in terms:
            table.add_row(term, *(units.gib(dict(m.terms)[term] / 2**30) if term in dict(m.terms) else ""
                                  for m in mem.moments))
        table.add_row("[bold]peak", *(f"[bold]{units.gib(m.peak / 2**30)}" for m in mem.moments))
        table.add_row("capacity", *(units.gib(m.capacity / 2**30) for m in mem.moments))
        table.add_row("fits", *("yes" if m.fits else "[red]NO" for m in mem.moments))
        out.print(table)
        if setup.objective == "step":
            out.print(f"vLLM KV cache: {mem.kv_cache_bytes / 2**30:.2f} GiB per GPU; one max_model_len request "
                      f"needs {mem.kv_needed_bytes / 2**30:.2f} GiB")
        else:
            out.print("no vLLM: this study measures the training phase alone (Megatron-core), no rollout",
                      markup=False)
        for r in mem.reasons():
            out.print(f"[red]OOM predicted:[/] {r}")
        if mem.host is not None:
            terms = ", ".join(f"{k} {units.gib(v / 2**30)}" for k, v in mem.host.terms)
            limit = (f" of {units.gib(mem.host.capacity / 2**30)} GiB Ray allows" if mem.host.capacity is not None
                     else " (the node's memory unknown: --host-memory GIB checks it)")
            out.print(f"host memory a node: {units.gib(mem.host.need / 2**30)} GiB{limit} ({terms})", markup=False)
        if record:
            worst = record["worst_case"]["moment_peaks_gib"]
            out.print("worst case (every sequence at the job's maximum), peak GiB: "
                      + ", ".join(f"{k} {units.gib(v)}" for k, v in worst.items()))
            for src in (mem.lengths.sources if mem.lengths else ()):
                out.print(f"lengths: {src}")
            out.print(f"micro-batch: {mem.bound}")
            colour = "green" if ev.worst_fits else ("yellow" if ev.feasible else "red")
            out.print(f"[{colour}]memory: {record['verdict']}[/]")
    if ev.throughput:
        t = ev.throughput
        phases = ", ".join(f"{k} {v:.1f}s" for k, v in t.phases)
        step = step_time_label(t.step_time, setup.model.is_moe)
        out.print(f"predicted {step} ({phases}); {units.throughput(t.throughput)} tokens/s/GPU (estimate)")
        what = "of the training phase alone" if t.micro_batch_tokens else "at mean lengths"
        out.print(f"throughput {what}: {t.lengths_words()}", markup=False)
    out.print(f"fits: {'yes' if ev.feasible else 'no'} (at step {setup.measure_step}); at the worst case the job "
              f"allows: {'yes' if ev.worst_fits else 'no'}")
    return 0


def cmd_probe(args: argparse.Namespace) -> int:
    from autotune.runners.base import TrialSpec
    from autotune.runners.mcore import McoreRunner, ProbeError

    setup, _ = make_setup(args)
    cand = setup.job.with_settings(parse_params(args.set))
    ev = evaluate(setup.model, setup.cluster, setup.job, cand, "train")
    try:
        if getattr(args, "profile", False):
            from autotune.profile.runs import ProfilingMcoreRunner

            runner = ProfilingMcoreRunner(steps=args.steps)
        else:
            runner = McoreRunner(steps=args.steps)
    except ProbeError as e:
        raise CLIError(str(e)) from None
    stamp = time.strftime("%Y%m%d-%H%M%S")
    spec = TrialSpec("probe", 0, setup.model, setup.cluster, setup.job, cand, ev.memory, ev.throughput,
                     workdir=Path(args.workdir) / stamp) if ev.memory and ev.throughput else None
    if spec is None:
        raise CLIError("the candidate breaks a static constraint: " + ev.prune_reason())
    result = runner.run(spec)
    doc = {
        "layout": cand.layout(), "status": result.status.value, "reason": result.reason,
        "throughput_train": result.throughput, "peak_memory_gib": result.peak_memory_gib,
        "torch_peak_allocated_gib": result.framework_memory_gib,
        "predicted_update_peak_gib": round(ev.memory.moment("update").peak / 2**30, 3),
        "predicted_throughput_train": round(ev.throughput.throughput, 1),
        "log": result.log_path, "probe": result.extra.get("probe"),
    }
    prof = _probe_profile(args, setup, cand, spec, result)
    if prof is not None:
        doc["profile"] = prof
    if args.json:
        print(json.dumps(doc, indent=2, default=str))
    else:
        out.print(f"{cand.layout()}: {result.status.value} {result.reason}")
        pred = doc["predicted_throughput_train"]
        out.print(f"  training tokens/s/GPU: measured {result.throughput}, predicted {pred}")
        out.print(f"  peak GiB: measured {result.peak_memory_gib} (NVML), {result.framework_memory_gib} (torch), "
                  f"predicted {doc['predicted_update_peak_gib']}")
        if prof is not None:
            from autotune.cli.profile import _print

            _print({**prof, "layout": cand.layout()})
    return 0 if result.status.value == "ok" else 1


def _probe_profile(args: argparse.Namespace, setup: Any, cand: Candidate, spec: Any, result: Any) -> dict | None:
    """With --profile: the analysis of the probe's profiled step, and advice for the training phase."""
    if not getattr(args, "profile", False):
        return None
    from autotune.profile.runs import analyse_dir, trace_dir

    probe = result.extra.get("probe") or {}
    micro = probe.get("num_microbatches")
    train = dataclasses.replace(setup, objective="train")
    return analyse_dir(trace_dir(spec.workdir, 1), train, cand, int(micro) if micro else None, result).as_dict()
