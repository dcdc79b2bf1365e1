"""How a verl trial gets its Ray, and the one Ray head per node that the verl runner keeps across trials (issue 24).

Modes (a trial's `extra["ray"]`): "private" (verl's driver starts its own local Ray and stops it at exit, the
runner's choice before issue 24), "fresh" (this trial's attempt started the kept head: it paid the start, recorded
as `ray_head_start_s` in its timings), "kept" (it joined the head an earlier trial started), "cluster" (the Ray
executor's cluster), "verl" (several nodes without the executor: verl's own `ray.init()`).

Why a kept head works with verl 0.9.1: run_ppo (verl/trainer/main_ppo.py) calls `ray.init(**ray_kwargs.ray_init)`
only when Ray is not initialised and never calls `ray.shutdown()`: the driver's exit ends its Ray job, and Ray then
kills the job's actors (none are detached). Ray applies a runtime_env (env_vars, worker_process_setup_hook) per job,
also to a job that joins an existing cluster, so the stack's setup hook still reaches every worker.

Between trials the runner checks that no Ray worker of the previous one is left: every worker process of a trial's
job carries TRIAL_ENV (the job's runtime_env env_vars, inherited by the processes it starts), read from
/proc/PID/environ in any session. Workers that outlive the cleanup timeout stop the head, and the next trial starts a
fresh one (correctness first); the GPUs are then checked as after any trial.

The head: `ray start --head --block` in a session of its own (gcs_server, the raylet and its workers stay in it, and
`--block` shares their fate), a short temp dir under /tmp (Ray's socket paths must stay < 108 bytes), free ports (a
user's Ray or another study's head on this node is never touched; never `ray stop`, which stops every Ray process of
the user), the trials' environment (its workers see what a private Ray's would), the node's GPUs the study uses. Its
record (`ray_head/procs.json` in the study's folder, procs.RECORD) lets the next run's runner stop a head a killed
tuner left (procs.reap_orphans), as it stops a killed tuner's trials.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune import verl
from autotune.cluster import detect_local_gpus
from autotune.runners.node.procs import RECORD, ProcessTracker, ProcInfo, all_procs, write_record
from autotune.verl import shims

TRIAL_ENV = "AUTOTUNE_RAY_TRIAL"  # in every Ray worker process of a trial's attempt (runtime_env env_vars)
HEAD_DIR = "ray_head"  # in the study's folder: the head's record and `ray start`'s output
START_TIMEOUT_S = 180.0  # `ray start` on a loaded node takes seconds; past this the trial uses a private Ray
# `ray start` runs that may exit by themselves before the trials fall back to a private Ray (before ray_cli.py, a
# raylet on a loaded 2-core machine aborted in Ray's fixed wait for its dashboard agent, up to three times in a row)
START_ATTEMPTS = 3
AUTH_MODE_ENV = "RAY_AUTH_MODE"
# Ray's temp dirs of autotune's own (a private Ray, a kept head): short, for Ray's socket paths (< 108 bytes)
RAY_TMP_DIR, RAY_TMP_PREFIX = "/tmp", "at-ray-"
# Per attempt, not part of the head's environment (a change of them needs no new head).
_PER_TRIAL_ENV = (verl.FILE_LOGGER_ENV, "RAY_TMPDIR", "RAY_ADDRESS")


class HeadError(RuntimeError):
    """The kept head could not be started; the message says why (the trial then uses a private Ray). `exited`: `ray
    start` gave up by itself (its raylet died or never registered, ray_cli.py), which a second start may not."""

    def __init__(self, message: str, exited: bool = False) -> None:
        super().__init__(message)
        self.exited = exited


@dataclass(frozen=True)
class Head:
    """A running kept head."""

    address: str  # HOST:PORT of its GCS, as `ray start` recorded it
    pid: int  # `ray start --block`: its session holds every process of the head
    temp_dir: str
    gpus: int
    cpus: int | None  # None: Ray counted the node's CPUs
    env_key: str  # the environment it started with (env_key())


def mode(keep: bool, own: bool, address: str | None, job: Any) -> tuple[str, str]:
    """The trial's Ray mode ("kept" for a kept head, fresh or not) and, where a kept head was asked for but cannot
    serve the job, why."""
    if address:
        return "cluster", ""
    if not own:
        return "verl", ""
    if not keep:
        return "private", ""
    blocking = sorted(k for k, _ in job.overrides if k.lstrip("+").startswith("ray_kwargs.ray_init.")
                      and k != verl.RAY_NUM_CPUS and not k.lstrip("+").startswith("ray_kwargs.ray_init.runtime_env."))
    if blocking:  # ray.init refuses them when it joins a running cluster (num_gpus, _temp_dir, ...)
        return "private", f"the job sets {', '.join(blocking)}: a private Ray per trial"
    return "kept", ""


def overrides(how: str, address: str, ray_tmp: str, mark: str, groups: list[str] | None) -> dict[str, Any]:
    """verl's `ray_kwargs.ray_init` for the trial: which Ray its driver joins or starts, and the setup hook."""
    from autotune.verl import ray_hook

    if how == "cluster":
        extra: dict[str, Any] = {verl.RAY_ADDRESS_KEY: address, verl.RAY_NAMESPACE_KEY: ray_hook.NAMESPACE}
        if groups:  # verl adopts the groups the executor reserved (verl/ray_hook.py)
            extra[verl.RAY_SETUP_HOOK_KEY] = ray_hook.HOOK
            extra[verl.RAY_ENV_VAR_PREFIX + ray_hook.ENV] = ",".join(groups)
        else:
            extra[verl.RAY_SETUP_HOOK_KEY] = shims.SETUP_HOOK
        return extra
    if how == "private":
        return {verl.RAY_SETUP_HOOK_KEY: shims.SETUP_HOOK,  # the stack's fixes in every Ray worker
                verl.RAY_ADDRESS_KEY: "local", verl.RAY_INIT_PREFIX + "_temp_dir": ray_tmp,
                verl.RAY_INIT_PREFIX + "include_dashboard": False}
    if how == "kept":
        return {verl.RAY_SETUP_HOOK_KEY: shims.SETUP_HOOK, verl.RAY_ADDRESS_KEY: address,
                verl.RAY_NUM_CPUS: None,  # the head has the job's; ray.init refuses it when it joins
                verl.RAY_ENV_VAR_PREFIX + TRIAL_ENV: mark}
    return {}


def trial_env(env: dict[str, str], how: str, ray_tmp: str) -> dict[str, str]:
    """The driver's environment for its Ray: no user's RAY_ADDRESS (it would join that cluster), a private Ray's temp
    dir, and for a kept head the authentication Ray's own local ray.init() turns on (the head gets the same)."""
    if how in ("private", "kept", "fresh"):
        env.pop("RAY_ADDRESS", None)
    if how == "private":
        env["RAY_TMPDIR"] = ray_tmp
    if how in ("kept", "fresh"):
        env.setdefault(AUTH_MODE_ENV, "token")
    return env


def mark(name: str) -> str:
    """An attempt's TRIAL_ENV value: its verl experiment name and this tuner's pid (unique on the node)."""
    return f"{name}-p{os.getpid()}"


def private_tmp() -> str:
    return tempfile.mkdtemp(prefix=RAY_TMP_PREFIX, dir=RAY_TMP_DIR)


def env_key(env: Mapping[str, str]) -> str:
    return hashlib.sha1(json.dumps(sorted((k, v) for k, v in env.items() if k not in _PER_TRIAL_ENV)).encode()
                        ).hexdigest()[:12]


def node_gpus(wanted: int, env: Mapping[str, str]) -> int:
    """The GPUs the head declares: the study's per node, at most those CUDA_VISIBLE_DEVICES (else NVML) leaves it;
    none where this node has none (verl then fails as with a private Ray: "Total available GPUs 0")."""
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        have = len([e for e in visible.split(",") if e.strip() and e.strip() != "-1"])
    else:
        found = detect_local_gpus()
        have = found[0] if found else 0
    return min(wanted, have)


def marked(mark: str) -> list[ProcInfo]:
    """Live processes (any session) whose environment carries this attempt's TRIAL_ENV."""
    needle = f"{TRIAL_ENV}={mark}".encode()
    found = []
    for p in all_procs():
        if p.state in ("Z", "X") or p.pid == os.getpid():
            continue
        try:
            environ = Path(f"/proc/{p.pid}/environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            found.append(p)
    return found


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _has_token(env: Mapping[str, str]) -> bool:
    """Ray's own order: RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH, ~/.ray/auth_token."""
    if env.get("RAY_AUTH_TOKEN", "").strip():
        return True
    path = Path(env.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token").expanduser()
    return path.is_file() and bool(path.read_text().strip())


def _keep_session_logs(temp_dir: str, dest: Path, keep_bytes: int = 200_000) -> Path | None:
    """The text logs of a head's session that did not come up (raylet, GCS, agents), each its last keep_bytes, kept in
    the study's folder: its temp dir goes with the head."""
    logs = Path(temp_dir) / "session_latest" / "logs"
    files = [f for f in logs.glob("*") if f.suffix in (".out", ".err", ".log") and f.is_file()] if logs.is_dir() else []
    if not files:
        return None
    dest.mkdir(parents=True, exist_ok=True)
    for f in files:
        with f.open("rb") as src:
            src.seek(max(f.stat().st_size - keep_bytes, 0))
            (dest / f.name).write_bytes(src.read())
    return dest


_RAY_CLI = (sys.executable, "-c", "import sys; from ray.scripts.scripts import main; sys.argv[0] = 'ray'; main()")
# `ray start` as the head runs it (ray_cli.py): the raylet told its dashboard agent's port, Ray's wait for a live
# raylet bounded by START_TIMEOUT_S instead of Ray's fixed 30 s, no Ray Client server
_RAY_START = (sys.executable, str(Path(__file__).with_name("ray_cli.py")), f"--node-wait-s={START_TIMEOUT_S - 30:g}")


class KeptRay:
    """The runner's one head: started lazily, reused while it lives with the same environment, stopped at close()."""

    def __init__(self, grace_s: float = 30.0):
        self.grace_s = grace_s
        self.head: Head | None = None
        self.keep_dir = False  # a trial failed: the head's session logs stay for the post-mortem
        self._proc: subprocess.Popen[bytes] | None = None
        self._tracker: ProcessTracker | None = None
        self._record: Path | None = None
        self._temp_dir = ""
        self.failed = ""  # why the head could not start: later trials use a private Ray
        self._atexit = False

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def join(self, env: Mapping[str, str], gpus: int, cpus: int | None, study_dir: Path) -> tuple[str, float, str]:
        """("fresh", seconds, "") where this attempt started the head, ("kept", 0, "") where it joins the running one,
        ("private", 0, why) where the head cannot start (`failed`: later trials do not try again)."""
        try:
            gpus = node_gpus(gpus, env)
            paid = self.ensure(env, gpus, cpus, study_dir)
        except (HeadError, OSError, subprocess.SubprocessError) as e:  # no Ray CLI, a timed-out token, ...
            self.stop()
            self.failed = f"no kept Ray head ({str(e)[:300]}): a private Ray per trial"
            return "private", 0.0, self.failed
        return ("fresh", round(paid, 3), "") if paid else ("kept", 0.0, "")

    def ensure(self, env: Mapping[str, str], gpus: int, cpus: int | None, study_dir: Path) -> float:
        """The head, started where none runs (or it died, or the environment changed); the seconds spent starting
        it (0.0 when the running one serves). A `ray start` that exits by itself is run again, START_ATTEMPTS in all
        (its log keeps every start). Raises HeadError."""
        key = env_key(env)
        h = self.head
        if h is not None and self.alive() and (h.env_key, h.gpus, h.cpus) == (key, gpus, cpus):
            return 0.0
        t0, attempt = time.monotonic(), 1
        while True:
            try:
                self._start(env, gpus, cpus, study_dir, key)
                return time.monotonic() - t0
            except HeadError as e:
                if not e.exited or attempt == START_ATTEMPTS:
                    raise
                attempt += 1

    def _start(self, env: Mapping[str, str], gpus: int, cpus: int | None, study_dir: Path, key: str) -> None:
        """One `ray start --head`, up when it has written its cluster's address. Raises HeadError."""
        self.stop()
        t0 = time.monotonic()
        env = dict(env)
        for k in _PER_TRIAL_ENV:
            env.pop(k, None)
        if env.get(AUTH_MODE_ENV, "").lower() == "token" and not _has_token(env):
            subprocess.run([*_RAY_CLI, "get-auth-token", "--generate"], env=env, capture_output=True, timeout=120)
        temp_dir = self._temp_dir = private_tmp()
        folder = study_dir / HEAD_DIR
        folder.mkdir(parents=True, exist_ok=True)
        # every port its own: Ray's defaults (the API server's 8265 among them) clash with another head on the node
        port, api, listen, grpc, metrics, runtime_env = _free_ports(6)
        argv = [*_RAY_START, "start", "--head", "--block", f"--port={port}", f"--temp-dir={temp_dir}",
                f"--num-gpus={gpus}", "--include-dashboard=false", "--disable-usage-stats", f"--dashboard-port={api}",
                f"--dashboard-agent-listen-port={listen}",
                f"--dashboard-agent-grpc-port={grpc}", f"--metrics-export-port={metrics}",
                f"--runtime-env-agent-port={runtime_env}", *([f"--num-cpus={cpus}"] if cpus is not None else [])]
        log = folder / "ray_start.log"
        with log.open("ab") as out:
            self._proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                          stderr=subprocess.STDOUT, start_new_session=True)
        self._tracker = ProcessTracker(self._proc)
        self._record = folder / RECORD
        write_record(self._record, self._tracker, remove=temp_dir)
        written = Path(temp_dir) / "ray_current_cluster"  # `ray start` writes it once the node is up
        while not (written.is_file() and written.read_text().strip()):
            if not self.alive() or time.monotonic() - t0 > START_TIMEOUT_S:
                why = "exited" if not self.alive() else f"was not up after {START_TIMEOUT_S:g} s"
                tail = log.read_text(errors="replace").strip().splitlines()[-3:]
                kept = _keep_session_logs(temp_dir, folder / f"failed_start_{time.strftime('%Y%m%d-%H%M%S')}")
                self.stop()
                raise HeadError(f"`ray start --head` {why} ({log}; the session's logs: {kept}): {' | '.join(tail)}",
                                exited=why == "exited")
            time.sleep(0.1)
        self.head = Head(written.read_text().strip(), self._proc.pid, temp_dir, gpus, cpus, key)
        if not self._atexit:  # a tuner ending without close() (an uncaught error) stops it too; SIGKILL: the record
            atexit.register(self.stop)
            self._atexit = True

    def settle(self, mark: str, timeout_s: float, poll_s: float = 0.1) -> dict[str, Any]:
        """After a trial's driver is gone: wait for its Ray workers to go; where some stay, stop the head (the next
        trial starts a fresh one) and the workers with it. Says what it found."""
        t0 = time.monotonic()
        left = marked(mark)
        while left and time.monotonic() - t0 < timeout_s:
            time.sleep(poll_s)
            left = marked(mark)
        info: dict[str, Any] = {"ray_workers_s": round(time.monotonic() - t0, 3)}
        if left:
            info["ray_workers_left"] = [f"{p.pid} ({p.comm})" for p in left]
            info["ray_head_stopped"] = "the trial's Ray workers outlived the cleanup timeout; the next trial starts " \
                                       "a fresh head"
            self.keep_dir = True  # the head's session logs show what the workers were doing
            info["ray_tmp_kept"] = self._temp_dir
            self.stop()
            for sig in (signal.SIGTERM, signal.SIGKILL):  # workers that left the head's session
                for p in marked(mark):
                    try:
                        os.kill(p.pid, sig)
                    except (ProcessLookupError, PermissionError):
                        pass
                deadline = time.monotonic() + self.grace_s
                while marked(mark) and time.monotonic() < deadline:
                    time.sleep(poll_s)
            info["ray_workers_remaining"] = [f"{p.pid} ({p.comm})" for p in marked(mark)]
        return info

    def logs_kept(self, ray_tmp: str, head_tmp: str, failed: bool) -> str:
        """Where an attempt's Ray session logs (every worker's output) stay for the post-mortem, "" where none: a
        private Ray's temp dir (removed when the attempt went well or it is empty), or the kept head's, which then
        stays after the head stops."""
        if head_tmp:
            if failed and self.head is not None and self.head.temp_dir == head_tmp:
                self.keep_dir = True
            return head_tmp if failed else ""
        if ray_tmp and failed and any(Path(ray_tmp).iterdir()):
            return ray_tmp
        if ray_tmp:
            shutil.rmtree(ray_tmp, ignore_errors=True)
        return ""

    def stop(self) -> None:
        """`ray start --block` stops its processes on SIGTERM; what is left of its session after grace_s is killed."""
        if self._proc is None or self._tracker is None:
            if self._temp_dir and not self.keep_dir:
                shutil.rmtree(self._temp_dir, ignore_errors=True)
            self._temp_dir = ""
            return
        self._tracker.scan()
        self._proc.terminate()
        try:
            self._proc.wait(self.grace_s)
        except subprocess.TimeoutExpired:
            pass
        info = self._tracker.stop(self.grace_s)
        if not info["remaining"] and self._record is not None:
            self._record.unlink(missing_ok=True)
        if self._temp_dir and not self.keep_dir:
            shutil.rmtree(self._temp_dir, ignore_errors=True)
        self._proc = self._tracker = self.head = None
        self._temp_dir = ""
        self.keep_dir = False
