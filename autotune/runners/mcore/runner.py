"""The mcore runner: the actor's training step alone, in Megatron-core on the local GPUs (a minute, not a verl run).

It turns a candidate into a probe spec for `autotune.runners.mcore.worker`, launches it with torchrun on the local
GPUs, and reads back tokens/s/GPU and per-rank peak memory, or the OOM. A model that does not fit the local GPUs
at full depth is cut to fewer layers (by the memory model) and the worker scales the result per layer; the result
says so. What it measures is the training phase only (no rollout, no log-prob passes).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from autotune.candidate import Candidate
from autotune.cluster import Cluster
from autotune.estimate.batching import update_micro_batches
from autotune.estimate.memory import estimate_memory
from autotune.job import Job
from autotune.model import ModelArch
from autotune.runners.base import Runner, TrialResult, TrialSpec, TrialStatus
from autotune.runners.node.procs import ProcessTracker, spawn
from autotune.verl.doctor import stack_env

MAX_PROBE_MICROBATCHES = 8  # enough to fill the pipeline and time a step; memory peaks at min(PP, M) in flight


class ProbeError(RuntimeError):
    """The probe cannot run here (no GPUs, no torchrun / megatron-core, a layout the local GPUs cannot hold)."""


def probe_world(cluster: Cluster, cand: Candidate, local_gpus: int) -> int:
    """GPUs a probe uses: the candidate's model-parallel group times as much data parallel as fits locally."""
    mp = cand.tp * cand.pp * cand.cp
    if local_gpus < mp:
        raise ProbeError(f"layout {cand.layout()} needs {mp} GPUs for TP*PP*CP; this machine has {local_gpus}")
    world = min(cluster.world_size, local_gpus)
    return world - world % mp


def probe_layers(model: ModelArch, cluster: Cluster, job: Job, cand: Candidate, world: int) -> int:
    """Full depth if the memory model says the update fits the local GPUs, else the most layers that fit."""
    chunk = cand.pp * cand.vpp_or_1
    local = dataclasses.replace(cluster, gpus_per_node=world, nodes=1)
    for layers in range(model.num_layers, 0, -chunk):
        if layers % chunk:
            continue
        m = model if layers == model.num_layers else model.with_layers(layers)
        upd = estimate_memory(m, local, job, cand).moment("update")
        if upd.fits or layers == chunk:
            return layers
    return chunk


def probe_spec(model: ModelArch, cluster: Cluster, job: Job, cand: Candidate, world: int, probe_id: str,
               layers: int | None = None, steps: int = 3) -> dict[str, Any]:
    """The worker's spec for a candidate: layout, recompute, one micro-batch at the candidate's token budget."""
    if cand.use_dynamic_bsz:
        tokens = cand.ppo_max_token_len_per_gpu
    else:
        tokens = (cand.ppo_micro_batch_size_per_gpu or 1) * job.max_seq_len // cand.cp
    if cand.cp > 1:
        tokens -= tokens % 2
    if cand.sequence_parallel and cand.tp > 1:
        tokens -= tokens % cand.tp
    local = dataclasses.replace(cluster, gpus_per_node=world, nodes=1)
    n_micro = min(MAX_PROBE_MICROBATCHES, update_micro_batches(job, local, cand, job.max_seq_len))
    n_micro = max(n_micro, cand.pp)
    if cand.vpp:
        n_micro = math.ceil(n_micro / cand.pp) * cand.pp
    recompute = None if cand.recompute == "none" else cand.recompute
    m = model if layers in (None, model.num_layers) else model.with_layers(layers)
    return {
        "id": probe_id,
        "model": dataclasses.asdict(m),
        "full_num_layers": model.num_layers,
        "layout": {
            "tp": cand.tp, "pp": cand.pp, "vpp": cand.vpp, "cp": cand.cp, "ep": cand.ep, "etp": cand.etp,
            "sequence_parallel": cand.sequence_parallel and cand.tp > 1,
            "recompute_granularity": recompute,
            "recompute_method": cand.recompute_method if recompute == "full" else None,
            "recompute_num_layers": cand.recompute_num_layers if recompute == "full" else None,
            "recompute_modules": cand.recompute_modules.split(",") if recompute == "selective" else None,
        },
        "tokens_per_microbatch": int(tokens),
        "num_microbatches": int(n_micro),
        "steps": steps,
        "warmup_steps": 1,
        "measure_forward_only": True,
        "world_size": world,
    }


def result_from_probe(res: dict[str, Any], log_path: str | None = None, log_tail: str = "") -> TrialResult:
    """A worker result line as a TrialResult (measured, training phase only; scaled values when cut)."""
    scaled = bool(res.get("scaled"))
    status = {"ok": TrialStatus.OK, "oom": TrialStatus.OOM}.get(res.get("status"), TrialStatus.FAILED)
    thr = res.get("throughput_train_scaled" if scaled else "throughput_train")
    peak = res.get("nvml_used_gib_max_scaled" if scaled else "nvml_used_gib_max")
    alloc = res.get("peak_alloc_gib_max_scaled" if scaled else "peak_alloc_gib_max")
    per_rank = (res.get("per_rank") or {}).get("nvml_used_gib") or ()
    what = "Megatron-core training step only"
    if scaled:
        what += f", measured at {res.get('num_layers')} of {res.get('full_num_layers')} layers and scaled per layer"
    reason = what if status == TrialStatus.OK else f"probe {status.value}: {res.get('error') or 'no result'}"
    return TrialResult(
        status,
        reason,
        throughput=thr if status == TrialStatus.OK else None,
        steps=(),
        phase_timings={"update_actor": res["step_time_s"]} if res.get("step_time_s") else {},
        peak_memory_gib=peak,
        peak_memory_per_gpu_gib=tuple(per_rank) if not scaled else (),
        framework_memory_gib=alloc,
        log_path=log_path,
        log_excerpt=log_tail if status != TrialStatus.OK else "",
        extra={"probe": res, "measures": "training phase only"},
    )


def local_gpu_count() -> int:
    from autotune.cluster import detect_local_gpus

    found = detect_local_gpus()
    return found[0] if found else 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class McoreRunner(Runner):
    """Runs each candidate's training step with torchrun on this machine's GPUs."""

    name = "mcore"
    objective = "train"  # the actor's training step alone, with Megatron's local layer spec

    def __init__(self, timeout_s: float = 900.0, steps: int = 3, local_gpus: int | None = None):
        self.timeout_s = timeout_s
        self.steps = steps
        self.local_gpus = local_gpus if local_gpus is not None else local_gpu_count()
        if self.local_gpus < 1:
            raise ProbeError("the mcore backend needs NVIDIA GPUs on this machine (none found through NVML)")
        if shutil.which("torchrun") is None and not _has_module("torch"):
            raise ProbeError("the mcore backend needs torch (torchrun) and megatron-core: pip install megatron-core")

    def describe(self) -> str:
        return f"mcore ({self.local_gpus} local GPUs)"

    def trial_probe(self, spec: TrialSpec) -> tuple[int, dict[str, Any]] | TrialResult:
        """The probe of a trial: (world size, probe spec), or the trial's result when it cannot run here."""
        try:
            world = probe_world(spec.cluster, spec.candidate, self.local_gpus)
        except ProbeError as e:
            return TrialResult(TrialStatus.CONFIG_ERROR, str(e))
        layers = probe_layers(spec.model, spec.cluster, spec.job, spec.candidate, world)
        return world, probe_spec(spec.model, spec.cluster, spec.job, spec.candidate, world,
                                 f"{spec.study}-{spec.number}", layers, self.steps)

    def run(self, spec: TrialSpec) -> TrialResult:
        probe = self.trial_probe(spec)
        if isinstance(probe, TrialResult):
            return probe
        world, pspec = probe
        return self.run_specs(spec.workdir, [pspec], world)[0]

    def run_specs(self, workdir: Path, specs: list[dict[str, Any]], world: int) -> list[TrialResult]:
        workdir = workdir.resolve()  # the probe runs in its folder: every path it is given must be absolute
        workdir.mkdir(parents=True, exist_ok=True)
        specs_path, out_path, log_path = workdir / "specs.json", workdir / "results.jsonl", workdir / "probe.log"
        specs_path.write_text(json.dumps(specs))
        out_path.unlink(missing_ok=True)
        cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={world}",
               f"--master_port={_free_port()}", "-m", "autotune.runners.mcore.worker",
               "--specs", str(specs_path), "--out", str(out_path)]
        # autotune importable (`-m autotune.runners.mcore.worker`) and torch's cuDNN first, as for a verl trial
        env = {**stack_env(os.environ), "NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
               "CUDA_DEVICE_MAX_CONNECTIONS": "1"}
        log_path.write_text("")
        proc = spawn(cmd, workdir, env, log_path)
        tracker = ProcessTracker(proc)  # torchrun's workers: stopped by session and PID, as a verl trial is
        try:
            proc.wait(timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            tracker.stop(grace_s=10.0)
            return [TrialResult(TrialStatus.TIMEOUT, f"probe ran past {self.timeout_s:.0f} s",
                                log_path=str(log_path), log_excerpt=_tail(log_path))] * len(specs)
        except KeyboardInterrupt:
            tracker.stop(grace_s=10.0)
            raise
        tracker.stop(grace_s=10.0)  # nothing of the probe may outlive it
        results = {}
        if out_path.exists():
            for line in out_path.read_text().splitlines():
                if line.strip():
                    r = json.loads(line)
                    results[r.get("id")] = r
        tail = _tail(log_path)
        return [
            result_from_probe(results[s["id"]], str(log_path), tail) if s["id"] in results
            else TrialResult(TrialStatus.FAILED, f"probe exited {proc.returncode} without a result",
                             log_path=str(log_path), log_excerpt=tail)
            for s in specs
        ]


def _has_module(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
