"""Real verl 0.9.1 trials as replay landscapes, and the study's first launch on each (issue 23).

    python -m benchmarks.verl_landscapes            # tests/data/real_verl_gpu/*/*.db -> benchmarks/landscapes/verl/
                                                    # and benchmarks/results/first_launch.md

Every measured trial of the campaign's study databases (launched, not simulated, ok or out of memory; each once, from
the newest copy of a resumed study: benchmarks/real_studies.py) becomes a row of a replay table (format:
benchmarks/README.md), one table per (model size, GPU type and count, job): its configuration, status, verl's
`perf/throughput` and per-phase `timing_s/*` at the measured step (where that step compiled a graph anew, at its
other steps: `_past_a_recompile`), and the NVML peak. The job is the study's job with
the node's defaults the trials ran with (the doctor's attention backend), less the paths that only existed on the lent
machine; trials of one size that ran different jobs land in different tables.

Then, per table, autotune's study is run on the replay runner until its first launch: the configuration the model
picks before anything is measured, among the configurations the table holds (a replay study cannot launch anything
else). What must hold (issue 23.5): it runs (no OOM) and is within 90% of the table's best measured throughput, or
under it by less than the measured noise of the two trials (their steps' spread, or their re-runs' across hosts:
`noise_spread`): a tie, which the short trials cannot decide and the report names apart. With two or three rows per
size this checks little; it grows with the campaign, and says how many rows each verdict is of.
Beside it, what each real study launched first (its database's lowest-numbered launched trial) and how that ended,
and what today's model would launch first on the real study's whole space: a replay cannot show that a pick no
trial measured runs, so the report says when today's pick was never measured.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import statistics
import tempfile
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from autotune import verl
from autotune.candidate import Candidate
from autotune.estimate.correction import NO_CORRECTION
from autotune.estimate.lengths import DATA_PROMPTS
from autotune.results import noise
from autotune.results.labels import Labeller
from autotune.search.ranking import make_ranking
from autotune.search.split import InfeasibleSpaceError
from benchmarks import real_studies
from benchmarks.real_cases import DATA, PHASES, catalog_size, measured_trials

HERE = Path(__file__).resolve().parent
OUT = HERE / "landscapes" / "verl"  # beside, not among, the training-phase landscapes (their own benchmarks)
RESULTS = HERE / "results" / "first_launch.md"
PREFIX = "verl-"
GOOD = 0.9  # the first launch's throughput over the table's best that issue 23.5 asks for
# Job keys that name files of the lent machine: a replay answers no file, and a study's fingerprint must not
# depend on where the checkpoint lay.
_MACHINE_PATHS = ("data.train_files", "data.val_files", "actor_rollout_ref.model.path")
# A knob set only under another's value: the replay table needs the other as a column to tell when (replay.py).
_CONTROLS = {"recompute_method": "recompute", "recompute_num_layers": "recompute", "recompute_modules": "recompute",
             "ppo_max_token_len_per_gpu": "use_dynamic_bsz", "log_prob_max_token_len_per_gpu": "use_dynamic_bsz",
             "ppo_micro_batch_size_per_gpu": "use_dynamic_bsz", "log_prob_micro_batch_size_per_gpu": "use_dynamic_bsz",
             "optimizer_offload_fraction": "optimizer_cpu_offload", "vpp": "pp"}


@dataclass(frozen=True)
class Measured:
    """One real trial, as a replay row sees it."""

    source: str
    params: dict[str, Any]
    status: str
    throughput: float | None
    peak_gib: float | None
    phases: dict[str, float]
    spread: float | None = None  # the trial's measured noise (autotune/results/noise.py), None where not measured


def _job(setup: Any, row: Any) -> dict[str, Any]:
    job = setup.job.with_node_defaults((row.extra or {}).get("job_defaults") or {})
    return {k: v for k, v in {**job.mapping, **dict(job.node_defaults)}.items() if k not in _MACHINE_PATHS}


def _key(setup: Any, job: dict[str, Any]) -> tuple[str, str, int, str]:
    return (catalog_size(setup.model), setup.cluster.gpu.name, setup.cluster.world_size,
            yaml.safe_dump(job, sort_keys=True))


def collect(dbs: list[Path]) -> dict[tuple[str, str, int, str], tuple[dict[str, Any], list[Measured]]]:
    """(model, gpu type, gpus, job as YAML) -> (job, the measured trials that ran it)."""
    groups: dict[tuple[str, str, int, str], tuple[dict[str, Any], list[Measured]]] = {}
    for db, store, setup, row in measured_trials(dbs):
        job = _job(setup, row)
        key = _key(setup, job)
        phases = {p: float(v) for p, v in (row.phase_timings or {}).items() if p in (*PHASES, "step")}
        throughput = row.throughput if row.status == "ok" else None
        compiled = real_studies.recompiled(db.parent.name, row.study, row.number, db.stem) or ()
        if throughput and setup.measure_step in compiled:
            throughput, phases = _past_a_recompile(store.steps(row.id), compiled, throughput, phases)
        groups.setdefault(key, (job, []))[1].append(Measured(
            f"{db.parent.name}/{db.name}/{row.study}#{row.number}", dict(row.params), row.status,
            throughput, row.peak_memory_gib, phases, noise.spread(row.extra)))
    return groups


def _past_a_recompile(steps: list[Any], compiled: tuple[int, ...], throughput: float, phases: dict[str, float]
                      ) -> tuple[float, dict[str, float]]:
    """A trial whose measured step compiled a graph anew (torch.compile's recompile, mostly a study's cold first
    trial: trial_cost.md, "Steps that recompiled") as a long run measures it: the median throughput and phase times
    of its other steps from 2 on that compiled nothing. calibration.md judges the model past a recompile by the
    trial's other steps too (`Case.measured_past_a_recompile`), but keeps a step that compiled as well; a row reads
    none, so lease 34's c-3b-h10 #0, which compiled in every step from 2 on, keeps its step 3. The compile's one-off
    seconds belong to the trial's place in its study, not to its configuration: lease 63's cold 1.5B dyn12k/32k read
    5,486.5 tokens/s/GPU at step 3 (update 16.8 s) against 7,480.2 at step 2. Unchanged where no other step ran."""
    others = [dict(s.metrics) for s in steps if s.step >= 2 and s.step not in compiled]
    values = [float(m[verl.M_THROUGHPUT]) for m in others if m.get(verl.M_THROUGHPUT) is not None]
    if not values:
        return throughput, phases
    steady = {p: statistics.median(vs) for p in phases
              if (vs := [float(m[verl.PHASE_TIMINGS[p]]) for m in others if m.get(verl.PHASE_TIMINGS[p]) is not None])}
    return statistics.median(values), steady


@dataclass(frozen=True)
class RealFirst:
    """What a real study launched first, and what today's model would launch first on the same space."""

    source: str  # database / study #number
    label: str
    origin: str
    status: str
    today: str  # today's first launch on the study's space (the uncorrected model, nothing measured)
    today_measured: str  # how today's pick ended where some trial measured it, else "not measured"
    predicted_fits: bool = True  # the study's own memory verdict when it launched it (a plan may enqueue an OOM)


def real_first_launches(dbs: list[Path]) -> dict[tuple[str, str, int, str], list[RealFirst]]:
    """Per table key (as `collect`'s), each real study's first launch: its lowest-numbered launched trial; and how
    today's first pick ended where any study of the same table measured it. A study whose row kept no lengths is
    judged at the prompt lengths its first launch was predicted at (`data_prompts`)."""
    from autotune.search.plan import first_launch as plan_first

    studies = []
    ended: dict[tuple[str, str, int, str], dict[str, str]] = defaultdict(dict)
    for db, store, study in real_studies.studies(dbs):
        rows = [r for r in store.trials(study.name) if r.launched and not r.simulated and r.params]
        if not rows:
            continue
        first = min(rows, key=lambda r: r.number)
        setup = real_studies.setup(study)
        setup = dataclasses.replace(setup, job=setup.job.with_node_defaults(
            (first.extra or {}).get("job_defaults") or {}))
        if setup.prompt_lengths is None and setup.response_length is None:
            setup = dataclasses.replace(setup, prompt_lengths=data_prompts(first))
        key = _key(setup, _job(setup, first))
        ended[key].update({r.candidate_key: r.status for r in rows if r.status in ("ok", "oom")
                           and not real_studies.killed_for_the_node(setup, r)})
        studies.append((db, setup, first, key))
    out: dict[tuple[str, str, int, str], list[RealFirst]] = defaultdict(list)
    for db, setup, first, key in studies:
        label = Labeller(setup.stock)
        try:
            today, _ = plan_first(make_ranking(setup), NO_CORRECTION, [])
        except InfeasibleSpaceError:
            today = None
        out[key].append(RealFirst(
            f"{db.parent.name}/{db.name}/{first.study}#{first.number}", label(first.params), first.origin,
            first.status, label(today.candidate.applied_params()) if today else "nothing (no setting fits)",
            ended[key].get(today.candidate.key(), "not measured") if today else "-",
            (first.predicted_memory or {}).get("fits") is not False))
    return out


def data_prompts(first: Any) -> tuple[float, float, str] | None:
    """The prompt lengths a study read from its job's data, as its first launch's memory record kept them, where
    its row kept none (a study made before StudyRow.lengths): a live study reads the data before it launches, a
    rebuild from the database cannot, and the first pick depends on them (lease 42's 7B study launched dyn32k/96k
    at its data's prompts, 161 tokens on average and 243 at most; at the job's 512 the pick is dyn24k/96k)."""
    known = (first.predicted_memory or {}).get("lengths") or {}
    sources = known.get("sources") or []
    if not (sources and str(sources[0]).startswith(DATA_PROMPTS) and known.get("prompt_max")):
        return None
    return float(known["prompt_mean"]), float(known["prompt_max"]), str(sources[0])


def write_table(out: Path, name: str, model: str, gpu: str, gpus: int, job: dict[str, Any],
                runs: dict[str, list[Measured]]) -> Path:
    """NAME.csv + NAME.meta.yaml from the table's trials by configuration (`by_configuration`). Parameter columns:
    every knob some row sets apart from the job's own value. A configuration measured more than once is one row, the
    mean of its runs (`_merged`): a re-run is a noise sample
    (lease 22's two re-runs on the H200 were planned for an H100, lease 24 re-ran lease 4's three 0.5B configurations
    to time their start-up with the bytecode cache, later leases re-ran rows on other hosts). Its noise_spread is the
    larger of the later trial's own step-to-step spread and the re-runs' spread (max - min over their mean
    throughput): the same configuration measured on two hosts is the noise a table of several hosts' trials holds
    (lease 11's and lease 35's H100s ran the 1.5B's dyn12k/96k 8,341.6 and 6,662.9 tokens/s/GPU)."""
    from autotune.job import Job

    base = Job.from_mapping(job).candidate(Candidate())
    kept = [_merged(ran) for ran in runs.values()]
    trials = sum(len(ran) for ran in runs.values())
    full = [Candidate.from_params(t.params, base).params() for t in kept]
    own = base.params()
    varied = {n for n in Candidate.param_names()
              if any(f.get(n) is not None for f in full) and any(f.get(n) != own.get(n) for f in full)}
    varied |= {_CONTROLS[n] for n in varied if n in _CONTROLS} | {"tp", "rollout_tp"}
    names = [n for n in Candidate.param_names() if n in varied]
    timing_cols = [f"{p}_s" for p in PHASES]
    csv_path = out / f"{name}.csv"
    with csv_path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow([*names, "status", "throughput", "peak_mem_gib", "step_time_s", *timing_cols, "noise_spread",
                    "trial"])
        for t, params in zip(kept, full, strict=True):
            w.writerow([_cell(params.get(n)) for n in names] + [
                t.status, f"{t.throughput:.1f}" if t.throughput else "",
                f"{t.peak_gib:.2f}" if t.peak_gib is not None else "",
                f"{t.phases['step']:.3f}" if "step" in t.phases else "",
                *(f"{t.phases[p]:.3f}" if p in t.phases else "" for p in PHASES),
                f"{t.spread:.4f}" if t.spread is not None else "", t.source])
    meta = {"source": "real verl 0.9.1 GRPO trials on the lent GPU (benchmarks/gpu_verl/, issue 23), from "
                      + ", ".join(sorted({t.source.split('/')[0] for t in kept})),
            "model": model, "gpu_type": gpu, "gpus": gpus, "objective": "step", "job": job,
            "notes": ["throughput: verl's perf/throughput (tokens/s/GPU) at the measured step; peak_mem_gib: the "
                      "NVML peak (the highest of a configuration's runs); *_s: verl's timing_s at that step (the "
                      "runs' mean throughput and times where a configuration ran more than once); noise_spread: the "
                      "trial's step-to-step spread, or its configuration's re-runs' (max - min over their mean) where "
                      "larger",
                      f"written by python -m benchmarks.verl_landscapes from {trials} trials "
                      f"({trials - len(kept)} re-runs of a configuration merged into its row: the runs' mean)"]}
    (out / f"{name}.meta.yaml").write_text(yaml.safe_dump(meta, sort_keys=False, width=120))
    return csv_path


def by_configuration(job: dict[str, Any], trials: list[Measured]) -> dict[str, list[Measured]]:
    """Candidate key -> the trials that ran it (a table's row), oldest first."""
    from autotune.job import Job

    base = Job.from_mapping(job).candidate(Candidate())
    out: dict[str, list[Measured]] = {}
    for t in trials:
        out.setdefault(Candidate.from_params(t.params, base).key(), []).append(t)
    return out


def _merged(runs: list[Measured]) -> Measured:
    """A configuration's row from its runs, oldest first: the later trial (its status and source), with the mean
    throughput and phase times of the runs that measured them and the highest peak, where more than one ran. The mean
    makes a row independent of which host ran it last: lease 42 re-ran lease 37's 3B first launch at 6,191.5 against
    7,312.1, which alone moved the table's first launch from 96 % of the best to 82 %."""
    last = runs[-1]
    ran = [t for t in runs if t.status == "ok" and t.throughput]
    if last.status != "ok" or len(ran) < 2:
        return dataclasses.replace(last, spread=_rerun_spread(runs))
    phases = {p: sum(vs) / len(vs) for p in last.phases if (vs := [t.phases[p] for t in ran if p in t.phases])}
    peaks = [t.peak_gib for t in ran if t.peak_gib is not None]
    return dataclasses.replace(last, throughput=sum(t.throughput or 0.0 for t in ran) / len(ran), phases=phases,
                               peak_gib=max(peaks) if peaks else None, spread=_rerun_spread(runs))


def _rerun_spread(runs: list[Measured]) -> float | None:
    """The larger of the kept (last) trial's own spread and its re-runs' (max - min over the mean), None where
    neither was measured."""
    thr = [t.throughput for t in runs if t.throughput]
    across = (max(thr) - min(thr)) / (sum(thr) / len(thr)) if len(thr) > 1 else None
    found = [v for v in (runs[-1].spread, across) if v is not None]
    return max(found) if found else None


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


@dataclass(frozen=True)
class FirstLaunch:
    table: str
    rows: int
    label: str
    status: str
    throughput: float | None
    best: float
    best_label: str
    # The larger measured noise (step-to-step spread) of the first launch's and the best's trials, None where neither
    # measured it: a gap within it is a tie, as `best` calls it (autotune/results/noise.py leaders_tie).
    noise: float | None = None
    first_key: str = ""  # the candidate keys of the first launch's row and the best's: their runs, per host
    best_key: str = ""
    # Per lease (one machine) where both rows ran: the first launch's mean throughput over the best's (`one_host`).
    one_host: tuple[tuple[str, float], ...] = ()

    @property
    def share(self) -> float:
        return (self.throughput or 0.0) / self.best if self.best else 0.0

    @property
    def tied(self) -> bool:
        """Under GOOD of the best, but within the measured noise of it: which is faster the trials do not say."""
        return (self.status == "ok" and self.share < GOOD and self.noise is not None
                and noise.within_noise(self.best, self.throughput or 0.0, self.noise))

    @property
    def good(self) -> bool:
        return self.status == "ok" and (self.share >= GOOD or self.tied)


def first_launch(table_path: Path) -> FirstLaunch:
    """Run autotune's study on the table's replay until it launches once."""
    from autotune.runners.replay import ReplayError, ReplayRunner, ReplayTable
    from autotune.study.study import Tuner

    try:
        table = ReplayTable.load(table_path)
    except ReplayError:  # no row ran: a replay runner refuses such a table, the study cannot start on it
        rows = sum(1 for _ in csv.DictReader(table_path.open()))
        return FirstLaunch(table_path.name, rows, "nothing: no measured row ran, a replay has nothing to launch",
                           "none", None, 0.0, "none ran")
    setup = table.setup()
    runner = ReplayRunner(table)
    label = Labeller(setup.stock)
    ran = [r for r in table.rows if r.status == "ok"]
    best, best_label, best_key = 0.0, "none ran", ""
    base = setup.job.candidate(Candidate())
    if ran:
        top = table.best
        best = top.throughput or 0.0
        top_candidate = Candidate.from_params(top.params, base)
        best_label, best_key = label(top_candidate.params()), top_candidate.key()
    row = None
    with tempfile.TemporaryDirectory() as tmp:
        try:
            tuner = Tuner(setup, runner, f"sqlite:///{tmp}/fl.db", study_name="first-launch", seed=0,
                          space_text=table.space_text(), workdir=Path(tmp))
        except InfeasibleSpaceError:  # the model predicts that none of the table's rows can run
            return FirstLaunch(table_path.name, len(table.rows), "nothing: no row is predicted to fit", "none",
                               None, best, best_label)
        tuner.seed_study()
        for _ in range(50):
            row = tuner.step()
            if row.launched:
                break
        tuner.storage.engine.dispose()
        tuner.store.engine.dispose()
    if row is None or not row.launched:
        return FirstLaunch(table_path.name, len(table.rows), "nothing launched", "none", None, best, best_label)
    replayed = table.keys(base).get(row.candidate_key)
    spreads = [float(r.extra["noise_spread"]) for r in (replayed, table.best if ran else None)
               if r is not None and r.extra.get("noise_spread")]
    return FirstLaunch(table_path.name, len(table.rows), label(row.params), row.status, row.throughput, best,
                       best_label, max(spreads) if spreads else None, row.candidate_key, best_key)


def one_host(runs: dict[str, list[Measured]], first_key: str, best_key: str) -> tuple[tuple[str, float], ...]:
    """Per lease where the first launch's configuration and the best's both ran: the first's mean throughput over the
    best's there. A table's row is the mean of its runs on every host, and the hosts differ by more than the rows do
    (the 0.5B's dyn32k/96k on an H100 ran 16.5 s a step in lease 4, 12.7 s in lease 62); on one machine the two
    configurations meet as a user's study meets them."""
    if not first_key or not best_key or first_key == best_key:
        return ()

    def by_lease(key: str) -> dict[str, list[float]]:
        out: dict[str, list[float]] = defaultdict(list)
        for t in runs.get(key, []):
            if t.status == "ok" and t.throughput:
                out[t.source.split("/")[0]].append(t.throughput)
        return out

    first, best = by_lease(first_key), by_lease(best_key)
    return tuple((lease, (sum(first[lease]) / len(first[lease])) / (sum(best[lease]) / len(best[lease])))
                 for lease in sorted(first.keys() & best.keys()))


def report(results: list[FirstLaunch], firsts: dict[str, list[RealFirst]]) -> str:
    lines = ["# The study's first launch on the real verl landscapes (issue 23.5)", "",
             "Written by `python -m benchmarks.verl_landscapes`. Must hold: a study's first launch runs and reaches "
             f"{GOOD:.0%} of the best, or ties it within the two trials' measured noise.", "",
             "## What the real studies launched first", "",
             "Each real study's first launch (its database's lowest-numbered launched trial, with the origin the "
             "study gave it) and how it ended; then what today's model launches first on the same study's whole "
             "space (uncorrected, nothing measured: safe settings first, `autotune/search/plan.py` first_launch) "
             "and how that setting ended where a trial measured it.", "",
             "| table | real study's first launch | origin | ended | today's first launch | ended |",
             "|---|---|---|---|---|---|"]
    for r in results:
        for f in firsts.get(r.table, []):
            lines.append(f"| {r.table} | {f.source}: {f.label} | {f.origin} | "
                         f"{f.status if f.status == 'ok' else '**' + f.status + '**'} | {f.today} | "
                         f"{f.today_measured} |")
    real = [f for fs in firsts.values() for f in fs]
    bad = [f for f in real if f.status != "ok"]
    picked = [f for f in real if f.origin != "user"]  # the model's own first picks, not a plan's --enqueue
    asked = [f for f in bad if f.origin == "user" and not f.predicted_fits]  # an OOM the plan meant to measure
    lines += ["", f"{len(real) - len(bad)} of {len(real)} real studies' first launches ran "
              f"({sum(f.status == 'ok' for f in picked)} of {len(picked)} the model's own picks; the others a "
              "configuration the plan enqueued)"
              + (": " + "; ".join(f"{f.source} ({f.label}) ended {f.status}" for f in bad) if bad else "") + "."
              + (f" {len(asked)} of them the plan enqueued although the study predicted it out of memory, to "
                 "measure an out-of-memory trial." if asked else ""),
              ""]
    for f in bad:
        today = (f"{f.today} first instead, which ended {f.today_measured} in another study of the table."
                 if f.today_measured in ("ok", "oom") else
                 f"{f.today} first instead, which no trial measured: whether it runs only a new run can show.")
        lines.append(f"- {f.source}: the plan enqueued it first although the study predicted it out of memory, and "
                     f"it ended {f.status} as predicted: not a launch the model makes. Today's model launches {today}"
                     if f in asked else
                     f"- {f.source}: issue 23.5 did not hold for that study. Today's model launches {today}")
    lines += ["", "## Today's model, replayed on the measured rows", "",
              "Per replay table of real verl 0.9.1 trials (`benchmarks/landscapes/verl/`, every measured trial a "
              "row, out-of-memory ones too), the configuration autotune's study launches first on the replay "
              "runner (the uncorrected model's pick among the table's measured configurations), against the "
              "table's best. A replay can only launch a measured row: where the model's own first pick was never "
              "measured (above), the replay shows what the same rule picks among the measured rows, not that "
              "pick.", "",
              "| table | rows | first launch | status | tokens/s/GPU | of the best | best measured | holds | "
              "of the best on one host (lease) |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        thr = f"{r.throughput:.1f}" if r.throughput else "-"
        best = f"{r.best_label} ({r.best:.1f})" if r.best else r.best_label
        holds = (f"yes: a tie within the measured noise ({r.noise:.0%})" if r.tied else
                 "yes" if r.good else "**no**")
        host = ("the same row" if r.first_key and r.first_key == r.best_key else
                ", ".join(f"{share:.0%} ({lease})" for lease, share in r.one_host) or "never on one host")
        lines.append(f"| {r.table} | {r.rows} | {r.label} | {r.status} | {thr} | {r.share:.0%} | {best} | {holds} | "
                     f"{host} |")
    within = sum(r.good and not r.tied for r in results)
    tied = [r for r in results if r.tied]
    lines += ["", f"{within} of {len(results)} tables: the replayed first launch runs and is within {GOOD:.0%} of "
              "the best" + (f"; {len(tied)} more where it runs and is under {GOOD:.0%} of the best but within the "
                            "measured noise of it, a tie that the short trials cannot decide (as `autotune best` "
                            "says of such leaders): " + "; ".join(
                                f"{r.table} at {r.share:.0%}, the noise {r.noise:.0%}" for r in tied)
                            if tied else "") + ".", "",
              "A row is the mean of its runs on every host that ran it, a run whose measured step compiled a graph "
              "anew (a study's cold first trial, mostly) read by its other steps (`_past_a_recompile`); the last "
              "column compares the two rows where one machine ran both (`one_host`: the first launch's mean there "
              "over the best's), as one user's study meets them."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--report", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for old in args.out.glob(f"{PREFIX}*"):
        old.unlink()
    dbs = sorted(args.data.glob("*/*.db"))
    groups = collect(dbs)
    real = real_first_launches(dbs)
    per_name: dict[str, int] = defaultdict(int)
    tables: list[tuple[Path, dict[str, list[Measured]]]] = []
    firsts: dict[str, list[RealFirst]] = {}
    for key, (job, trials) in sorted(groups.items(), key=lambda kv: kv[0][:3]):
        model, gpu, gpus, _ = key
        stem = f"{PREFIX}{model}-{gpu}-g{gpus}-{job.get(verl.ATTENTION_BACKEND) or 'default'}"
        per_name[stem] += 1
        name = stem + (f"-j{per_name[stem]}" if per_name[stem] > 1 else "")
        runs = by_configuration(job, trials)
        path = write_table(args.out, name, model, gpu, gpus, job, runs)
        tables.append((path, runs))
        firsts[path.name] = real.get(key, [])
    results = [dataclasses.replace(r, one_host=one_host(runs, r.first_key, r.best_key))
               for path, runs in tables for r in [first_launch(path)]]
    text = report(results, firsts)
    args.report.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
