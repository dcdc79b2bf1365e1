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
HANG_GUARD_S = 300.0  # only against a test hanging forever: every wait here ends on an event long before


def agent_ports() -> dict[str, int]:
    """Ports for a node's Ray agents, chosen here: a raylet whose agents bind ports of their own choosing waits a
    fixed 15 s for them to write the port files (ray/src/ray/raylet/node_manager.cc, WaitForPersistedPort), which a
    loaded 2-core machine exceeds (the node crashes); with the ports given, it waits on nothing."""
    from tests.conftest import free_port

    names = ("metrics_agent_port", "metrics_export_port", "dashboard_agent_listen_port", "runtime_env_agent_port")
    return {name: free_port() for name in names}


@contextmanager
def _node_starts_for_this_machine() -> Iterator[None]:
    """While the test cluster lives, a node's start waits for its raylet to register with the GCS, not Ray's fixed
    30 s (ray/_private/node.py) that a loaded machine can exceed."""
    import ray._private.services as services

    get_node = services.get_node

    def patient_get_node(gcs_address: str, node_id: str) -> object:
        deadline = time.monotonic() + HANG_GUARD_S
        while True:
            try:
                return get_node(gcs_address, node_id)
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    services.get_node = patient_get_node
    try:
        yield
    finally:
        services.get_node = get_node


def add_node(cluster: object, **kw: object) -> object:
    """A node (8 declared GPUs and verl's 3 CPUs per GPU unless given) joining `cluster`."""
    with _node_starts_for_this_machine():
        node = cluster.add_node(**{"num_cpus": NODE_CPUS, "num_gpus": NODE_GPUS, **agent_ports(), **kw})
        cluster.wait_for_nodes()
    return node


def dashboard_dependency_error() -> str | None:
    """Ray's own verdict on whether ray[default] (dashboard, state API) is installed: None when it is."""
    import ray._private.utils as utils

    return utils.get_dashboard_dependency_error()


@contextmanager
def ray_cluster(nodes: int = 2) -> Iterator[object]:
    from ray.cluster_utils import Cluster

    with _node_starts_for_this_machine():
        c = Cluster(initialize_head=True, head_node_args={"num_cpus": NODE_CPUS + 4, "num_gpus": NODE_GPUS,
                                                           "include_dashboard": False, **agent_ports()})
    try:
        for _ in range(nodes - 1):
            add_node(c)
        yield c
    finally:
        c.shutdown()


def free_gpus(address: str, timeout: float = HANG_GUARD_S, want: float | None = None) -> float:
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
    early when the executor says so, and recording how many ran at once and where.

    `together`: each trial first waits until that many run at once (an event, not a guess at how long proposing
    takes; once reached the gate stays open, so the last trials of a study pass through)."""

    def __init__(self, seconds: float = 0.6, together: int = 0):
        self.seconds, self.now, self.peak = seconds, 0, 0
        self.lock = threading.Lock()
        self.placements: list[dict] = []
        self.gate = threading.Event()
        self.together = together
        if together <= 1:
            self.gate.set()

    def run(self, spec: TrialSpec) -> TrialResult:
        with self.lock:
            self.now += 1
            self.peak = max(self.peak, self.now)
            self.placements.append(spec.placement)
            if self.now >= self.together:
                self.gate.set()
        try:
            deadline = time.monotonic() + HANG_GUARD_S
            while not self.gate.wait(0.05) and not _stopped(spec) and time.monotonic() < deadline:
                pass
            if spec.stop is not None:
                spec.stop.wait(self.seconds)
            else:
                time.sleep(self.seconds)
        finally:
            with self.lock:
                self.now -= 1
        return super().run(spec)


def _stopped(spec: TrialSpec) -> bool:
    return spec.stop is not None and spec.stop.is_set()


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


def cli_main(argv: list[str]) -> int:
    """`autotune ARGV` as a user runs it (the CLI's own main, signal handling and exit codes), its simulate backend's
    trials taking SECONDS (the first argument) each: `python -m tests.ray_cluster cli SECONDS run ...`."""
    import autotune.cli as cli
    import autotune.cli.run as cli_run

    seconds = float(argv[0])

    def make_runner(name: str, **_: object) -> SimulateRunner:
        assert name == "simulate", name
        return SlowSimulate(seconds)

    cli_run.make_runner = make_runner
    return cli.main(argv[1:])


@contextmanager
def token_cluster(token: str, home: str) -> Iterator[str]:
    """A one-node cluster (8 declared GPUs) that requires Ray's token authentication (RAY_AUTH_MODE=token), in a
    process of its own (Ray reads the mode when it starts); yields its address. HOME is `home`: nothing touches the
    machine's ~/.ray."""
    import os
    import subprocess

    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token, "HOME": home}
    env.pop("RAY_AUTH_TOKEN_PATH", None)
    proc = subprocess.Popen([sys.executable, "-m", "tests.ray_cluster", "serve"], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()  # the address, once the node is up
        assert line.startswith("address "), f"the token cluster did not start ({proc.wait()})"
        yield line.split()[1]
    finally:
        proc.stdin.close()  # the cluster shuts down
        proc.wait(HANG_GUARD_S)


def _serve() -> None:
    with ray_cluster(1) as c:
        print("address", c.address, flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    if sys.argv[1] == "cli":
        sys.exit(cli_main(sys.argv[2:]))
    if sys.argv[1] == "serve":
        sys.exit(_serve())
    tuner_main(sys.argv[1:])
