"""Each real study once, from the committed study databases (tests/data/real_verl_gpu/<lease>/*.db).

A lease that resumes a study commits the study's database again: lease 10's c-3b.db holds lease 7's c-3b trials 0-3
again and its new trial 4; lease 12's c-7b.db holds lease 9's c-7b (which held lease 8's trial 0). Read naively, a
trial counts once per copy. A copy is superseded when another database holds a study of the same name whose launched
trials include all of the copy's launched trials (the same number, started at the same instant) and more; of copies
with the same trials, the last database in path order is kept (lease folders sort by date). A trial is then read from
the newest copy that holds it, and its committed logs may lie in an earlier lease's folder (`trial_dir`).
"""

from __future__ import annotations

import argparse
import functools
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.store.store import Store

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


def studies(dbs: Iterable[Path]) -> Iterator[tuple[Path, Store, Any]]:
    """(database, its store, study row) of each real study once, its superseded copies skipped (module docstring).
    A database's store is disposed of once its studies are yielded."""
    keep = {(c.db, c.name) for c in kept(copies(dbs))}
    for db in sorted({c[0] for c in keep}):
        store = Store(f"sqlite:///{db}")
        try:
            for study in store.list_studies():
                if (db, study.name) in keep:
                    yield db, store, study
        finally:
            store.engine.dispose()


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
