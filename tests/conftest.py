"""Shared fixtures: small setups, a SQLite URL per test, and a real PostgreSQL server started for the session."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from autotune.cluster import Cluster, get_gpu_type
from autotune.job import Job
from autotune.model import get_model
from autotune.search.setup import Setup
from autotune.search.space import load_space

REPO = Path(__file__).resolve().parent.parent

# A suite started in the background by a non-interactive shell (`cmd &` in a script, nohup) inherits SIGINT ignored,
# and so would every command the tests start (an ignored signal stays ignored across exec; a handled one is reset to
# the default): their Ctrl-C tests would send a signal nobody sees. The commands get SIGINT as a terminal gives it.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def zeroed() -> list:
    """The committed real verl trials as calibration cases, predicted with the fitted engine costs zeroed (what the
    fits read: benchmarks/cost_fits.py)."""
    from benchmarks import calibration as cal
    from benchmarks.real_cases import DATA

    return cal.cases(list(DATA.glob("*/*.db")), cal.ZEROED)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'study.db'}"


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'a.db'}"


def cli_run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """`autotune ARGV` in this process: (exit code, stdout, stderr)."""
    from autotune.cli import main

    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def make_setup(model: str = "qwen2.5-7b", gpus: int = 8, gpu: str = "h100", job: Job | None = None,
               space: str | None = None, nodes: int = 1) -> Setup:
    m = get_model(model)
    return Setup(m, Cluster(get_gpu_type(gpu), gpus, nodes), job or Job.default(),
                 load_space(space or ("moe" if m.is_moe else "dense")))


@pytest.fixture
def setup7b() -> Setup:
    return make_setup()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def dashboard_server(url: str) -> Iterator[str]:
    """The dashboard of this database served by uvicorn in a thread, for a real browser: its base URL."""
    import uvicorn

    from autotune.dashboard.app import create_app

    port = free_port()
    srv = uvicorn.Server(uvicorn.Config(create_app(url), host="127.0.0.1", port=port, log_level="warning"))
    th = threading.Thread(target=srv.run, daemon=True)
    th.start()
    deadline = time.time() + 20
    while not srv.started and time.time() < deadline:
        time.sleep(0.05)
    assert srv.started, "uvicorn did not start"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        srv.should_exit = True
        th.join(10)


def _pg_bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for base in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (base / name).exists():
            return str(base / name)
    return None


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """A throwaway PostgreSQL cluster on a free loopback port, run as the `postgres` user when we are root."""
    initdb, pg_ctl = _pg_bin("initdb"), _pg_bin("pg_ctl")
    if not (initdb and pg_ctl):
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) are not installed; .ci/run installs them")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        pytest.skip("psycopg is not installed (pip install -e '.[postgres]')")
    root = Path(tempfile.mkdtemp(prefix="autotune-pg-"))
    data = root / "data"
    port = free_port()
    as_user: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    subprocess.run([*as_user, initdb, "-D", str(data), "-U", "autotune", "--auth=trust"], check=True,
                   capture_output=True)
    subprocess.run([*as_user, pg_ctl, "-D", str(data), "-l", str(root / "log"), "-w", "-o",
                    f"-p {port} -k {root} -h 127.0.0.1", "start"], check=True, capture_output=True)
    url = f"postgresql+psycopg://autotune@127.0.0.1:{port}/postgres"
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                break
        except OSError:
            time.sleep(0.2)
    yield url
    subprocess.run([*as_user, pg_ctl, "-D", str(data), "-m", "immediate", "stop"], capture_output=True)
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def shared_ray_cluster() -> object:
    """A real local Ray cluster of 2 nodes x 8 declared GPUs (tests/ray_cluster.py), one for the Ray test modules that
    run one after another (test_ray_executor, test_ray_faults, test_ray_verl: each test leaves it as it found it):
    started by the first test that needs it, stopped when the next test this process runs does not (the hooks
    below). Not "after the last one in the collection": under pytest-xdist that one may run in the other worker, and
    the cluster then stayed up beside every later test of this one (CI stop 60: beside the kept-head tests).
    Function-scoped, as the modules' `cluster`: a cluster stopped between two tests is never handed out again."""
    from tests.ray_cluster import shared_cluster

    return shared_cluster()


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    if "shared_ray_cluster" not in item.fixturenames:
        return
    if nextitem is None or "shared_ray_cluster" not in nextitem.fixturenames:
        from tests.ray_cluster import stop_shared_cluster

        stop_shared_cluster()


def pytest_sessionfinish(session: pytest.Session) -> None:
    from tests.ray_cluster import stop_shared_cluster

    stop_shared_cluster()  # a run stopped early (-x, Ctrl-C) leaves no cluster behind


# The test files that take longest (benchmarks/results/test_durations.md: the soak, the Ray and PostgreSQL fault tests,
# real verl on the CPU, verl's own validation), longest first. xdist's loadfile hands each worker whole files in the
# collection's order (scripts/test.sh turns off its own order, by the number of tests in a file, which left these
# few-test files for the end of the suite while the other worker idled): run first, they overlap the many short ones.
LONGEST_FIRST = ("test_faults.py", "test_ray_verl.py", "test_verl_study.py", "test_concurrent_pg.py",
                 "test_kept_ray.py", "test_verl_validate.py", "test_ray_executor.py", "test_ray_faults.py",
                 "test_real_verl.py", "test_live.py", "test_real_studies.py", "test_verl_log.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each file's tests keep their order
