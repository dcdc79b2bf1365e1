"""How well the throughput model orders the measured configurations of verl_megatron_practice.

For each table: the Megatron rows that report a step time (and, separately, an update_actor time) are rebuilt as
candidates (layout from `train_parallel`, rollout TP from `infer_parallel`, token budgets or micro-batch sizes,
the DAPO scripts' settings: offload on, fused kernels, gpu_memory_utilization 0.6), estimated, and compared with
the measurement by Spearman rank correlation. The memory model's verdict on each row that ran is reported too:
none of them should be predicted to OOM.

    python benchmarks/throughput_rank.py [--reference benchmarks/data/verl_megatron_practice] [-o FILE.md]
"""

from __future__ import annotations

import argparse
import csv
import re
from dataclasses import dataclass, replace
from pathlib import Path

from scipy.stats import spearmanr

from autotune import verl
from autotune.candidate import Candidate
from autotune.cluster import Cluster, get_gpu_type
from autotune.estimate import ModelConstants, evaluate
from autotune.estimate.memory import MCORE_013_CALIBRATION, estimate_memory
from autotune.estimate.throughput import DEFAULT_WORKLOAD, VERL_04_EFFICIENCY, estimate_throughput
from autotune.job import Job
from autotune.model import get_model

HERE = Path(__file__).resolve().parent
# The measured tables, copied into this repository from the project's shared reference (SOURCE.txt says from where).
DEFAULT_REF = HERE / "data" / "verl_megatron_practice"
MODEL_NAMES = {
    "qwen2.5 7b math": "qwen2.5-7b",
    "qwen2.5-14b": "qwen2.5-14b",
    "qwen3-14b-base": "qwen3-14b",
    "qwen2.5 32b": "qwen2.5-32b",
    "qwen3-30b": "qwen3-30b-a3b",
    "qwen3-235b": "qwen3-235b-a22b",
}
# Rows whose launch scripts (upstream DAPO_MOE30B/*.sh) set full recompute without saying so in the table.
FULL_RECOMPUTE = {("dapo_moe30b", n) for n in ("8", "10", "11", "12", "13", "14", "15", "16")}
TABLES = ("dapo7b.csv", "dapo14b.csv", "dapo32b.csv", "dapo_moe30b.csv", "dapo_moe235b.csv")


def tokens(text: str) -> int:
    t = text.strip().lower()
    if t.endswith("k"):
        return int(float(t[:-1]) * 1024)
    return int(float(t))


def num(text: str) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


@dataclass
class Row:
    table: str
    number: str
    model: str
    gpu: str
    gpus: int
    cand: Candidate
    job: Job
    step: float | None
    update: float | None
    response_length: float | None
    mfu: float | None = None

    @property
    def ran(self) -> bool:
        """The table reports a measurement (a time or an MFU): the configuration ran."""
        return any(v is not None for v in (self.step, self.update, self.mfu))


def parse_layout(text: str) -> dict[str, int] | None:
    text = text.lower().split()[0] if text.strip() else ""
    if not text or text.startswith(("sp", "fsdp", "all")):
        return None
    out = {"tp": 1, "pp": 1, "cp": 1, "ep": 1}
    for key, val in re.findall(r"(tp|pp|vpp|cp|ep)(\d+)", text):
        out[key] = int(val)
    return out


def read_rows(path: Path) -> list[Row]:
    rows = []
    with path.open() as f:
        for r in csv.DictReader(f):
            if "megatron" not in (r.get("backend") or ""):
                continue
            model_key = (r.get("model") or r.get("mdoel") or "").strip().lower()
            if model_key not in MODEL_NAMES:
                continue
            layout = parse_layout(r["train_parallel"])
            if layout is None:
                continue
            micro_a = r["micro_bs_actor/dynamic_max_token"].strip()
            micro_l = r["micro_bs_logp/dynamic_max_token"].strip()
            dynamic = micro_a.lower().endswith("k")
            params = dict(
                tp=layout["tp"], pp=layout["pp"], vpp=layout.get("vpp"), cp=layout["cp"], ep=layout["ep"],
                rollout_tp=int(r["infer_parallel"].lower().removeprefix("tp")),
                use_dynamic_bsz=dynamic, param_offload=True, optimizer_offload=True, use_fused_kernels=True,
                gpu_memory_utilization=0.6, max_num_batched_tokens=10240,
            )
            other = (r.get("Other") or "") + r["train_parallel"]
            if "full" in other or (path.stem, r["number"]) in FULL_RECOMPUTE:
                params.update(recompute="full", recompute_method="uniform", recompute_num_layers=1)
            elif "selective" in other:
                params.update(recompute="selective")
            if layout["ep"] > 1:
                params.update(etp=1)  # the upstream MoE scripts set expert_tensor_parallel_size=1
            if dynamic:
                params.update(ppo_max_token_len_per_gpu=tokens(micro_a), log_prob_max_token_len_per_gpu=tokens(micro_l))
            elif micro_a not in ("\\", ""):
                params.update(ppo_micro_batch_size_per_gpu=int(micro_a), log_prob_micro_batch_size_per_gpu=int(micro_l))
            else:  # the table does not say (dapo14b, dapo32b): assume dynamic batching of one full sequence
                need = tokens(r["max_prompt_len"]) + tokens(r["max_response_len"])
                params.update(use_dynamic_bsz=True, ppo_max_token_len_per_gpu=need // layout["cp"],
                              log_prob_max_token_len_per_gpu=2 * need)
            rope = "rope_fusion" in other or "all optimization" in other  # the scripts' override
            job = Job.from_mapping({
                **({verl.ROPE_FUSION: True} if rope else {}),
                # verl 0.4-era runs: vLLM eager (no CUDA graphs), that era's default; rows that say otherwise do
                verl.ENFORCE_EAGER: "cuda graph" not in other.lower(),
                verl.USE_V1: False,  # verl 0.4 had no V1 trainer: its rollout was awaited, not polled
                "data.max_prompt_length": tokens(r["max_prompt_len"]),
                "data.max_response_length": tokens(r["max_response_len"]),
                "data.train_batch_size": int(r["bs"]),
                "actor_rollout_ref.actor.ppo_mini_batch_size": int(r["mini_bs"]),
                "actor_rollout_ref.rollout.n": 16,
            }, path.name)
            rows.append(Row(
                path.stem, r["number"], MODEL_NAMES[model_key], r["GPU"].strip().lower(), int(r["num_gpus"]),
                Candidate.from_params(params), job, num(r.get("step")), num(r.get("update_actor")),
                num(r.get("response_length")), num(r.get("MFU")),
            ))
    return rows


def cluster_for(row: Row) -> Cluster:
    gpus_per_node = min(8, row.gpus)
    return Cluster(get_gpu_type(row.gpu), gpus_per_node, row.gpus // gpus_per_node)


def practice_constants(table: str) -> ModelConstants:
    """verl_megatron_practice's tables ran verl 0.4 (VERL_04_EFFICIENCY); the DAPO ones on Megatron-core 0.13 (their
    SOURCE.txt), whose SwiGLU kept 8f, not 10f."""
    constants = ModelConstants(efficiency=VERL_04_EFFICIENCY)
    return replace(constants, calibration=MCORE_013_CALIBRATION) if table.startswith("dapo") else constants


def predict(row: Row) -> tuple[float, float, bool, str]:
    """(predicted step seconds, predicted update seconds, fits, why not)."""
    m = get_model(row.model)
    cl = cluster_for(row)
    wl = DEFAULT_WORKLOAD
    if row.response_length:  # the table says how long the responses were: use it
        wl = replace(wl, response_fraction=row.response_length / row.job.max_response_length)
    constants = practice_constants(row.table)
    mem = estimate_memory(m, cl, row.job, row.cand, constants.calibration)
    t = estimate_throughput(m, cl, row.job, row.cand, mem, wl, constants.efficiency)
    ev = evaluate(m, cl, row.job, row.cand, constants=constants)
    return t.step_time, dict(t.phases)["update_actor"], ev.feasible, ev.prune_reason()


def report(ref: Path) -> str:
    lines = [
        "# Throughput model vs verl_megatron_practice",
        "",
        "Spearman rank correlation between the model's prediction and the measured time (lower time = faster) "
        "over the Megatron rows of each table; the memory model's verdict on every row that ran. Generated by "
        "`python benchmarks/throughput_rank.py`.",
        "",
        "| table | rows with step | rho (step time) | rows with update | rho (update_actor) | rows predicted OOM |",
        "|---|---|---|---|---|---|",
    ]
    detail = ["", "## Rows", "", "| table | # | model | GPUs | layout | measured step s | predicted step s | "
              "measured update s | predicted update s | fits |", "|---|---|---|---|---|---|---|---|---|---|"]
    for name in TABLES:
        path = ref / name
        if not path.exists():
            continue
        rows = read_rows(path)
        preds = [predict(r) for r in rows]
        with_step = [(r.step, p[0]) for r, p in zip(rows, preds, strict=True) if r.step]
        with_upd = [(r.update, p[1]) for r, p in zip(rows, preds, strict=True) if r.update]
        oom = [f"#{r.number}: {p[3]}" for r, p in zip(rows, preds, strict=True) if not p[2]]

        def rho(pairs: list[tuple[float, float]]) -> str:
            if len(pairs) < 3:
                return "n/a (fewer than 3 rows)"
            return f"{spearmanr([a for a, _ in pairs], [b for _, b in pairs]).statistic:.2f}"

        lines.append(f"| {name} | {len(with_step)} | {rho(with_step)} | {len(with_upd)} | {rho(with_upd)} | "
                     f"{len(oom)}{': ' + '; '.join(oom) if oom else ''} |")
        for r, p in zip(rows, preds, strict=True):
            detail.append(
                f"| {name} | {r.number} | {r.model} | {r.gpus}x{r.gpu} | {r.cand.layout()} | {r.step or '-'} | "
                f"{p[0]:.0f} | {r.update or '-'} | {p[1]:.0f} | {'yes' if p[2] else 'NO'} |"
            )
    lines += [
        "",
        "Correlations are over few rows and mix GPU counts (the model predicts per-step seconds for the row's own "
        "GPU count); treat them as a sanity check of the ordering, not a fit. The FSDP rows, the vision-language "
        "table and the Qwen3.5 tflops table are left out (no Megatron text-model step to compare).",
        "",
        "Known gaps: the Qwen3-235B rows use uneven pipeline stages (94 layers over PP=8) and a 16-GPU rollout "
        "across nodes, which the constraints do not allow; the two MoE rows on H20 predicted to OOM ran with DeepEP, "
        "fused permutation and (row 21) Megatron's CPU Adam, which the memory model does not represent: it "
        "over-counts MoE activations there. dapo14b/dapo32b do not give their token budgets: one full sequence "
        "per micro-batch is assumed.",
    ]
    return "\n".join(lines + detail) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reference", type=Path, default=DEFAULT_REF)
    ap.add_argument("-o", "--output", type=Path, default=HERE / "results" / "throughput_rank.md")
    args = ap.parse_args()
    text = report(args.reference)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
