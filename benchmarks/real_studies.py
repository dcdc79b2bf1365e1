"""Each real study once, from the committed study databases (tests/data/real_verl_gpu/<lease>/*.db).

A lease that resumes a study commits the study's database again: lease 10's c-3b.db holds lease 7's c-3b trials 0-3
again and its new trial 4; lease 12's c-7b.db holds lease 9's c-7b (which held lease 8's trial 0). Read naively, a
trial counts once per copy. A copy is superseded when another database holds a study of the same name whose launched
trials include all of the copy's launched trials (the same number, started at the same instant) and more; of copies
with the same trials, the last database in path order is kept (lease folders sort by date). A trial is then read from
the newest copy that holds it, and its committed logs may lie in an earlier lease's folder (`trial_dir`).

A trial stopped after its log held the measured step (lease 25's c-3b-h3 #2: the lease's deadline SIGTERMed it in step
4, the extra step that measures the noise) measured what an ok trial measures, but the tuner recorded it interrupted,
with nothing of its steps. The reports read such a trial as measured (`read_in_cut`: status ok, its steps from its
committed `metrics.jsonl`, its timings from its time-stamped console, its peak from its NVML trace; `extra[CUT]` says
what stopped it); the committed database is left as it is. A trial interrupted before its measured step (lease 4's
c-0.5b #3, lease 6's c-0.5b-l6 #0: step 1 only) stays out.
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import types
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune import verl
from autotune.results import memory_trace, timeline
from autotune.store.schema import TrialRow
from autotune.store.store import Store
from autotune.verl.log import parse_jsonl_record, recompiled_steps_in_stamps, stamp_milestones

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "real_verl_gpu"
TrialKey = tuple[int, str]  # a trial's number and its start, the same in every copy of its study


@dataclass(frozen=True)
class Copy:
    """One study as one database holds it."""

    db: Path
    name: str
    trials: frozenset[TrialKey]  # its launched trials

    def superseded_by(self, other: Copy) -> bool:
        if other.name != self.name or other.db == self.db or not self.trials <= other.trials:
            return False
        return len(other.trials) > len(self.trials) or str(other.db) > str(self.db)


def _key(row: Any) -> TrialKey:
    return row.number, row.started_at.isoformat() if row.started_at else ""


def copies(dbs: Iterable[Path]) -> list[Copy]:
    """Every study of every database, with its launched trials."""
    out = []
    for db in sorted(Path(d) for d in dbs):
        store = Store(f"sqlite:///{db}")
        try:
            for study in store.list_studies():
                out.append(Copy(db, study.name, frozenset(
                    _key(r) for r in store.trials(study.name) if r.launched and not r.simulated)))
        finally:
            store.engine.dispose()
    return out


def kept(cs: list[Copy]) -> list[Copy]:
    """The copies no other copy supersedes: one per study."""
    return [c for c in cs if not any(c.superseded_by(o) for o in cs)]


def studies(dbs: Iterable[Path]) -> Iterator[tuple[Path, Any, Any]]:
    """(database, its store, study row) of each real study once, its superseded copies skipped (module docstring);
    the store reads the study's cut trials in as measured (`ReadIn`). A database's store is disposed of once its
    studies are yielded."""
    keep = {(c.db, c.name) for c in kept(copies(dbs))}
    for db in sorted({c[0] for c in keep}):
        store = Store(f"sqlite:///{db}")
        try:
            for study in store.list_studies():
                if (db, study.name) in keep:
                    yield db, ReadIn(db, store, study), study
        finally:
            store.engine.dispose()


CUT = "cut"  # the key of a read-in trial's extra: what stopped it after its measured step, in words
_STAMP = re.compile(r"^\[\s*(?P<t>[\d.]+)\] (?P<line>.*)$")
_STEP_LINE = re.compile(r"(?:^|\s)step:(?P<step>\d+) - ")


def console_times(path: Path) -> tuple[dict[str, float], dict[int, float], float | None]:
    """From a trial's time-stamped console (`verl.ts.log`, each line prefixed by the seconds since launch, as the
    runner writes it): each start-up milestone's first line, each step's line, and the last line's seconds."""
    milestones: dict[str, float] = {}
    step_at: dict[int, float] = {}
    last = None
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return {}, {}, None
    for raw in text.splitlines():
        m = _STAMP.match(raw)
        if not m:
            continue
        t, line = float(m["t"]), m["line"]
        last = t
        stamp_milestones(milestones, t, line)
        if (s := _STEP_LINE.search(line)) is not None:
            step_at.setdefault(int(s["step"]), t)
    return milestones, step_at, last


def _value(text: str) -> Any:
    try:
        return json.loads(text)  # true -> True, 1 -> 1
    except ValueError:
        return text


def read_in_cut(db: Path, row: Any, study: Any, defaults: Iterable[str] = ()) -> tuple[Any, list[Any]] | None:
    """(the trial as measured, its steps) of an interrupted trial whose committed metrics hold the study's measured
    step (module docstring); None for any other trial. `defaults`: the node's default keys its study's other trials
    recorded (`extra["job_defaults"]`), read back from the trial's recorded command."""
    if row.status != "interrupted" or not row.launched or row.simulated or not row.params:
        return None
    folder = trial_dir(db, row, holding="metrics.jsonl")
    if folder is None:
        return None
    steps = {}
    for line in (folder / "metrics.jsonl").read_text(errors="replace").splitlines():
        if (parsed := parse_jsonl_record(line)) is not None and parsed[0] >= verl.FIRST_STEP:
            steps.setdefault(parsed[0], {}).update(parsed[1])
    at = steps.get(study.measure_step) or {}
    if at.get(verl.M_THROUGHPUT) is None or at.get(verl.PHASE_TIMINGS["step"]) is None:
        return None
    try:
        argv = json.loads((folder / "command.json").read_text()).get("argv") or []
    except (OSError, ValueError):
        argv = []
    given = dict(a.split("=", 1) for a in argv if "=" in a)
    milestones, step_at, last = console_times(folder / "verl.ts.log")
    trace = memory_trace.read_trace(folder / "gpu.csv")
    peak = max((used for _, used in trace), default=None)
    alloc = [m[verl.M_MAX_MEM_ALLOCATED] for m in steps.values() if verl.M_MAX_MEM_ALLOCATED in m]
    done = max(steps)
    cut = (f"{(row.reason or 'interrupted').split(';')[0]} in step {done + 1}, after its measured step "
           f"{study.measure_step}" + (" (the extra step that measures the noise)" if done == study.measure_step else "")
           + f": steps {verl.FIRST_STEP}-{done} read from its committed log")
    timings = {f"{k}_s": v for k, v in milestones.items()}
    if study.measure_step in step_at:
        timings["measured_s"] = step_at[study.measure_step]
    if last is not None:
        timings["wall_s"] = last  # its console's last line: the run was stopped, not ended
    extra = {**(row.extra or {}), CUT: cut, "measured_steps": [study.measure_step, study.measure_step],
             "job_defaults": {k: _value(given[k]) for k in defaults if k in given},
             "timings": timings, timeline.SPANS: timeline.step_spans(step_at, steps)}
    fields = {c.key: getattr(row, c.key) for c in TrialRow.__table__.columns}
    fields.update(
        status="ok", reason=f"measured {at[verl.M_THROUGHPUT]:.1f} tokens/s/GPU (step {study.measure_step}); {cut}",
        throughput=float(at[verl.M_THROUGHPUT]),
        phase_timings={p: float(at[k]) for p, k in verl.PHASE_TIMINGS.items() if at.get(k) is not None},
        peak_memory_gib=peak, peak_memory_per_gpu=[peak] if peak is not None else None,
        framework_memory_gib=max(alloc) if alloc else None, extra=extra)
    return (types.SimpleNamespace(**fields),
            [types.SimpleNamespace(trial_id=row.id, step=s, metrics=m) for s, m in sorted(steps.items())])


class ReadIn:
    """A study database's store as the reports read it: `trials` and `steps` with the study's cut trials read in as
    measured (`read_in_cut`); anything else is the store's."""

    def __init__(self, db: Path, store: Store, study: Any):
        self._store = store
        rows = store.trials(study.name)
        defaults = {k for r in rows for k in ((r.extra or {}).get("job_defaults") or {})}
        self._cut = {r.id: got for r in rows if (got := read_in_cut(db, r, study, sorted(defaults))) is not None}

    def trials(self, study: str, status: str | None = None) -> list[Any]:
        rows = [self._cut[r.id][0] if r.id in self._cut else r for r in self._store.trials(study)]
        return [r for r in rows if status is None or r.status == status]

    def steps(self, trial_id: int) -> list[Any]:
        return self._cut[trial_id][1] if trial_id in self._cut else self._store.steps(trial_id)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


@functools.cache
def _copies_under(root: Path) -> tuple[Copy, ...]:
    return tuple(copies(root.glob("*/*.db")))


def trial_dir(db: Path, row: Any, holding: str = "gpu.csv") -> Path | None:
    """The committed folder of a trial's logs (the one holding `holding`: its NVML trace by default, its console log
    for the reclassifier): beside the database it was read from or beside any other copy of its study that holds the
    same trial (a resumed study's earlier trials keep their logs in the lease that ran them). A folder is
    `trial_NNNN`, `<db stem's lease>_trial_NNNN` (two studies in one lease folder: smoke_l3b.db -> l3b_trial_NNNN) or
    `<study>_trial_NNNN`; one whose recorded command ran in another trial's work dir is not this trial's. A trial
    stopped before it recorded its log path is looked for by its number."""
    work = Path(row.log_path).parent if row.log_path else None
    name = work.name if work else f"trial_{row.number:04d}"
    key = _key(row)
    dbs = [db] + [c.db for c in _copies_under(db.parent.parent)
                  if c.name == row.study and key in c.trials and c.db != db]
    for d in dbs:
        tag = d.stem.split("_")[-1]  # smoke_l3b -> l3b
        for folder in dict.fromkeys((d.parent / f"{tag}_{name}", d.parent / f"{row.study}_{name}",
                                     d.parent / name)):
            if (folder / holding).is_file() and (work is None or _ran_in(folder, work)):
                return folder
    return None


@functools.cache
def recompiled(lease: str, study: str, number: int, db_stem: str = "", data: Path = DATA) -> tuple[int, ...] | None:
    """The steps the trial's verl worker compiled a graph anew in (autotune.verl.log.recompiled_steps_in_stamps), from
    its committed time-stamped console: `<study>_trial_NNNN`, `<db stem's lease>_trial_NNNN`, or `trial_NNNN` where
    the lease folder holds one study; None where no console was kept."""
    folder = data / lease
    names = [f"{study}_trial_{number:04d}", f"{db_stem.split('_')[-1]}_trial_{number:04d}" if db_stem else ""]
    if len(list(folder.glob("*.db"))) == 1:
        names.append(f"trial_{number:04d}")
    for name in filter(None, names):
        log = folder / name / "verl.ts.log"
        if log.is_file():
            return recompiled_steps_in_stamps(log.read_text(errors="replace"))
    return None


def _ran_in(folder: Path, work: Path) -> bool:
    """Whether the folder's recorded command (command.json's cwd) ran in `work`; True where it recorded none."""
    try:
        cwd = json.loads((folder / "command.json").read_text()).get("cwd")
    except (OSError, ValueError):
        return True
    return not cwd or Path(cwd) == work


# The lent machines' host memory (H100 and H200 alike: 128 GiB, a cgroup limit of 135,148,564,480 B as Ray's memory
# monitor reported it, h200_2026-11-26_l9). Studies recorded before autotune read a node's host memory (the cluster
# row has none) are replayed with it, so that the host's rule judges their trials as it judges a study on the node.
LENT_HOST_GIB = 135148564480 / 2**30


def lanes(cluster: Any) -> int:
    """How many one-GPU studies shared the node a study ran on (plans/campaign.sh `lane`): a lane of a node of two or
    four recorded the whole node's host memory (251.8 or 503.8 GiB); a lane that passes its share (--host-memory,
    from lease 43 on) and a one-GPU machine record the lent machine's 128 GiB: 1."""
    host = cluster.host_memory_gib
    return max(1, round(host / LENT_HOST_GIB)) if host and cluster.gpus_per_node == 1 else 1


def killed_for_the_node(setup: Any, row: Any) -> bool:
    """A trial Ray's memory monitor killed while its node's memory was shared by lanes: the monitor kills for the
    whole node, and which lane's workers it picks says nothing of the trial's own need (lease 42: a 7B and a 3B trial
    at once, the node at 239 of 252 GiB). Such a trial has no memory verdict of its own, nor an outcome of its
    configuration; the reports name it apart."""
    return (row.extra or {}).get("failure") == verl.HOST_OOM and lanes(setup.cluster) > 1


def setup(study: Any) -> Any:
    """A real study's setup as its row holds it, with the lent machine's host memory where the row has none."""
    import dataclasses

    from autotune.search.setup import setup_from_row

    s = setup_from_row(study)
    if s.cluster.host_memory_gib is None:
        s = dataclasses.replace(s, cluster=dataclasses.replace(s.cluster, host_memory_gib=LENT_HOST_GIB))
    return s


def write_report(doc: str, out: Path, text_of: Callable[[Path], str], argv: list[str] | None = None) -> None:
    """The real-trial reports' command line: --data (the lease folders, DATA), --out (the report, `out`); the file
    is `text_of(data)`, written and printed."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--out", type=Path, default=out)
    args = ap.parse_args(argv)
    text = text_of(args.data)
    args.out.write_text(text)
    print(text)
