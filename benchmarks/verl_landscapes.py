"""Real verl 0.9.1 trials as replay landscapes, and the study's first launch on each (issue 23).

    python -m benchmarks.verl_landscapes            # tests/data/real_verl_gpu/*/*.db -> benchmarks/landscapes/verl/
                                                    # and benchmarks/results/first_launch.md

Every measured trial of the campaign's study databases (launched, not simulated, ok or out of memory) becomes a row
of a replay table (format: benchmarks/README.md), one table per (model size, GPU type and count, job): its
configuration, status, verl's `perf/throughput` and per-phase `timing_s/*` at the measured step, and the NVML peak.
The job is the study's job with the node's defaults the trials ran with (the doctor's attention backend), less the
paths that only existed on the lent machine; trials of one size that ran different jobs land in different tables.

Then, per table, autotune's study is run on the replay runner until its first launch: the configuration the model
picks before anything is measured, among the configurations the table holds (a replay study cannot launch anything
else). What must hold (issue 23.5): it runs (no OOM) and is within 90% of the table's best measured throughput. With
two or three rows per size this checks little; it grows with the campaign, and says how many rows each verdict is of.
"""

from __future__ import annotations

import argparse
import csv
import tempfile
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from autotune import verl
from autotune.candidate import Candidate
from autotune.results.labels import Labeller
from benchmarks.calibration import DATA, PHASES, _size, measured_trials

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


def _job(setup: Any, row: Any) -> dict[str, Any]:
    job = setup.job.with_node_defaults((row.extra or {}).get("job_defaults") or {})
    return {k: v for k, v in {**job.mapping, **dict(job.node_defaults)}.items() if k not in _MACHINE_PATHS}


def collect(dbs: list[Path]) -> dict[tuple[str, str, int, str], tuple[dict[str, Any], list[Measured]]]:
    """(model, gpu type, gpus, job as YAML) -> (job, the measured trials that ran it)."""
    groups: dict[tuple[str, str, int, str], tuple[dict[str, Any], list[Measured]]] = {}
    for db, _, setup, row in measured_trials(dbs):
        job = _job(setup, row)
        key = (_size(setup.model), setup.cluster.gpu.name, setup.cluster.world_size,
               yaml.safe_dump(job, sort_keys=True))
        phases = {p: float(v) for p, v in (row.phase_timings or {}).items() if p in (*PHASES, "step")}
        groups.setdefault(key, (job, []))[1].append(Measured(
            f"{db.parent.name}/{db.name}/{row.study}#{row.number}", dict(row.params), row.status,
            row.throughput if row.status == "ok" else None, row.peak_memory_gib, phases))
    return groups


def write_table(out: Path, name: str, model: str, gpu: str, gpus: int, job: dict[str, Any],
                trials: list[Measured]) -> Path:
    """NAME.csv + NAME.meta.yaml. Parameter columns: every knob some row sets apart from the job's own value; a
    configuration measured twice keeps its later trial (the campaign re-ran nothing on purpose; a re-run is a noise
    sample, and the later one ran on warmer caches like the rest of the table)."""
    from autotune.job import Job

    base = Job.from_mapping(job).candidate(Candidate())
    by_key: dict[str, Measured] = {}
    for t in trials:
        by_key[Candidate.from_params(t.params, base).key()] = t
    kept = list(by_key.values())
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
        w.writerow([*names, "status", "throughput", "peak_mem_gib", "step_time_s", *timing_cols, "trial"])
        for t, params in zip(kept, full, strict=True):
            w.writerow([_cell(params.get(n)) for n in names] + [
                t.status, f"{t.throughput:.1f}" if t.throughput else "",
                f"{t.peak_gib:.2f}" if t.peak_gib is not None else "",
                f"{t.phases['step']:.3f}" if "step" in t.phases else "",
                *(f"{t.phases[p]:.3f}" if p in t.phases else "" for p in PHASES), t.source])
    meta = {"source": "real verl 0.9.1 GRPO trials on the lent GPU (benchmarks/gpu_verl/, issue 23), from "
                      + ", ".join(sorted({t.source.split('/')[0] for t in kept})),
            "model": model, "gpu_type": gpu, "gpus": gpus, "objective": "step", "job": job,
            "notes": ["throughput: verl's perf/throughput (tokens/s/GPU) at the measured step; peak_mem_gib: the "
                      "NVML peak; *_s: verl's timing_s at that step",
                      f"written by python -m benchmarks.verl_landscapes from {len(trials)} trials "
                      f"({len(trials) - len(kept)} re-runs of a configuration dropped)"]}
    (out / f"{name}.meta.yaml").write_text(yaml.safe_dump(meta, sort_keys=False, width=120))
    return csv_path


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

    @property
    def share(self) -> float:
        return (self.throughput or 0.0) / self.best if self.best else 0.0

    @property
    def good(self) -> bool:
        return self.status == "ok" and self.share >= GOOD


def first_launch(table_path: Path) -> FirstLaunch:
    """Run autotune's study on the table's replay until it launches once."""
    from autotune.runners.replay import ReplayRunner, ReplayTable
    from autotune.study.study import Tuner

    table = ReplayTable.load(table_path)
    setup = table.setup()
    runner = ReplayRunner(table)
    label = Labeller(setup.stock)
    with tempfile.TemporaryDirectory() as tmp:
        tuner = Tuner(setup, runner, f"sqlite:///{tmp}/fl.db", study_name="first-launch", seed=0,
                      space_text=table.space_text(), workdir=Path(tmp))
        tuner.seed_study()
        row = None
        for _ in range(50):
            row = tuner.step()
            if row.launched:
                break
        tuner.storage.engine.dispose()
        tuner.store.engine.dispose()
    best = table.best
    best_cand = Candidate.from_params(best.params, setup.job.candidate(Candidate()))
    if row is None or not row.launched:
        return FirstLaunch(table_path.name, len(table.rows), "nothing launched", "none", None,
                           best.throughput or 0.0, label(best_cand.params()))
    return FirstLaunch(table_path.name, len(table.rows), label(row.params), row.status, row.throughput,
                       best.throughput or 0.0, label(best_cand.params()))


def report(results: list[FirstLaunch]) -> str:
    lines = ["# The study's first launch on the real verl landscapes (issue 23.5)", "",
             "Written by `python -m benchmarks.verl_landscapes`: per replay table of real verl 0.9.1 trials "
             "(`benchmarks/landscapes/verl/`), the configuration autotune's study launches first (the uncorrected "
             "model's pick among the table's measured configurations), against the table's best. Must hold: it "
             f"runs and reaches {GOOD:.0%} of the best.", "",
             "| table | rows | first launch | status | tokens/s/GPU | of the best | best measured | holds |",
             "|---|---|---|---|---|---|---|---|"]
    for r in results:
        thr = f"{r.throughput:.1f}" if r.throughput else "-"
        lines.append(f"| {r.table} | {r.rows} | {r.label} | {r.status} | {thr} | {r.share:.0%} | "
                     f"{r.best_label} ({r.best:.1f}) | {'yes' if r.good else '**no**'} |")
    held = sum(r.good for r in results)
    lines += ["", f"{held} of {len(results)} tables: the first launch runs and is within {GOOD:.0%} of the best."]
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
    groups = collect(sorted(args.data.glob("*/*.db")))
    per_name: dict[str, int] = defaultdict(int)
    tables = []
    for (model, gpu, gpus, _), (job, trials) in sorted(groups.items(), key=lambda kv: kv[0][:3]):
        if not any(t.status == "ok" for t in trials):
            continue
        stem = f"{PREFIX}{model}-{gpu}-g{gpus}-{job.get(verl.ATTENTION_BACKEND) or 'default'}"
        per_name[stem] += 1
        name = stem + (f"-j{per_name[stem]}" if per_name[stem] > 1 else "")
        tables.append(write_table(args.out, name, model, gpu, gpus, job, trials))
    text = report([first_launch(t) for t in tables])
    args.report.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
