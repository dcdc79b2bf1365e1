"""`autotune import`: verl runs made by hand, recorded as measured trials of a study.

Each file (a verl console log or metrics JSONL, autotune/verl/runs.py) becomes one trial as the verl runner would
have recorded it: backend `import`, not simulated, the measured step's throughput and phase timings, every step,
or its failure class and reason; an Optuna trial with the same state, so the sampler, `status`, the dashboard and
the model's calibration read it like any other. Every file is read and checked before anything is written: a bad
or foreign file gets one line and is left out, and when nothing can be imported the database is not touched
(exit code 2). A file imported before (same bytes) is not imported again.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState

from autotune import units, verl
from autotune.candidate import Candidate
from autotune.cli.options import CLIError, err, existing_store, out
from autotune.cluster import make_cluster
from autotune.job import Job
from autotune.model import get_model
from autotune.results.labels import label
from autotune.runners.base import TrialStatus
from autotune.search.learning import Learning, measured_lengths, step_lengths
from autotune.search.setup import Setup, setup_from_row
from autotune.search.space import default_space_name, load_space
from autotune.store.access import check_writable, open_storage
from autotune.store.schema import StudyRow, TrialRow, utcnow
from autotune.store.store import Store, TrialTaken, safe_url, worker_id
from autotune.study.recovery import OPTUNA_STATE
from autotune.verl.runs import RunFileError, VerlRun, outcome, read_run, strategy_error

BACKEND = "import"
REASON_WIDTH = 160  # characters of a failure's reason on its line (cut at a word; the trial keeps it whole)
STUDY_BACKEND = "verl"  # imported runs are real verl runs: `autotune run --backend verl` may resume the study


# A run's candidate and workload (verl/runs.py read its resolved config), and where it differs from the study ------
def candidate_from_config(config: dict[str, Any]) -> Candidate:
    """The knobs autotune tunes, as the run had them (verl's resolved values)."""
    params: dict[str, Any] = {}
    for param, keys in verl.PARAM_KEYS.items():
        key = keys[0].lstrip("+")  # a run's resolved config names keys without Hydra's prefixes
        if key not in config:
            continue
        value = config[key]
        if param == "recompute":
            value = value or "none"
        elif param == "recompute_modules":
            value = ",".join(value) if isinstance(value, (list, tuple)) else value
        params[param] = value
    ref = params.get("ref_param_offload")
    if ref is not None and ref == params.get("param_offload"):
        params["ref_param_offload"] = None  # verl's default: the actor's
    return Candidate.from_params(params)


def job_from_runs(configs: Sequence[dict[str, Any]], source: str) -> Job:
    """What the runs fixed, as a study's job: the first run's workload (verl.IMPORT_JOB_KEYS; runs of another one
    are refused) and every setting all the runs share (the tuned knobs, verl.IMPORT_SETTING_KEYS), so the study's
    estimates start from what ran, not from verl's defaults."""
    first = configs[0]
    mapping = {k: first[k] for k in verl.IMPORT_JOB_KEYS if first.get(k) is not None}
    mapping |= {k: first[k] for k in verl.IMPORT_SETTING_KEYS
                if first.get(k) is not None and all(_same(c.get(k), first[k]) for c in configs)}
    cands = [candidate_from_config(c) for c in configs]
    params = [c.params() for c in cands]
    common = {p for p, v in params[0].items() if v is not None and all(q[p] == v for q in params[1:])}
    mapping |= {k: v for k, v in cands[0].verl_overrides().items() if v is not None and verl.param_for_key(k) in common}
    return Job.from_mapping(mapping, source)


def _norm(v: Any) -> Any:
    """A value as Hydra would read it back, for comparing a job file's value with verl's printed one."""
    if isinstance(v, str):
        low = v.strip().lower()
        if low in ("true", "false"):
            return low == "true"
        if low in ("null", "none", "~", ""):
            return None
        try:
            return float(low)
        except ValueError:
            return v.strip()
    if isinstance(v, bool) or v is None:
        return v
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, (list, tuple)):
        return [_norm(x) for x in v]
    return v


def _same(a: Any, b: Any) -> bool:
    na, nb = _norm(a), _norm(b)
    return type(na) is type(nb) and na == nb


def conflicts(job: Job, config: dict[str, Any], gpus_per_node: int, nodes: int) -> list[str]:
    """Where the run differs from the study's job and cluster (a run of another workload is not comparable)."""
    out = []
    for key in verl.IMPORT_JOB_KEYS:
        if key in verl.IMPORT_PATH_KEYS:
            continue  # where the model and data lie differs between machines, not what the run was
        if key in config and key in job.mapping and not _same(job.mapping[key], config[key]):
            out.append(f"{key} is {config[key]!r} in the run, {job.mapping[key]!r} in the study's job")
    for key, want in ((verl.N_GPUS_PER_NODE, gpus_per_node), (verl.NNODES, nodes)):
        if key in config and not _same(config[key], want):
            out.append(f"{key} is {config[key]!r} in the run, {want} in the study (--gpus/--nodes)")
    return out


@dataclasses.dataclass(frozen=True)
class _Planned:
    run: VerlRun
    cand: Candidate
    config_from: str


def _read_all(paths: list[str]) -> tuple[list[VerlRun], list[str]]:
    runs: list[VerlRun] = []
    bad: list[str] = []
    by_hash: dict[str, Path] = {}
    for name in paths:
        p = Path(name)
        try:
            run = read_run(p)
        except RunFileError as e:
            bad.append(f"{p}: {e}")
            continue
        if run.sha256 in by_hash:
            bad.append(f"{p}: the same file as {by_hash[run.sha256]} (imported once)")
            continue
        by_hash[run.sha256] = p
        runs.append(run)
    # a metrics JSONL whose console log is on the command line too is the same run: the console log stands for it
    named = {r.path.resolve() for r in runs if r.kind == "console"}
    kept = []
    for r in runs:
        if r.kind == "jsonl" and any(c.resolve() in named for c in r.companions):
            bad.append(f"{r.path}: the metrics of {r.companions[0]}, which is imported with them")
            continue
        kept.append(r)
    return kept, bad


def _study_row(args: argparse.Namespace, store: Store | None) -> StudyRow | None:
    """The study named by --study, else the database's only study when neither --study nor --model says more."""
    if args.study:
        return store.get_study(args.study) if store else None
    if args.model or store is None:
        return None
    studies = store.list_studies()
    if len(studies) > 1:
        raise CLIError(f"{safe_url(args.storage)} holds several studies; choose one with --study: "
                       f"{', '.join(s.name for s in studies)} (or --model to start a new one)")
    return studies[0] if studies else None


def _usable(configs: list[dict[str, Any]], gpus: int, nodes: int) -> list[dict[str, Any]]:
    """The configs that will be imported into a study made from the first: Megatron runs of its workload."""
    ok = []
    for config in configs:
        try:
            candidate_from_config(config)
        except (TypeError, ValueError):
            continue
        if strategy_error(config) is None:
            ok.append(config)
    if not ok:
        return []
    first = job_from_runs(ok[:1], "imported run")
    return [c for c in ok if not conflicts(first, c, gpus, nodes)]


def _setup(args: argparse.Namespace, store: Store | None, runs: list[VerlRun],
           run_job: Job | None) -> tuple[Setup, str, StudyRow | None]:
    """The study's setup: the existing study's, or one made from the options and what the runs fixed."""
    row = _study_row(args, store)
    if row is None:
        if not args.model:
            raise CLIError("--model is required to start a study from imported runs (or --study NAME of an "
                           "existing study)")
        model = get_model(args.model)
        first = next((r.config for r in runs if r.config), None)
        gpus = args.gpus if args.gpus is not None else (first or {}).get(verl.N_GPUS_PER_NODE)
        nodes = args.nodes if args.nodes is not None else (first or {}).get(verl.NNODES)
        cluster = make_cluster(int(gpus) if gpus else None, int(nodes) if nodes else None, args.gpu_type)
        usable = _usable([r.config for r in runs if r.config], cluster.gpus_per_node, cluster.nodes)
        if run_job is not None:
            job = run_job
        elif usable:
            job = job_from_runs(usable, "imported runs")
        else:
            raise CLIError("no file holds verl's printed config (a metrics JSONL alone has none): pass --job with "
                           "the runs' verl overrides, or import their console logs")
        space_ref = args.space or default_space_name(model.is_moe)
        setup = Setup(model, cluster, job, load_space(space_ref), args.measure_step or 3)
        name = args.study or setup.default_study_name()
        row = store.get_study(name) if store else None
        if row is None:
            return setup, name, None
        new = setup
    else:
        name, new = row.name, None
    if row.backend != STUDY_BACKEND:
        raise CLIError(f"study {name!r} is a {row.backend!r} study{' (SIMULATED)' if row.simulated else ''}: "
                       "measured verl runs go into a study of real verl runs; use another --study name")
    setup = setup_from_row(row)
    if new is not None and new.fingerprint() != setup.fingerprint():
        diffs = [k for k, v in new.fingerprint().items() if setup.fingerprint().get(k) != v]
        raise CLIError(f"study {name!r} was made for a different setup ({', '.join(diffs)} differ): pass --study "
                       "NAME alone to import into it, or another --study name")
    if args.measure_step and args.measure_step != setup.measure_step:
        raise CLIError(f"study {name!r} measures step {setup.measure_step}, not {args.measure_step}")
    if args.model and get_model(args.model).name != setup.model.name:
        raise CLIError(f"study {name!r} is for {setup.model.name}, not {args.model}")
    for opt, have, want in (("--gpus", args.gpus, setup.cluster.gpus_per_node), ("--nodes", args.nodes,
                                                                                 setup.cluster.nodes)):
        if have is not None and have != want:
            raise CLIError(f"study {name!r} has {want} for {opt}, not {have}")
    found = conflicts(setup.job, run_job.mapping, setup.cluster.gpus_per_node, setup.cluster.nodes) \
        if run_job is not None else []
    if found:
        raise CLIError(f"--job {args.job}: another workload than study {name!r}'s: {'; '.join(found[:3])}; pass the "
                       "job these runs ran with")
    return setup, name, row


def _plan(runs: list[VerlRun], setup: Setup, run_job: Job | None, done: dict[str, int]) -> tuple[list[_Planned],
                                                                                                list[str]]:
    """What each run is as a trial of the study; why a run is left out. A run without its printed config is the
    configuration --job describes, never the study's: nothing else says what it ran."""
    planned, bad = [], []
    given = run_job.candidate(Candidate()) if run_job is not None else None
    for run in runs:
        name = str(run.path)
        if run.sha256 in done:
            bad.append(f"{name}: already imported as trial {done[run.sha256]} of this study")
            continue
        if run.config is None:
            if given is None:
                bad.append(f"{name}: no verl config in it{' or beside it' if run.kind == 'jsonl' else ''} "
                           "(verl prints it at start): pass --job with this run's verl overrides, or import its "
                           "console log")
                continue
            planned.append(_Planned(run, given, "job"))
            continue
        why = strategy_error(run.config)
        if why is None:
            found = conflicts(setup.job, run.config, setup.cluster.gpus_per_node, setup.cluster.nodes)
            why = f"another workload than the study's: {'; '.join(found[:3])}" if found else None
        if why is None:
            try:
                cand = candidate_from_config(run.config)
            except (TypeError, ValueError) as e:
                why = f"its configuration is not one autotune can represent: {e}"
        if why:
            bad.append(f"{name}: {why}")
            continue
        planned.append(_Planned(run, cand, run.config_source))
    return planned, bad


def _distributions(setup: Setup, cand: Candidate) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any] | None]:
    """Optuna params and distributions of the candidate where the space holds it; else none, and the candidate
    itself as a user attribute (as the Tuner queues configurations from outside the space)."""
    ctx = setup.context
    params = cand.params()
    if not setup.space.contains(params, ctx):
        return {}, {}, params
    projected = setup.space.project(params, ctx)
    dists = {k: CategoricalDistribution(list(setup.space[k].choices)) for k in projected}
    return projected, dists, None


def _record(store: Store, storage: optuna.storages.RDBStorage, study: optuna.Study, name: str, setup: Setup,
            p: _Planned) -> TrialRow:
    run, cand = p.run, p.cand
    res = outcome(run, setup.measure_step)
    ev = setup.evaluate(cand)
    status = TrialStatus(res.status)
    steps = tuple({"step": s, **m} for s, m in sorted(run.steps.items()))
    alloc = [m[verl.M_MAX_MEM_ALLOCATED] for m in run.steps.values() if verl.M_MAX_MEM_ALLOCATED in m]
    reserved = [m[verl.M_MAX_MEM_RESERVED] for m in run.steps.values() if verl.M_MAX_MEM_RESERVED in m]
    params, dists, outside = _distributions(setup, cand)
    attrs = {"origin": "import", "candidate": outside, "status": status.value,
             "reason": units.cut(res.reason, units.OPTUNA_REASON_CHARS), "simulated": False, "layout": cand.layout()}
    frozen = optuna.trial.create_trial(state=TrialState.RUNNING, params=params, distributions=dists)
    trial_id = storage.create_new_trial(study._study_id, template_trial=frozen)
    number = storage.get_trial_number_from_id(trial_id)
    now = utcnow()
    row = TrialRow(
        study=name, number=number, status=status.value, reason=res.reason, origin="import", launched=True,
        simulated=False, backend=BACKEND, candidate_key=cand.key(), params=cand.applied_params(),
        verl_overrides=cand.verl_overrides(), worker=worker_id(),
        predicted_throughput=ev.throughput.throughput if ev.throughput else None,
        predicted_step_s=ev.throughput.step_time if ev.throughput else None,
        predicted_phases=dict(ev.throughput.phases) if ev.throughput else None,
        predicted_peak_gib=ev.memory.peak / 2**30 if ev.memory else None, predicted_memory=setup.memory_record(ev),
        throughput=res.throughput, phase_timings=res.phases or None, peak_memory_gib=None, peak_memory_per_gpu=None,
        framework_memory_gib=max(alloc) if alloc else None, log_path=str(run.path.resolve()),
        log_excerpt=res.excerpt[-6000:], started_at=now, heartbeat_at=now, finished_at=now, duration_s=0.0,
        extra={
            "imported": {"file": str(run.path.resolve()), "sha256": run.sha256, "kind": run.kind,
                         "config_from": p.config_from,
                         "companions": [str(c.resolve()) for c in run.companions] or None},
            "failure": res.failure or None, "measured_steps": [setup.measure_step, setup.measure_step],
            "memory": {"nvml_peak_gib": None, "nvml_note": "GPU memory not measured: an imported run (verl's own "
                       "numbers only)", "verl_max_memory_allocated_gib": max(alloc) if alloc else None,
                       "verl_max_memory_reserved_gib": max(reserved) if reserved else None,
                       "predicted_peak_gib": ev.memory.peak / 2**30 if ev.memory else None},
            "executor": BACKEND,
        },
    )
    store.add_finished_trial(row, steps)
    for k, v in attrs.items():
        if v is not None:
            storage.set_trial_user_attr(trial_id, k, v)
    state = OPTUNA_STATE[status]
    value = res.throughput if state == TrialState.COMPLETE else None
    if state == TrialState.COMPLETE and value is None:
        state = TrialState.FAIL
    storage.set_trial_state_values(trial_id, state=state, values=None if value is None else [value])
    return row


def _lengths(planned: list[_Planned], setup: Setup) -> tuple[tuple[tuple[str, float], ...], ...]:
    """The length metrics at the measured step of the runs that reached it (as the tuner folds in a trial's)."""
    steps = [p.run.steps.get(setup.measure_step, {}) for p in planned]
    found = [step_lengths(m) for m in steps if verl.M_THROUGHPUT in m]
    return tuple(x for x in found if x)


def cmd_import(args: argparse.Namespace) -> int:
    if args.measure_step is not None and args.measure_step < 1:
        raise CLIError("--measure-step must be at least 1")
    run_job = Job.from_file(args.job) if args.job else None
    runs, bad = _read_all(args.files)
    store = existing_store(args.storage) if runs else None
    planned: list[_Planned] = []
    setup = name = row = None
    if runs:
        setup, name, row = _setup(args, store, runs, run_job)
        done = {}
        if row is not None:
            for t in store.trials(name):
                sha = ((t.extra or {}).get("imported") or {}).get("sha256")
                if sha:
                    done[sha] = t.number
        planned, more = _plan(runs, setup, run_job, done)
        bad += more
    order = {str(Path(n)): i for i, n in reversed(list(enumerate(args.files)))}
    for line in sorted(bad, key=lambda ln: order.get(ln.split(": ", 1)[0], len(order))):  # in the order given
        err.print(f"autotune: skipped {line}", markup=False)
    if not planned:
        err.print(f"autotune: error: nothing imported ({len(args.files)} file(s) given); the database is unchanged",
                  markup=False)
        return 2
    assert setup is not None and name is not None
    store = store or Store(args.storage)
    storage = open_storage(args.storage)
    check_writable(store.engine, args.storage)  # a read-only database: one line, before the first write
    if row is None:
        try:
            store.add_study(setup.study_row(name, STUDY_BACKEND, False, Path(setup.space.source).read_text()))
        except Exception:  # another worker made it at the same moment: it is compared on the next import
            if store.get_study(name) is None:
                raise
    study = optuna.create_study(study_name=name, storage=storage, direction="maximize", load_if_exists=True)
    learning = Learning(store, name, setup)  # the tuner's own: refitted below on every measured trial
    warm = learning.warm_start() if row is None else None
    # the lengths the runs measured, not typical ones: the imported trials' predictions and the refit read them
    setup = dataclasses.replace(setup, correction=learning.current, measured_lengths=(
        measured_lengths(store, name, setup.measure_step) if row is not None else ()) + _lengths(planned, setup))
    reference = setup.stock
    imported = 0
    for p in planned:
        try:
            trow = _record(store, storage, study, name, setup, p)
        except TrialTaken as e:
            err.print(f"autotune: skipped {p.run.path}: {e} (a tuner closed it meanwhile); import it again",
                      markup=False)
            continue
        imported += 1
        what = f"{trow.throughput:.1f} tokens/s/GPU at step {setup.measure_step}" if trow.throughput is not None \
            else f"{trow.status}: {units.clip(trow.reason, REASON_WIDTH)}"
        out.print(f"imported {p.run.path} as trial {trow.number} ({label(p.cand, reference)}): {what}", markup=False)
    if warm:
        out.print(warm, markup=False)
    out.print(learning.refit(setup).summary(), markup=False)
    out.print(f"{imported} of {len(args.files)} file(s) imported into study {name} ({safe_url(args.storage)}); "
              f"`autotune status --study {name}` shows them", markup=False)
    return 0 if imported else 2
