"""The live line of `autotune run` while a verl trial runs: drawn on a terminal (a pseudo-terminal here), quiet in a
pipe, absent with --json. The trials are real processes of the verl test double (tests/fake_verl)."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from autotune.runners.progress import STARTUP, estimate, phase_at
from tests.conftest import REPO

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
LIVE = re.compile(r"^trial #(?P<trial>\d+) (?P<label>.+?) \| (?P<phase>[^|]+?) \| step (?P<step>\d+)/(?P<steps>\d+) \| "
                  r"(?P<elapsed>\S+) elapsed, (?P<left>[^|]+?) \| GPU peak (?P<mem>.+)$")


def _argv(tmp_path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "tests.fake_verl.run_cli", "run", "--model", "qwen2.5-7b", "--backend", "verl",
            "--n-trials", "1", "--confirm", "0", "--storage", f"sqlite:///{tmp_path / 'a.db'}",
            "--workdir", str(tmp_path / "trials"), *extra]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "FAKE_VERL_STEP_S": "0.8", "FAKE_VERL_STARTUP_S": "0.8",
            "FAKE_VERL_TEARDOWN_S": "0.2", "TERM": "xterm-256color", "COLUMNS": "220", "LINES": "40"}


def _in_pty(argv: list[str], stderr_apart: bool = False, timeout: float = 240) -> tuple[int, str, str]:
    """Run argv with its standard output (and error) on a pseudo-terminal; returns (code, terminal text, stderr)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 220, 0, 0))
    proc = subprocess.Popen(argv, cwd=REPO, env=_env(), stdin=slave, stdout=slave,
                            stderr=subprocess.PIPE if stderr_apart else slave)
    os.close(slave)
    chunks, deadline = [], time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # EIO: the child closed the terminal
                    break
                if not data:
                    break
                chunks.append(data)
            elif proc.poll() is not None:
                break
    finally:
        os.close(master)
    code = proc.wait(timeout=60)
    err = proc.stderr.read().decode() if stderr_apart else ""
    return code, b"".join(chunks).decode(errors="replace"), err


def _screen_lines(text: str) -> list[str]:
    """Every line the terminal was given, redraws included, without escape codes."""
    return [ln.strip() for ln in ANSI.sub("", text).replace("\r\n", "\n").replace("\r", "\n").split("\n")]


def _in_pipe(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=240)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The three `autotune run`s of this module at once (each is mostly the double's 0.8 s steps, asleep): on a
    terminal, in a pipe, and on a terminal with --json; each in a folder of its own."""
    dirs = [tmp_path_factory.mktemp(name) for name in ("terminal", "pipe", "json")]
    with ThreadPoolExecutor(3) as pool:
        terminal = pool.submit(_in_pty, _argv(dirs[0]))
        pipe = pool.submit(_in_pipe, _argv(dirs[1]))
        doc = pool.submit(_in_pty, _argv(dirs[2], "--json"), stderr_apart=True)
        return {"terminal": terminal.result(), "pipe": pipe.result(), "json": doc.result()}


def test_live_line_on_a_terminal(runs):
    code, text, _ = runs["terminal"]
    lines = _screen_lines(text)
    assert code == 0, "\n".join(lines[-30:])
    live = [m.groupdict() for m in map(LIVE.match, lines) if m]
    assert live, "no live line drawn:\n" + "\n".join(lines[-30:])
    result = next(ln for ln in lines if re.match(r"#0\s+ok\s", ln))
    assert all(d["trial"] == "0" and result.endswith(d["label"]) for d in live)  # the trial's own label
    assert all(d["steps"] == "4" for d in live)  # the measured step 3 and one extra step (the noise)
    steps = [int(d["step"]) for d in live]
    assert steps == sorted(steps) and steps[0] == 0 and max(steps) >= 2
    before = [d for d in live if d["step"] == "0"]
    assert all(d["phase"] == STARTUP and d["left"].startswith(">") and d["mem"] == "-" for d in before)
    during = [d for d in live if 1 <= int(d["step"]) < 3]
    assert during and all(d["phase"].endswith("~") and d["left"].startswith("~") for d in during)
    # Without NVML the peak is verl's own counter (the double reports 52 + step GiB reserved)
    for d in during:
        assert d["mem"] == f"{52.0 + int(d['step']):.1f} GiB (torch, actor)" or d["mem"].endswith(" GiB (NVML)")
    assert any(ln.startswith("best: trial 0") for ln in lines)
    assert any(ln.startswith("GPU time: ") and "GPU-hours" in ln for ln in lines)


def test_quiet_in_a_pipe(runs):
    proc = runs["pipe"]
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"^  #0\s+ok\s", proc.stdout, re.M) and "best: trial 0" in proc.stdout
    assert "elapsed" not in proc.stdout + proc.stderr and "\x1b[" not in proc.stdout


def test_json_on_a_terminal_is_the_document_alone(runs):
    code, text, err = runs["json"]
    assert code == 0, err
    doc = json.loads(text.replace("\r\n", "\n"))
    assert doc["launched"] == 1 and doc["report"]["best_trial"] == 0 and doc["report"]["gpu_hours"] > 0
    assert "elapsed" not in err


def test_phase_and_time_left_from_completed_steps():
    phases = {"gen": 6.0, "old_log_prob": 1.0, "update_actor": 3.0}
    assert [phase_at(t, phases) for t in (0, 5.9, 6.5, 7.5, 9.9, 12)] == [
        "rollout", "rollout", "log-prob", "update", "update", "update"]
    metrics = {"timing_s/gen": 6.0, "timing_s/old_log_prob": 1.0, "timing_s/update_actor": 3.0, "timing_s/step": 10.0}
    # Before the first step: the model's step time, as a lower bound (start-up not included)
    p = estimate(4, 3, 30.0, [], 100.0, {"gen": 60.0}, None)
    assert p.phase == STARTUP and p.eta_s == 300.0 and p.eta_is_lower_bound
    # After step 1 (seen 60 s after launch), 6.5 s into step 2: log-prob; 2 steps of 10 s left minus 6.5 s
    p = estimate(4, 3, 66.5, [(1, 60.0, metrics)], 100.0, None, 40.0, "NVML")
    assert (p.phase, p.phase_estimated, p.step, p.eta_s) == ("log-prob", True, 1, 13.5)
    assert p.line("tp2 rtp2") == ("trial #4 tp2 rtp2 | log-prob~ | step 1/3 | 1m06s elapsed, ~14s left | "
                                  "GPU peak 40.0 GiB (NVML)")
    # Two steps seen: the wall time between them is the step time (20 s here, not verl's 10 s)
    p = estimate(4, 3, 85.0, [(1, 60.0, metrics), (2, 80.0, metrics)], 100.0, None)
    assert p.eta_s == 15.0 and p.phase == "rollout"  # 5 s into a 20 s step whose first 12 s are the rollout
