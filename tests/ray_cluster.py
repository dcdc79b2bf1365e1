"""A real local Ray cluster for the tests: several nodes on this machine, each declaring GPUs it does not have."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

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
