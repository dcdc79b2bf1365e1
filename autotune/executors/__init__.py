"""Executors place trials on resources (Ray Tune's roles: an executor places runners; it is not a runner).

`make_executor` is the only place an executor name becomes an executor. `local` (default) needs no Ray.

May import: the flat values, verl, candidate, job, estimate, store, search, results and runners.
"""

from __future__ import annotations

from autotune.executors.base import Executor, Finished, Placement, placement_text, run_trial
from autotune.executors.local import LocalExecutor

EXECUTORS = ("local", "ray")


def make_executor(name: str = "local", parallel: int = 1, ray_address: str | None = None) -> Executor:
    if name == "local":
        if ray_address:
            raise ValueError("--ray-address is for --executor ray")
        return LocalExecutor(parallel)
    if name == "ray":
        from autotune.executors.ray import RayExecutor  # imported here: Ray is only needed for this executor

        return RayExecutor(parallel, ray_address)
    raise ValueError(f"unknown executor {name!r}; choose one of {', '.join(EXECUTORS)}")


__all__ = ["EXECUTORS", "Executor", "Finished", "LocalExecutor", "Placement", "make_executor", "placement_text",
           "run_trial"]
