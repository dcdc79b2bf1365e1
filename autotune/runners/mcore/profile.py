"""One profiled training step of the probe (`autotune probe --profile`, `autotune profile --backend mcore`).

After its timed steps (whose numbers it reports as always) the worker runs one more step under torch.profiler, marked
with verl's own stage name, and each rank writes a chrome trace named the way verl 0.9.1 names its workers' traces
(verl/utils/profiler/torch_profile.py build_trace_basename), with the worker role "mcore", so that autotune.profile
reads probe and verl traces alike. Standard library only at import (torch inside the functions), like every part of
the worker.
"""

from __future__ import annotations

import datetime as _dt
import os

# verl's record_function name of the actor update (autotune/verl/keys.py PROFILE_STAGES; a test keeps them equal).
UPDATE_STAGE = "actor_update"
WORKER = "mcore_train"


def megatron_topology() -> dict:
    """This rank's tp/pp/dp/cp ranks from Megatron's parallel_state, as verl's get_dist_topology reads them."""
    try:
        from megatron.core import parallel_state as ps

        if not ps.model_parallel_is_initialized():
            return {}
        return {"tp": ps.get_tensor_model_parallel_rank(), "pp": ps.get_pipeline_model_parallel_rank(),
                "dp": ps.get_data_parallel_rank(), "cp": ps.get_context_parallel_rank()}
    except Exception:  # noqa: BLE001 - a name without the parallel ranks is still a trace
        return {}


def trace_basename(rank: int, world: int, topology: dict, step: int | None, pid: int | None = None,
                   when: _dt.datetime | None = None) -> str:
    """`mcore_train_step<N>_rank<R>-of-<W>_tp<t>-pp<p>-dp<d>-cp<c>_pid<P>_<timestamp>`, verl's layout."""
    parts = [WORKER]
    if step is not None:
        parts.append(f"step{step}")
    parts.append(f"rank{rank}-of-{world}")
    parallel = "-".join(f"{k}{topology[k]}" for k in ("tp", "pp", "dp", "cp") if k in topology)
    if parallel:
        parts.append(parallel)
    parts.append(f"pid{os.getpid() if pid is None else pid}")
    parts.append((when or _dt.datetime.now()).strftime("%Y%m%d%H%M%S%f")[:-3])
    return "_".join(parts)


def profile_step(step_fn, out_dir: str, rank: int, world: int, step: int | None = None,
                 topology: dict | None = None) -> str:
    """Run `step_fn()` once under torch.profiler (CPU, and CUDA where present); returns the trace's path."""
    import torch

    activities = [torch.profiler.ProfilerActivity.CPU]
    cuda = torch.cuda.is_available()
    if cuda:
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    os.makedirs(out_dir, exist_ok=True)
    topo = megatron_topology() if topology is None else topology
    path = os.path.join(out_dir, trace_basename(rank, world, topo, step) + ".json.gz")
    with torch.profiler.profile(activities=activities) as prof:
        with torch.profiler.record_function(UPDATE_STAGE):
            step_fn()
            if cuda:
                torch.cuda.synchronize()
    prof.export_chrome_trace(path)
    return path
