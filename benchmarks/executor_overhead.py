"""Executor overhead per trial: the Ray executor on a local Ray cluster against the local executor, same run.

    python -m benchmarks.executor_overhead [--trials 20]

A 2-node local Ray cluster (ray.cluster_utils, 8 declared GPUs per node) is started; trials of 1 node x 8 GPUs
are submitted one at a time to each executor. The runner is the simulate runner, stamped: what is measured is the
executor's own time, not a trial's. Per trial:
- start: submit() -> the runner starts (placement groups created and ready, the trial thread started); a runner's
  first log line can come no earlier;
- stop: the runner returns -> the executor hands the finished trial back, its placement groups removed and reported
  REMOVED by Ray; and runner returns -> Ray's cluster-wide view (ray.available_resources) shows every GPU free.
Target: under 2 s per trial (each of start and stop). Results: benchmarks/results/executor_overhead.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from autotune.executors.local import LocalExecutor  # noqa: E402
from autotune.executors.ray import RayExecutor  # noqa: E402
from autotune.runners.base import TrialResult, TrialSpec  # noqa: E402
from autotune.runners.simulate import SimulateRunner  # noqa: E402
from tests.conftest import make_setup  # noqa: E402
from tests.fake_verl import make_spec  # noqa: E402
from tests.ray_cluster import ray_cluster  # noqa: E402


class Stamped(SimulateRunner):
    def __init__(self) -> None:
        self.started: dict[int, float] = {}
        self.ended: dict[int, float] = {}

    def run(self, spec: TrialSpec) -> TrialResult:
        self.started[spec.number] = time.monotonic()
        res = super().run(spec)
        self.ended[spec.number] = time.monotonic()
        return res


def measure(ex, n: int, tmp: Path) -> dict:
    import ray

    setup = make_setup(gpus=8)
    runner = Stamped()
    starts, stops, gpus_back = [], [], []
    for i in range(n):
        spec = make_spec(setup, tmp, number=i)
        t0 = time.monotonic()
        ex.submit(spec, runner)
        fins = ex.wait()
        t_done = time.monotonic()
        assert [f.number for f in fins] == [i], fins
        starts.append(runner.started[i] - t0)
        stops.append(t_done - runner.ended[i])
        if ex.name == "ray":  # until Ray's own resource view shows every GPU free again
            total = ray.cluster_resources().get("GPU", 0.0)
            while ray.available_resources().get("GPU", 0.0) < total and time.monotonic() - t_done < 30:
                time.sleep(0.005)
            gpus_back.append(time.monotonic() - runner.ended[i])
    out = {"trials": n, "start_s_median": statistics.median(starts), "start_s_max": max(starts),
           "stop_s_median": statistics.median(stops), "stop_s_max": max(stops)}
    if gpus_back:
        out["gpus_free_in_cluster_view_s_median"] = statistics.median(gpus_back)
        out["gpus_free_in_cluster_view_s_max"] = max(gpus_back)
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in out.items()}


def main(argv: list[str] | None = None) -> None:
    import tempfile

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "executor_overhead.json"))
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp, ray_cluster(2) as cluster:
        local = measure(LocalExecutor(), args.trials, Path(tmp))
        ex = RayExecutor(parallel=1, address=cluster.address)
        try:
            ray_ = measure(ex, args.trials, Path(tmp))
        finally:
            ex.close()
    result = {"what": "executor overhead per trial (s): submit -> runner starts; runner returns -> trial handed "
                      "back with its GPUs free", "cluster": "ray.cluster_utils 2 nodes x 8 declared GPUs, trials "
                      "of 1 x 8 GPUs, this 2-core machine", "local": local, "ray": ray_, "target_s": 2.0}
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
