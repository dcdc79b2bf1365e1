"""Processes of one trial: launched in their own session, tracked through /proc, stopped by group and by PID.

A verl run is a tree (driver -> Ray's gcs/raylet -> workers -> vLLM engines) that re-parents itself when a parent
dies. So the tracker records every process it has seen in the trial's session or below its root, with its start
time (a PID may be reused), and cleanup signals exactly those, never processes chosen by name. Linux only.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

_PROC = Path("/proc")


@dataclass(frozen=True)
class ProcInfo:
    pid: int
    ppid: int
    pgid: int
    sid: int
    start: int  # clock ticks since boot: with pid, identifies one process
    state: str
    comm: str


def read_proc(pid: int) -> ProcInfo | None:
    try:
        raw = (_PROC / str(pid) / "stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError, OSError):
        return None
    lpar, rpar = raw.find("("), raw.rfind(")")
    fields = raw[rpar + 2:].split()
    try:
        return ProcInfo(pid, int(fields[1]), int(fields[2]), int(fields[3]), int(fields[19]), fields[0],
                        raw[lpar + 1:rpar])
    except (IndexError, ValueError):
        return None


def all_procs() -> list[ProcInfo]:
    out = []
    for entry in os.scandir(_PROC):
        if entry.name.isdigit():
            info = read_proc(int(entry.name))
            if info is not None:
                out.append(info)
    return out


def _alive(info: ProcInfo) -> bool:
    now = read_proc(info.pid)
    return now is not None and now.start == info.start and now.state not in ("Z", "X")


def spawn(argv: Sequence[str], cwd: Path, env: Mapping[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    """Start argv (a list, never a shell string) as the leader of a new session; stdout+stderr to log_path."""
    with log_path.open("ab") as log:
        return subprocess.Popen(
            list(argv), cwd=cwd, env=dict(env), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )


class ProcessTracker:
    """Every process that belongs to one launched trial: its session, its process group, its descendants."""

    def __init__(self, root: subprocess.Popen[bytes]):
        self.root = root
        self.sid = root.pid  # start_new_session: the leader's pid is the session and group id
        self.seen: dict[int, ProcInfo] = {}
        self.scan()

    def scan(self) -> None:
        procs = all_procs()
        by_pid = {p.pid: p for p in procs}
        children: dict[int, list[ProcInfo]] = {}
        for p in procs:
            children.setdefault(p.ppid, []).append(p)
        for p in procs:
            if p.sid == self.sid or p.pgid == self.sid or p.pid == self.root.pid:
                self._add(p)
        # descendants that left the session (setsid) are still reached through their (same, not reused) parents
        stack = [pid for pid, info in self.seen.items() if pid in by_pid and by_pid[pid].start == info.start]
        while stack:
            for c in children.get(stack.pop(), ()):
                if c.pid not in self.seen or self.seen[c.pid].start != c.start:
                    self._add(c)
                    stack.append(c.pid)

    def _add(self, p: ProcInfo) -> None:
        if p.state not in ("Z", "X"):
            self.seen[p.pid] = p

    def alive(self) -> list[ProcInfo]:
        """Processes of the trial still running (zombies count as gone)."""
        self.scan()
        return [p for p in self.seen.values() if _alive(p)]

    def signal(self, sig: int) -> None:
        try:
            os.killpg(self.sid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        for p in self.alive():
            try:
                os.kill(p.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def stop(self, grace_s: float, poll_s: float = 0.1) -> dict[str, object]:
        """SIGTERM everything, SIGKILL what is left after grace_s; returns what had to be killed and what remains."""
        t0 = time.monotonic()
        self.scan()  # while the tree is still whole: children that left the group are found through parents
        self.signal(signal.SIGTERM)
        killed: list[int] = []
        while time.monotonic() - t0 < grace_s:
            self._reap()
            if not self.alive():
                break
            time.sleep(poll_s)
        else:
            left = self.alive()
            killed = sorted(p.pid for p in left)
            self.signal(signal.SIGKILL)
            deadline = time.monotonic() + 10.0
            while self.alive() and time.monotonic() < deadline:
                self._reap()
                time.sleep(poll_s)
        self._reap()
        remaining = self.alive()
        return {
            "stop_s": round(time.monotonic() - t0, 3),
            "sigkilled": killed,
            "remaining": [f"{p.pid} ({p.comm})" for p in remaining],
            "processes_seen": len(self.seen),
        }

    def _reap(self) -> None:
        self.root.poll()


# A tuner killed with SIGKILL cannot stop its trial: the trial's session survives it. Each launch leaves a small
# record next to the trial's log; the next runner on this host ends what a dead tuner left behind.
RECORD = "procs.json"


def write_record(path: Path, tracker: ProcessTracker, remove: str = "") -> None:
    """`remove`: a folder of the session's own under /tmp (a kept Ray head's temp dir), removed with it."""
    me = read_proc(os.getpid())
    root = read_proc(tracker.root.pid)
    path.write_text(json.dumps({
        "host": socket.gethostname(), "tuner_pid": os.getpid(), "tuner_start": me.start if me else None,
        "root_pid": tracker.root.pid, "root_start": root.start if root else None, "sid": tracker.sid,
        **({"remove": remove} if remove else {}),
    }))


def reap_orphans(study_dir: Path, grace_s: float = 5.0) -> list[str]:
    """Stop the sessions of trials whose tuner (on this host) is gone; returns what was stopped."""
    stopped: list[str] = []
    if not study_dir.is_dir():
        return stopped
    for rec_path in study_dir.glob(f"*/{RECORD}"):
        try:
            rec = json.loads(rec_path.read_text())
        except (OSError, ValueError):
            continue
        if rec.get("host") != socket.gethostname():
            continue
        tuner = read_proc(int(rec["tuner_pid"]))
        if tuner is not None and tuner.start == rec.get("tuner_start") and tuner.state not in ("Z", "X"):
            continue  # its tuner is alive and will clean up itself
        members = [p for p in all_procs() if p.sid == rec["sid"] and p.state not in ("Z", "X")]
        root = read_proc(int(rec["root_pid"]))
        if root is not None and root.start != rec.get("root_start"):
            members = [p for p in members if p.pid != root.pid]
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for p in members:
                try:
                    os.kill(p.pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass
            deadline = time.monotonic() + grace_s
            while time.monotonic() < deadline and any(_alive(p) for p in members):
                time.sleep(0.1)
        if members:
            stopped.append(f"{rec_path.parent.name}: {len(members)} processes of session {rec['sid']}")
        remove = Path(rec.get("remove") or "/nonexistent")
        if remove.parent == Path("/tmp") and remove.name.startswith("at-ray-"):  # a kept Ray head's, nothing else
            shutil.rmtree(remove, ignore_errors=True)
        rec_path.unlink(missing_ok=True)
    return stopped
