"""Reading a verl run's output: console step lines, the JSONL file logger, and what a failure looks like.

Pure functions and small incremental readers; the formats and failure messages themselves live in autotune/verl/keys.py.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from autotune import verl

_STEP_RE = re.compile(verl.STEP_LINE_RE)
_NUMPY_RE = re.compile(verl.NUMPY_SCALAR_RE)
_ANSI_RE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_FAILURES = tuple(
    (cls, status, tuple(re.compile(p) for p in pats)) for cls, status, pats in verl.FAILURE_PATTERNS
)
_VLLM_START = tuple(re.compile(p) for p in verl.VLLM_START_MARKERS)
_VLLM_PROCESS = re.compile(verl.VLLM_PROCESS_RE)
_TRAINING_STARTED = re.compile(verl.TRAINING_STARTED_RE)
_TRAINING_FRAMES = re.compile(verl.TRAINING_FRAMES_RE)
_VLLM_READY = re.compile(verl.VLLM_READY_RE)
_BENIGN = tuple(re.compile(p) for p in verl.BENIGN_AFTER_FINISH)
_FATAL = tuple(re.compile(p) for p in verl.FATAL_LINE_PATTERNS)
_MILESTONES = tuple((name, re.compile(p)) for name, p in verl.STARTUP_MILESTONES.items())
_RECOMPILE = tuple(re.compile(p) for p in verl.RECOMPILE_MARKERS)
_STAMPED = re.compile(r"^\[\s*-?[\d.]+\] (?P<line>.*)$")
_ERROR_LINE = re.compile(
    r"^\s*(?:\([^)]*\)\s*)*(?:[\w.]+\.)?\w*(?:Error|Exception|Interrupt)(?:\([\w.]*\))?:|SIG[A-Z]+ received"
)


def stamp_milestones(milestones: dict[str, float], t: float, line: str) -> None:
    """Record at `t` (seconds after launch) each start-up milestone `line` is the first to show."""
    for name, pattern in _MILESTONES:
        if name not in milestones and pattern.search(line):
            milestones[name] = t


def is_recompile(line: str) -> bool:
    """Whether a console line marks a graph a worker compiled anew (verl.RECOMPILE_MARKERS)."""
    return any(p.search(line) for p in _RECOMPILE)


def recompiled_steps_in_stamps(text: str) -> tuple[int, ...]:
    """The steps a worker compiled a graph anew in, read back from a run's time-stamped console (RunLog.stamps): a
    marker belongs to the step after the last step line before it (the worker prints it in that step's backward)."""
    last, held = verl.FIRST_STEP - 1, set()
    for raw in text.splitlines():
        m = _STAMPED.match(raw)
        line = m.group("line") if m else raw
        parsed = parse_step_line(line)
        if parsed:
            last = max(last, parsed[0])
        elif is_recompile(line):
            held.add(last + 1)
    return tuple(sorted(held))


def parse_number(text: str) -> float | None:
    """A value as verl's console logger prints it (pprint of a number): 1.5, -3, nan, True, np.float64(2.0)."""
    text = text.strip()
    m = _NUMPY_RE.match(text)
    if m:
        text = m.group("value").strip()
    if text in ("True", "False"):
        return 1.0 if text == "True" else 0.0
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def parse_step_line(line: str) -> tuple[int, dict[str, float]] | None:
    """(step, metrics) from one console line, or None for any other line."""
    m = None
    if "step:" not in line:
        return None
    for segment in reversed(_ANSI_RE.sub("", line).rstrip("\r\n").split("\r")):  # progress bars rewrite with \r
        m = _STEP_RE.match(segment)
        if m:
            break
    if not m:
        return None
    metrics: dict[str, float] = {}
    for item in m.group("rest").split(" - ")[1:]:
        key, sep, raw = item.rpartition(":")
        if not sep or not key:
            continue
        value = parse_number(raw)
        if value is not None:
            metrics[key] = value
    return int(m.group("step")), metrics


def parse_jsonl_record(line: str) -> tuple[int, dict[str, float]] | None:
    """(step, numeric metrics) from one FileLogger line `{"step": N, "data": {...}}`; None if not one."""
    try:
        doc = json.loads(line)
    except (json.JSONDecodeError, ValueError):
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("data"), dict) or not isinstance(doc.get("step"), int):
        return None
    metrics: dict[str, float] = {}
    for k, v in doc["data"].items():
        if isinstance(v, bool):
            metrics[k] = float(v)
        elif isinstance(v, (int, float)) and math.isfinite(v):
            metrics[k] = float(v)
    return doc["step"], metrics


class LineTail:
    """Reads whole lines appended to a file since the last call (the file may not exist yet, or be truncated)."""

    def __init__(self, path: Path):
        self.path = path
        self._pos = 0
        self._partial = b""

    def read(self) -> list[str]:
        try:
            with self.path.open("rb") as f:
                f.seek(0, 2)
                size = f.tell()
                if size < self._pos:  # truncated (verl's FileLogger opens with "wb")
                    self._pos, self._partial = 0, b""
                f.seek(self._pos)
                data = f.read()
                self._pos = f.tell()
        except FileNotFoundError:
            return []
        if not data:
            return []
        data = self._partial + data
        lines = data.split(b"\n")
        self._partial = lines.pop()
        return [ln.decode("utf-8", "replace").rstrip("\r") for ln in lines]

    def flush(self) -> list[str]:
        """Lines read so far plus a last line without a newline (the process has exited)."""
        lines = self.read()
        if self._partial:
            lines.append(self._partial.decode("utf-8", "replace"))
            self._partial = b""
        return lines


@dataclass
class RunLog:
    """What the watcher has learnt so far from one run's console output and metrics file."""

    console: LineTail
    jsonl: LineTail
    tail_lines: int = 200
    stamps: Path | None = None  # a copy of the console, each line prefixed by the seconds since `started`
    started: float | None = None  # time.monotonic() at launch

    def __post_init__(self) -> None:
        self.steps: dict[int, dict[str, float]] = {}
        self.last: deque[str] = deque(maxlen=self.tail_lines)
        self.lines_seen = 0
        self.milestones: dict[str, float] = {}  # start-up milestone -> seconds after launch it was first seen
        self.step_at: dict[int, float] = {}  # step -> seconds after launch its line (or JSONL record) first showed
        self.fatal_at: float | None = None  # seconds after launch of the first line no run recovers from
        self.recompiled: set[int] = set()  # steps a worker compiled a graph anew in (RECOMPILE_MARKERS)
        self._last_line_step = verl.FIRST_STEP - 1  # the last step whose console line was read
        self._stamps: IO[str] | None = None

    def poll(self, final: bool = False) -> list[int]:
        """Read what is new; returns the step numbers that appeared for the first time."""
        new: list[int] = []
        t = time.monotonic() - self.started if self.started is not None else None
        for line in self.console.flush() if final else self.console.read():
            self.lines_seen += 1
            plain = _ANSI_RE.sub("", line)
            self.last.append(plain)
            if t is not None:
                self._stamp(t, plain)
            parsed = parse_step_line(line)
            if not parsed and is_recompile(plain):
                self.recompiled.add(self._last_line_step + 1)  # printed in the backward of the step under way
            if parsed:
                self._last_line_step = max(self._last_line_step, parsed[0])
                self._merge(parsed, new, prefer=False)
                if t is not None:
                    self.step_at.setdefault(parsed[0], round(t, 2))
        for line in self.jsonl.flush() if final else self.jsonl.read():
            parsed = parse_jsonl_record(line)
            if parsed:
                self._merge(parsed, new, prefer=True)
                if t is not None and parsed[0] >= verl.FIRST_STEP:
                    self.step_at.setdefault(parsed[0], round(t, 2))
        return new

    def _stamp(self, t: float, line: str) -> None:
        if self.fatal_at is None and any(p.search(line) for p in _FATAL):
            self.fatal_at = round(t, 2)
        stamp_milestones(self.milestones, round(t, 2), line)
        if self.stamps is not None:
            if self._stamps is None:
                self._stamps = self.stamps.open("a", encoding="utf-8", errors="replace")
            self._stamps.write(f"[{t:8.2f}] {line}\n")
            self._stamps.flush()

    def close(self) -> None:
        if self._stamps is not None:
            self._stamps.close()
            self._stamps = None

    def _merge(self, parsed: tuple[int, dict[str, float]], new: list[int], prefer: bool) -> None:
        step, metrics = parsed
        if step < verl.FIRST_STEP:
            return
        if step not in self.steps:
            self.steps[step] = {}
            new.append(step)
        if prefer:
            self.steps[step].update(metrics)
        else:
            for k, v in metrics.items():
                self.steps[step].setdefault(k, v)

    def recompiled_steps(self) -> tuple[int, ...]:
        """The steps whose time includes a graph a worker compiled anew (torch.compile's recompile)."""
        return tuple(sorted(self.recompiled))

    def tail(self, n: int = 40) -> str:
        return "\n".join(list(self.last)[-n:])


@dataclass(frozen=True)
class Failure:
    """A classified failure: verl's failure class, the autotune status it maps to, and the lines that show it."""

    kind: str
    status: str
    message: str
    excerpt: str


def classify(log_text: str, returncode: int | None, killed_by_us: bool = False) -> Failure:
    """The failure class of a run that ended without its measured step, from its output and exit code.

    Exit code 0 is never a crash: verl finished by itself (`early_exit`; the caller knows whether its steps were
    enough), whatever its workers printed while shutting down (BENIGN_AFTER_FINISH).
    """
    lines = [ln for ln in _ANSI_RE.sub("", log_text).splitlines() if not any(p.search(ln) for p in _BENIGN)]
    if returncode == 0:
        return Failure("early_exit", "failed", "verl exited normally (exit code 0)", "\n".join(lines[-40:]))
    final_from = max(0, len(lines) - verl.FINAL_ERROR_LINES)
    for kind, status, patterns in _FAILURES:
        start = final_from if kind in verl.FINAL_ERROR_CLASSES else 0
        for p in patterns:  # a class's patterns go from the most telling line to the least
            for i in range(start, len(lines)):
                if p.search(lines[i]):
                    if kind == "gpu_oom":
                        kind = _oom_phase(lines, i)
                    return Failure(kind, status, _message(kind, lines[i]), _excerpt(lines, i))
    if returncode is not None and returncode in (-9, 137) and not killed_by_us:
        return Failure(verl.HOST_OOM, "oom", "killed by SIGKILL, not by autotune: the kernel OOM killer (host RAM) "
                       "is the usual cause; check `dmesg`", "\n".join(lines[-40:]))
    last_error = next((ln for ln in reversed(lines) if _ERROR_LINE.search(ln)), "")
    msg = f"exited with code {returncode}" + (f": {last_error.strip()[:300]}" if last_error else "")
    return Failure("crash", "failed", msg, "\n".join(lines[-40:]))


def _oom_phase(lines: list[str], i: int) -> str:
    """Whose torch OOM line i is, by the phase the run was in: vLLM's start, the rollout, or training.

    vLLM's lines are everywhere in a real log (its server actor prints through the whole run), so being near them
    says nothing; what does: a training frame in the OOM's traceback, the trainer's loop having begun (its progress
    bar is made after the rollout servers started), and whether the OOM line is printed by a vLLM process.
    """
    block = lines[max(0, i - 40): i + 3]
    if any(_TRAINING_FRAMES.search(ln) for ln in block):
        return "gpu_oom"
    in_vllm = bool(_VLLM_PROCESS.search(lines[i]))
    if any(_TRAINING_STARTED.search(ln) for ln in lines[:i]):
        return "rollout_oom" if in_vllm else "gpu_oom"
    if in_vllm or (_near(lines, i, _VLLM_START) and not any(_VLLM_READY.search(ln) for ln in lines[:i])):
        return "vllm_start_oom"
    return "gpu_oom"


_WHAT = {
    "gpus_unavailable": "the Ray cluster has fewer GPUs than the job asks for (trainer.n_gpus_per_node x "
                        "trainer.nnodes; --gpus/--nodes)",
    "config_error": "verl rejected the configuration",
    "kv_cache_too_small": "vLLM's KV cache cannot hold one max_model_len request",
    "vllm_start_oom": "GPU out of memory while vLLM started",
    "vllm_wakeup_oom": "GPU out of memory when vLLM woke up (weights/KV cache back on the GPU)",
    "gpu_oom": "GPU out of memory in training",
    "rollout_oom": "GPU out of memory in vLLM during the rollout",
    "attention_backend_unavailable": "Transformer Engine has no attention backend for this model here (verl's "
                                     "default `flash` needs the flash-attn package; `autotune doctor` says which "
                                     "backends load)",
    "attention_backend_error": "Transformer Engine's fused (cuDNN) attention failed when run (set "
                               "override_transformer_config.attention_backend=unfused in the job, or install "
                               "flash-attn; `autotune doctor` runs it once)",
    "tokenizer_error": "the model's tokenizer does not fit verl's chat handling",
    "import_error": "a package failed to import or load (`autotune doctor` checks the stack)",
    "software_error": "a Python error in verl's software stack, the same on every retry (`autotune doctor` checks "
                      "the versions)",
    verl.HOST_OOM: "host RAM exhausted (not GPU memory)",
    "nccl_error": "NCCL error",
}


def _message(kind: str, line: str) -> str:
    return f"{_WHAT[kind]}: {line.strip()[:400]}"


def _near(lines: list[str], i: int, markers: tuple[re.Pattern[str], ...], span: int = 60) -> bool:
    return any(p.search(ln) for ln in lines[max(0, i - span): i + span] for p in markers)


def _excerpt(lines: list[str], i: int, before: int = 8, after: int = 12, limit: int = 6000) -> str:
    text = "\n".join(lines[max(0, i - before): i + after + 1])
    return text[-limit:]
