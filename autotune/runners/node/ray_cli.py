"""`ray start` for the kept head (ray_head.py): Ray's own CLI with three of its fixed choices changed for a loaded node.

    python autotune/runners/node/ray_cli.py [--node-wait-s S] start --head --dashboard-agent-listen-port=P ...

Run by its path, not as a module: it imports only Ray, not autotune's packages (0.6 s of CPU the head would wait for).

- The raylet is told the dashboard agent's listen port. Ray 2.60 gives the raylet the agent's other ports but not
  this one, and the raylet then waits a fixed 15 s for the agent to write it to a file and aborts past that ("Check
  failed ... Timed out waiting for file .../dashboard_agent_listen_port", in NodeManager::WaitForDashboardAgentPorts).
  The agent is a Python process that imports aiohttp, grpc and opencensus first: on a 2-core machine under load it
  took 21 s, the raylet died, and `ray start` exited ("The current node timed out during startup"). CI lost the kept
  head's tests to it (stops 59 and 60).
- Ray waits a fixed 30 s for the raylet to register with its GCS. Here the node's lookup waits up to `--node-wait-s`
  (the caller's own timeout bounds the start) while the raylet lives, and gives up at once when it died.
- Ray starts a Ray Client server wherever ray[client] is installed, with no flag against it. Trials join the head's
  GCS address, never ray://; the server is a Python process of ~8 s of CPU that imports Ray while the raylet waits.

Each change applies only where Ray still has the name it patches (Ray 2.60's); otherwise Ray runs as it is.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

NODE_WAIT_S = 150.0
LISTEN_PORT_FLAG = "--dashboard_agent_listen_port"  # the raylet's gflag


def patient(get_node: Callable[..., Any], wait_s: float, gone: Callable[[], bool] = lambda: False,
            poll_s: float = 0.5, clock: Callable[[], float] = time.monotonic) -> Callable[..., Any]:
    """get_node retried on RuntimeError (Ray's "node not registered yet") for up to wait_s, while not gone()."""
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        deadline = clock() + wait_s
        while True:
            try:
                return get_node(*args, **kwargs)
            except RuntimeError:
                if clock() >= deadline or gone():
                    raise
                time.sleep(poll_s)
    return wrapped


def with_listen_port(start_ray_process: Callable[..., Any], port: int, raylet: str) -> Callable[..., Any]:
    """Ray's start_ray_process, the raylet's command given the dashboard agent's listen port."""
    def wrapped(command: Sequence[str], process_type: str, *args: Any, **kwargs: Any) -> Any:
        if process_type == raylet and port > 0 and not any(c.startswith(LISTEN_PORT_FLAG) for c in command):
            command = [*command, f"{LISTEN_PORT_FLAG}={port}"]
        return start_ray_process(command, process_type, *args, **kwargs)
    return wrapped


def raylet_gone() -> Callable[[], bool]:
    """True once a raylet this process started has exited (a raylet not started yet is not gone)."""
    import psutil

    seen: set[int] = set()

    def gone() -> bool:
        alive = set()
        for c in psutil.Process().children():
            try:
                if c.name() == "raylet" and c.status() != psutil.STATUS_ZOMBIE:
                    alive.add(c.pid)
            except psutil.Error:  # a child that exited while listed: not Ray's RuntimeError, it would end `ray start`
                pass
        seen.update(alive)
        return bool(seen) and not alive
    return gone


def main(argv: list[str] | None = None) -> None:
    if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
        sys.path.pop(0)  # run by its path: its neighbours are not top-level modules
    ap = argparse.ArgumentParser(prog="ray_cli", add_help=False)
    ap.add_argument("--node-wait-s", type=float, default=NODE_WAIT_S)
    ours, rest = ap.parse_known_args(sys.argv[1:] if argv is None else argv)
    listen = next((int(a.split("=", 1)[1]) for a in rest if a.startswith("--dashboard-agent-listen-port=")), 0)
    import ray._private.ray_constants as constants
    import ray._private.services as services
    import ray.scripts.scripts as scripts

    if hasattr(services, "start_ray_process") and hasattr(constants, "PROCESS_TYPE_RAYLET"):
        services.start_ray_process = with_listen_port(services.start_ray_process, listen,
                                                      constants.PROCESS_TYPE_RAYLET)
    if hasattr(services, "get_node"):
        services.get_node = patient(services.get_node, ours.node_wait_s, raylet_gone())
    if hasattr(scripts, "get_ray_client_dependency_error"):
        scripts.get_ray_client_dependency_error = lambda: "not started by autotune: trials join the GCS address"
    sys.argv = ["ray", *rest]
    scripts.main()


if __name__ == "__main__":
    main()
