"""`autotune dashboard`: a web page over the study database, for watching a tuning session while it runs.

What was tried, what failed and why, and what wins: the studies list, a page per study (best configuration and its
speed-up over verl's example configuration, optimisation history, trials table, phase timings, memory, the shape of
the space, parameter importance, parallel coordinates, slice, timeline, failures) and a page per trial.

autotune keeps Optuna's own tables next to its own in the same database, so the same database can also be opened
with optuna-dashboard (`optuna-dashboard sqlite:///trials/autotune.db`), which shows the Optuna side of it (values,
parameters, states and the user attributes `status`, `reason`, `origin`, `simulated`, `layout`).

Needs the optional dependencies: pip install -e '.[dashboard]'.

May import: the packages below it (the flat values, verl, candidate, job, estimate, store, search, results,
runners, executors, study), not profile/ or cli/.
"""

from __future__ import annotations

import importlib.util
import signal
import socket
import threading

REQUIRED = ("fastapi", "uvicorn", "jinja2", "plotly")


def missing_dependencies() -> list[str]:
    return [m for m in REQUIRED if importlib.util.find_spec(m) is None]


def bind(host: str, port: int) -> socket.socket:
    """The dashboard's listening socket, bound before anything is printed: a port in use is an OSError here, not a
    traceback from inside uvicorn after the URL was announced."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, kind, proto, _, addr = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does: TIME_WAIT is no conflict
        sock.bind(addr)
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def serve(storage_url: str, host: str = "127.0.0.1", port: int = 8080, sock: socket.socket | None = None) -> None:
    """Serve the dashboard until interrupted (on `sock` when given, bound by `bind`)."""
    import uvicorn

    from autotune.dashboard import importance
    from autotune.dashboard.app import create_app

    config = uvicorn.Config(create_app(storage_url, hosts=[host]), host=host, port=port, log_level="warning")
    # uvicorn shuts down gracefully on SIGTERM, then raises it again: with the default handler the process would die
    # there, leaving the importance worker running; as KeyboardInterrupt it ends like Ctrl-C, through `finally`.
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _interrupt) if main else None
    try:
        uvicorn.Server(config).run(sockets=[sock or bind(host, port)])
    finally:
        if main:
            signal.signal(signal.SIGTERM, previous)
        importance.shutdown()


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt
