"""Re-read the failure of each failed real trial of a committed study database from its committed console log.

A classification is derived from the log, not measured: when the classifier learns a failure it read wrongly, the
committed trials are read again so that what the benchmarks and the correction learn from them is right. Each
changed trial keeps its old reading in its note. 2026-11-26: Ray's memory monitor (the host's memory) had been read
as a GPU OOM in the update (`RayTaskError(OutOfMemoryError)`), h200_2026-11-26_l9 and _l12.

    python -m benchmarks.gpu_verl.reclassify tests/data/real_verl_gpu/h200_2026-11-26_l12/c-7b.db
"""

from __future__ import annotations

import argparse
from pathlib import Path

from autotune.store.store import Store
from autotune.verl.log import classify
from benchmarks.real_studies import trial_dir


def reclassify(db: Path) -> list[str]:
    """Update the trials whose committed log now reads as another failure; what changed, in words."""
    store = Store(f"sqlite:///{db}")
    changed = []
    for study in store.list_studies():
        for row in store.trials(study.name):
            extra = dict(row.extra or {})
            if not row.launched or row.simulated or row.status not in ("oom", "failed") or not extra.get("failure"):
                continue
            folder = trial_dir(db, row, holding="verl.log")
            if folder is None:
                continue
            log = folder / "verl.log"
            f = classify(log.read_text(errors="replace"), extra.get("returncode"))
            if f.kind == extra["failure"]:
                continue
            note = (f"{row.note} " if row.note else "") + (
                f"[reclassified from the committed log: was {extra['failure']} ({row.reason[:120]})]")
            changed.append(f"{db.parent.name}/{db.name} {study.name}#{row.number}: {extra['failure']} -> {f.kind}")
            extra["failure"] = f.kind
            store.update_trial(row.id, status=f.status, reason=f.message, extra=extra, note=note)
    store.engine.dispose()
    return changed


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dbs", nargs="+", type=Path)
    for line in (c for db in ap.parse_args(argv).dbs for c in reclassify(db)):
        print(line)


if __name__ == "__main__":
    main()
