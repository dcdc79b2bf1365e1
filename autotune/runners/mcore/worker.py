"""Megatron-core probe worker: measure training throughput and GPU memory of parallel layouts.

Run under torchrun on a GPU machine:

    torchrun --nproc_per_node N -m autotune.runners.mcore.worker --specs specs.json --out results.jsonl

``specs.json`` is a JSON list of probe specs (see ``validate_spec``); the worker runs them one after another in
one process group and appends one JSON line per spec to ``--out`` (rank 0 writes). It also writes
``<out>.progress`` lines (``{"started": id}``) so a supervisor can tell which spec hung.

This module is the entry point: process group, one spec's life (build, measure, gather, tear down) and the
loop over the specs file. Its parts are sibling modules: ``mcore_spec`` (specs and their validation),
``mcore_layers`` (the SDPA/CP attention and RMSNorms swapped into Megatron's local spec), ``mcore_model``
(building the model and optimizer), ``mcore_step`` (micro-batches, the timed step), ``mcore_memory`` (the NVML
sampler), ``mcore_results`` and ``mcore_scaling`` (the result row, cut-model scaling). They import nothing
from ``autotune`` (each other only, relatively; only the standard library at import time; torch and
megatron-core are imported inside functions) so they can run on a machine holding just this package.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import gc
import json
import os
import sys
import time
import traceback

from .layers import build_modules
from .memory import MemSampler
from .model import build_model
from .profile import profile_step
from .results import classify_error, rank_results, short_error
from .spec import SpecError, load_specs, validate_spec
from .step import make_batches, timed_steps, train_step


class Worker:
    """One rank of the probe: its process group, layers and memory sampler, reused by every spec."""

    def __init__(self, args):
        import torch
        import torch.distributed as dist

        self.torch = torch
        self.dist = dist
        self.args = args
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(self.local_rank)
        dist.init_process_group("nccl", timeout=_dt.timedelta(seconds=args.nccl_timeout))
        self.rank = dist.get_rank()
        self.world = dist.get_world_size()
        self.mods = build_modules()
        self.sampler = MemSampler(self.local_rank)
        import megatron.core

        self.mcore_version = getattr(megatron.core, "__version__", None)
        if self.mcore_version is None:
            try:
                from megatron.core import package_info

                self.mcore_version = package_info.__version__
            except Exception:
                self.mcore_version = "?"
        self.gpu_name = torch.cuda.get_device_name(self.local_rank)
        # Record the process groups Megatron creates for a spec, to destroy them afterwards.
        self._created_groups = []
        orig_new_group = dist.new_group

        def _new_group(*a, **kw):
            g = orig_new_group(*a, **kw)
            self._created_groups.append(g)
            return g

        dist.new_group = _new_group

    # ------------------------------------------------------------------------------------------
    def _agree(self, code: int) -> int:
        t = self.torch.tensor([code], dtype=self.torch.int32, device="cuda")
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX)
        return int(t.item())

    def _gather_floats(self, values: list[float]) -> list[list[float]]:
        torch = self.torch
        t = torch.tensor(values, dtype=torch.float64, device="cuda")
        out = [torch.zeros_like(t) for _ in range(self.world)]
        self.dist.all_gather(out, t)
        return [o.tolist() for o in out]

    def build(self, spec):
        """Model chunks and optimizer of `spec` (see ``mcore_model.build_model``)."""
        return build_model(spec, self.mods)

    def run_spec(self, raw):
        torch = self.torch
        from megatron.core import parallel_state as ps

        started = time.time()
        res = {"id": raw.get("id") if isinstance(raw, dict) else None, "status": "error", "error": None}
        try:
            spec = validate_spec(raw, self.world)
        except SpecError as e:
            res["error"] = f"SpecError: {e}"
            return res
        m, lay = spec["model"], spec["layout"]
        res.update(
            world_size=self.world, gpu_name=self.gpu_name, torch_version=torch.__version__,
            mcore_version=self.mcore_version, num_layers=m["num_layers"], full_num_layers=spec["full_num_layers"],
            scaled=spec["full_num_layers"] != m["num_layers"], model=m.get("name"), layout=lay,
            tokens_per_microbatch=spec["tokens_per_microbatch"], num_microbatches=spec["num_microbatches"],
            nvml_source=self.sampler.source,
        )
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        self.sampler.reset()
        res["nvml_baseline_gib"] = self.sampler.read() / 2**30
        state = {}
        stats = [0.0] * 8
        code = 0
        err = None
        try:
            config, model, optimizer, n_params = self.build(spec)
            state.update(model=model, optimizer=optimizer, config=config)
            res["params_on_rank0"] = n_params
            dp = ps.get_data_parallel_world_size()
            res["dp"] = dp
            batches = make_batches(spec, m["vocab_size"], spec["num_microbatches"])
            state["batches"] = batches
            step_s = timed_steps(spec, model, optimizer, batches, False, spec["warmup_steps"], spec["steps"])
            torch.cuda.synchronize()
            stats[0] = step_s
            stats[1] = torch.cuda.max_memory_allocated() / 2**30
            stats[2] = torch.cuda.max_memory_reserved() / 2**30
            stats[3] = self.sampler.peak / 2**30
            if spec["profile_dir"]:  # after the timed steps: their numbers stay the profiler's overhead free
                try:
                    res["profile_trace"] = profile_step(
                        lambda: train_step(spec, model, optimizer, batches, False), spec["profile_dir"], self.rank,
                        self.world, spec["warmup_steps"] + spec["steps"] + 1)
                except Exception as e:  # noqa: BLE001 - a failed trace leaves the measured step as measured
                    res["profile_error"] = short_error(e)
            if spec["measure_forward_only"]:
                torch.cuda.reset_peak_memory_stats()
                with torch.no_grad():
                    f_s = timed_steps(spec, model, optimizer, batches, True, 1, spec["forward_steps"])
                torch.cuda.synchronize()
                stats[4] = f_s
                stats[5] = torch.cuda.max_memory_allocated() / 2**30
                stats[6] = torch.cuda.max_memory_reserved() / 2**30
        except Exception as e:  # noqa: BLE001 - OOM and anything else is recorded, then the next spec runs
            text = "".join(traceback.format_exception_only(type(e), e))
            kind = "oom" if isinstance(e, torch.OutOfMemoryError) else classify_error(text)
            err = short_error(e)
            code = 2 if kind == "oom" else 1
            if self.args.verbose or kind != "oom":
                sys.stderr.write(f"[rank {self.rank}] spec {res['id']}: {traceback.format_exc()[-3000:]}\n")
            del e
        state.clear()
        config = model = optimizer = batches = None  # noqa: F841 - drop this frame's references too
        gc.collect()
        torch.cuda.synchronize()
        agreed = self._agree(code)
        # gather the per-rank numbers and errors
        stats[7] = float(code)
        rows = self._gather_floats(stats)
        errs = [None] * self.world
        self.dist.all_gather_object(errs, err)
        self._teardown()
        res["leftover_alloc_gib_rank0"] = round(torch.cuda.memory_allocated() / 2**30, 3)
        res = rank_results(res, spec, rows, errs, agreed, self.world)
        res["wall_s"] = round(time.time() - started, 2)
        res["timestamp"] = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
        return res

    def _teardown(self):
        torch = self.torch
        from megatron.core import parallel_state as ps

        try:
            ps.destroy_model_parallel()
        except Exception:
            pass
        try:
            from megatron.core.models.common.embeddings.rotary_pos_embedding import RotaryEmbedding

            RotaryEmbedding.forward.cache_clear()  # its lru_cache keeps modules and tables alive
        except Exception:
            pass
        try:
            ps._GLOBAL_MEMORY_BUFFER = None
        except Exception:
            pass
        torch.cuda.synchronize()
        self.dist.barrier()
        if self.args.destroy_groups:
            for g in self._created_groups:
                try:
                    self.dist.destroy_process_group(g)
                except Exception:
                    pass
        self._created_groups.clear()
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--specs", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--nccl-timeout", type=int, default=600)
    p.add_argument("--destroy-groups", type=int, default=1)
    p.add_argument("--verbose", action="store_true")
    p.add_argument("--exit-after-failure", type=int, default=1,
                   help="stop after an oom/error spec (memory can stay held after an OOM; a supervisor such as "
                        "benchmarks/mcore_grid.py restarts the worker on the remaining specs)")
    args = p.parse_args(argv)
    specs = load_specs(args.specs)
    w = Worker(args)
    progress = args.out + ".progress"
    for raw in specs:
        sid = raw.get("id") if isinstance(raw, dict) else None
        if w.rank == 0:
            with open(progress, "a") as f:
                f.write(json.dumps({"started": sid, "t": time.time()}) + "\n")
        res = w.run_spec(raw)
        if w.rank == 0:
            with open(args.out, "a") as f:
                f.write(json.dumps(res) + "\n")
            print(f"[mcore_worker] {sid}: {res['status']} "
                  f"{res.get('throughput_train') or ''} {res.get('error') or ''}", flush=True)
        if args.exit_after_failure and res["status"] != "ok":
            break
    w.sampler.stop()
    w.dist.barrier()
    w.dist.destroy_process_group()


if __name__ == "__main__":
    main()
