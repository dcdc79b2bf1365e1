"""The CLI over a PostgreSQL URL with a password (issue 27): no printed line carries the password, and a URL whose
driver is missing or whose port is malformed is one line that says what to do."""

from __future__ import annotations

import importlib.util
import os

import pytest
import sqlalchemy

from tests.conftest import cli_run

SECRET = "s3cret-pw"


@pytest.fixture
def secret_url(postgres_url: str) -> str:
    """The session's server (trust authentication: any password is accepted), a fresh database, a password."""
    name = f"pw_{os.getpid()}_{os.urandom(3).hex()}"  # one per test: an earlier test's engine may still hold its own
    engine = sqlalchemy.create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as c:
        c.execute(sqlalchemy.text(f"DROP DATABASE IF EXISTS {name}"))
        c.execute(sqlalchemy.text(f"CREATE DATABASE {name}"))
    engine.dispose()
    return postgres_url.rsplit("/", 1)[0].replace("autotune@", f"autotune:{SECRET}@") + f"/{name}"


@pytest.mark.postgres
def test_no_command_prints_the_password(secret_url, capsys, tmp_path):
    code, out, err = cli_run(capsys, "status", "--storage", secret_url)  # an empty database: an error naming it
    assert code == 2 and SECRET not in out + err and "autotune:***@" in err
    code, out, err = cli_run(capsys, "run", "--model", "qwen2.5-1.5b", "--backend", "simulate", "--storage",
                             secret_url, "--study", "pw", "--n-trials", "2", "--confirm", "0", "--workdir",
                             str(tmp_path))
    assert code == 0, err
    assert SECRET not in out + err and "in postgresql+psycopg://autotune:***@" in out and "next: autotune export" in out
    for argv in (["status"], ["best"], ["status", "--study", "nope"]):
        code, out, err = cli_run(capsys, *argv, "--storage", secret_url)
        assert SECRET not in out + err, argv
    import optuna

    asked = optuna.load_study(study_name="pw", storage=secret_url).ask()  # on PostgreSQL too: shown, not hidden
    code, out, err = cli_run(capsys, "status", "--storage", secret_url)
    assert f"1 Optuna trial(s) without an autotune row: #{asked.number} RUNNING (asked by an unknown tuner)" in out


def test_a_malformed_port_is_one_line_without_the_password(capsys):
    url = f"postgresql+psycopg://autotune:{SECRET}@127.0.0.1:notaport/db"
    for argv in (["status", "--storage", url], ["best", "--storage", url]):
        code, out, err = cli_run(capsys, *argv)
        assert code == 2 and SECRET not in out + err and len(err.strip().splitlines()) == 1, err


@pytest.mark.skipif(importlib.util.find_spec("psycopg2") is not None, reason="psycopg2 is installed here")
def test_a_missing_driver_names_itself_and_what_installs_it(capsys, tmp_path):
    url = f"postgresql+psycopg2://autotune:{SECRET}@127.0.0.1:5432/db"
    for argv in (["status", "--storage", url], ["best", "--storage", url],
                 ["run", "--model", "qwen2.5-1.5b", "--backend", "simulate", "--storage", url, "--n-trials", "1",
                  "--workdir", str(tmp_path)]):
        code, out, err = cli_run(capsys, *argv)
        assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
        assert "driver psycopg2 is not installed: pip install psycopg2-binary" in err and SECRET not in err


@pytest.mark.postgres
def test_the_dashboard_says_where_it_serves_without_the_password(secret_url, capsys, tmp_path):
    import signal
    import socket
    import subprocess
    import sys

    code, _, err = cli_run(capsys, "run", "--model", "qwen2.5-1.5b", "--backend", "simulate", "--storage", secret_url,
                           "--study", "pw", "--n-trials", "1", "--confirm", "0", "--workdir", str(tmp_path))
    assert code == 0, err
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "autotune", "dashboard", "--storage", secret_url, "--port",
                             str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()  # the start line, printed before it serves
    finally:
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=120)
    assert first.startswith("autotune dashboard: http://") and "autotune:***@" in first, first
    assert SECRET not in first + rest
