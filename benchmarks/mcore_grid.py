"""Grid of Megatron-core probes (layouts x token budgets x recompute) and a runner for a multi-GPU box.

    python -m benchmarks.mcore_grid --list                       # print the grid summary
    python -m benchmarks.mcore_grid --write-specs specs/         # write the spec files per world size
    python -m benchmarks.mcore_grid --run --gpus 4 --out OUT/    # run on a GPU machine, write the CSV

Running: specs are grouped by world size (1, 2, 4 GPUs). The 4-GPU specs run in one torchrun over all GPUs,
the 2-GPU specs in two concurrent torchruns (GPUs 0,1 and 2,3), the 1-GPU specs in four concurrent torchruns
(one per GPU, via CUDA_VISIBLE_DEVICES), each with its own master port. Each torchrun runs
``autotune.runners.mcore.worker`` over its batch; a lane whose worker stops making progress (a hang, e.g. one
pipeline stage ran out of memory while the others wait for it) is killed and restarted on the remaining specs,
the stuck spec recorded as oom (when the log shows an out-of-memory error) or error. A CSV row is appended as
each result arrives, so a run cut short still leaves data.

The qwen2.5-7b probes are cut to 8 (some to 4) layers; the worker reports measured numbers for the cut model and
per-layer-scaled estimates (its scaling rules are in the JSON results); the CSV has the measured numbers with
``scaled=true`` and ``full_num_layers`` so the full-depth numbers can be derived.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

CSV_COLUMNS = [
    "id", "model", "num_layers", "full_num_layers", "scaled", "gpus", "tp", "pp", "vpp", "cp", "ep", "etp",
    "sequence_parallel", "recompute", "recompute_method", "recompute_num_layers", "ppo_max_token_len_per_gpu",
    "num_microbatches", "dp", "gpu_name", "status", "error", "throughput_train", "throughput_fwd", "step_time_s",
    "peak_alloc_gib_max", "peak_reserved_gib_max", "nvml_used_gib_max", "fwd_peak_alloc_gib_max",
    "throughput_train_scaled", "peak_alloc_gib_max_scaled", "nvml_baseline_gib", "torch_version",
    "mcore_version", "date",
]


def _model_dict(name: str, layers: int | None = None) -> dict:
    from autotune.model import get_model

    m = get_model(name)
    if layers is not None and layers != m.num_layers:
        m = m.with_layers(layers)
    return dataclasses.asdict(m)


def make_spec(model: str, gpus: int, tokens: int, nmb: int, *, tp=1, pp=1, vpp=None, cp=1, ep=1, etp=None,
              sp=None, recompute="none", layers=None, steps=2, warmup=1, fwd=False, tag="") -> dict:
    from autotune.model import get_model

    full = get_model(model).num_layers
    m = _model_dict(model, layers)
    if sp is None:
        sp = tp > 1
    layout = {"tp": tp, "pp": pp, "vpp": vpp, "cp": cp, "ep": ep, "etp": etp, "sequence_parallel": bool(sp),
              "recompute_granularity": None, "recompute_method": None, "recompute_num_layers": None,
              "recompute_modules": None}
    if recompute == "selective":
        layout.update(recompute_granularity="selective", recompute_modules=["core_attn"])
    elif recompute == "full":
        layout.update(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1)
    short = {"qwen2.5-1.5b": "q15", "qwen2.5-7b": "q7", "qwen3-30b-a3b": "q30a3"}.get(model, model)
    parts = [f"{short}L{m['num_layers']}", f"g{gpus}", f"tp{tp}", f"pp{pp}"]
    if vpp:
        parts.append(f"v{vpp}")
    if cp > 1:
        parts.append(f"cp{cp}")
    if ep > 1:
        parts.append(f"ep{ep}")
    parts += [f"{'sp' if sp and tp > 1 else 'nosp'}", f"rc{recompute[0]}", f"t{tokens}", f"m{nmb}"]
    if tag:
        parts.append(tag)
    return {
        "id": "-".join(parts),
        "model": m,
        "layout": layout,
        "tokens_per_microbatch": tokens,
        "num_microbatches": nmb,
        "steps": steps,
        "warmup_steps": warmup,
        "measure_forward_only": fwd,
        "full_num_layers": full,
        "world_size": gpus,
    }


def build_grid() -> list[dict]:
    """The probe grid (dense Qwen2.5 + a small MoE); order inside a world size = run order."""
    S = make_spec
    g: list[dict] = []
    A, B = "qwen2.5-1.5b", "qwen2.5-7b"
    # ---- 1 GPU ------------------------------------------------------------------------------------------
    for tok, nmb, rc in [(4096, 4, "none"), (8192, 4, "none"), (16384, 2, "none"), (24576, 2, "none"),
                         (32768, 2, "none"), (16384, 2, "selective"), (16384, 2, "full"), (32768, 2, "full"),
                         (65536, 2, "none"), (8192, 8, "none")]:
        g.append(S(A, 1, tok, nmb, recompute=rc, fwd=(tok == 16384 and rc == "none")))
    for tok, nmb, rc, layers in [(8192, 2, "none", 8), (16384, 2, "none", 8), (24576, 2, "none", 8),
                                 (16384, 2, "full", 8), (32768, 2, "full", 8), (65536, 2, "none", 8),
                                 (8192, 2, "none", 4), (16384, 2, "none", 4)]:
        g.append(S(B, 1, tok, nmb, recompute=rc, layers=layers, fwd=(tok == 16384 and rc == "none")))
    # ---- 2 GPUs -----------------------------------------------------------------------------------------
    for tok, nmb, rc in [(8192, 4, "none"), (16384, 4, "none"), (32768, 2, "none"), (16384, 4, "selective")]:
        g.append(S(A, 2, tok, nmb, tp=2, recompute=rc, fwd=(tok == 16384 and rc == "none")))
    g.append(S(A, 2, 16384, 4, tp=2, sp=False))
    for tok, nmb, rc in [(8192, 4, "none"), (16384, 4, "none"), (16384, 4, "full")]:
        g.append(S(A, 2, tok, nmb, pp=2, recompute=rc))
    g.append(S(A, 2, 16384, 4, pp=2, vpp=2))
    g.append(S(A, 2, 8192, 4, pp=2, vpp=2))
    for tok, nmb in [(8192, 4), (16384, 2), (32768, 2)]:
        g.append(S(A, 2, tok, nmb, cp=2))
    g.append(S(A, 2, 16384, 4, tp=1, tag="dp2"))  # pure data parallel
    for tok, nmb, rc in [(8192, 4, "none"), (16384, 4, "none"), (32768, 2, "none"), (32768, 2, "full")]:
        g.append(S(B, 2, tok, nmb, tp=2, recompute=rc, layers=8, fwd=(tok == 16384 and rc == "none")))
    g.append(S(B, 2, 16384, 4, pp=2, layers=8))
    g.append(S(B, 2, 16384, 4, pp=2, vpp=2, layers=8))
    g.append(S(B, 2, 16384, 2, cp=2, layers=8))
    g.append(S(B, 2, 65536, 2, tp=2, layers=8))  # expected OOM
    # ---- 4 GPUs -----------------------------------------------------------------------------------------
    for tok, nmb, rc in [(8192, 4, "none"), (16384, 4, "none"), (32768, 4, "none"), (16384, 4, "full"),
                         (65536, 2, "none"), (65536, 2, "full")]:
        g.append(S(B, 4, tok, nmb, tp=4, recompute=rc, layers=8, fwd=(tok == 16384 and rc == "none")))
    g.append(S(B, 4, 16384, 4, tp=2, pp=2, layers=8))
    g.append(S(B, 4, 16384, 8, tp=2, pp=2, vpp=2, layers=8))
    g.append(S(B, 4, 16384, 8, tp=1, pp=4, layers=8))
    g.append(S(B, 4, 16384, 8, tp=1, pp=4, vpp=2, layers=8))
    g.append(S(B, 4, 16384, 4, tp=2, cp=2, layers=8))
    g.append(S(B, 4, 16384, 2, cp=4, layers=8))
    g.append(S(B, 4, 32768, 2, tp=2, cp=2, layers=8, recompute="selective"))
    g.append(S(B, 4, 131072, 2, tp=4, layers=8))  # expected OOM
    g.append(S(B, 4, 16384, 4, tp=2, layers=8, tag="dp2"))
    for tok, nmb, rc in [(16384, 4, "none"), (32768, 4, "none")]:
        g.append(S(A, 4, tok, nmb, tp=2, pp=2, recompute=rc))
    g.append(S(A, 4, 16384, 4, pp=4))
    g.append(S(A, 4, 16384, 8, tp=2, pp=2, vpp=2))
    g.append(S(A, 4, 32768, 2, cp=4))
    g.append(S(A, 4, 16384, 4, tp=2, cp=2))
    g.append(S(A, 4, 16384, 4, tag="dp4"))
    # small MoE: qwen3-30b-a3b cut to 4 layers, expert parallel
    g.append(S("qwen3-30b-a3b", 4, 8192, 4, ep=4, layers=4, tag="moe"))
    g.append(S("qwen3-30b-a3b", 4, 8192, 4, tp=2, ep=2, layers=4, tag="moe"))
    g.append(S("qwen3-30b-a3b", 2, 8192, 4, ep=2, layers=4, tag="moe"))
    return g + build_grid_extra()


def build_grid_extra() -> list[dict]:
    """Second batch: more budgets / micro-batch counts, 4-layer twins of 8-layer 7B probes (per-layer slope)."""
    S = make_spec
    A, B = "qwen2.5-1.5b", "qwen2.5-7b"
    g = [
        S(A, 1, 12288, 4), S(A, 1, 20480, 2), S(A, 1, 65536, 2, recompute="full"),
        S(A, 1, 24576, 2, recompute="selective"),
        S(B, 1, 12288, 2, layers=8), S(B, 1, 49152, 2, layers=8, recompute="full"),
        S(B, 1, 24576, 2, layers=4), S(B, 1, 16384, 2, layers=4, recompute="full"),
        S(A, 2, 24576, 4, tp=2), S(A, 2, 65536, 2, tp=2, recompute="full"), S(A, 2, 32768, 4, pp=2),
        S(A, 2, 16384, 8, pp=2, vpp=2), S(A, 2, 32768, 2, cp=2, recompute="full"), S(A, 2, 16384, 8, tp=2),
        S(B, 2, 24576, 4, tp=2, layers=8), S(B, 2, 32768, 2, tp=2, layers=8, recompute="selective"),
        S(B, 2, 32768, 2, cp=2, layers=8, recompute="full"), S(B, 2, 32768, 4, pp=2, layers=8, recompute="full"),
        S(B, 2, 16384, 4, tp=2, layers=4),
        S(B, 4, 24576, 4, tp=4, layers=8), S(B, 4, 16384, 8, tp=4, layers=8), S(B, 4, 32768, 4, tp=2, pp=2, layers=8),
        S(B, 4, 65536, 2, tp=2, cp=2, layers=8, recompute="full"), S(B, 4, 32768, 2, cp=4, layers=8, recompute="full"),
        S(B, 4, 32768, 8, pp=4, layers=8, recompute="full"), S(B, 4, 262144, 1, tp=4, layers=8),
        S(A, 4, 32768, 8, tp=2, pp=2, vpp=2), S(A, 4, 32768, 8, pp=4, recompute="full"), S(A, 4, 16384, 2, cp=4),
        S(A, 4, 32768, 4, tp=2, cp=2), S(B, 4, 16384, 4, tp=4, layers=4),
    ]
    return g


def smoke_grid() -> list[dict]:
    """A handful of tiny specs exercising tp2, pp2+vpp, cp2 and an OOM (qwen2.5-1.5b cut to 4 layers)."""
    S = make_spec
    A = "qwen2.5-1.5b"
    return [
        S(A, 2, 2048, 2, tp=2, layers=4, tag="smoke", fwd=True),
        S(A, 2, 2048, 4, pp=2, vpp=2, layers=4, tag="smoke"),
        S(A, 2, 2048, 2, cp=2, layers=4, tag="smoke"),
        S("qwen2.5-7b", 2, 1 << 20, 1, tp=2, layers=4, tag="smoke"),  # OOM
    ]


def validate_grid(specs: list[dict]) -> list[str]:
    """Problems found by the worker's validator (empty when all specs are runnable)."""
    from autotune.runners.mcore.spec import SpecError, validate_spec

    problems = []
    ids = set()
    for s in specs:
        if s["id"] in ids:
            problems.append(f"duplicate id {s['id']}")
        ids.add(s["id"])
        try:
            validate_spec(s, s["world_size"])
        except SpecError as e:
            problems.append(str(e))
    return problems


# ----------------------------------------------------------------------------------------------------------
# CSV
# ----------------------------------------------------------------------------------------------------------


def result_to_row(res: dict, spec: dict | None = None) -> dict:
    """One CSV row from a worker result line (and its spec, for the layout when the result lacks it)."""
    lay = dict(res.get("layout") or (spec or {}).get("layout") or {})
    rg = lay.get("recompute_granularity")
    model = res.get("model") or ((spec or {}).get("model") or {}).get("name")
    num_layers = res.get("num_layers") or ((spec or {}).get("model") or {}).get("num_layers")
    full = res.get("full_num_layers") or (spec or {}).get("full_num_layers") or num_layers
    tp = lay.get("tp")
    row = {
        "id": res.get("id"),
        "model": model,
        "num_layers": num_layers,
        "full_num_layers": full,
        "scaled": bool(res.get("scaled", num_layers != full)),
        "gpus": res.get("world_size") or (spec or {}).get("world_size"),
        "tp": tp,
        "pp": lay.get("pp"),
        "vpp": lay.get("vpp"),
        "cp": lay.get("cp"),
        "ep": lay.get("ep"),
        "etp": lay.get("etp") if lay.get("etp") is not None else tp,
        "sequence_parallel": lay.get("sequence_parallel"),
        "recompute": rg or "none",
        "recompute_method": lay.get("recompute_method"),
        "recompute_num_layers": lay.get("recompute_num_layers"),
        "ppo_max_token_len_per_gpu": res.get("tokens_per_microbatch") or (spec or {}).get("tokens_per_microbatch"),
        "num_microbatches": res.get("num_microbatches") or (spec or {}).get("num_microbatches"),
        "dp": res.get("dp"),
        "gpu_name": res.get("gpu_name"),
        "status": res.get("status"),
        "error": (res.get("error") or "")[:300],
        "throughput_train": _r(res.get("throughput_train")),
        "throughput_fwd": _r(res.get("throughput_fwd")),
        "step_time_s": _r(res.get("step_time_s"), 4),
        "peak_alloc_gib_max": _r(res.get("peak_alloc_gib_max"), 3),
        "peak_reserved_gib_max": _r(res.get("peak_reserved_gib_max"), 3),
        "nvml_used_gib_max": _r(res.get("nvml_used_gib_max"), 3),
        "fwd_peak_alloc_gib_max": _r(res.get("fwd_peak_alloc_gib_max"), 3),
        "throughput_train_scaled": _r(res.get("throughput_train_scaled")),
        "peak_alloc_gib_max_scaled": _r(res.get("peak_alloc_gib_max_scaled"), 3),
        "nvml_baseline_gib": _r(res.get("nvml_baseline_gib"), 3),
        "torch_version": res.get("torch_version"),
        "mcore_version": res.get("mcore_version"),
        "date": (res.get("timestamp") or "")[:10],
    }
    return {k: ("" if v is None else v) for k, v in row.items()}


def _r(v, nd=1):
    return None if v is None else round(float(v), nd)


class CsvSink:
    """Thread-safe CSV appender (header once, flushed per row) plus a raw JSONL copy."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.lock = threading.Lock()
        self.raw = self.path.with_suffix(".jsonl")
        new = not self.path.exists()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if new:
            with open(self.path, "w", newline="") as f:
                csv.DictWriter(f, fieldnames=CSV_COLUMNS).writeheader()

    def add(self, res: dict, spec: dict | None = None):
        row = result_to_row(res, spec)
        with self.lock:
            with open(self.path, "a", newline="") as f:
                csv.DictWriter(f, fieldnames=CSV_COLUMNS).writerow(row)
            with open(self.raw, "a") as f:
                f.write(json.dumps(res) + "\n")


def read_csv(path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


# ----------------------------------------------------------------------------------------------------------
# Runner (GPU box)
# ----------------------------------------------------------------------------------------------------------


def lanes_for(world: int, gpus: int) -> list[str]:
    """CUDA_VISIBLE_DEVICES strings of the concurrent lanes for one world size."""
    n = gpus // world
    return [",".join(str(i * world + j) for j in range(world)) for i in range(n)]


def split_round_robin(specs: list[dict], n: int) -> list[list[dict]]:
    out: list[list[dict]] = [[] for _ in range(n)]
    for i, s in enumerate(specs):
        out[i % n].append(s)
    return out


class Lane(threading.Thread):
    """Runs one batch of specs through torchrun on a fixed set of GPUs, restarting past hangs."""

    def __init__(self, name, devices, world, specs, sink, workdir, port, deadline, spec_timeout, env_extra=None):
        super().__init__(daemon=True, name=name)
        self.devices, self.world, self.specs = devices, world, list(specs)
        self.sink, self.workdir, self.port = sink, Path(workdir), port
        self.deadline, self.spec_timeout = deadline, spec_timeout
        self.env_extra = env_extra or {}
        self.done_ids: set[str] = set()
        self.launch = 0

    def log(self, msg):
        print(f"[{self.name} {time.strftime('%H:%M:%S')}] {msg}", flush=True)

    def run(self):
        while True:
            todo = [s for s in self.specs if s["id"] not in self.done_ids]
            if not todo:
                return
            if time.time() + 60 > self.deadline:
                self.log(f"deadline: {len(todo)} specs not run: {[s['id'] for s in todo]}")
                return
            self._launch(todo)

    def _launch(self, todo):
        self.launch += 1
        tag = f"{self.name}_{self.launch}"
        specs_path = self.workdir / f"{tag}.specs.json"
        out_path = self.workdir / f"{tag}.results.jsonl"
        log_path = self.workdir / f"{tag}.log"
        specs_path.write_text(json.dumps(todo))
        env = dict(os.environ)
        env.update({"CUDA_VISIBLE_DEVICES": self.devices, "NCCL_NVLS_ENABLE": "0",
                    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1",
                    "PYTHONUNBUFFERED": "1", "CUDA_DEVICE_MAX_CONNECTIONS": "1",
                    "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3", "OMP_NUM_THREADS": "4"})
        env.update(self.env_extra)
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(self.world),
               "--master_port", str(self.port + self.launch), "-m", "autotune.runners.mcore.worker",
               "--specs", str(specs_path), "--out", str(out_path)]
        self.log(f"launch {len(todo)} specs on GPUs {self.devices}")
        with open(log_path, "w") as logf:
            proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, env=env, start_new_session=True)
            seen = 0
            last_progress = time.time()
            current = None
            while True:
                rc = proc.poll()
                seen, got = self._collect(out_path, seen, todo)
                if got:
                    last_progress = time.time()
                prog = self._current(out_path)
                if prog and prog != current:
                    current = prog
                    last_progress = time.time()
                if rc is not None:
                    break
                hard = time.time() > self.deadline
                if time.time() - last_progress > self.spec_timeout or hard:
                    self.log(f"{'deadline' if hard else 'timeout'} on {current}; killing torchrun")
                    self._kill(proc)
                    self._collect(out_path, seen, todo)
                    if current and current not in self.done_ids:
                        self._record_stuck(current, todo, log_path, "deadline" if hard else "timeout")
                    if hard:
                        self.done_ids.update(s["id"] for s in todo)
                    return
                time.sleep(1.0)
        seen, _ = self._collect(out_path, seen, todo)
        if rc != 0:
            cur = self._current(out_path)
            self.log(f"torchrun exited rc={rc} during {cur}")
            if cur and cur not in self.done_ids:
                self._record_stuck(cur, todo, log_path, f"crash rc={rc}")
        # specs never started (e.g. init failure) are marked to avoid loops
        if rc != 0 and seen == 0 and not self._current(out_path):
            for s in todo:
                self._record(s, {"id": s["id"], "status": "error", "error": f"worker failed to start rc={rc}"})

    def _kill(self, proc):
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=15)
        except Exception:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
            except Exception:
                pass

    def _current(self, out_path):
        p = Path(str(out_path) + ".progress")
        if not p.exists():
            return None
        lines = p.read_text().strip().splitlines()
        return json.loads(lines[-1])["started"] if lines else None

    def _collect(self, out_path, seen, todo):
        if not out_path.exists():
            return seen, False
        lines = out_path.read_text().splitlines()
        by_id = {s["id"]: s for s in todo}
        got = False
        for ln in lines[seen:]:
            try:
                res = json.loads(ln)
            except json.JSONDecodeError:
                break
            seen += 1
            got = True
            self._record(by_id.get(res.get("id")), res)
        return seen, got

    def _record(self, spec, res):
        if res.get("id") in self.done_ids:
            return
        self.done_ids.add(res.get("id"))
        self.sink.add(res, spec)
        self.log(f"{res.get('id')}: {res.get('status')} train={res.get('throughput_train')} "
                 f"peak={res.get('peak_alloc_gib_max')} {res.get('error') or ''}")

    def _record_stuck(self, sid, todo, log_path, why):
        text = log_path.read_text(errors="replace") if log_path.exists() else ""
        oom_lines = [ln for ln in text.splitlines() if "out of memory" in ln.lower()]
        spec = next((s for s in todo if s["id"] == sid), None)
        res = {"id": sid, "status": "oom" if oom_lines else "error",
               "error": (oom_lines[-1].strip()[:300] if oom_lines else f"{why}; no result (see log)"),
               "world_size": self.world, "timestamp": dt.datetime.now(dt.UTC).isoformat()}
        if spec:
            res.update(layout=spec["layout"], model=spec["model"]["name"], num_layers=spec["model"]["num_layers"],
                       full_num_layers=spec["full_num_layers"], tokens_per_microbatch=spec["tokens_per_microbatch"],
                       num_microbatches=spec["num_microbatches"])
        self._record(spec, res)


def run_grid(specs, gpus, out_dir, budget_s, spec_timeout=240, order=(4, 2, 1), base_port=29400, csv_name=None):
    out_dir = Path(out_dir)
    work = out_dir / "work"
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    deadline = t0 + budget_s
    csv_path = out_dir / (csv_name or f"mcore_{time.strftime('%Y%m%d_%H%M%S')}.csv")
    sink = CsvSink(csv_path)
    by_world: dict[int, list[dict]] = {}
    for s in specs:
        by_world.setdefault(int(s["world_size"]), []).append(s)
    port = base_port
    for world in order:
        batch = by_world.get(world, [])
        if not batch or world > gpus:
            continue
        lanes = lanes_for(world, gpus)
        groups = split_round_robin(batch, len(lanes))
        threads = []
        for i, (devs, grp) in enumerate(zip(lanes, groups, strict=True)):
            if not grp:
                continue
            th = Lane(f"w{world}l{i}", devs, world, grp, sink, work, port, deadline, spec_timeout)
            port += 50
            threads.append(th)
            th.start()
        for th in threads:
            th.join()
        print(f"[grid] world {world} done at {time.time() - t0:.0f}s", flush=True)
    return csv_path


def main(argv=None):
    p = argparse.ArgumentParser(description="Megatron-core probe grid")
    p.add_argument("--list", action="store_true")
    p.add_argument("--write-specs")
    p.add_argument("--run", action="store_true")
    p.add_argument("--smoke", action="store_true", help="run the smoke specs first")
    p.add_argument("--only", default="", help="comma-separated substrings; keep specs whose id has one")
    p.add_argument("--skip-ids", default="", help="file with ids (one per line, or a CSV with an id column)")
    p.add_argument("--worlds", default="4,2,1")
    p.add_argument("--gpus", type=int, default=4)
    p.add_argument("--out", default="mcore_out")
    p.add_argument("--budget-s", type=float, default=540)
    p.add_argument("--spec-timeout", type=float, default=240)
    p.add_argument("--csv-name")
    args = p.parse_args(argv)
    specs = build_grid()
    if args.only:
        keys = args.only.split(",")
        specs = [s for s in specs if any(k in s["id"] for k in keys)]
    if args.skip_ids:
        path = Path(args.skip_ids)
        skip = set()
        for f in (path.glob("*.csv") if path.is_dir() else [path]):
            if str(f).endswith(".csv"):
                skip |= {r["id"] for r in read_csv(f) if r.get("status") in ("ok", "oom")}
            else:
                skip |= set(f.read_text().split())
        specs = [s for s in specs if s["id"] not in skip]
    if args.smoke:
        specs = smoke_grid() + specs
    problems = validate_grid(specs)
    if problems:
        print("invalid specs:\n  " + "\n  ".join(problems))
        return 2
    if args.list or not (args.run or args.write_specs):
        from collections import Counter

        c = Counter(s["world_size"] for s in specs)
        print(f"{len(specs)} specs; by world size: {dict(sorted(c.items()))}")
        for s in specs:
            print(" ", s["id"])
    if args.write_specs:
        d = Path(args.write_specs)
        d.mkdir(parents=True, exist_ok=True)
        for w in sorted({s["world_size"] for s in specs}):
            (d / f"specs_w{w}.json").write_text(json.dumps([s for s in specs if s["world_size"] == w], indent=1))
    if args.run:
        order = tuple(int(x) for x in args.worlds.split(","))
        path = run_grid(specs, args.gpus, args.out, args.budget_s, args.spec_timeout, order=order,
                        csv_name=args.csv_name)
        rows = read_csv(path)
        from collections import Counter

        print(f"[grid] wrote {path}: {len(rows)} rows, {dict(Counter(r['status'] for r in rows))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
