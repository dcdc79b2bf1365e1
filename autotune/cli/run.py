"""`autotune run`: a tuning study run (or resumed) from the command line, with its progress bar, live line of
the running trial, confirmation runs and the closing report; `--backend replay --table` takes its setup from
the table.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn

from autotune import units
from autotune.cli.options import CLIError, _window, err, make_setup, out, parse_params
from autotune.cli.results import _best_dict, _speed, passed_over, passed_over_words, preferred_over
from autotune.executors import make_executor
from autotune.results.labels import Labeller
from autotune.results.report import StudyReport, report_lines, study_report
from autotune.runners import auto_backend, make_runner, stopping
from autotune.runners.confirm import confirm_top
from autotune.search.setup import Setup
from autotune.store.schema import TrialRow
from autotune.store.store import safe_url
from autotune.study.live import RunProgress, progress_view
from autotune.study.study import Tuner
from autotune.verl.launch_script import is_launch_script, read_script


def cmd_run(args: argparse.Namespace) -> int:
    started = time.monotonic()  # --deadline counts from here: the setup and the space's ranking take their time too
    if args.n_trials < 1:
        raise CLIError(f"--n-trials {args.n_trials}: it counts launched trials and must be at least 1")
    executor = make_executor(args.executor, args.parallel, args.ray_address)
    if executor.found:  # a cluster the user did not name: say which, with its address
        (err if args.json else out).print(f"autotune: {executor.found}", markup=False)
    try:
        return _run(args, executor, started)
    finally:
        executor.close()


def _split_items(text: str) -> list[str]:
    """'tp=2,recompute_modules=[core_attn,mlp]' -> ['tp=2', 'recompute_modules=[core_attn,mlp]']."""
    items, depth, cur = [], 0, ""
    for ch in text:
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
        else:
            cur += ch
    return [i.strip() for i in [*items, cur] if i.strip()]


def _requested(setup: Setup, runner: Any, text: str) -> tuple[dict[str, Any], str | None]:
    """One --enqueue configuration as full parameters, and a warning where the model predicts it does not fit (it is
    launched as asked: measuring a verdict is what --enqueue is for); a static rule or the runner refusing it is a
    CLIError."""
    cand = setup.job.with_settings(parse_params(_split_items(text), "--enqueue"))
    ev = setup.evaluate(cand)
    why = "; ".join(str(v) for v in ev.violations) or runner.refuse(cand, setup.job)
    if why:
        raise CLIError(f"--enqueue {text}: cannot run: {why}")
    warning = (f"--enqueue {text}: the model predicts it does not fit ({ev.prune_reason()}); launching it as asked, "
               "its trial records that it was forced") if ev.predicted_oom else None
    return cand.params(), warning


def _run(args: argparse.Namespace, executor: Any, started: float) -> int:
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
        if runner.objective != setup.objective:  # e.g. mcore probes measure (and are pruned for) training alone
            setup = dataclasses.replace(setup, objective=runner.objective)
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
    executor.check(setup.cluster.nodes, setup.cluster.gpus_per_node)  # before the study: a cluster too small says so
    checked = [_requested(setup, runner, e) for e in args.enqueue]
    requested = [params for params, _ in checked]
    tuner = Tuner(setup, runner, args.storage, args.study, seed=args.seed, n_model_seeds=args.model_seeds,
                  space_text=space_text, workdir=Path(args.workdir), prune_slower_than=args.prune_slower_than,
                  prune_after=args.prune_after, measure_from=_window(args)[0], executor=executor,
                  requested=requested,

                  warm_start=False if args.no_warm_start else (args.warm_start or True))
    for note in [*tuner.notes, *(warning for _, warning in checked if warning)]:
        say.print(f"autotune: {note}", markup=False)
    if executor.name != "local":
        say.print(f"autotune: executor {executor.describe()}")
    say.print(f"study {tuner.study_name} in {safe_url(args.storage)}: {setup.model.name}, {setup.cluster.describe()}, "
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
            deadline_s = None if args.deadline is None else args.deadline - (time.monotonic() - started)
            summary = tuner.run(args.n_trials, args.timeout, on_trial=on_trial, deadline_s=deadline_s)
            stopping.check()  # a signal after the last safe point of the loop still stops the command
            summary["confirm"] = confirm_top(tuner, args.confirm, args.confirm_steps)
            stopping.check()
            for c in summary["confirm"].get("runs", []):
                say.print(f"  confirm #{c['trial']}: {c['status']}: {units.clip(c['reason'], 150)}")
                if c.get("why"):
                    say.print(f"    confirmed because {c['why']}")
                if c.get("longest_response") is not None:
                    say.print(f"    longest response seen: {c['longest_response']:.0f} tokens")
                if c.get("headroom_gib") is not None:
                    say.print(f"    memory headroom measured: {c['headroom_gib']:.1f} GiB"
                              + (f" (predicted {c['predicted_headroom_gib']:.1f})"
                                 if c.get("predicted_headroom_gib") is not None else ""))
            if args.confirm and summary["confirm"].get("skipped"):
                say.print(f"confirmation skipped: {summary['confirm']['skipped']}")
        except KeyboardInterrupt as e:
            how = " by SIGTERM" if stopping.exit_code(e) == 143 else ""
            err.print(f"autotune: interrupted{how}; the running trials are recorded as interrupted (measured where "
                      "their measured step was in) and every Optuna "
                      "trial this run asked is told. Re-run the same command to resume the study.")
            return stopping.exit_code(e)
        finally:  # also when the study stops on a RunnerFatal: the verl runner's kept Ray head ends with the run
            runner.close()
    best = tuner.store.best(tuner.study_name)
    summary["pruned_this_run"] = counts["pruned"]
    summary["best"] = _best_dict(best, tuner.study_name) if best else None
    report = _run_report(tuner, best, labels)
    summary["report"] = report.as_dict()
    over = passed_over(tuner.store, tuner.study_name, best) if best else None
    if best:
        summary["best"]["label"] = report.best_label
        summary["best"]["preferred_over"] = preferred_over(over, best, tuner.study_name)
    if args.json:
        print(json.dumps(summary, indent=2, default=str))
        return 0
    out.print(f"{_launched_line(summary)}; {counts['pruned']} candidates pruned before launch this run.")
    if best:
        out.print(f"best: trial {best.number}, {_speed(best)} ({report.best_label})")
        if over:  # a faster trial whose memory is not safe, passed over as `autotune best` says
            out.print(passed_over_words(over, best), markup=False)
        if (best.predicted_memory or {}).get("verdict"):
            late = best.predicted_memory.get("worst_case_fits") is False or bool(best.predicted_memory.get("at_limit"))
            out.print(f"{'[yellow]' if late else ''}memory: {best.predicted_memory['verdict']} (model estimate)"
                      f"{'[/]' if late else ''}")
    else:
        out.print("no trial ran to its measured step yet")
    for line in report_lines(report):
        out.print(line, markup=False)
    if best:
        out.print(f"next: autotune export --study {tuner.study_name} --storage {safe_url(args.storage)} --format sh "
                  "-o job.sh")
    return 0


def _launched_line(summary: dict[str, Any]) -> str:
    """What this run launched, and the study's total apart when they differ (a resumed run may launch nothing)."""
    here, total = summary["launched_this_run"], summary["launched"]
    if here == total:
        return f"{total} trials launched ({summary['stopped']})"
    return f"{here} trial{'s' if here != 1 else ''} launched this run ({total} in the study; {summary['stopped']})"


def _live_line(tuner: Tuner, bar: RunProgress, labels: Labeller, args: argparse.Namespace) -> None:
    """On a terminal (and without --json): a live line with the running trial's phase, step, times and memory."""
    if args.json or not out.is_terminal:
        return

    def label_of(number: int) -> str:
        row = tuner.store.trial(tuner.study_name, number)
        return labels(row.params, row.candidate_key) if row else ""

    tuner.on_progress = progress_view(bar, label_of)


def _run_report(tuner: Tuner, best: TrialRow | None, labels: Labeller) -> StudyReport:
    """What the study is worth (autotune.results.report): speed-ups over the references, GPU time, prunes by kind."""
    rows = tuner.store.trials(tuner.study_name)
    return study_report(rows, best, tuner.setup.cluster.world_size, labels, model=tuner.setup.correction.summary())


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


def _verl_options(args: argparse.Namespace) -> dict[str, Any]:
    extra_steps = getattr(args, "extra_steps", None)
    if extra_steps is not None and extra_steps < 0:
        raise CLIError(f"--extra-steps {extra_steps}: steps after the measured one, 0 or more")
    return {"trial_timeout_s": args.trial_timeout, "stall_timeout_s": args.stall_timeout,
            "startup_timeout_s": args.startup_timeout, "extra_steps": extra_steps,
            "doctor": False if getattr(args, "skip_doctor", False) else None,
            "keep_ray": getattr(args, "keep_ray", None)}


def _print_script_notes(setup: Setup) -> None:
    src = Path(setup.job.source)
    if src.is_file() and is_launch_script(src):
        err.print(read_script(src).report(), markup=False)


def _trial_line(row: TrialRow, label: str) -> str:
    why = units.clip(row.reason, 80) if row.status != "ok" else ""
    return f"  #{row.number:<4} {row.status:<12} {_speed(row):<38} {label}  {why}"
