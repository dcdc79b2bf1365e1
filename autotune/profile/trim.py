"""Cut traces small enough to commit as results, keeping what the analysis reads.

A trimmed trace keeps its metadata, verl's stage annotations and the profiler's window marks whole, then the device's
work (GPU kernels, copies and the calls that launched them) from the start up to a cut-off time, so that everything
before the cut-off is exactly as recorded; CPU ops fill what is left of the budget, longest first. The analysis of a
trimmed trace is the analysis of its first part: the committed analysis comes from the whole traces.

    python -m autotune.profile.trim SRC_DIR DST_DIR [--max-events N]
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path
from typing import Any

from autotune.profile.traces import GPU_CATS, discover

KEEP_CATS = ("user_annotation", "gpu_user_annotation", "Trace")
LAUNCH_CATS = ("cuda_runtime", "cuda_driver")
MAX_EVENTS = 60_000


def _load(path: Path) -> dict[str, Any]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def trim_doc(doc: dict[str, Any], max_events: int = MAX_EVENTS) -> tuple[dict[str, Any], dict[str, Any]]:
    """The trimmed trace and what was cut (events in/out, the device cut-off in µs)."""
    events = doc.get("traceEvents") or []
    # metadata and the profiler's window marks; flow arrows (ph s/f, two per kernel) are dropped: the kernels keep
    # their correlation ids, which is what links them to their launches
    always = [e for e in events if e.get("ph") in ("M", "i") or (e.get("ph") == "X" and e.get("cat") in KEEP_CATS)]
    gpu = sorted((e for e in events if e.get("ph") == "X" and e.get("cat") in GPU_CATS), key=lambda e: e["ts"])
    budget = max(max_events - len(always), 0)
    cutoff = None
    if len(gpu) * 2 > budget:  # each kernel with its launch
        gpu = gpu[: budget // 2]
        cutoff = gpu[-1]["ts"] + gpu[-1].get("dur", 0) if gpu else None
    corr = {(e.get("args") or {}).get("correlation") for e in gpu}
    launches = [e for e in events if e.get("ph") == "X" and e.get("cat") in LAUNCH_CATS
                and (e.get("args") or {}).get("correlation") in corr]
    left = max(budget - len(gpu) - len(launches), 0)
    cpu = [e for e in events if e.get("ph") == "X" and e.get("cat") not in (*KEEP_CATS, *GPU_CATS, *LAUNCH_CATS)]
    if cutoff is not None:
        cpu = [e for e in cpu if e["ts"] <= cutoff]
    cpu = sorted(cpu, key=lambda e: -e.get("dur", 0))[:left]
    kept = always + sorted(gpu + launches + cpu, key=lambda e: e["ts"])
    out = {k: v for k, v in doc.items() if k != "traceEvents"}
    out["traceEvents"] = kept
    out["autotune_trimmed"] = {"events_in": len(events), "events_out": len(kept), "device_cutoff_us": cutoff,
                               "note": "trimmed by autotune.profile.trim: the analysis of the whole trace is "
                                       "committed beside it"}
    return out, out["autotune_trimmed"]


def trim_dir(src: str | Path, dst: str | Path, max_events: int = MAX_EVENTS) -> list[dict[str, Any]]:
    """Trim every trace under `src` into `dst` (same relative paths, gzipped)."""
    src, dst = Path(src), Path(dst)
    files, _ = discover(src)
    report = []
    for f in files:
        path = Path(f.path)
        rel = path.relative_to(src)
        target = dst / (str(rel) if rel.name.endswith(".gz") else str(rel) + ".gz")
        target.parent.mkdir(parents=True, exist_ok=True)
        doc, info = trim_doc(_load(path), max_events)
        with gzip.open(target, "wt") as out:
            json.dump(doc, out)
        report.append({"file": str(rel), "bytes": target.stat().st_size, **info})
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--max-events", type=int, default=MAX_EVENTS)
    args = ap.parse_args(argv)
    for row in trim_dir(args.src, args.dst, args.max_events):
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
