"""What a new user reads: one clear line for a mistake, nothing created by a typo, values as YAML, reasons whole."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from autotune import units
from autotune.search.space import builtin_spaces
from autotune.store.schema import TrialRow
from autotune.store.store import Store
from tests.conftest import REPO
from tests.conftest import cli_run as run

ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def autotune(*argv: str, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autotune", *argv], capture_output=True, text=True, env=ENV,
                          cwd=cwd, timeout=timeout)


@pytest.fixture(scope="module")
def study_db(tmp_path_factory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('msgs') / 'a.db'}"
    from autotune.cli import main

    assert main(["run", "--model", "qwen2.5-7b", "--storage", url, "--n-trials", "2", "--json"]) == 0
    return url


def test_a_bad_option_value_is_one_line_not_the_usage():
    r = autotune("run", "--n-trials", "abc")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and "usage:" not in r.stderr
    assert "--n-trials: invalid int value: 'abc'" in r.stderr and "autotune run --help" in r.stderr


@pytest.mark.parametrize("command", ["status", "best", "export"])
def test_reading_a_missing_sqlite_database_creates_nothing(capsys, tmp_path, command):
    path = tmp_path / "typo" / "atuotune.db"
    code, out, err = run(capsys, command, "--storage", f"sqlite:///{path}")
    assert code == 2 and out == ""
    assert "no study database at" in err and str(path) in err and "autotune run" in err
    assert not path.exists() and not path.parent.exists()


def test_a_file_that_is_not_a_database_is_not_a_server_problem(capsys, tmp_path):
    path = tmp_path / "notes.db"
    path.write_text("not a database\n" * 100)
    code, _, err = run(capsys, "status", "--storage", f"sqlite:///{path}")
    assert code == 2 and "must be a SQLite database" in err
    assert "server" not in err  # a file has no server to check
    code, _, err = run(capsys, "status", "--storage", "postgresql+psycopg://x@127.0.0.1:9/db")
    assert code == 2 and "server is running" in err  # a server URL still gets the server advice


def test_dashboard_on_a_taken_port_is_one_line_and_exit_2(study_db):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = autotune("dashboard", "--storage", study_db, "--port", str(port))
    assert r.returncode == 2 and r.stdout == ""  # no URL announced for a server that cannot start
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert f"127.0.0.1:{port}: in use by another program; choose another port with --port" in r.stderr


def test_best_prints_the_label_once_and_values_as_yaml(capsys, study_db):
    code, out, _ = run(capsys, "best", "--storage", study_db)
    assert code == 0 and "layout:" not in out and "label:" not in out
    first, *params = out.splitlines()
    label = first.rsplit("(", 1)[1].rstrip(")")
    assert out.count(label) == 1
    values = [line for line in params if re.match(r"\s+\w+:\s", line)]  # not the notes (a safer pick's words)
    assert values
    for line in values:
        assert not re.search(r"\bNone\b|\bTrue\b|\bFalse\b|'", line), line
    assert any(re.match(r"\s+vpp:\s+null\s", line) for line in params)


def test_spaces_prints_each_dimension_as_its_yaml(capsys):
    code, out, _ = run(capsys, "spaces")
    assert code == 0 and not re.search(r"\bNone\b|\bTrue\b|\bFalse\b", out)
    for name, path in builtin_spaces().items():
        dims = out.split(f"{name} (", 1)[1].split("  dimensions:\n", 1)[1]
        parsed = {}
        for line in dims.splitlines():
            if not line.startswith("    "):
                break
            parsed.update(yaml.safe_load(line.strip()))
        assert parsed == yaml.safe_load(path.read_text())["dimensions"], name


def test_status_cuts_long_reasons_at_a_word_and_json_keeps_them_whole(capsys, study_db):
    store = Store(study_db)
    name = store.list_studies()[0].name
    reason = "runner error: " + "word " * 14 + "abcdefghijklmnopqrstuvwxyz " * 4 + "end"
    store.add_trial(TrialRow(study=name, number=999, status="failed", reason=reason, candidate_key="k",
                             params=store.trials(name)[0].params, verl_overrides={}, launched=True))
    code, out, _ = run(capsys, "status", "--storage", study_db, "--all")
    assert code == 0 and "\u2026" in out
    for word in re.findall(r"abc[a-z]*", out):
        assert word == "abcdefghijklmnopqrstuvwxyz", f"cut mid-word: {word}"
    code, out, _ = run(capsys, "status", "--storage", study_db, "--all", "--json")
    assert next(t for t in json.loads(out)["trials"] if t["number"] == 999)["reason"] == reason


def test_clip_never_cuts_a_word():
    text = "predicted OOM: update: predicted 124.2 GiB > 79.6 GiB (largest: activations)"
    assert units.clip(text, 200) == text
    for width in range(20, len(text)):
        short = units.clip(text, width)
        assert len(short) <= width and short.endswith("\u2026")
        assert text.startswith(short[:-1]) and not text[len(short) - 1].isalnum()  # the next is not a letter


def test_status_help_does_not_promise_a_default_from_options_it_lacks():
    r = autotune("status", "--help")
    assert r.returncode == 0 and "--model" not in r.stdout
    assert "derived from model" not in r.stdout and "its only study" in " ".join(r.stdout.split())
