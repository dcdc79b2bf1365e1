"""A real local Ray cluster for the tests: several nodes on this machine, each declaring GPUs it does not have."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from autotune.runners.base import TrialResult, TrialSpec
from autotune.runners.simulate import SimulateRunner

NODE_GPUS = 8
NODE_CPUS = 3 * NODE_GPUS  # verl's bundle shape: {"CPU": 3, "GPU": 1} per GPU


@contextmanager
def ray_cluster(nodes: int = 2) -> Iterator[object]:
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": NODE_CPUS + 4, "num_gpus": NODE_GPUS,
                                                       "include_dashboard": False})
    for _ in range(nodes - 1):
        c.add_node(num_cpus=NODE_CPUS, num_gpus=NODE_GPUS)
    c.wait_for_nodes()
    try:
        yield c
    finally:
        c.shutdown()


def free_gpus(address: str, timeout: float = 20.0, want: float | None = None) -> float:
    """The cluster's available GPUs, once they reach `want` (or after `timeout`), from a separate connection."""
    import ray

    own = not ray.is_initialized()
    if own:
        ray.init(address=address, log_to_driver=False, logging_level="ERROR")
    try:
        deadline = time.monotonic() + timeout
        while True:
            free = ray.available_resources().get("GPU", 0.0)
            if want is None or free >= want or time.monotonic() > deadline:
                return free
            time.sleep(0.2)
    finally:
        if own:
            ray.shutdown()


class SlowSimulate(SimulateRunner):
    """The simulate runner taking `seconds` per trial (a GPU trial's duration, which cannot happen here), stopping
    early when the executor says so, and recording how many ran at once and where."""

    def __init__(self, seconds: float = 0.6):
        self.seconds, self.now, self.peak = seconds, 0, 0
        self.lock = threading.Lock()
        self.placements: list[dict] = []

    def run(self, spec: TrialSpec) -> TrialResult:
        with self.lock:
            self.now += 1
            self.peak = max(self.peak, self.now)
            self.placements.append(spec.placement)
        try:
            if spec.stop is not None:
                spec.stop.wait(self.seconds)
            else:
                time.sleep(self.seconds)
        finally:
            with self.lock:
                self.now -= 1
        return super().run(spec)


def tuner_main(argv: list[str]) -> None:
    """A tuner process for the fault tests: ADDRESS STORAGE STUDY PARALLEL SECONDS N_TRIALS GPUS."""
    from autotune.executors.ray import RayExecutor
    from autotune.study import Tuner
    from tests.conftest import make_setup

    address, storage, study, parallel, seconds, n, gpus = argv
    ex = RayExecutor(parallel=int(parallel), address=address)
    tuner = Tuner(make_setup(gpus=int(gpus)), SlowSimulate(float(seconds)), storage, study, executor=ex)
    try:
        tuner.run(int(n))
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        sys.exit(130)
    finally:
        ex.close()


if __name__ == "__main__":
    tuner_main(sys.argv[1:])
