"""A lease's bundle (device.sh's smoke_bundle.tar.xz) laid out as committed real trials, in one step.

    python -m benchmarks.gpu_verl.import_bundle /work/.device/N/smoke_bundle.tar.xz \\
        tests/data/real_verl_gpu/h200_2026-11-29_l51

The layout the tests and benchmarks read (benchmarks/real_studies.py): each study's database at the top, its trial
folders as `<study>_trial_NNNN` and its Ray head's logs as `<study>_ray_head` (the bundle keeps them under
`trials/[g<lane>/]<study>/`), and the lease's own records beside them. Run `lease_tree.sh in` first where the lease
staged the committed trials out. It never writes into a folder that holds files already: committed data is not
overwritten.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

# The lease's records kept beside its studies (device.sh collect writes them at the bundle's top).
RECORDS = ("*.db", "status-*.txt", "device.log", "doctor.txt", "plan.out", "lane*.out", "cpu_adam_rate.json",
           "host_speed*.json")
TRIAL_DIR = re.compile(r"^(trial_\d{4}|ray_head)$")
MAX_FILE_BYTES = 2 * 1024 * 1024  # issue 23.2: each committed log, console, metrics file and trace 2 MB at most


@dataclass(frozen=True)
class Imported:
    """What one import laid out: studies (name -> trial folders copied) and the files over MAX_FILE_BYTES."""

    studies: dict[str, int]
    files: int
    too_large: tuple[str, ...]


def _root(extracted: Path) -> Path:
    """The bundle's top folder (device.sh packs `bundle/`)."""
    inner = extracted / "bundle"
    if inner.is_dir():
        return inner
    raise ValueError(f"no bundle/ folder in the archive (found: {sorted(p.name for p in extracted.iterdir())}); "
                     "pass the smoke_bundle.tar.xz that `device.sh collect` writes")


def lay_out(bundle: Path, dest: Path) -> Imported:
    """Copy a bundle folder's studies, trials and records into `dest` (created; it must hold no file yet)."""
    if dest.exists() and any(dest.iterdir()):
        raise FileExistsError(f"{dest} already holds files: committed trials are never overwritten; pass a new "
                              "lease folder (<gpu>_<date>_l<N>)")
    trials = bundle / "trials"
    studies: dict[str, int] = {}
    dest.mkdir(parents=True, exist_ok=True)
    if trials.is_dir():
        for folder in sorted(p for p in trials.rglob("*") if p.is_dir() and TRIAL_DIR.match(p.name)):
            study = folder.parent.name
            shutil.copytree(folder, dest / f"{study}_{folder.name}")
            if folder.name != "ray_head":
                studies[study] = studies.get(study, 0) + 1
    for pattern in RECORDS:
        for f in sorted(bundle.glob(pattern)):
            shutil.copy2(f, dest / f.name)
    files = [p for p in dest.rglob("*") if p.is_file()]
    if not files:
        raise ValueError(f"{bundle} holds no study, trial or lease record: nothing to import")
    too_large = tuple(str(p.relative_to(dest)) for p in files if p.stat().st_size > MAX_FILE_BYTES)
    return Imported(studies, len(files), too_large)


def import_bundle(archive: Path, dest: Path) -> Imported:
    """Unpack `archive` (a .tar.xz from device.sh) and lay it out in `dest`."""
    with tempfile.TemporaryDirectory() as tmp, tarfile.open(archive) as tar:
        tar.extractall(tmp, filter="data")
        return lay_out(_root(Path(tmp)), dest)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bundle", type=Path, help="smoke_bundle.tar.xz, or an unpacked bundle/ folder")
    ap.add_argument("dest", type=Path, help="tests/data/real_verl_gpu/<gpu>_<date>_l<N>")
    args = ap.parse_args(argv)
    try:
        done = (lay_out(args.bundle, args.dest) if args.bundle.is_dir()
                else import_bundle(args.bundle, args.dest))
    except (OSError, ValueError, tarfile.TarError) as e:
        print(f"import_bundle: {e}", file=sys.stderr)
        return 2
    trials = ", ".join(f"{s} {n}" for s, n in done.studies.items()) or "none"
    print(f"{args.dest}: {done.files} files; trials per study: {trials}")
    for name in done.too_large:
        print(f"over 2 MB, trim before committing: {name}", file=sys.stderr)
    return 1 if done.too_large else 0


if __name__ == "__main__":
    sys.exit(main())
