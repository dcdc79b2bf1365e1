"""`ray start` for the kept head (ray_head.py): Ray's own CLI with two of its fixed choices changed for a loaded node.

    python autotune/runners/node/ray_cli.py [--node-wait-s S] start --head ...

Run by its path, not as a module: it imports only Ray, not autotune's packages (0.6 s of CPU the head would wait for).

- Ray waits a fixed 30 s for the head's raylet to register with its GCS, and then exits ("The current node timed out
  during startup"). The raylet registers once its Python agents have imported Ray; on a 2-core machine under a load
  of 3 that took 25-50 s, and CI lost a kept-head test to three such exits in a row. Here the node's lookup waits up
  to `--node-wait-s` (the caller's own timeout bounds the start).
- Ray starts a Ray Client server wherever ray[client] is installed, with no flag against it. Trials join the head's
  GCS address, never ray://; the server is a Python process of ~8 s of CPU that imports Ray while the raylet waits.

Each change applies only where Ray still has the name it patches (Ray 2.60's); otherwise Ray runs as it is.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

NODE_WAIT_S = 150.0


def patient(get_node: Callable[..., Any], wait_s: float, poll_s: float = 0.5,
            clock: Callable[[], float] = time.monotonic) -> Callable[..., Any]:
    """get_node retried on RuntimeError (Ray's "node not registered yet") for up to wait_s."""
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        deadline = clock() + wait_s
        while True:
            try:
                return get_node(*args, **kwargs)
            except RuntimeError:
                if clock() >= deadline:
                    raise
                time.sleep(poll_s)
    return wrapped


def main(argv: list[str] | None = None) -> None:
    if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
        sys.path.pop(0)  # run by its path: its neighbours are not top-level modules
    ap = argparse.ArgumentParser(prog="ray_cli", add_help=False)
    ap.add_argument("--node-wait-s", type=float, default=NODE_WAIT_S)
    ours, rest = ap.parse_known_args(sys.argv[1:] if argv is None else argv)
    import ray._private.services as services
    import ray.scripts.scripts as scripts

    if hasattr(services, "get_node"):
        services.get_node = patient(services.get_node, ours.node_wait_s)
    if hasattr(scripts, "get_ray_client_dependency_error"):
        scripts.get_ray_client_dependency_error = lambda: "not started by autotune: trials join the GCS address"
    sys.argv = ["ray", *rest]
    scripts.main()


if __name__ == "__main__":
    main()
