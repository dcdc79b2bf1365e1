"""What the commands share: the consoles they print on, CLIError for a bad option, and the options that
describe a setup (model, cluster, job, space, measured step), which make_setup turns into a Setup.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console

from autotune import verl
from autotune.candidate import Candidate
from autotune.cluster import GPU_TYPES, make_cluster
from autotune.estimate.lengths import at_step, prompt_lengths_from_data
from autotune.job import Job
from autotune.model import get_model
from autotune.search.setup import Setup
from autotune.search.space import builtin_spaces, default_space_name, load_space, value_error
from autotune.verl.preflight import unknown_keys

DEFAULT_STORAGE = "sqlite:///trials/autotune.db"

_WIDTH = None if sys.stdout.isatty() else 200  # pipes and files get whole rows, not 80 columns
out = Console(highlight=False, soft_wrap=True, width=_WIDTH)
err = Console(stderr=True, highlight=False, soft_wrap=True, width=_WIDTH)


class CLIError(ValueError):
    pass


MAX_GPUS_PER_NODE = 16  # more than any node sold has (8 is usual); a larger --gpus is a typo or a total


def seconds(text: str) -> float:
    """argparse type of a time limit: a positive number of seconds."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text}: a time limit is a positive number of seconds (leave the option "
                                         "out for the default)")
    return value


def _whole(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None


def count(text: str) -> int:
    """argparse type of a count that may be 0: a whole number, 0 or more."""
    value = _whole(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text}: must be 0 or more (0: off)")
    return value


def positive(text: str) -> int:
    """argparse type of a count of at least 1 (--nodes)."""
    value = _whole(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text}: must be at least 1")
    return value


def positive_float(text: str) -> float:
    """argparse type of a size above 0 (--host-memory GiB)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text}: not a number (GiB, e.g. 128)") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text}: must be a number of GiB above 0 (e.g. 128)")
    return value


def gpus_per_node(text: str) -> int:
    """argparse type of --gpus: GPUs of one node, 1 to MAX_GPUS_PER_NODE."""
    value = positive(text)
    if value > MAX_GPUS_PER_NODE:
        raise argparse.ArgumentTypeError(
            f"{value} GPUs per node: no node has more than {MAX_GPUS_PER_NODE}; --gpus counts the GPUs of one node "
            "(e.g. 8), and --nodes the nodes")
    return value


def require_database(url: str) -> None:
    """Commands that read a study need its database: a mistyped SQLite path must not create an empty one."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        u = make_url(url)
    except ArgumentError:
        return  # Store words the error
    if u.get_backend_name() == "sqlite" and u.database and u.database != ":memory:" \
            and not Path(u.database).expanduser().exists():
        raise CLIError(f"no study database at {url} ({Path(u.database).expanduser()} does not exist); pass the "
                       "--storage that `autotune run` used, or start a study there with `autotune run --storage "
                       f"{url} ...`")


def existing_store(url: str) -> Any:
    """The study database when it already holds autotune's tables; None otherwise (nothing is created to look)."""
    from sqlalchemy import create_engine, inspect
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import SQLAlchemyError

    from autotune.store.schema import StudyRow
    from autotune.store.store import Store

    try:
        u = make_url(url)
        if u.get_backend_name() == "sqlite" and u.database and u.database != ":memory:" \
                and not Path(u.database).expanduser().exists():
            return None
        engine = create_engine(url)
        try:
            present = inspect(engine).has_table(StudyRow.__tablename__)
        finally:
            engine.dispose()
    except (SQLAlchemyError, ValueError, ImportError):
        return Store(url)  # raises StoreError with what to do
    return Store(url) if present else None


def study_name(store: Any, url: str, name: str | None) -> str:
    """--study NAME checked against the database, else its only study (the default of every reading command)."""
    from autotune.store.store import safe_url

    names = [s.name for s in store.list_studies()]
    if name:
        if name not in names:
            raise CLIError(f"no study {name!r} in {safe_url(url)}; studies there: {', '.join(names) or 'none'}")
        return name
    if not names:
        ids = store.profile_ids()  # `autotune profile` of a configuration stores a profile and no study
        held = (f" (it holds only profile(s) {id_list(ids)}: `autotune profile --show {ids[-1]} --storage "
                f"{safe_url(url)}` prints one)" if ids else "")
        raise CLIError(f"no study in {safe_url(url)}{held}; start a study with `autotune run --model ...`")
    if len(names) > 1:
        raise CLIError(f"{safe_url(url)} holds several studies; choose one with --study: {', '.join(names)}")
    return names[0]


def id_list(ids: list[int], most: int = 8) -> str:
    """Ids for an error message, in one line however many a database holds."""
    if len(ids) <= most:
        return ", ".join(map(str, ids)) or "none"
    return f"{', '.join(map(str, ids[:most - 1]))}, ..., {ids[-1]} ({len(ids)} in all)"


def _setup_args(p: argparse.ArgumentParser, model_required: bool = True) -> None:
    p.add_argument("--model", required=model_required,
                   help="catalog name (see `autotune models`) or a Hugging Face model dir / config.json")
    p.add_argument("--gpus", type=gpus_per_node, help="GPUs per node (default: the local GPUs, else 8)")
    p.add_argument("--nodes", type=positive, help="number of nodes (default 1)")
    p.add_argument("--gpu-type", help=f"one of {', '.join(GPU_TYPES)} (default: detected, else h100)")
    p.add_argument("--host-memory", type=positive_float, metavar="GIB",
                   help="host memory of a node in GiB, which offload and the CPU optimizer fill (default: this "
                   "machine's where it has GPUs, else unchecked)")
    p.add_argument("--job", help="YAML mapping of verl override keys to values, or your verl launch script (bash "
                   "running verl.trainer.main_ppo with overrides) (default: a typical GRPO job)")
    p.add_argument("--space", help="built-in space name (dense, moe) or a YAML file (default: by model type)")
    p.add_argument("--measure-step", type=int, default=3, help="the step whose throughput is the objective")
    p.add_argument("--response-length", type=float, metavar="TOKENS",
                   help="expected mean response length at the measured step; the step's memory verdict uses it "
                   "(measured lengths of earlier trials take over; default: the job's maximum)")


def _storage_args(p: argparse.ArgumentParser, run: bool = False) -> None:
    p.add_argument("--storage", default=DEFAULT_STORAGE, help=f"SQLAlchemy URL (default {DEFAULT_STORAGE})")
    p.add_argument("--study", help="study name (default: model, cluster and a hash of the job)" if run else
                   "study name (needed when the database holds several studies; default: its only study)")


def make_setup(args: argparse.Namespace) -> tuple[Setup, str]:
    if not args.model:
        raise CLIError("--model is required (or --backend replay --table FILE.csv, whose table names the model)")
    model = get_model(args.model)
    cluster = make_cluster(args.gpus, args.nodes, args.gpu_type, getattr(args, "host_memory", None),
                           getattr(args, "parallel", None) or 1)
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


def parse_params(sets: list[str], flag: str = "--set") -> dict[str, Any]:
    """NAME=VALUE items (YAML values) -> candidate parameters; a CLIError names the bad item and what it takes."""
    params: dict[str, Any] = {}
    for item in sets:
        if "=" not in item:
            raise CLIError(f"{flag} {item!r}: expected NAME=VALUE, e.g. --set tp=4")
        name, raw = item.split("=", 1)
        name = name.strip()
        if name not in Candidate.param_names():
            param = verl.param_for_key(name)
            hint = f" (that verl key is the parameter {param!r})" if param else ""
            raise CLIError(f"{flag} {name}: unknown parameter{hint}; known: {', '.join(Candidate.param_names())}")
        try:
            params[name] = yaml.safe_load(raw) if raw.strip() else None
        except yaml.YAMLError:
            params[name] = raw
        if isinstance(params[name], list) and all(isinstance(v, str) for v in params[name]):
            params[name] = ",".join(params[name])  # recompute_modules=[core_attn,mlp]: the list verl's key takes
        why = value_error(name, params[name])
        if why:
            raise CLIError(f"{flag} {item}: {why}{_choices_hint(name)}")
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
