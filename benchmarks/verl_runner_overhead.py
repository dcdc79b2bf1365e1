"""Tuner overhead per verl trial: launch to result recorded, minus the time verl itself needed.

verl is replaced by the test double (tests/fake_verl/main_ppo.py), which records how long it took from its own
start to printing the measured step. Everything else is real: the Optuna study in SQLite, the runner's process
launch in its own session, live log parsing, the stop at the measured step (SIGTERM to the group, while the double
would otherwise spend FAKE_VERL_TEARDOWN_S in "Ray shutdown"), the /proc clean-up check and the database writes.

    python -m benchmarks.verl_runner_overhead [--trials 10]

Target: < 2 s per trial (a real trial lasts minutes; the overhead decides how many fit in an hour only marginally).
Writes benchmarks/results/verl_runner_overhead.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from autotune.runners.verl import VerlOptions, VerlRunner  # noqa: E402
from autotune.study.study import Tuner  # noqa: E402
from tests.conftest import make_setup  # noqa: E402
from tests.fake_verl import ENTRY, records  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "verl_runner_overhead.json"))
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="verl-overhead-"))
    rec = work / "rec.jsonl"
    env = {"FAKE_VERL_MODE": "ok", "FAKE_VERL_RECORD": str(rec), "FAKE_VERL_TEARDOWN_S": "10",
           "FAKE_VERL_STEP_S": "0.2", "FAKE_VERL_STARTUP_S": "0.5"}
    runner = VerlRunner(VerlOptions(), entry=ENTRY, env=env)  # production defaults (poll 0.2 s, grace 30 s)
    tuner = Tuner(make_setup(), runner, f"sqlite:///{work / 'db.sqlite'}", "overhead", workdir=work / "trials")
    tuner.recover()
    tuner.seed_study()
    rows = []
    while len(rows) < args.trials:
        n_before = len(records(rec))
        t0 = time.monotonic()
        row = tuner.step()
        wall = time.monotonic() - t0
        if not row.launched:
            continue
        own = [r for r in records(rec)[n_before:] if "own_s" in r]
        assert row.status == "ok" and len(own) == 1, (row.status, row.reason)
        rows.append({"trial": row.number, "wall_s": wall, "verl_own_s": own[0]["own_s"],
                     "overhead_s": wall - own[0]["own_s"]})
    over = [r["overhead_s"] for r in rows]
    result = {
        "what": "tuner overhead per verl trial (Tuner.step wall time minus the verl double's own time to its "
                "measured step), production VerlOptions, SQLite study",
        "trials": len(rows),
        "overhead_s_median": statistics.median(over),
        "overhead_s_mean": statistics.fmean(over),
        "overhead_s_max": max(over),
        "target_s": 2.0,
        "meets_target": statistics.median(over) < 2.0,
        "per_trial": rows,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"overhead per trial: median {result['overhead_s_median']:.2f} s, mean {result['overhead_s_mean']:.2f} s, "
          f"max {result['overhead_s_max']:.2f} s over {len(rows)} trials (target < 2 s) -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
