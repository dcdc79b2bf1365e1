"""`autotune profile`: where a configuration's step time goes, from verl's own profiler, and what to change.

The configuration is a recorded trial (`--study NAME --trial N` or `--best`) or any (`--model ... --set ...`); it is
re-run with the profiler on through the verl runner (or the Megatron-core probe, `--backend mcore`), or traces a run
already wrote are analysed as found (`--traces DIR`). The profile is stored in the database, with its trial when it
profiles one (the dashboard's trial page shows it); `--show ID` prints a stored one.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import time
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from autotune.candidate import Candidate
from autotune.cli.options import (
    CLIError,
    existing_store,
    id_list,
    make_setup,
    out,
    parse_params,
    require_database,
    seconds,
    study_name,
)
from autotune.store.store import Store, safe_url

PROFILED_BACKENDS = ("verl", "mcore")


def add_parser(sub: Any) -> None:
    from autotune.cli.options import _setup_args, _storage_args

    p = sub.add_parser("profile", help="profile a configuration with verl's profiler: time per phase and kind, "
                       "top kernels, and advice the model checked")
    _setup_args(p, model_required=False)
    _storage_args(p)
    p.add_argument("--trial", type=int, help="with --study: the trial to profile")
    p.add_argument("--best", action="store_true", help="with --study: profile the study's best trial")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="with --model: change a parameter of the job's configuration (search-space names)")
    p.add_argument("--backend", choices=PROFILED_BACKENDS,
                   help="verl: a short verl run with its profiler on (default); mcore: the Megatron-core probe's "
                        "training step")
    p.add_argument("--traces", metavar="DIR", help="analyse the traces already in DIR (verl's "
                   "global_profiler.save_path) instead of running anything")
    p.add_argument("--workdir", default="trials/profiles", help="where the profiled run and its traces go")
    p.add_argument("--rollout-iterations", type=int, default=100,
                   help="vLLM engine iterations traced per replica (default 100; 0: the whole rollout)")
    p.add_argument("--update-mini-batches", type=int, default=0,
                   help="update mini-batches traced (verl's profiler schedule; default 0: all)")
    p.add_argument("--steps", type=int, default=2, help="with --backend mcore: timed steps before the profiled one")
    p.add_argument("--trial-timeout", type=seconds, help="with --backend verl: seconds the run may take (default 3600)")
    p.add_argument("--stall-timeout", type=seconds, help="with --backend verl: seconds without a new step "
                   "(default 1200)")
    p.add_argument("--force", action="store_true", help="with --model: run a configuration the memory model "
                   "predicts will not fit (it refuses otherwise: a profile of an OOM shows nothing)")
    p.add_argument("--show", type=int, metavar="ID", help="print a stored profile")
    p.add_argument("--json", action="store_true")


def _target(args: argparse.Namespace, store: Store) -> tuple[Any, Candidate | None, str | None, int | None, str]:
    """(setup, candidate, study, trial number, default backend) of what is to be profiled."""
    from autotune.search.setup import setup_from_row

    if args.trial is not None or args.best:
        if args.model or args.set:
            raise CLIError("give either --study with --trial/--best, or --model with --set, not both")
        name = args.study or study_name(store, args.storage, None)  # the database's only study
        st = store.get_study(name)
        if st is None:
            raise CLIError(f"no study named {name!r} in {safe_url(args.storage)}")
        row = store.best(name) if args.best else store.trial(name, args.trial)
        if row is None:
            what = "no trial that ran to its measured step" if args.best else f"no trial {args.trial}"
            raise CLIError(f"study {name!r} has {what}")
        setup = _with_measured_lengths(setup_from_row(st), store, row)
        cand = Candidate(**row.params)  # the trial as it ran (as `autotune export` writes it)
        backend = st.backend if st.backend in PROFILED_BACKENDS else "verl"
        return setup, cand, name, row.number, backend
    if args.model:
        setup, _ = make_setup(args)
        cand = setup.job.with_settings(parse_params(args.set))
        ev = setup.evaluate(cand)
        if not args.traces and not ev.feasible and not args.force:
            # lease 10 (H100, 2026-11-26): a 0.5B profile without fused kernels ran 4.5 minutes into its OOM
            raise CLIError(f"{cand.layout()}: the model predicts it cannot run: {ev.prune_reason()}; profile a "
                           "configuration that fits (`autotune estimate` shows the memory per moment), or pass "
                           "--force to run it anyway")
        return setup, cand, None, None, "verl"
    if args.study:
        raise CLIError("--study needs --trial N or --best")
    if args.traces:
        return None, None, None, None, "traces"
    raise CLIError("what to profile: --study NAME --trial N (or --best), --model NAME [--set NAME=VALUE ...], or "
                   "--traces DIR")


def _with_measured_lengths(setup: Any, store: Store, row: Any) -> Any:
    """The trial's own sequence lengths at the measured step, for the advice's memory verdicts (as the study folds
    its trials' lengths in); a simulated trial measured none."""
    from autotune.search.learning import step_lengths

    found = [] if row.simulated else [step_lengths(st.metrics) for st in store.steps(row.id)
                                      if st.step == setup.measure_step]
    measured = [x for x in found if x]
    return dataclasses.replace(setup, measured_lengths=tuple(measured)) if measured else setup


def _runner(backend: str, args: argparse.Namespace) -> Any:
    from autotune.cluster import detect_local_gpus
    from autotune.runners import RunnerUnavailable

    if not detect_local_gpus():
        raise CLIError(f"--backend {backend} runs the configuration on this machine's GPUs and finds none; run "
                       "autotune profile on the GPU node, or analyse traces a run already wrote: --traces DIR")
    if backend == "mcore":
        from autotune.profile.runs import ProfilingMcoreRunner
        from autotune.runners.mcore import ProbeError

        try:
            return ProfilingMcoreRunner(steps=args.steps)
        except ProbeError as e:
            raise CLIError(str(e)) from None
    from autotune.profile.runs import ProfilingVerlRunner
    from autotune.runners.verl import VerlOptions, make_verl_runner

    try:
        make_verl_runner()  # the same checks as `run --backend verl` (verl importable, Linux)
    except RunnerUnavailable as e:
        raise CLIError(str(e)) from None
    timeouts = {k: v for k, v in (("trial_timeout_s", args.trial_timeout), ("stall_timeout_s", args.stall_timeout))
                if v is not None}
    # one run: a Ray head kept across trials would save nothing, so the run starts and stops a private Ray
    return ProfilingVerlRunner(VerlOptions(**timeouts, keep_ray=False),
                               rollout_iterations=args.rollout_iterations or None,
                               update_mini_batches=args.update_mini_batches or None)


def cmd_profile(args: argparse.Namespace) -> int:
    from autotune.profile.runs import analyse_dir, profile_configuration, store_profile

    standalone = args.traces and args.study is None and args.trial is None and not args.best and args.show is None
    if standalone:  # traces alone need no database: stored where one exists, else only printed
        store = existing_store(args.storage)
    else:
        if args.show is not None or args.trial is not None or args.best or args.study:
            require_database(args.storage)
        store = Store(args.storage)
    if args.show is not None:
        row = store.profile(args.show)
        if row is None:
            ids = store.profile_ids()
            raise CLIError(f"no profile {args.show} in {safe_url(args.storage)}; " + (
                f"profiles there: {id_list(ids)}" if ids else "it holds none (`autotune profile` stores one; pass "
                "the --storage it used)"))
        doc = _row_doc(row)
        if args.json:
            print(json.dumps(doc, indent=2, default=str))
        else:
            _print(doc)
        return 0  # shown as asked, a failed profile too (its status and reason are in what is printed)
    setup, cand, study, number, backend = _target(args, store)
    if importlib.util.find_spec("hta") is None:  # before anything runs: the analysis needs it
        raise CLIError("autotune profile analyses traces with HolisticTraceAnalysis, which is not installed: "
                       "pip install -e '.[profile]' (or pip install HolisticTraceAnalysis==0.5.0 plotly)")
    if args.traces:
        if not Path(args.traces).is_dir():
            raise CLIError(f"--traces {args.traces}: no such folder")
        backend = "traces"
        prof = analyse_dir(args.traces, setup, cand)
        if not prof.ok:  # nothing ran: a folder without readable traces is bad input, and nothing is stored
            raise CLIError(f"--traces {args.traces}: {prof.error}")
    else:
        backend = args.backend or backend
        runner = _runner(backend, args)
        if backend == "mcore":  # the probe measures the training step alone: the model judges that (advice too)
            setup = dataclasses.replace(setup, objective="train")
        stamp = time.strftime("%Y%m%d-%H%M%S")
        where = Path(args.workdir) / (f"{study}/trial_{number:04d}" if study else "configs") / stamp
        prof = profile_configuration(runner, setup, cand, where, study or "profile", number or 0)
    pid = store_profile(store, prof, backend, cand, study, number) if store is not None else None
    doc = {"profile_id": pid, "study": study, "trial": number, "backend": backend,
           "layout": cand.layout() if cand else None, **prof.as_dict()}
    if args.json:
        print(json.dumps(doc, indent=2, default=str))
    else:
        _print(doc)
        where = f"with trial {number} of {study} (autotune dashboard: the trial's page)" if study else "standalone"
        out.print(f"stored as profile {pid}, {where}; autotune profile --show {pid} prints it again" if pid is not None
                  else f"not stored: no study database at {safe_url(args.storage)} (--storage URL of one keeps it)",
                  markup=False)
    return 0 if prof.ok else 1


def _row_doc(row: Any) -> dict[str, Any]:
    analysis = row.analysis or {}
    return {"profile_id": row.id, "study": row.study, "trial": row.trial_number, "backend": row.backend,
            "layout": Candidate(**row.params).layout() if row.params else None,  # names a standalone profile
            "ok": row.status == "ok", "error": row.reason, "trace_dir": row.trace_dir, "step": row.step,
            "run": row.run, "analysis": analysis or None, "advice": row.advice or [],
            "advised": [a["line"] for a in row.advice or [] if a.get("advised")],
            "created_at": row.created_at}


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def _print(doc: dict[str, Any]) -> None:
    what = f"trial {doc['trial']} of {doc['study']}" if doc.get("study") else (doc.get("layout") or "traces")
    if not doc.get("ok"):
        out.print(f"[red]profile of {escape(str(what))} failed:[/] {escape(str(doc.get('error')))}")
    a = doc.get("analysis")
    if not a:
        return
    ranks = max((p["ranks"] for p in a["phases"]), default=0)
    out.print(f"profile of {what}: step {doc.get('step')}, {ranks} rank(s), {a['device'].upper()} traces in "
              f"{doc.get('trace_dir')}", markup=False)
    run = doc.get("run") or {}
    if run.get("status"):
        out.print(f"profiled run: {run['status']} (its speed is slowed by the profiler, not the trial's measurement)")
    timings = run.get("phase_timings") or {}
    table = Table(title="time per phase (share of the phase's rank-seconds; communication and copies: exposed)")
    for col in ("phase", "traced s", "verl s", "gemm", "attention", "other", "comm", "copies", "idle", "comm hidden",
                "bubble"):
        table.add_column(col, justify="left" if col == "phase" else "right")
    for p in a["phases"]:
        s = p["shares"]
        name = p["phase"] if p["source"] != "probe" else f"{p['phase']} (probe)"
        verl_s = timings.get(p["phase"]) if p["source"] != "probe" else None
        table.add_row(name, f"{p['seconds']:.3f}", "-" if verl_s is None else f"{verl_s:.1f}",
                      *(_pct(s[k]) for k in ("gemm", "attention", "other", "communication", "memory", "idle")),
                      _pct(p["communication_hidden_fraction"]), _pct(p["bubble_fraction"]))
    out.print(table)
    if timings:
        out.print("verl s: verl's own timing_s/<phase> of the profiled run (traced s: the traces' window)")
    for phase, why in (a.get("unprofiled") or {}).items():
        t = timings.get(phase)
        out.print(f"{phase}: in no trace ({why})" + (f"; {t:.1f} s in the profiled run" if t is not None else ""),
                  markup=False)
    for note in a.get("notes") or []:
        out.print(f"note: {note}", markup=False)
    hta = [v for v in (a.get("hta") or {}).values() if "idle_pct" in v]
    if hta:
        mean = {k: sum(v.get(k, 0.0) for v in hta) / len(hta) for k in ("idle_pct", "compute_pct", "non_compute_pct",
                                                                         "comm_comp_overlap_pct")}
        out.print(f"HolisticTraceAnalysis, whole traces between the first and last kernel (mean of {len(hta)}): idle "
                  f"{mean['idle_pct']:.0f}%, compute {mean['compute_pct']:.0f}%, non-compute "
                  f"{mean['non_compute_pct']:.0f}%, communication overlapping compute "
                  f"{mean['comm_comp_overlap_pct']:.0f}%")
    for p in a["phases"]:
        if p["phase"] == "outside" or not p["top"]:
            continue
        busy = sum(k["seconds"] for k in p["top"]) or 1.0
        out.print(f"top {'kernels' if p['device'] == 'gpu' else 'ops'}, {p['phase']}:")
        for k in p["top"][:5]:
            out.print(f"  {k['seconds']:9.4f} s  {k['count']:6d}x  {k['kind']:<13} {k['name'][:100]}"
                      f"  ({100 * k['seconds'] / busy:.0f}% of the top)", markup=False)
    advised = doc.get("advised") or []
    if advised:
        out.print("advice (each change checked by the model: predicted faster and fitting):")
        for line in advised:
            out.print(f"  {line}", markup=False)
    elif doc.get("advice") is not None:
        considered = len(doc.get("advice") or [])
        out.print("advice: none" + (f" ({considered} change(s) considered, none predicted faster and fitting; "
                                     "--json lists them)" if considered else " (nothing in this profile stands out)"))
