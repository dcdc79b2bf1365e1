"""The `autotune` command: run, status, best, export, estimate, models, spaces, dashboard."""

from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from autotune import __version__, verl
from autotune.candidate import Candidate
from autotune.cluster import GPU_TYPES, ClusterError, make_cluster
from autotune.estimate import evaluate
from autotune.estimate.lengths import at_step, prompt_lengths_from_data
from autotune.estimate.throughput import error_band, step_time_label
from autotune.executors import EXECUTORS, make_executor, placement_text
from autotune.export import FORMATS, ExportInfo, export_text
from autotune.job import Job, JobError
from autotune.labels import Labeller, study_reference
from autotune.launch_script import is_launch_script, read_script
from autotune.live import RunProgress, progress_view
from autotune.model import CATALOG, UnknownModelError, get_model
from autotune.report import StudyReport, report_lines, study_report
from autotune.runners import BACKENDS, RunnerUnavailable, auto_backend, make_runner
from autotune.runners.base import RunnerFatal
from autotune.runners.confirm import confirm_top
from autotune.runners.verl_preflight import unknown_keys
from autotune.setup import Setup, StudyMismatchError, setup_from_row
from autotune.space import SpaceError, builtin_spaces, default_space_name, load_space, value_error
from autotune.store import Store, StoreError, TrialRow
from autotune.study import Tuner, open_storage
from autotune.tables import print_table

DEFAULT_STORAGE = "sqlite:///trials/autotune.db"
USER_ERRORS = (UnknownModelError, JobError, SpaceError, StoreError, StudyMismatchError, ClusterError,
               RunnerUnavailable, RunnerFatal, ValueError)

_WIDTH = None if sys.stdout.isatty() else 200  # pipes and files get whole rows, not 80 columns
out = Console(highlight=False, soft_wrap=True, width=_WIDTH)
err = Console(stderr=True, highlight=False, soft_wrap=True, width=_WIDTH)


class CLIError(ValueError):
    pass


def _setup_args(p: argparse.ArgumentParser, model_required: bool = True) -> None:
    p.add_argument("--model", required=model_required,
                   help="catalog name (see `autotune models`) or a Hugging Face model dir / config.json")
    p.add_argument("--gpus", type=int, help="GPUs per node (default: the local GPUs, else 8)")
    p.add_argument("--nodes", type=int, help="number of nodes (default 1)")
    p.add_argument("--gpu-type", help=f"one of {', '.join(GPU_TYPES)} (default: detected, else h100)")
    p.add_argument("--job", help="YAML mapping of verl override keys to values, or your verl launch script (bash "
                   "running verl.trainer.main_ppo with overrides) (default: a typical GRPO job)")
    p.add_argument("--space", help="built-in space name (dense, moe) or a YAML file (default: by model type)")
    p.add_argument("--measure-step", type=int, default=3, help="the step whose throughput is the objective")
    p.add_argument("--response-length", type=float, metavar="TOKENS",
                   help="expected mean response length at the measured step; the step's memory verdict uses it "
                   "(measured lengths of earlier trials take over; default: the job's maximum)")


def _storage_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--storage", default=DEFAULT_STORAGE, help=f"SQLAlchemy URL (default {DEFAULT_STORAGE})")
    p.add_argument("--study", help="study name (default: derived from model, cluster and job)")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="autotune", description="Find the fastest verl Megatron GRPO configuration.")
    ap.add_argument("--version", action="version", version=f"autotune {__version__}")
    sub = ap.add_subparsers(dest="command", required=True)

    p = sub.add_parser("run", help="run (or resume) a tuning study")
    _setup_args(p, model_required=False)
    _storage_args(p)
    p.add_argument("--backend", choices=["auto", *BACKENDS], default="auto",
                   help="auto: verl where GPUs and verl are present, else simulate")
    p.add_argument("--table", help="with --backend replay: CSV of measured configurations; it gives the model, "
                   "GPUs, job and search space (format: benchmarks/README.md)")
    p.add_argument("--probe", action="store_true",
                   help="probe each candidate's training step with Megatron-core on the local GPUs first; a probe "
                   "OOM prunes it before the full trial (needs GPUs and megatron-core)")
    p.add_argument("--n-trials", type=int, default=20, help="launched trials the study should hold (default 20)")
    p.add_argument("--timeout", type=float, help="stop launching after this many seconds")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--model-seeds", type=int, default=4, help="best candidates by the model to try first")
    p.add_argument("--workdir", default="trials", help="per-trial folders go under WORKDIR/<study>/")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    g = p.add_argument_group("executor (where trials run)")
    g.add_argument("--executor", choices=EXECUTORS, default="local",
                   help="local: one trial at a time on this node (default); ray: up to --parallel trials at once on "
                        "a Ray cluster, each holding its own nodes x GPUs (docs/executors.md)")
    g.add_argument("--parallel", type=int, default=1, help="with --executor ray: trials at once (default 1)")
    g.add_argument("--ray-address", help="with --executor ray: the cluster's head, HOST:6379 (default: the cluster "
                                         "this host joined with `ray start`)")
    g = p.add_argument_group("verl backend")
    g.add_argument("--trial-timeout", type=float, help="seconds a trial may run in all (default 3600)")
    g.add_argument("--stall-timeout", type=float, help="seconds without a new training step (default 1200)")
    g.add_argument("--measure-steps", help="measured window FIRST-LAST, e.g. 3-5: the objective is its mean")
    g.add_argument("--prune-slower-than", type=float, metavar="FRACTION",
                   help="stop a trial whose early steps run below FRACTION of the best trial's (default: off)")
    g.add_argument("--prune-after", type=int, default=5, help="completed trials before pruning starts (default 5)")
    g.add_argument("--confirm", type=int, default=2, help="re-run the K best for more steps before declaring "
                   "the best (default 2; 0: off; never for simulated results)")
    g.add_argument("--confirm-steps", type=int, default=6, help="steps of a confirmation run (default 6)")

    p = sub.add_parser("status", help="table of a study's trials")
    _storage_args(p)
    p.add_argument("--all", action="store_true", help="include trials pruned before launch")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("best", help="the best trial of a study")
    _storage_args(p)
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("export", help="write the best (or a chosen) trial as a verl job")
    _storage_args(p)
    p.add_argument("--format", choices=FORMATS, default="sh")
    p.add_argument("--trial", type=int, help="trial number (default: the best)")
    p.add_argument("-o", "--output", help="file to write (default: standard output)")
    p.add_argument("--like", metavar="SCRIPT", help="with --format sh: your verl launch script, written back with "
                   "only the tuned keys changed")

    p = sub.add_parser("estimate", help="memory and throughput estimate of the job's own configuration")
    _setup_args(p)
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="change a parameter (search-space names, e.g. tp=4, use_dynamic_bsz=true)")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("probe", help="measure one candidate's training step with Megatron-core on the local GPUs")
    _setup_args(p)
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="change a parameter of the job's configuration (search-space names)")
    p.add_argument("--steps", type=int, default=3, help="timed training steps (after one warm-up)")
    p.add_argument("--workdir", default="trials/probes", help="where the probe's spec, result and log go")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("models", help="list the model catalog")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("spaces", help="list the built-in search spaces")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("dashboard", help="web page over the study database (needs pip install -e '.[dashboard]')")
    p.add_argument("--storage", default=DEFAULT_STORAGE, help=f"SQLAlchemy URL (default {DEFAULT_STORAGE})")
    p.add_argument("--port", type=int, default=8080, help="port (default 8080)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    return ap


def make_setup(args: argparse.Namespace) -> tuple[Setup, str]:
    if not args.model:
        raise CLIError("--model is required (or --backend replay --table FILE.csv, whose table names the model)")
    model = get_model(args.model)
    cluster = make_cluster(args.gpus, args.nodes, args.gpu_type)
    job = Job.from_file(args.job) if args.job else Job.default()
    unknown = unknown_keys(job.mapping) if args.job else []
    if unknown:
        more = f" (and {len(unknown) - 1} more unknown key(s))" if len(unknown) > 1 else ""
        raise CLIError(f"{args.job}: {unknown[0]}{more}")
    space_ref = getattr(args, "space", None) or default_space_name(model.is_moe)
    space = load_space(space_ref)
    if args.measure_step < 1:
        raise CLIError("--measure-step must be at least 1")
    if args.response_length is not None:
        at_step(job, response_length=args.response_length)  # a clear error for an impossible estimate
    return Setup(model, cluster, job, space, _window(args)[1], response_length=args.response_length,
                 prompt_lengths=prompt_lengths_from_data(job)), Path(space.source).read_text()


def _terminate(signum: int, frame: Any) -> None:
    """SIGTERM (`kill`, a scheduler's stop) ends a run as Ctrl-C does: the running trial recorded, resumable."""
    raise KeyboardInterrupt("SIGTERM")


def cmd_run(args: argparse.Namespace) -> int:
    if args.n_trials < 1:
        raise CLIError(f"--n-trials {args.n_trials}: it counts launched trials and must be at least 1")
    executor = make_executor(args.executor, args.parallel, args.ray_address)
    try:
        return _run(args, executor)
    finally:
        executor.close()


def _run(args: argparse.Namespace, executor: Any) -> int:
    if args.table or args.backend == "replay":
        setup, space_text, runner = _replay_setup(args)
    else:
        setup, space_text = make_setup(args)
        backend = args.backend if args.backend != "auto" else auto_backend()
        ray_address = getattr(executor, "gcs_address", None)  # verl's driver joins the executor's cluster
        runner = make_runner(backend, **_verl_options(args), ray_address=ray_address) if backend == "verl" \
            else make_runner(backend)
        if args.probe:
            from autotune.runners.probed import ProbedRunner

            runner = ProbedRunner(make_runner("mcore"), runner)
        _print_script_notes(setup)
    say = err if args.json else out  # with --json, standard output is the JSON document alone
    if runner.name == "replay":
        say.print(f"[bold yellow]autotune: backend replay: every result is REPLAYED from {runner.describe()}: "
                  "real measurements looked up, nothing is run now and nothing is simulated.[/]")
    elif runner.simulated:
        why = "no GPU on this machine" if args.backend == "auto" else "--backend simulate"
        say.print(f"[bold yellow]autotune: {why}: using the simulate runner; every result is SIMULATED "
                  "(a model estimate, not a measurement).[/]")
    else:
        say.print(f"autotune: backend {runner.describe()} on {setup.cluster.describe()}")
    tuner = Tuner(setup, runner, args.storage, args.study, seed=args.seed, n_model_seeds=args.model_seeds,
                  space_text=space_text, workdir=Path(args.workdir), prune_slower_than=args.prune_slower_than,
                  prune_after=args.prune_after, measure_from=_window(args)[0], executor=executor)
    if executor.name != "local":
        say.print(f"autotune: executor {executor.describe()}")
    say.print(f"study {tuner.study_name} in {args.storage}: {setup.model.name}, {setup.cluster.describe()}, "
              f"job {setup.job.source}, space {setup.space.name}")
    counts = {"pruned": 0}
    labels = Labeller(tuner.setup.stock)
    with RunProgress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                     console=out, transient=True, disable=args.json) as bar:
        task = bar.add_task("trials", total=args.n_trials, completed=tuner.launched_count())
        _live_line(tuner, bar, labels, args)

        def on_trial(row: TrialRow) -> None:
            bar.live_line = ""
            if row.launched:
                bar.update(task, completed=tuner.launched_count())
                if not args.json:
                    bar.console.print(_trial_line(row, labels(row.params, row.candidate_key)))
            else:
                counts["pruned"] += 1
            bar.update(task, description=f"trials ({counts['pruned']} pruned before launch)")

        try:
            summary = tuner.run(args.n_trials, args.timeout, on_trial=on_trial)
            summary["confirm"] = confirm_top(tuner, args.confirm, args.confirm_steps)
            for c in summary["confirm"].get("runs", []):
                say.print(f"  confirm #{c['trial']}: {c['status']}: {c['reason'][:150]}")
                if c.get("longest_response") is not None:
                    say.print(f"    longest response seen: {c['longest_response']:.0f} tokens")
            if args.confirm and summary["confirm"].get("skipped"):
                say.print(f"confirmation skipped: {summary['confirm']['skipped']}")
        except KeyboardInterrupt:
            err.print("autotune: interrupted; the running trials are recorded as interrupted. "
                      "Re-run the same command to resume the study.")
            runner.close()
            return 130
    runner.close()
    best = tuner.store.best(tuner.study_name)
    summary["pruned_this_run"] = counts["pruned"]
    summary["best"] = _best_dict(best, tuner.study_name) if best else None
    report = _run_report(tuner, best, labels)
    summary["report"] = report.as_dict()
    if summary["best"]:
        summary["best"]["label"] = report.best_label
    if args.json:
        print(json.dumps(summary, indent=2, default=str))
        return 0
    out.print(f"{summary['launched']} trials launched ({summary['stopped']}); "
              f"{counts['pruned']} candidates pruned before launch this run.")
    if best:
        out.print(f"best: trial {best.number}, {_speed(best)} ({report.best_label})")
        if (best.predicted_memory or {}).get("verdict"):
            late = best.predicted_memory.get("worst_case_fits") is False
            out.print(f"{'[yellow]' if late else ''}memory: {best.predicted_memory['verdict']} (model estimate)"
                      f"{'[/]' if late else ''}")
    else:
        out.print("no trial ran to its measured step yet")
    for line in report_lines(report):
        out.print(line, markup=False)
    if best:
        out.print(f"next: autotune export --study {tuner.study_name} --storage {args.storage} --format sh -o job.sh")
    return 0


def _live_line(tuner: Tuner, bar: RunProgress, labels: Labeller, args: argparse.Namespace) -> None:
    """On a terminal (and without --json): a live line with the running trial's phase, step, times and memory."""
    if args.json or not out.is_terminal:
        return

    def label_of(number: int) -> str:
        row = tuner.store.trial(tuner.study_name, number)
        return labels(row.params, row.candidate_key) if row else ""

    tuner.on_progress = progress_view(bar, label_of)


def _run_report(tuner: Tuner, best: TrialRow | None, labels: Labeller) -> StudyReport:
    """What the study is worth (autotune.report): speed-ups over the references, GPU time, prunes by kind."""
    rows = tuner.store.trials(tuner.study_name)
    return study_report(rows, best, tuner.setup.cluster.world_size, labels)


def _replay_setup(args: argparse.Namespace) -> tuple[Setup, str, Any]:
    """--backend replay --table FILE: the table gives model, cluster, job and space; options may not override."""
    if args.backend != "replay":
        raise CLIError("--table is for --backend replay")
    if not args.table:
        raise CLIError("--backend replay needs --table FILE.csv (a table of measured configurations)")
    given = [f"--{k.replace('_', '-')}" for k in ("model", "gpus", "nodes", "gpu_type", "job", "space")
             if getattr(args, k)]
    if given:
        raise CLIError(f"{', '.join(given)}: with --backend replay the table's metadata gives the model, GPUs, job "
                       "and space; drop these options (or edit the table's metadata)")
    runner = make_runner("replay", table=args.table)
    setup = runner.table.setup(args.measure_step if args.measure_step != 3 else None)
    return setup, runner.table.space_text(), runner


def _window(args: argparse.Namespace) -> tuple[int | None, int]:
    """--measure-steps FIRST-LAST (or N) -> (FIRST or None, LAST); else (None, --measure-step)."""
    if not getattr(args, "measure_steps", None):
        return None, args.measure_step
    first, _, last = args.measure_steps.partition("-")
    try:
        lo, hi = int(first), int(last or first)
    except ValueError:
        raise CLIError(f"--measure-steps {args.measure_steps!r}: expected FIRST-LAST, e.g. 3-5") from None
    if not 1 <= lo <= hi:
        raise CLIError(f"--measure-steps {args.measure_steps!r}: need 1 <= FIRST <= LAST")
    return (lo if lo < hi else None), hi


def _verl_options(args: argparse.Namespace) -> dict[str, Any]:
    return {"trial_timeout_s": args.trial_timeout, "stall_timeout_s": args.stall_timeout}


def _print_script_notes(setup: Setup) -> None:
    src = Path(setup.job.source)
    if src.is_file() and is_launch_script(src):
        err.print(read_script(src).report(), markup=False)


def _speed(row: TrialRow) -> str:
    if row.throughput is None:
        return "-"
    how = " [SIMULATED]" if row.simulated else (" replayed" if row.backend == "replay" else " measured")
    return f"{row.throughput:.1f} tokens/s/GPU{how}"


def _layout(row: TrialRow) -> str:
    return Candidate(**row.params).layout()


def _trial_line(row: TrialRow, label: str) -> str:
    why = row.reason[:80] if row.status != "ok" else ""
    return f"  #{row.number:<4} {row.status:<12} {_speed(row):<38} {label}  {why}"


def _open_study(args: argparse.Namespace) -> tuple[Store, str]:
    # Store gives the clear error for an unreachable database (Optuna's storage would take a second more to open)
    store = Store(args.storage)
    names = [s.name for s in store.list_studies()]
    if args.study:
        if args.study not in names:
            raise CLIError(f"no study {args.study!r} in {args.storage}; studies there: {', '.join(names) or 'none'}")
        return store, args.study
    if not names:
        raise CLIError(f"no study in {args.storage}; start one with `autotune run --model ...`")
    if len(names) > 1:
        raise CLIError(f"{args.storage} holds several studies; choose one with --study: {', '.join(names)}")
    return store, names[0]


def _best_dict(row: TrialRow, study: str) -> dict[str, Any]:
    return {
        "study": study,
        "trial": row.number,
        "throughput": row.throughput,
        "simulated": row.simulated,
        "measured": not row.simulated,
        "layout": _layout(row),
        "params": row.params,
        "verl_overrides": row.verl_overrides,
        "predicted_throughput": row.predicted_throughput,
        "predicted_peak_gib": row.predicted_peak_gib,
        "peak_memory_gib": row.peak_memory_gib,
        "memory_verdict": (row.predicted_memory or {}).get("verdict"),
    }


def cmd_status(args: argparse.Namespace) -> int:
    store, name = _open_study(args)
    meta = store.get_study(name)
    shown = store.trial_summaries(name, launched_only=not args.all)
    counts = store.status_counts(name)
    labels = Labeller(study_reference(meta))
    if args.json:
        print(json.dumps({
            "study": name, "backend": meta.backend, "simulated": meta.simulated,
            "counts": counts,
            "trials": [{**{k: getattr(r, k) for k in (
                "number", "status", "reason", "origin", "throughput", "simulated", "predicted_throughput",
                "predicted_peak_gib", "peak_memory_gib", "params")}, "layout": Candidate(**r.params).layout(),
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
        "-" if r.throughput is None else f"{r.throughput:.1f}{' (sim)' if r.simulated else ''}",
        "-" if r.predicted_throughput is None else f"{r.predicted_throughput:.1f}",
        "-" if r.predicted_peak_gib is None else f"{r.predicted_peak_gib:.1f}",
        "-" if r.peak_memory_gib is None else f"{r.peak_memory_gib:.1f}",
        "" if r.status == "ok" else r.reason[:70],
    ) for r in shown]
    print_table(out, f"study {name}: {meta.model_name}, backend {meta.backend}{sim}", columns, cells)
    out.print(", ".join(f"{k}: {v}" for k, v in counts.items()))
    return 0


def cmd_best(args: argparse.Namespace) -> int:
    store, name = _open_study(args)
    best = store.best(name)
    if best is None:
        raise CLIError(f"study {name!r} has no trial that ran to its measured step yet")
    best_label = Labeller(study_reference(store.get_study(name)))(best.params)
    if args.json:
        print(json.dumps({**_best_dict(best, name), "label": best_label}, indent=2, default=str))
        return 0
    out.print(f"study {name}: best trial {best.number}, {_speed(best)}")
    out.print(f"layout: {_layout(best)}")
    out.print(f"label: {best_label}")
    for k, v in best.params.items():
        out.print(f"  {k:34} {v!r:>10}   {', '.join(verl.keys_for(k))}")
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
                          label=Labeller(setup.stock)(row.params))
        text = read_script(args.like).render_like(Candidate(**row.params), header=f"# {info.headline()}\n"
                                                  "# autotune changed only the tuned keys of this script")
    if args.output:
        Path(args.output).write_text(text)
        if args.format in ("sh", "ray"):
            Path(args.output).chmod(0o755)
        err.print(f"wrote {args.output} (trial {row.number}{', SIMULATED' if row.simulated else ''})")
    else:
        sys.stdout.write(text)
    return 0


def _parse_sets(sets: list[str]) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for item in sets:
        if "=" not in item:
            raise CLIError(f"--set {item!r}: expected NAME=VALUE, e.g. --set tp=4")
        name, raw = item.split("=", 1)
        name = name.strip()
        if name not in Candidate.param_names():
            param = verl.param_for_key(name)
            hint = f" (that verl key is the parameter {param!r})" if param else ""
            raise CLIError(f"--set {name}: unknown parameter{hint}; known: {', '.join(Candidate.param_names())}")
        try:
            params[name] = yaml.safe_load(raw) if raw.strip() else None
        except yaml.YAMLError:
            params[name] = raw
        why = value_error(name, params[name])
        if why:
            raise CLIError(f"--set {item}: {why}{_choices_hint(name)}")
    return params


def _choices_hint(name: str) -> str:
    """The values the shipped spaces try for `name`, as an example of what it takes."""
    seen: list[Any] = []
    for path in builtin_spaces().values():
        space = load_space(str(path))
        if name in space.names:
            seen += [c for c in space[name].choices if c not in seen]
    shown = [str(c).lower() if isinstance(c, bool) else str(c) for c in seen]
    return f" (e.g. {', '.join(shown)})" if seen and name not in ("recompute", "recompute_method") else ""


def cmd_estimate(args: argparse.Namespace) -> int:
    setup, _ = make_setup(args)
    cand = Candidate.from_params(_parse_sets(args.set), setup.job.candidate(Candidate()))
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
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    out.print(f"{setup.model.name} on {setup.cluster.describe()}, job {setup.job.source}: {cand.layout()}")
    for v in ev.violations:
        out.print(f"[red]breaks {v.rule}:[/] {v.message}")
    if ev.memory:
        mem = ev.memory
        table = Table(title="predicted per-GPU memory (GiB)")
        table.add_column("term")
        for m in mem.moments:
            table.add_column(m.name, justify="right")
        terms = list(dict.fromkeys(k for m in mem.moments for k, _ in m.terms))
        for term in terms:
            table.add_row(term, *(f"{dict(m.terms)[term] / 2**30:.2f}" if term in dict(m.terms) else ""
                                  for m in mem.moments))
        table.add_row("[bold]peak", *(f"[bold]{m.peak / 2**30:.2f}" for m in mem.moments))
        table.add_row("capacity", *(f"{m.capacity / 2**30:.2f}" for m in mem.moments))
        table.add_row("fits", *("yes" if m.fits else "[red]NO" for m in mem.moments))
        out.print(table)
        out.print(f"vLLM KV cache: {mem.kv_cache_bytes / 2**30:.2f} GiB per GPU; one max_model_len request needs "
                  f"{mem.kv_needed_bytes / 2**30:.2f} GiB")
        for r in mem.reasons():
            out.print(f"[red]OOM predicted:[/] {r}")
        if record:
            worst = record["worst_case"]["moment_peaks_gib"]
            out.print("worst case (every sequence at the job's maximum), peak GiB: "
                      + ", ".join(f"{k} {v:.1f}" for k, v in worst.items()))
            for src in (mem.lengths.sources if mem.lengths else ()):
                out.print(f"lengths: {src}")
            out.print(f"micro-batch: {mem.bound}")
            colour = "green" if ev.worst_fits else ("yellow" if ev.feasible else "red")
            out.print(f"[{colour}]memory: {record['verdict']}[/]")
    if ev.throughput:
        t = ev.throughput
        phases = ", ".join(f"{k} {v:.1f}s" for k, v in t.phases)
        step = step_time_label(t.step_time, setup.model.is_moe)
        out.print(f"predicted {step} ({phases}); {t.throughput:.1f} tokens/s/GPU (estimate)")
    out.print(f"fits: {'yes' if ev.feasible else 'no'} (at step {setup.measure_step}); at the worst case the job "
              f"allows: {'yes' if ev.worst_fits else 'no'}")
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    if args.json:
        print(json.dumps({k: dataclasses.asdict(m) | {"params_b": round(m.total_params() / 1e9, 2)}
                          for k, m in CATALOG.items()}, indent=2))
        return 0
    table = Table(title="model catalog (or pass --model PATH to a Hugging Face config)")
    for col in ("name", "params", "layers", "hidden", "heads/kv", "vocab", "MoE"):
        table.add_column(col)
    for m in CATALOG.values():
        moe = f"{m.num_experts} experts, top-{m.moe_top_k}" if m.is_moe else "-"
        table.add_row(m.name, f"{m.total_params() / 1e9:.2f}B", str(m.num_layers), str(m.hidden_size),
                      f"{m.num_attention_heads}/{m.num_kv_heads}", str(m.vocab_size), moe)
    out.print(table)
    return 0


def cmd_spaces(args: argparse.Namespace) -> int:
    spaces = {name: load_space(str(path)) for name, path in builtin_spaces().items()}
    if args.json:
        print(json.dumps({n: {"source": s.source, "dimensions": s.describe()} for n, s in spaces.items()}, indent=2))
        return 0
    for name, s in spaces.items():
        out.print(f"[bold]{name}[/] ({s.source}): {s.description}")
        for d in s.describe():
            when = f"  when {' and '.join(d['when'])}" if d["when"] else ""
            out.print(f"  {d['name']:34} {d['choices']}{when}")
    return 0


def cmd_dashboard(args: argparse.Namespace) -> int:
    """Imported lazily: the core CLI works without the dashboard's dependencies."""
    from autotune.dashboard import missing_dependencies, serve

    missing = missing_dependencies()
    if missing:
        raise CLIError(f"the dashboard needs {', '.join(missing)}: pip install -e '.[dashboard]'")
    if args.storage.startswith("sqlite:///") and not Path(args.storage.removeprefix("sqlite:///")).expanduser().exists():
        raise CLIError(f"no study database at {args.storage}; start a study with `autotune run --storage "
                       f"{args.storage} ...` or pass the --storage that `autotune run` used")
    open_storage(args.storage)  # a clear error for an unreachable database
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        err.print(f"autotune: the dashboard has no login; anyone who can reach {args.host}:{args.port} can read "
                  "the studies and edit notes.")
    out.print(f"autotune dashboard: http://{'localhost' if args.host in ('127.0.0.1', '::1') else args.host}:"
              f"{args.port}/ over {args.storage} (Ctrl-C to stop)")
    serve(args.storage, args.host, args.port)
    return 0


def cmd_probe(args: argparse.Namespace) -> int:
    from autotune.runners.base import TrialSpec
    from autotune.runners.mcore import McoreRunner, ProbeError

    setup, _ = make_setup(args)
    cand = Candidate.from_params(_parse_sets(args.set), setup.job.candidate(Candidate()))
    ev = evaluate(setup.model, setup.cluster, setup.job, cand, "train")
    try:
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
    if args.json:
        print(json.dumps(doc, indent=2, default=str))
    else:
        out.print(f"{cand.layout()}: {result.status.value} {result.reason}")
        pred = doc["predicted_throughput_train"]
        out.print(f"  training tokens/s/GPU: measured {result.throughput}, predicted {pred}")
        out.print(f"  peak GiB: measured {result.peak_memory_gib} (NVML), {result.framework_memory_gib} (torch), "
                  f"predicted {doc['predicted_update_peak_gib']}")
    return 0 if result.status.value == "ok" else 1


COMMANDS = {
    "run": cmd_run, "status": cmd_status, "best": cmd_best, "export": cmd_export, "estimate": cmd_estimate,
    "models": cmd_models, "spaces": cmd_spaces, "dashboard": cmd_dashboard, "probe": cmd_probe,
}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    prev_term = signal.signal(signal.SIGTERM, _terminate) if args.command == "run" else None
    try:
        return COMMANDS[args.command](args)
    except (CLIError, *USER_ERRORS) as e:
        err.print(f"autotune: error: {e}", markup=False)
        return 2
    except KeyboardInterrupt:
        err.print("autotune: interrupted")
        return 130
    except BrokenPipeError:  # `autotune status | head`: the reader left; nothing more to say
        sys.stderr.close()
        return 0
    finally:
        if prev_term is not None:
            signal.signal(signal.SIGTERM, prev_term)


if __name__ == "__main__":
    sys.exit(main())
