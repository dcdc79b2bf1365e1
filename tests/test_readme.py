"""Every command the README shows is run here, and says what the README says it says.

The commands are read from the README's bash blocks (continuation lines joined, `a && b` and `a; b` split): each
must be listed below, either run here in a fresh directory (checked against the README's comment on it) or, where it
needs what this machine has not (GPUs, a Ray cluster of GPU nodes), parsed by autotune's own parser with the files
it names present. A command added to the README without a test here fails `test_every_readme_command_is_covered`.
The end-of-run report the README prints is compared line by line with the run it names.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from autotune.cli import build_parser
from tests.conftest import REPO, free_port

pytestmark = pytest.mark.slow

README = (REPO / "README.md").read_text()
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced block."""
    return re.findall(r"^```(\w*)\n(.*?)^```", text, re.M | re.S)


def readme_commands() -> dict[str, str]:
    """`autotune ...` command -> the README's comment on it ("" when none), from the bash blocks."""
    out: dict[str, str] = {}
    for lang, body in blocks(README):
        if lang != "bash":
            continue
        for line in body.replace("\\\n", " ").splitlines():
            code, _, comment = line.partition("  #")
            for part in re.split(r"\s*(?:&&|;)\s*", code):
                part = " ".join(part.split())
                if part.startswith("autotune "):
                    out[part] = comment.strip()
    return out


COMMANDS = readme_commands()
RUN = "autotune run --model qwen2.5-7b"
ESTIMATE_LATE = ("autotune estimate --model qwen2.5-7b --set tp=2 --set ppo_micro_batch_size_per_gpu=2 "
                 "--set log_prob_micro_batch_size_per_gpu=4 --response-length 1500")
RUN_HERE = [
    RUN, "autotune status", "autotune best --json", "autotune export --format sh -o job.sh",
    "autotune estimate --model qwen2.5-7b --set tp=4 --set use_dynamic_bsz=true", ESTIMATE_LATE,
    "autotune models", "autotune spaces", "autotune dashboard --storage sqlite:///trials/autotune.db --port 8080",
    "autotune doctor --model qwen2.5-7b",
    "autotune dashboard --storage postgresql+psycopg://USER:PASS@DBHOST/autotune --host 0.0.0.0",
]
NOT_HERE = {  # command -> what it needs that no test machine has
    "autotune run --model qwen2.5-7b --backend verl --job examples/job_qwen2.5-7b_grpo.yaml --n-trials 30 "
    "--measure-step 3 --trial-timeout 3600 --stall-timeout 1200 --confirm 2 --confirm-steps 6":
        "an 8-GPU node with verl's vLLM and Megatron, and the job's gsm8k data",
    "autotune run --model qwen2.5-32b --nodes 2 --gpus 8 --backend verl --job job.yaml --executor ray "
    "--ray-address HEAD:6379 --parallel 4 --n-trials 40 --storage postgresql+psycopg://USER:PASS@DBHOST/autotune "
    "--study q32-2x8": "a Ray cluster of 8-GPU nodes and your job file",
}


def autotune(argv: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autotune", *shlex.split(argv)[1:]], cwd=cwd, env=ENV,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """A fresh directory in which the README's first command has run (its database under trials/)."""
    cwd = tmp_path_factory.mktemp("readme")
    r = autotune(RUN, cwd)
    assert r.returncode == 0, r.stderr
    (cwd / "run.out").write_text(r.stdout)
    return cwd


def test_every_readme_command_is_covered():
    assert set(COMMANDS) == set(RUN_HERE) | set(NOT_HERE)


def test_the_first_run_ends_with_its_report(workdir):
    out = (workdir / "run.out").read_text()
    assert "SIMULATED" in out and "20 trials launched (reached --n-trials (" in out
    assert re.search(r"^best: trial \d+, [\d.]+ tokens/s/GPU \[SIMULATED\] \(tp", out, re.M)
    assert (workdir / "trials" / "autotune.db").exists()


def test_status_best_and_export_read_that_study(workdir):
    # "table of trials: label, status, throughput, predicted vs measured memory"
    r = autotune("autotune status", workdir)
    assert r.returncode == 0
    for col in ("status", "configuration", "tokens/s/GPU", "mem pred GiB", "mem meas GiB"):
        assert col in r.stdout
    # "the winner: throughput, measured or simulated, params and verl keys"
    r = autotune("autotune best --json", workdir)
    best = json.loads(r.stdout)
    assert best["throughput"] > 0 and best["simulated"] is True and best["measured"] is False
    assert best["params"] and best["verl_overrides"] and best["label"] in autotune("autotune status", workdir).stdout
    # "bash script running verl with the winner": no --job, so it names what to fill in and refuses to run without it
    r = autotune("autotune export --format sh -o job.sh", workdir)
    script = workdir / "job.sh"
    assert r.returncode == 0 and script.stat().st_mode & 0o111
    text = script.read_text()
    assert "python -m verl.trainer.main_ppo" in text and best["label"] in text.splitlines()[1]
    assert "TO FILL IN" in text and "fill in" in r.stderr
    subprocess.run(["bash", "-n", str(script)], check=True)
    for fmt in ("yaml", "json", "ray"):  # "(also: yaml, json, ray)"
        assert autotune(f"autotune export --format {fmt}", workdir).returncode == 0


def test_estimate_examples_print_what_the_readme_promises(tmp_path):
    r = autotune("autotune estimate --model qwen2.5-7b --set tp=4 --set use_dynamic_bsz=true", tmp_path)
    assert r.returncode == 0  # "memory breakdown + step time"
    assert "predicted per-GPU memory (GiB)" in r.stdout and re.search(r"predicted step \d+ s", r.stdout)
    promise = COMMANDS[ESTIMATE_LATE].strip('"')
    assert promise.startswith("fits at step 3; OOM in update_actor once responses reach ")
    r = autotune(ESTIMATE_LATE, tmp_path)
    assert r.returncode == 0 and f"memory: {promise}" in r.stdout, r.stdout


def test_models_and_spaces(tmp_path):
    models = autotune("autotune models", tmp_path)
    spaces = autotune("autotune spaces", tmp_path)
    assert models.returncode == spaces.returncode == 0
    assert "qwen2.5-7b" in models.stdout and "deepseek-v3" in models.stdout
    assert re.search(r"^dense \(", spaces.stdout, re.M) and re.search(r"^moe \(", spaces.stdout, re.M)


def _serve_and_get(argv: list[str], cwd: Path) -> tuple[int, str, str, str]:
    """Start `autotune dashboard`, wait for the line announcing its URL, GET /, stop it with Ctrl-C."""
    proc = subprocess.Popen([sys.executable, "-m", "autotune", *argv[1:]], cwd=cwd, env=ENV, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        line = proc.stdout.readline()  # printed once the port is bound: a request now waits for the server
        assert line.startswith("autotune dashboard: http://"), line + proc.stderr.read()
        port = re.search(r":(\d+)/", line).group(1)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=60) as resp:
            page = resp.read().decode()
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    return proc.returncode, line, page, err


def test_dashboard_examples_serve_the_study_database(workdir, postgres_url):
    port = free_port()  # the README's 8080 may be taken on a test machine
    argv = shlex.split("autotune dashboard --storage sqlite:///trials/autotune.db --port 8080")
    code, line, page, _ = _serve_and_get([*argv[:-1], str(port)], workdir)
    assert f"http://localhost:{port}/ over sqlite:///trials/autotune.db" in line
    assert "qwen2.5-7b-1x8xh100" in page and code == 0  # Ctrl-C is how it ends
    # the README's step 2, `createdb autotune`: a database of its own on the test server (others hold other studies)
    from sqlalchemy import create_engine, text

    name = f"readme_{os.getpid()}"
    engine = create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(f"DROP DATABASE IF EXISTS {name}"))
        conn.execute(text(f"CREATE DATABASE {name}"))
    engine.dispose()
    readme = "autotune dashboard --storage postgresql+psycopg://USER:PASS@DBHOST/autotune --host 0.0.0.0"
    url = postgres_url.rsplit("/", 1)[0] + "/" + name
    argv = shlex.split(readme.replace("postgresql+psycopg://USER:PASS@DBHOST/autotune", url))
    code, _, page, err = _serve_and_get([*argv, "--port", str(free_port())], workdir)
    assert "no login" in err and "No study in this database yet" in page and code == 0
    assert err.rstrip().endswith("autotune dashboard: stopped") and "Traceback" not in err


@pytest.mark.parametrize("command", sorted(NOT_HERE))
def test_gpu_examples_parse_and_name_files_that_exist(command):
    args = build_parser().parse_args(shlex.split(command)[1:])
    assert args.command == "run" and args.backend == "verl"
    if args.job.startswith("examples/"):
        assert (REPO / args.job).is_file()


def test_the_report_the_readme_prints_is_that_run_s(tmp_path):
    """The README's end-of-run report, line by line, from the replay run it names."""
    said = " ".join(re.search(r"here a study replayed.*?`(autotune run [^`]+)`", README, re.S).group(1).split())
    report = next(body for lang, body in blocks(README) if not lang and "trials launched" in body)
    (tmp_path / "benchmarks").symlink_to(REPO / "benchmarks")  # the table's path is relative to the repository
    r = autotune(said, tmp_path)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    at = 0
    for want in report.strip().splitlines():
        at = lines.index(want, at) + 1 if want in lines[at:] else pytest.fail(f"not in the run's output: {want}")


def test_doctor_on_a_machine_without_the_gpu_stack_says_what_to_fix(tmp_path):
    """The README's check of a GPU node, run where there is none: one line per problem, each with its fix; exit 1."""
    r = autotune("autotune doctor --model qwen2.5-7b", tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    fixes = [ln for ln in r.stdout.splitlines() if ln.startswith("FIX")]
    assert fixes and all(":" in ln for ln in fixes)
    # no GPU here: said first (issue 25 item 22), with what NVML and torch found, instead of a `cuda` line further down
    assert r.stdout.splitlines()[1].startswith("FIX   gpus: no GPU here (")
    assert "sees no CUDA GPU" in fixes[0] or "torch does not import" in fixes[0]
    assert not any(ln.startswith("FIX   cuda:") for ln in fixes)
    assert "NOT READY" in r.stdout and "head size 128" in r.stdout


def _section(title: str) -> str:
    """The README's text under a `## title` heading, up to the next one."""
    return re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", README, re.M | re.S).group(1)


def test_the_tests_have_an_environment_of_their_own():
    """The test command's extras, verl and CPU torch go to .venv-test, never the .venv the README installs into."""
    script = (REPO / "scripts" / "test.sh").read_text()
    venv = re.search(r"^VENV=\$\{TEST_VENV:-([^}]+)\}$", script, re.M).group(1)
    assert venv == ".venv-test" and 'python3 -m venv "$VENV"' in script and '. "$VENV/bin/activate"' in script
    code = "\n".join(ln for ln in script.splitlines() if not ln.lstrip().startswith("#"))
    assert not re.search(r"\.venv\b(?!-)", code)
    first = next(body for lang, body in blocks(README) if lang == "bash" and "venv" in body)
    assert "python3 -m venv .venv " in first and venv not in first
    assert f"`{venv}`" in README and "`TEST_VENV=DIR`" in README
    assert "bash scripts/test.sh" in (REPO / ".ci" / "run").read_text()
    assert f"{venv}/" in (REPO / ".gitignore").read_text().splitlines()


def test_the_test_command_says_where_cpu_torch_comes_from():
    """Not PyPI's Linux torch (the CUDA build): the local +cpu version, from pip's sources or PyTorch's CPU index."""
    script = (REPO / "scripts" / "install-verl-cpu.sh").read_text()
    want = re.search(r'"(torch==[\d.]+\+cpu)"', script).group(1)
    index = re.search(r"TORCH_CPU_INDEX=\$\{TORCH_CPU_INDEX:-(\S+)\}", script).group(1)
    assert script.count(f'"{want}"') == 2 and '--index-url "$TORCH_CPU_INDEX"' in script
    assert f"`{want}`" in README and f"`{index}`" in README and "CUDA build" in README


@pytest.mark.parametrize("section, extra", [("Dashboard", "dashboard"), ("Where the time goes", "profile")])
def test_optional_features_name_their_extra(section, extra):
    """The install line each section gives is an extra pyproject.toml has, the one the command asks for when missing."""
    import tomllib

    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    line = f"pip install -e '.[{extra}]'"
    assert extra in extras and line in _section(section)
    cli = {"dashboard": "results.py", "profile": "profile.py"}[extra]
    assert line in (REPO / "autotune" / "cli" / cli).read_text()


def test_the_ray_section_says_what_token_authentication_needs(monkeypatch):
    """`ray start --head` under Ray 2.60 may require tokens: the README says what a worker then needs, in the words of
    autotune's own refusal (the refusal is made here against a GCS that answers UNAUTHENTICATED)."""
    grpc = pytest.importorskip("grpc")
    from ray.core.generated import gcs_service_pb2_grpc

    from autotune.executors import ray as ray_executor

    class Refused(grpc.RpcError):
        def code(self):
            return grpc.StatusCode.UNAUTHENTICATED

    class Stub:
        def __init__(self, channel):
            pass

        def GetClusterId(self, *a, **kw):  # noqa: N802 - the gRPC method's name
            raise Refused()

    monkeypatch.setattr(gcs_service_pb2_grpc, "NodeInfoGcsServiceStub", Stub)
    for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("HOME", "/nonexistent")
    said = ray_executor._auth_refused("127.0.0.1:1", timeout_s=0.1)
    ray_text = " ".join(_section("Tuning on a Ray cluster").split())
    assert "ray start --head" in ray_text and "RAY_AUTH_MODE=token" in ray_text and "RAY_AUTH_MODE=disabled" in ray_text
    quoted = re.search(r"`(authentication failed: [^`]+)`", ray_text).group(1)
    for piece in quoted.split(" ... "):
        assert piece in said, (piece, said)


def test_the_map_of_the_code_follows_the_tree():
    """"Where things live" names every package of autotune/ (issue 26), and every file it names exists."""
    section = README.split("## Where things live", 1)[1].split("\n## ", 1)[0]
    rows = [ln.split("|")[1] for ln in section.splitlines() if ln.startswith("| `")]
    named = {p for row in rows for p in re.findall(r"`autotune/(\w+)/`", row)}
    packages = {d.name for d in (REPO / "autotune").iterdir() if (d / "__init__.py").is_file()}
    assert named == packages
    for path in re.findall(r"`(autotune/[\w/.-]+)`", section):
        assert (REPO / path).exists(), path
