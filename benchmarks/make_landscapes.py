"""Turn Megatron-core probe CSVs (benchmarks/mcore_grid.py) into replay tables, one per (model, depth, GPUs).

    python -m benchmarks.make_landscapes                          # benchmarks/results/mcore_*.csv -> landscapes/
    python -m benchmarks.make_landscapes --csv A.csv B.csv --out DIR

Each landscape is `NAME.csv` + `NAME.meta.yaml` in the replay format (benchmarks/README.md). What is kept:
- the measured training throughput (`throughput_train`, tokens/s/GPU) of the model as probed: a cut model
  (e.g. qwen2.5-7b at 8 layers) stays the cut model (meta `num_layers`); the per-layer-scaled full-depth
  estimates of the CSV are estimates, not measurements, and are left out;
- status ok / oom as measured; `invalid` rows (a probe spoiled by an earlier one) and `superseded` rows
  (re-measured in a later run) are dropped (results/README_mcore.md says why); any other status (error, timeout,
  crash) becomes `failed`;
- `peak_mem_gib` = the NVML peak (what an out-of-memory is decided against), `step_time_s` = one training step.
- A configuration probed twice at different micro-batch counts keeps the row with more micro-batches (nearer a
  real mini-batch, whose pipeline bubble and optimizer step are amortised like verl's); the other is listed in
  the meta notes.
Groups with fewer than MIN_OK distinct ok configurations are too small to compare search strategies and skipped.

The objective is `train` (autotune/estimate/__init__.py): the training phase only, measured as the probes do,
each micro-batch one sequence of `ppo_max_token_len_per_gpu * cp` tokens. The job of a landscape fixes what the
probes do not vary: dynamic batching at the row's token budget; its batch (one mini-batch per step) is the
group's median number of micro-batch sequences per optimizer step (num_microbatches x DP); its prompt + response
length is the group's shortest micro-batch, so that every row's budget holds one sample (verl's rule).
"""

from __future__ import annotations

import argparse
import csv
import statistics
from collections import defaultdict
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
OUT = REPO / "benchmarks" / "landscapes"
MIN_OK = 4
PARAMS_DENSE = ["tp", "pp", "vpp", "cp", "sequence_parallel", "recompute", "ppo_max_token_len_per_gpu"]
PARAMS_MOE = ["tp", "pp", "vpp", "cp", "ep", "sequence_parallel", "recompute", "ppo_max_token_len_per_gpu"]
DATA = ["status", "throughput", "peak_mem_gib", "step_time_s", "num_microbatches", "probe_id", "error"]


def _int(v: str | None) -> int | None:
    return int(float(v)) if v not in (None, "", "None") else None


def _bool(v: str | None) -> bool:
    return str(v).strip().lower() in ("true", "1")


def landscape_name(model: str, layers: int, full: int, gpus: int) -> str:
    return f"{model}-g{gpus}" if layers == full else f"{model}-L{layers}-g{gpus}"


def read_rows(paths: list[Path]) -> list[dict]:
    rows = []
    for p in paths:
        with open(p, newline="") as f:
            for r in csv.DictReader(f):
                r["_file"] = p.name
                rows.append(r)
    return rows


def convert(rows: list[dict]) -> dict[str, tuple[list[dict], dict]]:
    """Landscape name -> (replay rows, meta)."""
    from autotune.cluster import gpu_type_from_device_name
    from autotune.model import get_model

    groups: dict[tuple[str, int, int], list[dict]] = defaultdict(list)
    for r in rows:
        if not r.get("model") or not r.get("gpus") or not r.get("num_layers"):
            continue
        groups[(r["model"], int(r["num_layers"]), int(r["gpus"]))].append(r)
    out = {}
    for (model, layers, gpus), grp in sorted(groups.items()):
        m = get_model(model)
        full = _int(grp[0].get("full_num_layers")) or m.num_layers
        params = PARAMS_MOE if m.is_moe else PARAMS_DENSE
        by_cfg: dict[tuple, dict] = {}
        dropped = []
        for r in grp:
            if r.get("status") in ("invalid", "superseded"):
                dropped.append(f"{r.get('id')} (marked {r.get('status')} in {r['_file']}; see README_mcore.md)")
                continue
            tp = _int(r["tp"]) or 1
            pp = _int(r["pp"]) or 1
            cfg = {
                "tp": tp, "pp": pp, "vpp": _int(r.get("vpp")) if pp > 1 else None, "cp": _int(r["cp"]) or 1,
                "ep": _int(r.get("ep")) or 1, "sequence_parallel": _bool(r.get("sequence_parallel")) and tp > 1,
                "recompute": r.get("recompute") or "none",
                "ppo_max_token_len_per_gpu": _int(r["ppo_max_token_len_per_gpu"]),
            }
            status = r.get("status", "")
            row = {**{k: cfg[k] for k in params},
                   "status": status if status in ("ok", "oom") else "failed",
                   "throughput": r.get("throughput_train", "") if status == "ok" else "",
                   "peak_mem_gib": r.get("nvml_used_gib_max") or r.get("peak_reserved_gib_max") or "",
                   "step_time_s": r.get("step_time_s", "") if status == "ok" else "",
                   "num_microbatches": _int(r.get("num_microbatches")) or 1,
                   "probe_id": r.get("id", ""), "error": (r.get("error") or "")[:160].replace("\n", " "),
                   "_gpu": r.get("gpu_name", ""), "_date": r.get("date", ""), "_file": r["_file"],
                   "_torch": r.get("torch_version", ""), "_mcore": r.get("mcore_version", "")}
            if status == "ok" and not row["throughput"]:
                row["status"], row["error"] = "failed", "ok without a throughput"
            key = tuple(cfg[k] for k in params)
            old = by_cfg.get(key)
            if old is None:
                by_cfg[key] = row
                continue
            keep, drop = (row, old) if _prefer(row, old) else (old, row)
            by_cfg[key] = keep
            dropped.append(f"{drop['probe_id']} (same configuration as {keep['probe_id']}, "
                           f"{drop['num_microbatches']} micro-batches)")
        table = sorted(by_cfg.values(), key=lambda r: tuple(str(r[k]) for k in params))
        ok = [r for r in table if r["status"] == "ok"]
        name = landscape_name(model, layers, full, gpus)
        if len(ok) < MIN_OK:
            print(f"skip {name}: {len(ok)} ok configurations (< {MIN_OK})")
            continue
        gpu_names = sorted({r["_gpu"] for r in table if r["_gpu"]})
        gtype = gpu_type_from_device_name(gpu_names[0]) if gpu_names else None
        seqs_per_step = statistics.median(r["num_microbatches"] * gpus / (r["tp"] * r["pp"] * r["cp"]) for r in ok)
        batch = max(gpus, round(seqs_per_step / gpus) * gpus)
        shortest = min(r["ppo_max_token_len_per_gpu"] * r["cp"] for r in table)
        meta = {
            "source": (f"Megatron-core training probes (autotune/runners/mcore/worker.py, benchmarks/mcore_grid.py), "
                       f"measured on {', '.join(gpu_names) or 'unknown GPU'} "
                       f"({', '.join(sorted({r['_date'] for r in table if r['_date']}))}; torch "
                       f"{', '.join(sorted({r['_torch'] for r in table if r['_torch']}))}, megatron-core "
                       f"{', '.join(sorted({r['_mcore'] for r in table if r['_mcore']}))}); "
                       f"from {', '.join(sorted({r['_file'] for r in table}))}"),
            "model": model,
            "gpu_type": gtype.name if gtype else "h100",
            "gpus": gpus,
            "objective": "train",
            "job": {
                "data.max_prompt_length": shortest // 4,
                "data.max_response_length": shortest - shortest // 4,
                "data.train_batch_size": batch,
                "actor_rollout_ref.actor.ppo_mini_batch_size": batch,
                "actor_rollout_ref.rollout.n": 1,
                "actor_rollout_ref.actor.use_dynamic_bsz": True,
            },
            "notes": [
                "throughput = throughput_train: tokens/s/GPU of one Megatron-core training step (forward, backward, "
                "optimizer) at the row's token budget per micro-batch; the training phase only, not a GRPO step",
                f"model as measured: {model}" + (f" cut to {layers} of its {full} layers" if layers != full else ""),
                "peak_mem_gib: NVML peak over GPUs; step_time_s: one training step over num_microbatches "
                "micro-batches",
                "objective train: each micro-batch is one sequence of ppo_max_token_len_per_gpu * cp tokens (as "
                "the probes ran); job batch = the group's median sequences (micro-batches x DP) per optimizer step; "
                "job prompt + response = the shortest micro-batch, so every budget holds one sample",
                *(["rows dropped: " + "; ".join(dropped)] if dropped else []),
            ],
        }
        if layers != full:
            meta["num_layers"] = layers
        cols = params + DATA
        out[name] = ([{k: r[k] for k in cols} for r in table], meta)
    return out


def _prefer(a: dict, b: dict) -> bool:
    """Which of two measurements of one configuration to keep: an ok one, then more micro-batches."""
    if (a["status"] == "ok") != (b["status"] == "ok"):
        return a["status"] == "ok"
    return a["num_microbatches"] > b["num_microbatches"]


def write(landscapes: dict[str, tuple[list[dict], dict]], out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, (rows, meta) in landscapes.items():
        path = out / f"{name}.csv"
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            for r in rows:
                w.writerow({k: ("" if v is None else str(v).lower() if isinstance(v, bool) else v)
                            for k, v in r.items()})
        path.with_suffix(".meta.yaml").write_text(yaml.safe_dump(meta, sort_keys=False, width=110))
        written.append(path)
        ok = sum(r["status"] == "ok" for r in rows)
        print(f"{path.relative_to(REPO) if path.is_relative_to(REPO) else path}: {len(rows)} configurations, "
              f"{ok} ok, {sum(r['status'] == 'oom' for r in rows)} oom")
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", nargs="*", type=Path, help="probe CSVs (default benchmarks/results/mcore_*.csv)")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    paths = args.csv or sorted(RESULTS.glob("mcore_*.csv"))
    if not paths:
        print(f"no probe CSVs (looked for {RESULTS}/mcore_*.csv)")
        return 1
    from autotune.runners.replay import ReplayTable

    for path in write(convert(read_rows(paths)), args.out):
        ReplayTable.load(path)  # every landscape must load as a replay table
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
