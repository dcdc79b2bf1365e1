"""Test double of verl's entry point (see main_ppo.py) and helpers to drive autotune's verl runner with it.

Only tests use these: the runner takes a test entry point from Python (`VerlRunner(entry=...)`), never from the CLI.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

from autotune.candidate import Candidate
from autotune.runners.base import TrialSpec
from autotune.runners.verl import VerlOptions, VerlRunner
from autotune.search.setup import Setup

FAKE_MAIN = Path(__file__).resolve().parent / "main_ppo.py"
ENTRY = (sys.executable, str(FAKE_MAIN))


def fake_module() -> Any:
    spec = importlib.util.spec_from_file_location("fake_verl_main_ppo", FAKE_MAIN)
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    return mod


def fast_options(**kw: Any) -> VerlOptions:
    """Watchdogs scaled to the double's sub-second steps."""
    base = dict(trial_timeout_s=30.0, stall_timeout_s=5.0, grace_s=2.0, cleanup_timeout_s=5.0, poll_s=0.05)
    base.update(kw)
    base.setdefault("startup_timeout_s", max(10.0, base["stall_timeout_s"]))  # the double starts in a second
    return VerlOptions(**base)


def fake_runner(env: dict[str, str] | None = None, **kw: Any) -> VerlRunner:
    return VerlRunner(fast_options(**kw), entry=ENTRY, env=env or {})


def make_spec(setup: Setup, workdir: Path, cand: Candidate | None = None, number: int = 0, measure_step: int = 3,
              **kw: Any) -> TrialSpec:
    cand = cand or Candidate(tp=2, pp=1, rollout_tp=2, ppo_micro_batch_size_per_gpu=2,
                             log_prob_micro_batch_size_per_gpu=4).normalized()
    ev = setup.evaluate(cand)
    return TrialSpec(study="s", number=number, model=setup.model, cluster=setup.cluster, job=setup.job,
                     candidate=cand, memory=ev.memory, prediction=ev.throughput, measure_step=measure_step,
                     workdir=workdir / f"trial_{number:04d}", **kw)


def records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def launches(path: Path) -> list[dict[str, Any]]:
    """One record per start of the double (it also appends timing records)."""
    return [r for r in records(path) if "argv" in r]


def pid_alive(pid: int) -> bool:
    """Alive and not a zombie (checked by PID through /proc, never by name)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] not in "ZX"


def leftovers(rec_path: Path) -> list[int]:
    """PIDs the double started (itself and its children) that are still running."""
    out = []
    for r in records(rec_path):
        out += [p for p in [r["pid"], *r["children"]] if pid_alive(p)]
    return out


def env_for(record: Path, **extra: str) -> dict[str, str]:
    env = {"FAKE_VERL_RECORD": str(record), "FAKE_VERL_TEARDOWN_S": "3"}
    env.update(extra)
    return env


__all__ = ["FAKE_MAIN", "ENTRY", "fake_runner", "fast_options", "make_spec", "records", "launches", "leftovers",
           "env_for", "pid_alive", "fake_module"]
