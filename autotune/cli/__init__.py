"""The `autotune` command: run, status, best, export, estimate, probe, profile, models, spaces, dashboard, doctor,
import.

This module holds the parser and main (dispatch, and the exit codes of user errors and interrupts); each
command lives in a sibling module: run, results (status, best, export, dashboard), estimate (estimate,
probe), catalog (models, spaces); options holds what they share.

May import: every package (it is the top); `tables` prints `status`'s large tables as rich would.
"""

from __future__ import annotations

import argparse
import sys
from contextlib import nullcontext
from typing import NoReturn

from autotune import __version__
from autotune.cli.catalog import cmd_models, cmd_spaces
from autotune.cli.doctor import cmd_doctor
from autotune.cli.estimate import cmd_estimate, cmd_probe
from autotune.cli.imports import cmd_import
from autotune.cli.options import (
    DEFAULT_STORAGE,
    CLIError,
    _setup_args,
    _storage_args,
    count,
    err,
    gpus_per_node,
    positive,
    seconds,
)
from autotune.cli.profile import add_parser as add_profile_parser
from autotune.cli.profile import cmd_profile
from autotune.cli.results import cmd_best, cmd_dashboard, cmd_export, cmd_status
from autotune.cli.run import cmd_run
from autotune.cluster import ClusterError
from autotune.executors import EXECUTORS
from autotune.job import JobError
from autotune.model import UnknownModelError
from autotune.results.export import FORMATS
from autotune.runners import BACKENDS, RunnerUnavailable, stopping
from autotune.runners.base import RunnerFatal
from autotune.search.setup import StudyMismatchError
from autotune.search.space import SpaceError
from autotune.store.store import StoreError

USER_ERRORS = (UnknownModelError, JobError, SpaceError, StoreError, StudyMismatchError, ClusterError,
               RunnerUnavailable, RunnerFatal, ValueError)


class Parser(argparse.ArgumentParser):
    """A bad option is one line that says where to look, exit 2 (not argparse's whole usage first)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (`{self.prog} --help` lists the options)\n")


def build_parser() -> argparse.ArgumentParser:
    ap = Parser(prog="autotune", description="Find the fastest verl Megatron GRPO configuration.")
    ap.add_argument("--version", action="version", version=f"autotune {__version__}")
    sub = ap.add_subparsers(dest="command", required=True)

    p = sub.add_parser("run", help="run (or resume) a tuning study")
    _setup_args(p, model_required=False)
    _storage_args(p, run=True)
    p.add_argument("--backend", choices=["auto", *BACKENDS], default="auto",
                   help="auto: verl where GPUs and verl are present, else simulate")
    p.add_argument("--table", help="with --backend replay: CSV of measured configurations; it gives the model, "
                   "GPUs, job and search space (format: benchmarks/README.md)")
    p.add_argument("--probe", action="store_true",
                   help="probe each candidate's training step with Megatron-core on the local GPUs first; a probe "
                   "OOM prunes it before the full trial (needs GPUs and megatron-core)")
    p.add_argument("--n-trials", type=int, default=20, help="launched trials the study should hold (default 20)")
    p.add_argument("--timeout", type=seconds, help="stop launching after this many seconds")
    p.add_argument("--deadline", type=seconds,
                   help="end within this many seconds (a reservation's end): launch a trial or a confirmation only "
                   "while the study's longest trial so far would still end in time (the first one: launched)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--model-seeds", type=int, default=4, help="best candidates by the model to try first")
    p.add_argument("--enqueue", action="append", default=[], metavar="NAME=VALUE,...",
                   help="launch this configuration first (the job's own, changed by these parameters), even when "
                   "the memory model predicts OOM: to check a verdict (static rules still apply); repeatable")
    p.add_argument("--warm-start", action="append", metavar="STUDY",
                   help="seed a new study's model correction with this earlier study's (repeatable; default: the "
                   "studies of the same database with the same GPU type and model family)")
    p.add_argument("--no-warm-start", action="store_true", help="start a new study's model uncorrected")
    p.add_argument("--workdir", default="trials", help="per-trial folders go under WORKDIR/<study>/")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    g = p.add_argument_group("executor (where trials run)")
    g.add_argument("--executor", choices=EXECUTORS, default="local",
                   help="local: one trial at a time on this node (default); ray: up to --parallel trials at once on "
                        "a Ray cluster, each holding its own nodes x GPUs (docs/executors.md)")
    g.add_argument("--parallel", type=int, default=1,
                   help="with --executor ray: trials at once (default 1); those that land on one node share its host "
                   "memory, which the memory model divides among them")
    g.add_argument("--ray-address", help="with --executor ray: the cluster's head, HOST:6379, or `local` for a "
                   "private Ray of this node's GPUs. Default: RAY_ADDRESS, else the cluster this host joined with `ray "
                   "start` (its address is printed: this host belongs to it), else a private local Ray; never "
                   "another Ray process that merely runs on this host")
    g = p.add_argument_group("verl backend")
    g.add_argument("--trial-timeout", type=seconds, help="seconds a trial may run in all (default 3600)")
    g.add_argument("--stall-timeout", type=seconds, help="seconds without a new training step once the first is in "
                   "(default 1200)")
    g.add_argument("--startup-timeout", type=seconds, help="seconds from launch to the first training step: Ray, "
                   "model build, vLLM start and step 1 (default 1800)")
    g.add_argument("--measure-steps", help="measured window FIRST-LAST, e.g. 3-5: the objective is its mean")
    g.add_argument("--extra-steps", type=int, metavar="K", help="steps run after the measured one (default 1; 0: "
                   "none): their spread is the trial's measured noise, and leaders within it are a tie; the "
                   "objective stays the measured step's")
    g.add_argument("--keep-ray", action=argparse.BooleanOptionalAction, default=None, help="one Ray head on this "
                   "node kept across the trials, stopped when the run ends (default on a single node; --no-keep-ray: "
                   "a private Ray started and stopped by each trial, as before)")
    g.add_argument("--prune-slower-than", type=float, metavar="FRACTION",
                   help="stop a trial whose early steps run below FRACTION of the best trial's (default: off)")
    g.add_argument("--prune-after", type=int, default=5, help="completed trials before pruning starts (default 5)")
    g.add_argument("--confirm", type=count, default=2, help="re-run the K best for more steps before declaring "
                   "the best (default 2; 0: off; never for simulated results)")
    g.add_argument("--confirm-steps", type=int, default=6, help="steps of a confirmation run (default 6)")
    g.add_argument("--skip-doctor", action="store_true", help="launch without `autotune doctor`'s checks of the "
                   "node's stack (they run before the first trial and refuse a node that cannot run verl)")

    p = sub.add_parser("status", help="table of a study's trials")
    _storage_args(p)
    p.add_argument("--all", action="store_true", help="include trials pruned before launch")
    p.add_argument("--trial", type=int, metavar="N", help="one trial: its result, measured noise and timeline "
                   "(launch, start-up milestones, each step, exit)")
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
    _setup_args(p, model_required=False)
    p.add_argument("--storage", default=DEFAULT_STORAGE, help="with --study: the study database")
    p.add_argument("--study", help="predict with this study's learned correction of the model (on the study's own "
                   "model, cluster and job unless --model is given)")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="change a parameter (search-space names, e.g. tp=4, use_dynamic_bsz=true)")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("probe", help="measure one candidate's training step with Megatron-core on the local GPUs")
    _setup_args(p)
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="change a parameter of the job's configuration (search-space names)")
    p.add_argument("--steps", type=int, default=3, help="timed training steps (after one warm-up)")
    p.add_argument("--workdir", default="trials/probes", help="where the probe's spec, result and log go")
    p.add_argument("--profile", action="store_true", help="after the timed steps, trace one more with torch.profiler "
                   "and print where its time goes (autotune profile --backend mcore also stores it)")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("doctor", help="check that this node can run a verl trial (versions, GPUs, Transformer "
                       "Engine, attention backends, vLLM, verl); exit code 1 when it cannot")
    p.add_argument("--model", help="the model whose head size the attention check uses (default: 128)")
    p.add_argument("--timeout", type=seconds, default=300.0, help="seconds for the heavy imports (default 300)")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("import", help="record verl runs made by hand (console logs or metrics JSONL) as measured "
                       "trials of a study")
    p.add_argument("files", nargs="+", metavar="LOG_OR_JSONL", help="verl console logs (what main_ppo printed) or "
                   "metrics JSONL files (verl's file logger)")
    p.add_argument("--model", help="catalog name or Hugging Face model dir (needed for a new study)")
    p.add_argument("--gpus", type=gpus_per_node, help="GPUs per node (default: the runs' trainer.n_gpus_per_node)")
    p.add_argument("--nodes", type=positive, help="nodes (default: the runs' trainer.nnodes)")
    p.add_argument("--gpu-type", help="GPU type of the runs (default: detected, else h100)")
    p.add_argument("--job", help="the runs' verl overrides (YAML or launch script); needed for a JSONL with no "
                   "console log beside it (default: the workload verl printed)")
    p.add_argument("--space", help="search space of a new study (default: by model type)")
    p.add_argument("--measure-step", type=int, help="the step whose throughput is the objective (default: the "
                   "study's, else 3)")
    _storage_args(p)

    add_profile_parser(sub)

    p = sub.add_parser("models", help="list the model catalog")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("spaces", help="list the built-in search spaces")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("dashboard", help="web page over the study database (needs pip install -e '.[dashboard]')")
    p.add_argument("--storage", default=DEFAULT_STORAGE, help=f"SQLAlchemy URL (default {DEFAULT_STORAGE})")
    p.add_argument("--port", type=int, default=8080, help="port (default 8080)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    return ap


COMMANDS = {
    "run": cmd_run, "status": cmd_status, "best": cmd_best, "export": cmd_export, "estimate": cmd_estimate,
    "models": cmd_models, "spaces": cmd_spaces, "dashboard": cmd_dashboard, "probe": cmd_probe,
    "doctor": cmd_doctor, "import": cmd_import, "profile": cmd_profile,
}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # `run`: SIGTERM (`kill`, a scheduler's stop) and Ctrl-C set a flag the tuner stops at
    # (autotune/runners/stopping.py): the running trial recorded, every Optuna trial told, resumable; exit 143 and 130
    # as a shell reports them.
    try:
        with stopping.handle_signals() if args.command == "run" else nullcontext():
            return COMMANDS[args.command](args)
    except (CLIError, *USER_ERRORS) as e:
        err.print(f"autotune: error: {e}", markup=False)
        return 2
    except KeyboardInterrupt as e:
        err.print("autotune: interrupted" + (" by SIGTERM" if stopping.exit_code(e) == 143 else ""))
        return stopping.exit_code(e)
    except BrokenPipeError:  # `autotune status | head`: the reader left; nothing more to say
        sys.stderr.close()
        return 0
