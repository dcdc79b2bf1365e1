"""verl runs made outside autotune, read back from their files: a console log (what `python -m
verl.trainer.main_ppo` printed) or the metrics JSONL of verl's file logger.

verl 0.9.1 prints its whole resolved config at start (verl/trainer/main_ppo.py TaskRunnerV1.run:
`pprint(OmegaConf.to_container(config, resolve=True))`, behind Ray's "(TaskRunnerV1 pid=N)" prefix): the run's
candidate (the knobs autotune tunes) and its workload are recovered from it. A JSONL holds metrics only: its
configuration comes from a console log beside it or from the user's job. Pure reading; `autotune import`
(cli/imports.py) records the runs as trials.
"""

from __future__ import annotations

import ast
import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune import verl
from autotune.verl.keys import flatten
from autotune.verl.log import classify, parse_jsonl_record, parse_step_line

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_PREFIX = re.compile(r"^(?:\((?P<actor>[A-Za-z_][\w.]*) pid=(?P<pid>\d+)(?:, ip=[^)]*)?\) ?)")
_CONFIG_START = "{'actor_rollout_ref': "
_CONSOLE_SUFFIXES = (".log", ".out", ".txt", ".err")
MAX_BYTES = 512 * 2**20


class RunFileError(ValueError):
    """A file that cannot be imported as a verl run; the message says why and what to do."""


@dataclass(frozen=True)
class VerlRun:
    """One verl run read from its files."""

    path: Path  # the file named on the command line
    kind: str  # console | jsonl
    sha256: str  # of that file's bytes: the same file is never imported twice
    steps: dict[int, dict[str, float]]
    config: dict[str, Any] | None = None  # verl's resolved config, flattened to dotted keys
    config_source: str = ""  # which file the config was read from
    console_text: str = ""  # the console log's text ("" for a JSONL without one)
    companions: tuple[Path, ...] = field(default=())  # other files read for this run (a JSONL's console log)


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _text(path: Path) -> str:
    try:
        size = path.stat().st_size
    except OSError as e:
        raise RunFileError(f"cannot read it: {e.strerror or e}") from None
    if size == 0:
        raise RunFileError("the file is empty")
    if size > MAX_BYTES:
        raise RunFileError(f"{size / 2**20:.0f} MiB: larger than a verl log ({MAX_BYTES // 2**20} MiB at most)")
    data = path.read_bytes()
    if b"\0" in data[:65536]:
        raise RunFileError("a binary file, not a verl console log or metrics JSONL")
    return data.decode("utf-8", errors="replace")


def recover_config(text: str) -> dict[str, Any] | None:
    """verl's printed config (nested dict) from a console log; None when the log does not hold it whole."""
    lines = _ANSI.sub("", text).split("\n")
    for i, line in enumerate(lines):
        m = _PREFIX.match(line)
        body = line[m.end():] if m else line
        if not body.startswith(_CONFIG_START):
            continue
        who = (m.group("actor"), m.group("pid")) if m else None
        parts = [body]
        for nxt in lines[i + 1:]:
            nm = _PREFIX.match(nxt)
            if who and not (nm and (nm.group("actor"), nm.group("pid")) == who):
                continue  # another process's line in between
            parts.append(nxt[nm.end():] if nm else nxt)
            if parts[-1].rstrip().endswith("}"):
                try:
                    value = ast.literal_eval("\n".join(parts))
                except (SyntaxError, ValueError):
                    continue
                return value if isinstance(value, dict) else None
            if len(parts) > 20000:
                break
    return None


def steps_from_console(text: str) -> dict[int, dict[str, float]]:
    steps: dict[int, dict[str, float]] = {}
    for line in text.split("\n"):
        parsed = parse_step_line(line)
        if parsed and parsed[0] >= verl.FIRST_STEP:
            steps.setdefault(parsed[0], {}).update(parsed[1])
    return steps


def steps_from_jsonl(text: str) -> dict[int, dict[str, float]] | None:
    """The file logger's steps; None when the file is not (all) `{"step": N, "data": {...}}` lines."""
    steps: dict[int, dict[str, float]] = {}
    seen = 0
    for line in text.split("\n"):
        if not line.strip():
            continue
        parsed = parse_jsonl_record(line)
        if parsed is None:
            return None
        seen += 1
        if parsed[0] >= verl.FIRST_STEP:
            steps.setdefault(parsed[0], {}).update(parsed[1])
    return steps if seen else None


def _looks_like_verl(text: str) -> bool:
    return any(marker in text for marker in (
        _CONFIG_START, "ray init kwargs:", "(TaskRunnerV1 pid=", "(TaskRunner pid=", "verl.trainer.main_ppo",
        "Error executing job with overrides:")) or bool(steps_from_console(text))


def _sibling_console(jsonl: Path) -> Path | None:
    """The console log beside a metrics JSONL that holds a verl config (the runner's trial folder: verl.log)."""
    found = []
    for p in sorted(jsonl.parent.iterdir()):
        if p.suffix in _CONSOLE_SUFFIXES and p.is_file() and p.stat().st_size <= MAX_BYTES:
            try:
                head = p.read_bytes()
            except OSError:
                continue
            if _CONFIG_START.encode() in head:
                found.append(p)
    if len(found) > 1:
        same = [p for p in found if p.stem == jsonl.stem or p.name in ("verl.log",)]
        found = same if len(same) == 1 else found
    if len(found) > 1:
        raise RunFileError(f"several verl console logs beside it ({', '.join(p.name for p in found)}): import the "
                           "console log itself, or pass --job with the run's configuration")
    return found[0] if found else None


def read_run(path: Path) -> VerlRun:
    """A verl console log or metrics JSONL read whole; RunFileError (why, in words) for anything else."""
    if not path.is_file():
        raise RunFileError("no such file" if not path.exists() else "not a file")
    text = _text(path)
    digest = sha256_of(path)
    jsonl_steps = steps_from_jsonl(text)
    if jsonl_steps is not None:
        console = _sibling_console(path)
        if console is None:
            return VerlRun(path, "jsonl", digest, jsonl_steps)
        ctext = _text(console)
        steps = steps_from_console(ctext)
        for s, m in jsonl_steps.items():  # the file logger's values are the exact ones
            steps.setdefault(s, {}).update(m)
        config = recover_config(ctext)
        return VerlRun(path, "jsonl", digest, steps, _flat(config), str(console) if config else "", ctext,
                       (console,))
    if not _looks_like_verl(text):
        raise RunFileError("not a verl run's output: no config print, no step line, no verl or Ray line (expected "
                           "the console log of `python -m verl.trainer.main_ppo` or its metrics JSONL)")
    config = recover_config(text)
    return VerlRun(path, "console", digest, steps_from_console(text), _flat(config), str(path) if config else "",
                   text)


def _flat(config: dict[str, Any] | None) -> dict[str, Any] | None:
    return flatten(config) if config else None


# The run's candidate and workload --------------------------------------------------------------------------------
def strategy_error(config: dict[str, Any]) -> str | None:
    """Why this config is not a Megatron run autotune tunes (an FSDP run, another rollout engine); None if it is."""
    if not any(k.startswith(verl.PARAM_KEYS["tp"][0].rsplit(".", 1)[0] + ".") for k in config):
        return "not a Megatron actor (verl's FSDP or another engine): autotune tunes Megatron GRPO runs"
    strategy = config.get("actor_rollout_ref.actor.strategy")
    if strategy not in (None, "megatron"):
        return f"actor strategy {strategy!r}: autotune tunes Megatron GRPO runs"
    rollout = config.get(verl.ROLLOUT_NAME)
    if rollout not in (None, "vllm"):
        return f"rollout {rollout!r}: autotune's runs use vLLM"
    return None


@dataclass(frozen=True)
class Outcome:
    """What the run shows at the measured step: ok with its numbers, or its failure."""

    status: str  # a TrialStatus value
    failure: str  # the failure class ("" for ok)
    reason: str
    excerpt: str
    throughput: float | None = None
    phases: dict[str, float] = field(default_factory=dict)


def outcome(run: VerlRun, measure_step: int) -> Outcome:
    step = run.steps.get(measure_step, {})
    done = max(run.steps) if run.steps else 0
    tail = "\n".join(_ANSI.sub("", run.console_text).split("\n")[-12:]) if run.console_text else ""
    if verl.M_THROUGHPUT in step:
        thr = step[verl.M_THROUGHPUT]
        phases = {p: step[m] for p, m in verl.PHASE_TIMINGS.items() if m in step}
        return Outcome("ok", "", f"measured {thr:.1f} tokens/s/GPU (step {measure_step}; imported)", tail, thr,
                       phases)
    total = (run.config or {}).get(verl.TOTAL_TRAINING_STEPS)
    finished = "Training Progress: 100%" in run.console_text or (isinstance(total, int) and 0 < total <= done)
    if run.console_text and not finished:
        f = classify(run.console_text, None)
        if f.kind != "crash" or "exited with code None:" in f.message:
            message = f.message.replace("exited with code None: ", "the run failed: ")
            return Outcome(f.status, f.kind, message, f.excerpt)
    if finished:
        return Outcome("failed", "early_exit", f"the run ended after {done} step(s), before the measured step "
                       f"{measure_step} (import with --measure-step {done} to measure its last step)", tail)
    return Outcome("failed", "incomplete", f"the {'log' if run.console_text else 'metrics file'} ends after {done} "
                   f"step(s) with no error: the run was stopped or still going before step {measure_step}", tail)
