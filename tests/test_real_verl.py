"""The real verl 0.9.1 `python -m verl.trainer.main_ppo` on this machine (CPU torch, no GPU), and the test double
checked against what it printed.

verl gets through Hydra and its config checks, starts its own Ray, loads the data, and dies where it first needs
GPUs (ResourcePoolManager: "Total available GPUs 0 is less than total desired GPUs 1"). tests/data/real_verl_cpu.log
is that output, saved from such a run; the double (tests/fake_verl) must print the same formats up to that point.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from autotune import verl
from autotune.candidate import Candidate
from autotune.cluster import Cluster, get_gpu_type
from autotune.job import Job
from autotune.model import get_model
from autotune.runners.base import TrialStatus
from autotune.search.setup import Setup
from autotune.search.space import load_space
from autotune.store.store import Store
from autotune.verl.log import LineTail, RunLog, classify, parse_step_line
from tests.fake_verl import env_for, fake_runner, leftovers, make_spec, pid_alive
from tests.real_verl import tiny_job, write_gsm8k_parquet, write_model

ROOT = Path(__file__).resolve().parent.parent
REAL_LOG = Path(__file__).parent / "data" / "real_verl_cpu.log"
# a real GPU trial's console as Ray wrote it (its workers' lines, which the CPU run never reached)
REAL_GPU_LOG = Path(__file__).parent / "data" / "real_verl_gpu" / "h100_2026-12-06_l59" / "c-1.5b-h59_trial_0000" / \
    "verl.log"
# What verl imports on the path to its first GPU request (scripts/install-verl-cpu.sh installs them).
VERL_PATH_MODULES = ("verl", "torch", "ray", "datasets", "transfer_queue", "torchdata", "peft", "aiohttp",
                     "cachetools", "zmq", "msgspec")

_ANSI = r"(?:\x1b\[[0-9;]*m)*"
_PREFIX = re.compile(rf"^(?P<pre>{_ANSI}\((?P<actor>[A-Za-z_]\w*) pid=(?P<pid>\d+)(?:, ip=[^)]*)?\){_ANSI}) ")
_TASK_ERROR = re.compile(r"^ray\.exceptions\.RayTaskError\((?P<exc>\w+)\): \x1b\[36mray::TaskRunnerV1\.run\(\)"
                         r"\x1b\[39m \(pid=\d+, ip=[\d.]+, actor_id=[0-9a-f]+, repr=<main_ppo\.TaskRunnerV1 "
                         r"object at 0x[0-9a-f]+>\)$")
_RAY_DRIVER_LOG = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}\t[A-Z]+ [\w.]+:\d+ -- ")
_FRAME = re.compile(r'^  File "[^"]+", line \d+, in \S+$')
_EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception): ")


def shape(line: str) -> str:
    """The format a console line is in, without its values (pids, numbers, paths)."""
    m = _PREFIX.match(line)
    if m:
        return "actor " + m.group("pre").replace(f"pid={m.group('pid')}", "pid=N")
    if line.startswith("ray init kwargs: {"):
        return "ray init kwargs"
    if _RAY_DRIVER_LOG.match(line):
        return "ray driver log: " + line.split(" -- ", 1)[1].split(" ")[0]
    if line.startswith("Error executing job with overrides: ["):
        return "hydra error"
    if line == "Traceback (most recent call last):":
        return "traceback"
    if _TASK_ERROR.match(line):
        return "task error"
    if _FRAME.match(line):
        return "frame"
    if line.startswith("    ") and line.strip():
        return "source"
    if _EXCEPTION.match(line):
        return "exception " + line.split(":", 1)[0]
    return "other: " + line[:60]


def lines_of(text: str) -> list[str]:
    """Lines as the runner reads them (split on newlines only: progress bars rewrite a line with \\r)."""
    return text.rstrip("\n").split("\n")


def real_lines() -> list[str]:
    return lines_of(REAL_LOG.read_bytes().decode())


def double_log(tmp_path: Path, mode: str) -> tuple[list[str], object]:
    rec = tmp_path / "rec.jsonl"
    setup = Setup(get_model("qwen2.5-7b"), Cluster(get_gpu_type("h100"), 1, 1), Job.default(), load_space("dense"))
    cand = Candidate(tp=1, pp=1, rollout_tp=1, ppo_micro_batch_size_per_gpu=2,
                     log_prob_micro_batch_size_per_gpu=2).normalized()
    res = fake_runner(env_for(rec, FAKE_VERL_MODE=mode, FAKE_VERL_TEARDOWN_S="0.1"), preflight=False).run(
        make_spec(setup, tmp_path, cand=cand, measure_step=1))
    assert leftovers(rec) == []
    return lines_of(Path(res.log_path).read_bytes().decode()), res


# the fixture and the double -----------------------------------------------------------------------------------
def test_real_log_is_classified_as_no_gpus_not_a_crash() -> None:
    f = classify(REAL_LOG.read_text(), 1)
    assert (f.kind, f.status) == ("gpus_unavailable", "failed")
    assert "Total available GPUs 0 is less than total desired GPUs 1" in f.message
    assert "fewer GPUs than the job asks for" in f.message
    assert "_check_resource_available" in f.excerpt
    log = RunLog(LineTail(REAL_LOG), LineTail(REAL_LOG.with_suffix(".none")))
    assert log.poll(final=True) == [] and log.steps == {}  # no step line, no false positive on 1000+ lines
    assert log.lines_seen == len(real_lines())


def test_double_prints_the_real_formats_up_to_where_verl_dies(tmp_path: Path) -> None:
    real = real_lines()
    lines, res = double_log(tmp_path, "no_gpus")
    real_shapes = {shape(ln) for ln in real}
    assert {shape(ln) for ln in lines} <= real_shapes, sorted({shape(ln) for ln in lines} - real_shapes)
    # the same order of events: Ray up, the task runner's output (data loaded), Hydra's error, the traceback
    for log in (real, lines):
        kinds = [shape(ln) for ln in log]
        first = {k: kinds.index(k) for k in ("ray init kwargs", "ray driver log: Started", "hydra error",
                                             "traceback", "task error")}
        actor = kinds.index("actor \x1b[36m(TaskRunnerV1 pid=N)\x1b[0m")
        assert first["ray init kwargs"] < first["ray driver log: Started"] < actor < first["hydra error"] \
            < first["traceback"] < first["task error"]
        assert any("dataset len: 32" in ln for ln in log)
    # the same failure, read the same way
    f_real, f_double = classify("\n".join(real), 1), classify("\n".join(lines), 1)
    assert (f_double.kind, f_double.status) == (f_real.kind, f_real.status)
    assert re.sub(r"\d+", "N", f_double.message) == re.sub(r"\d+", "N", f_real.message)
    assert res.status == TrialStatus.FAILED and res.extra["failure"] == "gpus_unavailable"
    assert len(res.extra["attempts"]) == 1  # not the candidate's fault, and not retried


def test_double_ray_init_kwargs_and_hydra_line_parse_like_the_real_ones(tmp_path: Path) -> None:
    def kwargs(log: list[str]) -> dict:
        return ast.literal_eval(next(ln for ln in log if ln.startswith("ray init kwargs: "))[17:])

    def hydra_overrides(log: list[str]) -> list[str]:
        return ast.literal_eval(next(ln for ln in log if ln.startswith("Error executing job"))[36:])

    real = real_lines()
    lines, _ = double_log(tmp_path, "no_gpus")
    rk, dk = kwargs(real), kwargs(lines)
    assert set(dk) <= set(rk) and set(dk["runtime_env"]) <= set(rk["runtime_env"])
    assert set(dk["runtime_env"]["env_vars"]) <= set(rk["runtime_env"]["env_vars"])
    for k in ("address", "include_dashboard"):  # what the runner passes, printed back the same way
        assert dk[k] == rk[k]
    assert dk["runtime_env"]["env_vars"]["VERL_FILE_LOGGER_PATH"].endswith("/metrics.jsonl")
    assert rk["runtime_env"]["env_vars"]["VERL_FILE_LOGGER_PATH"].endswith("/metrics.jsonl")
    ro, do = hydra_overrides(real), hydra_overrides(lines)
    assert ro[:3] == do[:3] == ["model_engine=megatron", "algorithm.adv_estimator=grpo",
                                "actor_rollout_ref.rollout.name=vllm"]
    plus_real = {o.split("=")[0] for o in ro if o.startswith("+")}
    plus_double = {o.split("=")[0] for o in do if o.startswith("+")}
    # the real log was recorded before the runner passed its Ray setup hook (the stack's shims, verl/shims.py)
    assert plus_real <= plus_double and plus_double - plus_real <= {verl.RAY_SETUP_HOOK_KEY}


def test_double_step_lines_parse_the_same_behind_the_real_actor_prefix(tmp_path: Path) -> None:
    real_prefix = next(m.group("pre") for ln in real_lines() if (m := _PREFIX.match(ln)))
    lines, res = double_log(tmp_path, "ok")
    steps = [ln for ln in lines if parse_step_line(ln)]
    assert steps and res.status == TrialStatus.OK
    before = lines[:lines.index(steps[0])]  # what a successful run prints before its first step: real formats too
    real_shapes = {shape(ln) for ln in real_lines() + lines_of(REAL_GPU_LOG.read_bytes().decode(errors="replace"))}
    assert before and {shape(ln) for ln in before} <= real_shapes
    for ln in steps:
        m = _PREFIX.match(ln)
        assert m and shape(ln) == "actor " + re.sub(r"pid=\d+", "pid=N", real_prefix)
        assert parse_step_line(real_prefix + " " + ln[m.end():]) == parse_step_line(ln)


# the real verl process ------------------------------------------------------------------------------------------
def _session_pids(ray_tmp: Path) -> set[int]:
    """PIDs Ray's session wrote into its log file names (driver, workers, actors)."""
    pids = set()
    for p in ray_tmp.glob("session_*/logs/*"):
        m = re.search(r"[-_](\d+)\.(?:out|err|log)$", p.name)
        if m:
            pids.add(int(m.group(1)))
    return pids


def _procs_mentioning(text: str) -> list[int]:
    """Live processes whose command line names `text` (Ray's raylet, gcs_server, dashboard and workers name their
    session or temp dir there)."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                cmd = Path(entry.path, "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if text in cmd and pid_alive(int(entry.name)):
                found.append(int(entry.name))
    return found


@pytest.mark.slow
def test_real_verl_dies_without_gpus_is_classified_and_leaves_nothing(tmp_path: Path) -> None:
    """`autotune run --backend verl` as a user types it, on the real verl: one trial, recorded and classified, then
    the study stops with the reason (exit 2); no process of Ray is left (the kept head autotune started, which the
    trial's driver joined, stopped with the run)."""
    missing = [m for m in VERL_PATH_MODULES if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"verl's CPU path needs {missing}: scripts/install-verl-cpu.sh installs them")
    model = write_model(tmp_path / "tiny-qwen2")
    data = write_gsm8k_parquet(tmp_path / "data" / "train.parquet")
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(tiny_job(model, data)))
    url = f"sqlite:///{tmp_path / 'study.db'}"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "HF_DATASETS_OFFLINE": "1"}
    env.pop("RAY_ADDRESS", None)
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "autotune", "run", "--model", str(model), "--gpus", "1", "--gpu-type", "h100",
         "--backend", "verl", "--job", "job.yaml", "--n-trials", "3", "--measure-step", "1", "--storage", url,
         "--trial-timeout", "420", "--stall-timeout", "420", "--skip-doctor"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    wall = time.monotonic() - t0
    store = Store(url)
    (study,) = [st.name for st in store.list_studies()]
    rows = store.trials(study)
    first = next(r for r in rows if r.launched)
    ray_tmp = Path((first.extra or {}).get("ray_tmp", ""))
    try:
        # the study stopped after its first launch, saying why, with exit code 2
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert "Total available GPUs 0 is less than total desired GPUs 1" in proc.stderr
        assert "--gpus/--nodes" in proc.stderr and "Traceback" not in proc.stderr
        assert sum(r.launched and r.status != "interrupted" for r in rows) == 1
        assert all(r.status in ("failed", "pruned", "interrupted") for r in rows)
        # the real output is recorded: Hydra and verl's config checks passed, it joined the kept head, data loaded
        text = Path(first.log_path).read_text()
        assert "[validate_config] All configuration checks passed successfully!" in text
        assert "Connected to Ray cluster." in text and "dataset len: 32" in text
        assert first.extra["ray"] == "fresh" and first.extra["timings"]["ray_head_start_s"] > 0
        # ... and the failure is verl's own, classified, with the lines that show it
        assert first.status == "failed" and first.extra["failure"] == "gpus_unavailable", first.reason
        assert "Total available GPUs 0 is less than total desired GPUs 1" in first.reason
        assert "_check_resource_available" in first.log_excerpt
        assert len(first.extra["attempts"]) == 1 and first.extra["returncode"] == 1
        assert not first.simulated and first.throughput is None
        # nothing left: the runner's own tracking, Ray's session (by PID) and anything naming its temp dir
        assert first.extra["cleanup"]["remaining"] == []
        assert first.extra["cleanup"]["ray_workers_s"] < 60 and "ray_head_stopped" not in first.extra["cleanup"]
        assert ray_tmp.name.startswith("at-ray-") and ray_tmp.is_dir()  # kept after a failure, for the post-mortem
        assert not (tmp_path / "trials" / study / "ray_head" / "procs.json").exists()  # the head stopped with the run
        pids = _session_pids(ray_tmp) | {int(p) for p in re.findall(r"\(TaskRunnerV1 pid=(\d+)\)", text)}
        assert len(pids) >= 3
        assert [p for p in pids if pid_alive(p)] == []
        assert _procs_mentioning(str(ray_tmp)) == []
        print(f"real verl through `autotune run`: {wall:.1f} s")
    finally:
        if ray_tmp.name.startswith("at-ray-"):
            shutil.rmtree(ray_tmp, ignore_errors=True)
