"""A real local Ray cluster for the tests: several nodes on this machine, each declaring GPUs it does not have."""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from autotune.runners.base import TrialResult, TrialSpec
from autotune.runners.simulate import SimulateRunner

T = TypeVar("T")
NODE_GPUS = 8
NODE_CPUS = 3 * NODE_GPUS  # verl's bundle shape: {"CPU": 3, "GPU": 1} per GPU
HANG_GUARD_S = 300.0  # only against a test hanging forever: every wait here ends on an event long before


def agent_ports() -> dict[str, int]:
    """Ports for a node's Ray agents, chosen here: for a port it is not given, the raylet waits a fixed 15 s for the
    agent to write it to a file (ray/src/ray/raylet/node_manager.cc, WaitForPersistedPort), and crashes past that;
    given these, it waits only for the dashboard agent's listen port, which it always reads from the file."""
    from tests.conftest import free_port

    names = ("metrics_agent_port", "metrics_export_port", "dashboard_agent_listen_port", "runtime_env_agent_port")
    ports: list[int] = []
    while len(ports) < len(names):  # a port freed at once may be handed out again: four distinct ones
        if (p := free_port()) not in ports:
            ports.append(p)
    return dict(zip(names, ports, strict=True))


NODE_START_TRIES = 4
# Ray gives a worker process 60 s from its start to register with its raylet, and fails the task past that ("worker
# failed to register"): on a loaded 2-core machine a worker's start (Python importing Ray, a runtime_env's setup hook)
# has taken longer. The cluster's workers get as long as the hang guard; a worker that dies still fails at once.
SYSTEM_CONFIG = {"worker_register_timeout_seconds": int(HANG_GUARD_S)}


@contextmanager
def _node_starts_for_this_machine() -> Iterator[None]:
    """Ray starts a node against fixed clocks that a loaded 2-core machine can miss: 30 s for the raylet to register
    with the GCS (ray/_private/node.py), and, in the raylet, 15 s for its dashboard agent (a Python process) to write
    its listen port (the raylet then crashes). While this is active a node start waits for the registration itself
    (failing at once if the raylet died), a failed start leaves no process behind (so `started` can try again), and
    nodes run Ray's minimal agents, as with plain `ray` (with ray[default] installed, which the `ray` extra brings for
    `ray list placement-groups`, the agent would load its full set of modules first; autotune uses none of them)."""
    import ray._private.node as node_mod
    import ray._private.services as services
    import ray._private.utils as utils

    get_node, init, dependency_error = services.get_node, node_mod.Node.__init__, utils.get_dashboard_dependency_error
    start_raylet = node_mod.Node.start_raylet
    starting: list[object] = []

    def raylet_died() -> bool:
        procs = getattr(starting[-1], "all_processes", {}).get("raylet", []) if starting else []
        return any(p.process.poll() is not None for p in procs)

    def patient_get_node(gcs_address: str, node_id: str) -> object:
        deadline = time.monotonic() + HANG_GUARD_S
        while True:
            try:
                return get_node(gcs_address, node_id)
            except RuntimeError:
                if time.monotonic() > deadline or raylet_died():
                    raise
                time.sleep(0.1)

    def tidy_init(self: object, *a: object, **kw: object) -> None:
        starting.append(self)
        try:
            init(self, *a, **kw)
        except Exception:
            with contextlib.suppress(Exception):
                self.kill_all_processes(check_alive=False, allow_graceful=False, wait=True)
            raise
        finally:
            starting.remove(self)

    def raylet_with_agent_port(self: object, *a: object, **kw: object) -> None:
        """The raylet, and at once the dashboard agent's listen port where the raylet looks for it: the port was
        chosen here (agent_ports), and the raylet's fixed 15 s for the agent (a Python process: seconds of imports
        on a loaded machine) to write it then no longer decides whether the node starts. The agent writes the same
        port when it is up."""
        start_raylet(self, *a, **kw)
        port = self._ray_params.dashboard_agent_listen_port
        if port:
            from ray._raylet import DASHBOARD_AGENT_LISTEN_PORT_NAME, persist_port

            persist_port(self._session_dir, self._node_id, DASHBOARD_AGENT_LISTEN_PORT_NAME, port)

    services.get_node, node_mod.Node.__init__ = patient_get_node, tidy_init
    node_mod.Node.start_raylet = raylet_with_agent_port
    utils.get_dashboard_dependency_error = lambda: "autotune tests: Ray's minimal agents"
    try:
        yield
    finally:
        services.get_node, node_mod.Node.__init__ = get_node, init
        node_mod.Node.start_raylet = start_raylet
        utils.get_dashboard_dependency_error = dependency_error


def started(start: Callable[[], T]) -> T:
    """A node start (inside _node_starts_for_this_machine), tried again when it failed (Ray's own clock ran out, or
    the raylet died): a start that failed left nothing running, and a loaded machine is slow only for a while."""
    for attempt in range(1, NODE_START_TRIES + 1):
        try:
            return start()
        except Exception:  # noqa: BLE001 - Ray raises a bare Exception for a missed clock; a raylet may also die
            if attempt == NODE_START_TRIES:  # of a port taken meanwhile: a failed start left nothing running
                raise


def add_node(cluster: object, **kw: object) -> object:
    """A node (8 declared GPUs and verl's 3 CPUs per GPU unless given) joining `cluster`."""
    with _node_starts_for_this_machine():
        node = started(lambda: cluster.add_node(**{"num_cpus": NODE_CPUS, "num_gpus": NODE_GPUS, **agent_ports(),
                                                   **kw}))
        cluster.wait_for_nodes()
    return node


def dashboard_dependency_error() -> str | None:
    """Ray's own verdict on whether ray[default] (dashboard, state API) is installed: None when it is."""
    import ray._private.utils as utils

    return utils.get_dashboard_dependency_error()


@contextmanager
def ray_cluster(nodes: int = 2) -> Iterator[object]:
    from ray.cluster_utils import Cluster

    c = Cluster()
    with _node_starts_for_this_machine():
        started(lambda: c.add_node(num_cpus=NODE_CPUS + 4, num_gpus=NODE_GPUS, include_dashboard=False,
                                   _system_config=SYSTEM_CONFIG, **agent_ports()))
    try:
        for _ in range(nodes - 1):
            add_node(c)
        yield c
    finally:
        c.shutdown()


_SHARED: dict[str, object] = {}


def shared_cluster() -> object:
    """The 2-node cluster (ray_cluster(2)) that the Ray test modules share through conftest's `shared_ray_cluster`:
    started by the first test that asks for it, running until stop_shared_cluster()."""
    if "cluster" not in _SHARED:
        stack = contextlib.ExitStack()
        _SHARED["cluster"] = stack.enter_context(ray_cluster(2))
        _SHARED["stack"] = stack
    return _SHARED["cluster"]


def stop_shared_cluster() -> None:
    stack = _SHARED.pop("stack", None)
    _SHARED.pop("cluster", None)
    if stack is not None:
        stack.close()


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
    from autotune.study.study import Tuner
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
