"""Views of a recorded study: `autotune status` (its trials), `best`, `export` (a trial as a verl job) and
`dashboard` (the web page over the study database).
"""

from __future__ import annotations

import argparse
import dataclasses
import errno
import json
import socket
import sys
from pathlib import Path
from typing import Any

from autotune import units, verl
from autotune.candidate import Candidate
from autotune.cli.options import CLIError, err, out, require_database, study_name
from autotune.cli.tables import print_table
from autotune.estimate import MEMORY_MARGIN
from autotune.estimate.safer import SAFE_TOLERANCE
from autotune.executors import placement_text
from autotune.job import Job
from autotune.results import memory_trace, rollout_wait
from autotune.results.export import ExportInfo, export_text, export_warning, missing_keys, tuned_values
from autotune.results.guessed import guessed_predictions
from autotune.results.labels import Labeller, provenance, study_reference
from autotune.results.noise import Noise, hidden_by_a_recompile, hidden_words, leaders_tie, noise_words
from autotune.results.timeline import Timeline
from autotune.search.learning import saved_correction
from autotune.search.setup import setup_from_row
from autotune.store.access import open_storage
from autotune.store.schema import FORCED, TrialRow
from autotune.store.store import Store, safe_url
from autotune.store.tuners import unrecorded
from autotune.verl.launch_script import read_script


def _speed(row: TrialRow) -> str:
    if row.throughput is None:
        return "-"
    how = " [SIMULATED]" if row.simulated else (" replayed" if row.backend == "replay" else " measured")
    return f"{units.throughput(row.throughput)} tokens/s/GPU{how}"


REASON_WIDTH = 90  # characters of a reason in `status` (cut at a word, with an ellipsis; --json has it whole)


def _layout(row: TrialRow) -> str:
    return Candidate(**row.params).layout()


def _open_study(args: argparse.Namespace) -> tuple[Store, str]:
    # Store gives the clear error for an unreachable database (Optuna's storage would take a second more to open)
    require_database(args.storage)
    store = Store(args.storage)
    return store, study_name(store, args.storage, args.study)


def _measured_memory(row: Any) -> str:
    """The GPU's measured peak (NVML), else verl's own (an imported run measured no GPU), marked as such."""
    if row.peak_memory_gib is not None:
        return units.gib(row.peak_memory_gib)
    return "-" if row.framework_memory_gib is None else f"{units.gib(row.framework_memory_gib)} (verl)"


def _at_limit(predicted_gib: float | None, capacity_gib: float) -> bool:
    """Predicted to fit within the memory model's expected error of the GPU's capacity (estimate.MEMORY_MARGIN)."""
    return predicted_gib is not None and capacity_gib * (1 - MEMORY_MARGIN) < predicted_gib <= capacity_gib


def _capacity_gib(meta: Any) -> float:
    return float((meta.cluster or {}).get("gpu", {}).get("memory_gib") or 0.0)


def _best_dict(row: TrialRow, study: str) -> dict[str, Any]:
    mem = row.predicted_memory or {}
    return {
        "study": study,
        "trial": row.number,
        "throughput": row.throughput,
        "simulated": row.simulated,
        "measured": provenance(row.simulated, row.backend) == "measured",
        "replayed": provenance(row.simulated, row.backend) == "replayed",
        "layout": _layout(row),
        "params": row.params,
        "verl_overrides": row.verl_overrides,
        "predicted_throughput": row.predicted_throughput,
        "predicted_peak_gib": row.predicted_peak_gib,
        "peak_memory_gib": row.peak_memory_gib,
        "memory_verdict": mem.get("verdict"),
        "at_limit": mem.get("at_limit", False),
        "predicted_headroom_gib": mem.get("headroom_gib"),
    }


def cmd_status(args: argparse.Namespace) -> int:
    store, name = _open_study(args)
    meta = store.get_study(name)
    if getattr(args, "trial", None) is not None:
        return _trial_status(store, name, args.trial, args.json)
    shown = store.trial_summaries(name, launched_only=not args.all)
    counts = store.status_counts(name)
    labels = Labeller(study_reference(meta))
    model = saved_correction(store, name)
    cap = _capacity_gib(meta)
    orphans = unrecorded(store, name)  # Optuna trials with no row of ours: shown, never hidden
    guessed, guessed_words = guessed_predictions(store, meta, shown)
    if args.json:
        print(json.dumps({
            "study": name, "backend": meta.backend, "simulated": meta.simulated,
            "counts": counts, "model": model.as_dict(),
            "optuna_without_row": [dataclasses.asdict(u) for u in orphans],
            "trials": [{**{k: getattr(r, k) for k in (
                "number", "status", "reason", "origin", "throughput", "simulated", "predicted_throughput",
                "predicted_peak_gib", "peak_memory_gib", "framework_memory_gib", "params")},
                "layout": Candidate(**r.params).layout(),
                "at_limit": _at_limit(r.predicted_peak_gib, cap), "predicted_lengths_guessed": r.number in guessed,
                "label": labels(r.params, r.candidate_key), "placement": r.placement} for r in shown],
        }, indent=2, default=str))
        return 0
    sim = " [SIMULATED]" if meta.simulated else ""
    placed = any(r.placement for r in shown)  # the placement column only where an executor placed trials
    columns = ("#", "status", "origin", "configuration", *(("placement",) if placed else ()), "tokens/s/GPU",
               "predicted", "mem pred GiB", "mem meas GiB", "reason")
    cells = [(
        str(r.number), r.status, r.origin, labels(r.params, r.candidate_key),
        *((placement_text(r.placement) or "-",) if placed else ()),
        "-" if r.throughput is None else f"{units.throughput(r.throughput)}{' (sim)' if r.simulated else ''}",
        "-" if r.predicted_throughput is None else units.throughput(r.predicted_throughput)
        + (" (lengths guessed)" if r.number in guessed else ""),
        "-" if r.predicted_peak_gib is None else units.gib(r.predicted_peak_gib)
        + (" (at limit)" if _at_limit(r.predicted_peak_gib, cap) else ""),
        _measured_memory(r),
        "" if r.status == "ok" else units.clip(r.reason, REASON_WIDTH),
    ) for r in shown]
    print_table(out, f"study {name}: {meta.model_name}, backend {meta.backend}{sim}", columns, cells)
    out.print(", ".join(f"{k}: {v}" for k, v in counts.items()))
    if orphans:
        out.print(f"{len(orphans)} Optuna trial(s) without an autotune row: "
                  + "; ".join(u.describe() for u in orphans), markup=False)
    out.print(model.summary(), markup=False)
    if any(r.peak_memory_gib is None and r.framework_memory_gib is not None for r in shown):
        out.print(f"(verl): no GPU memory measured (an imported run); verl's own peak, {verl.M_MAX_MEM_ALLOCATED} "
                  "(the training's allocated memory, without vLLM's)", markup=False)
    if guessed:
        out.print(guessed_words, markup=False)
    if any(_at_limit(r.predicted_peak_gib, cap) for r in shown):
        out.print(f"(at limit): predicted within the memory model's expected error ({MEMORY_MARGIN:.0%}) of the "
                  f"{cap:.1f} GiB of a GPU; it may run out of memory", markup=False)
    return 0


def _trial_status(store: Store, name: str, number: int, as_json: bool) -> int:
    """`status --trial N`: one trial's result, its measured noise and its timeline from launch to exit."""
    row = store.trial(name, number)
    if row is None:
        raise CLIError(f"study {name!r}: no trial {number}")
    tl = Timeline.from_extra(row.extra)
    meta = store.get_study(name)
    label = Labeller(study_reference(meta))(row.params, row.candidate_key) if row.params else "-"
    if as_json:
        print(json.dumps({"study": name, "trial": row.number, "status": row.status, "reason": row.reason,
                          "throughput": row.throughput, "simulated": row.simulated, "label": label,
                          "noise": (row.extra or {}).get("noise"), "noise_words": noise_words(row),
                          "timeline": tl.as_dict() if tl else None, "forced": (row.extra or {}).get(FORCED),
                          "memory_moments": [dataclasses.asdict(m) for m in memory_trace.per_moment(row)],
                          "rollout_idle_s": (row.extra or {}).get(rollout_wait.EXTRA)},
                         indent=2, default=str))
        return 0
    say = lambda text: out.print(text, markup=False)  # noqa: E731
    say(f"study {name}: trial {row.number}, {row.status}, {_speed(row)} ({label})")
    say(f"reason: {row.reason or '-'}")
    if forced := (row.extra or {}).get(FORCED):
        say(forced)
    say(f"noise: {noise_words(row)}")
    per_step = (Noise.from_extra(row.extra) or Noise(None, (0, 0), {})).per_step
    if per_step:
        say("  tokens/s/GPU by step: " + ", ".join(f"{s}: {units.throughput(v)}" for s, v in per_step.items()))
    if moments := memory_trace.per_moment_words(row, meta.measure_step):
        say(moments)
    if idle := rollout_wait.words(row.extra, meta.measure_step, rollout_wait.study_poll_s(meta)):
        say(idle)
    if tl is None:
        why = ("nothing ran now: the result is " + provenance(row.simulated, row.backend).upper()
               if row.simulated or row.backend == "replay" else "none recorded (not launched, or launched by an "
               "older autotune)")
        say(f"timeline: {why}")
        return 0
    say("timeline (seconds after launch):")
    for what, at, took in tl.rows():
        say(f"  {units.seconds(at):>8}  {what}" + (f" ({units.seconds(took)} s)" if took is not None else ""))
    say(tl.summary())
    return 0


def passed_over(store: Store, name: str, best: TrialRow) -> TrialRow | None:
    """The faster trial that the best was preferred to (its memory verdict not safe, within the model's error)."""
    top = store.fastest(name)
    return top if top is not None and top.number != best.number else None


def passed_over_words(top: TrialRow, best: TrialRow) -> str:
    verdict = (top.predicted_memory or {}).get("verdict") or "not safe"
    return (f"trial {top.number} is {(top.throughput / best.throughput - 1) * 100:.1f}% faster, but its memory is not "
            f"safe ({verdict}); trial {best.number} is safe and within the model's error of it ({SAFE_TOLERANCE:.0%}),"
            f" so it is the best (export trial {top.number} with --trial {top.number})")


def preferred_over(over: TrialRow | None, best: TrialRow, name: str) -> dict[str, Any] | None:
    """`--json`'s `preferred_over`: the trial passed over for the best, and why (None where none was)."""
    return {**_best_dict(over, name), "why": passed_over_words(over, best)} if over else None


def cmd_best(args: argparse.Namespace) -> int:
    store, name = _open_study(args)
    best = store.best(name)
    if best is None:
        raise CLIError(f"study {name!r} has no trial that ran to its measured step yet")
    best_label = Labeller(study_reference(store.get_study(name)))(best.params)
    ok = store.trials(name, "ok")
    tie = leaders_tie(ok)
    hidden = hidden_by_a_recompile(ok, 1)
    over = passed_over(store, name, best)
    if args.json:
        print(json.dumps({**_best_dict(best, name), "label": best_label, "noise": (best.extra or {}).get("noise"),
                          "tie": tie.as_dict() if tie else None,
                          "hidden_by_a_recompile": [{"trial": r.number, "steady_throughput": round(v, 1)}
                                                    for r, v in hidden],
                          "preferred_over": preferred_over(over, best, name),
                          "model": saved_correction(store, name).as_dict()}, indent=2, default=str))
        return 0
    out.print(f"study {name}: best trial {best.number}, {_speed(best)} ({best_label})", markup=False)
    if over is not None:
        out.print(passed_over_words(over, best), markup=False)
    out.print(f"noise: {noise_words(best)}", markup=False)
    if tie is not None:
        out.print(tie.words(), markup=False)
    for r, steady in hidden:
        out.print(hidden_words(r.number, steady), markup=False)
    verdict = (best.predicted_memory or {}).get("verdict")
    if verdict:
        out.print(f"memory: {verdict} (model estimate)", markup=False)
    out.print(saved_correction(store, name).summary(), markup=False)
    for k, v in best.params.items():
        out.print(f"  {k + ':':35} {units.yaml_value(v):>13}   {', '.join(verl.keys_for(k))}", markup=False)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    store, name = _open_study(args)
    row = store.trial(name, args.trial) if args.trial is not None else store.best(name)
    if row is None:
        raise CLIError(f"study {name!r}: no trial {args.trial}" if args.trial is not None
                       else f"study {name!r} has no trial that ran to its measured step yet")
    text = export_text(store, name, row, args.format)
    if args.like:
        if args.format != "sh":
            raise CLIError("--like SCRIPT writes a bash script: use it with --format sh")
        setup = setup_from_row(store.get_study(name))
        info = ExportInfo(name, row.number, row.throughput, row.simulated, _layout(row), setup.model.name,
                          memory_verdict=(row.predicted_memory or {}).get("verdict", ""),
                          label=Labeller(setup.stock)(row.params),
                          replayed=provenance(row.simulated, row.backend) == "replayed")
        script = read_script(args.like)
        values = tuned_values(Job.from_launch_script(script), Candidate(**row.params))
        text = script.render_like(values, Candidate().verl_overrides(), header=f"# {info.headline()}\n"
                                  "# autotune changed only the tuned keys of this script")
    if args.output:
        Path(args.output).write_text(text)
        if args.format in ("sh", "ray"):
            Path(args.output).chmod(0o755)
        err.print(f"wrote {args.output} (trial {row.number}{', SIMULATED' if row.simulated else ''})")
    else:
        sys.stdout.write(text)
    over = passed_over(store, name, row) if args.trial is None else None
    if over is not None:
        err.print(f"autotune: {passed_over_words(over, row)}", markup=False)
    warning = export_warning(row)
    if warning:
        err.print(f"autotune: WARNING: {warning}", markup=False)
    missing = [] if args.like else missing_keys(setup_from_row(store.get_study(name)).job)
    if missing:
        err.print(f"autotune: fill in {', '.join(missing)} before running it: the study's job does not set "
                  "them (see the export's header)", markup=False)
    return 0


def cmd_dashboard(args: argparse.Namespace) -> int:
    """Imported lazily: the core CLI works without the dashboard's dependencies."""
    from autotune.dashboard import bind, missing_dependencies, serve

    missing = missing_dependencies()
    if missing:
        raise CLIError(f"the dashboard needs {', '.join(missing)}: pip install -e '.[dashboard]'")
    require_database(args.storage)
    open_storage(args.storage)  # a clear error for an unreachable database
    try:
        sock = bind(args.host, args.port)
    except socket.gaierror as e:
        raise CLIError(f"--host {args.host}: {e.strerror or e}; give an address or name of this machine") from None
    except OSError as e:
        why = "in use by another program" if e.errno == errno.EADDRINUSE else (e.strerror or str(e)).lower()
        raise CLIError(f"cannot serve on {args.host}:{args.port}: {why}; choose another port with --port") from None
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        err.print(f"autotune: the dashboard has no login; anyone who can reach {args.host}:{args.port} can read "
                  "the studies and edit notes.")
    out.print(f"autotune dashboard: http://{'localhost' if args.host in ('127.0.0.1', '::1') else args.host}:"
              f"{args.port}/ over {safe_url(args.storage)} (Ctrl-C to stop)")
    try:
        serve(args.storage, args.host, args.port, sock)
    except KeyboardInterrupt:  # Ctrl-C is how a dashboard is meant to end (uvicorn re-raises it once shut down)
        err.print("autotune dashboard: stopped")
    return 0
