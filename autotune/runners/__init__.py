"""Runners, one per backend. `make_runner` is the only place a backend name becomes a runner.

Test doubles live in tests/, never here: no user command can select one.

Owns the runner interface (`base`), one runner per backend (`simulate`, `replay`, `verl`, the Megatron-core probe in
`mcore/`), what the verl runner shares (`node/`: the trial's processes, the GPUs, the kept Ray head; `progress`,
`confirm`, `probed`) and the graceful stop (`stopping`).

May import: the flat values, verl, candidate, job, estimate, store, search and results.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

from autotune.cluster import detect_local_gpus
from autotune.runners.base import Runner, RunnerUnavailable, TrialResult, TrialSpec, TrialStatus
from autotune.runners.simulate import SimulateRunner


def _simulate(**_: Any) -> Runner:
    return SimulateRunner()


def _replay(table: str | None = None, **_: Any) -> Runner:
    from autotune.runners.replay import ReplayRunner  # imported here: it builds setups (autotune.search.setup)

    if not table:
        raise RunnerUnavailable("the replay backend needs a measured table: --backend replay --table FILE.csv "
                                "(format: benchmarks/README.md)")
    return ReplayRunner(table)


# Backend name -> factory taking the CLI's runner options as keyword arguments.
_FACTORIES: dict[str, Callable[..., Runner]] = {"simulate": _simulate}
BACKENDS = ("simulate", "verl", "mcore", "replay")


def register(name: str, factory: Callable[..., Runner]) -> None:
    _FACTORIES[name] = factory


register("replay", _replay)


def _verl(**options: Any) -> Runner:
    from autotune.runners.verl import make_verl_runner  # imported here: it is only needed on GPU nodes

    return make_verl_runner(**options)


register("verl", _verl)


def _mcore(timeout_s: float | None = None, **_: Any) -> Runner:
    from autotune.runners.mcore import McoreRunner, ProbeError

    try:
        return McoreRunner(timeout_s=timeout_s or 900.0)
    except ProbeError as e:
        raise RunnerUnavailable(str(e)) from None


register("mcore", _mcore)


def make_runner(name: str, **options: Any) -> Runner:
    if name not in BACKENDS:
        raise RunnerUnavailable(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")
    if name not in _FACTORIES:
        raise RunnerUnavailable(f"backend {name!r} is not available in this version of autotune")
    return _FACTORIES[name](**options)


def auto_backend() -> str:
    """verl where GPUs and verl are present, else simulate."""
    if detect_local_gpus() and importlib.util.find_spec("verl") is not None and "verl" in _FACTORIES:
        return "verl"
    return "simulate"


__all__ = ["Runner", "TrialResult", "TrialSpec", "TrialStatus", "make_runner", "register", "RunnerUnavailable",
           "BACKENDS", "auto_backend"]
