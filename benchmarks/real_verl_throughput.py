"""The throughput model against the one real verl 0.9.1 GRPO run it has met: predicted vs measured, before and after.

The run (2026-11-23, one H100, ../shared/gpu-verl/: make_tiny.py, job_gpu.yaml, verl_cmd.sh): a random-weight
2-layer Qwen2 (hidden 256, vocab 136), 8 prompts x 4 responses, max 128 + 128 tokens, vLLM 0.24 with CUDA graphs
(verl 0.9.1's default), Megatron actor. What was measured of it: perf/throughput at step 3 and the step time (the
console timeline: steps 1-3 ended 273/277/281 s after launch); memory 59.3 GiB (NVML). No per-phase timing and no
response length were kept, so the lengths below are inferred (see RESPONSE_MEAN).

"Before" is the model as it was (typical lengths, eager decode overhead, 3.0 s fixed cost): reproduced here with
the same functions and the old constants, and checked against the 256 tokens/s/GPU it predicted on the device.

    python -m benchmarks.real_verl_throughput   # writes benchmarks/results/real_verl_throughput.md
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from autotune import verl
from autotune.candidate import Candidate
from autotune.cluster import Cluster, get_gpu_type
from autotune.estimate import ModelConstants, evaluate
from autotune.estimate.lengths import Lengths, at_step
from autotune.estimate.throughput import DEFAULT_EFFICIENCY, ThroughputEstimate
from autotune.job import Job
from autotune.model import ModelArch, from_hf_config

HERE = Path(__file__).resolve().parent

# make_tiny.py's Qwen2Config (vocab = its word-level tokenizer's 136 tokens).
TINY_CONFIG = {
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 256, "intermediate_size": 688,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 1024,
    "tie_word_embeddings": True, "vocab_size": 136,
}
# job_gpu.yaml without its paths.
JOB = {
    verl.TRAIN_BATCH_SIZE: 8, verl.MAX_PROMPT_LENGTH: 128, verl.MAX_RESPONSE_LENGTH: 128,
    verl.PPO_MINI_BATCH_SIZE: 8, verl.ROLLOUT_N: 4, verl.USE_KL_LOSS: False, verl.USE_KL_IN_REWARD: False,
}
# verl_cmd.sh's tuned keys (autotune's own trial 0 differed in dynamic batching and gpu_memory_utilization, which
# change nothing here: a 2-layer model's update and log-prob passes take milliseconds).
PARAMS = {
    "tp": 1, "pp": 1, "cp": 1, "ep": 1, "rollout_tp": 1, "use_dynamic_bsz": False,
    "ppo_micro_batch_size_per_gpu": 4, "log_prob_micro_batch_size_per_gpu": 4, "gpu_memory_utilization": 0.4,
    "max_num_batched_tokens": 8192, "use_fused_kernels": False, "param_offload": False, "optimizer_offload": False,
}

MEASURED_THROUGHPUT = 982.0  # perf/throughput at step 3, tokens/s/GPU
MEASURED_STEP_S = 4.0  # 281 - 277 s on the console timeline (whole seconds: +-0.5 s each end)
PREDICTED_ON_DEVICE = 256.0  # what autotune's model said for the trial on the device
# Prompt tokens of the run's parquet under its tokenizer and chat template (lengths.prompt_lengths_from_data;
# tests/test_real_verl_throughput.py re-derives them from the same helpers).
PROMPT_MEAN, PROMPT_MAX = 27.34375, 28.0
# Inferred, not measured: verl's throughput is tokens / (step time x GPUs), so a step carried 982 x 4.0 = 3928
# tokens over 32 sequences, 122.8 each, of which 27.3 prompt: a mean response of ~95 tokens (81-112 over the
# timeline's +-0.5 s). Random weights sample near-uniformly over 136 tokens with one EOS: an expected mean of
# 136 x (1 - (135/136)^128) = 83 and the longest at the 128 cap, which agrees within that resolution.
RESPONSE_MEAN = MEASURED_THROUGHPUT * MEASURED_STEP_S / (JOB[verl.TRAIN_BATCH_SIZE] * JOB[verl.ROLLOUT_N]) - PROMPT_MEAN
BAND = 0.15  # the test's band around 982: the step time's own +-0.5 s of 4 s, rounded up

# The constants the model had before this run (eager decode overhead for every job, added to the GPU's work; 3.0 s
# fixed cost; no fixed engine pass costs, the verl 0.4-era efficiencies and weight sync, which came later).
BEFORE_EFFICIENCY = replace(DEFAULT_EFFICIENCY, fixed_step_s=3.0,
                            decode_step_overhead_graph_s=DEFAULT_EFFICIENCY.decode_step_overhead_s,
                            train=0.9, forward=0.6, logprob_pass_s=0.0, update_pass_s=0.0, reshard_local_s=1.0,
                            reshard_local_gbps=4.0, micro_batch_of_one_s=0.0, small_micro_batch_layer_s=0.0,
                            small_budget_micro_batch_layer_s=0.0, logprob_micro_batch_s=0.0, decode_overlap=False,
                            tokens_half_layer_params=0.0)


def model() -> ModelArch:
    return from_hf_config(TINY_CONFIG, "tiny-qwen2")


def cluster() -> Cluster:
    return Cluster(get_gpu_type("h100"), 1, 1)


def job(extra: dict | None = None) -> Job:
    return Job.from_mapping({**JOB, **(extra or {})}, "job_gpu.yaml")


def candidate() -> Candidate:
    return Candidate.from_params(PARAMS)


def prompts() -> tuple[float, float, str]:
    return PROMPT_MEAN, PROMPT_MAX, "prompt lengths of the run's train.parquet (its tokenizer and chat template)"


def predict(lengths: Lengths | None, before: bool = False) -> ThroughputEstimate:
    consts = ModelConstants(efficiency=BEFORE_EFFICIENCY) if before else ModelConstants()
    # the model before this run did not know verl's poll of the rollout either
    ev = evaluate(model(), cluster(), job({verl.USE_V1: False} if before else None), candidate(), lengths=lengths,
                  constants=consts)
    assert ev.throughput is not None, ev.prune_reason()
    return ev.throughput


def cases() -> list[tuple[str, Lengths | None, bool]]:
    """(what the model knows, lengths, old model?) in the order the report shows them."""
    j = job()
    return [
        ("before: typical lengths (18% of max responses), eager decode, 3.0 s fixed (what the device run predicted)",
         None, True),
        ("the lengths fix alone: inferred lengths, old constants", at_step(j, RESPONSE_MEAN, prompts()), True),
        ("after: nothing known (no data, no measurement): typical lengths", None, False),
        ("after: prompts from the job's data (a study's first trial)", at_step(j, prompts=prompts()), False),
        (f"after: prompts from data + mean response {RESPONSE_MEAN:.0f} (a study after one measured trial, or "
         "`--response-length 95`)", at_step(j, RESPONSE_MEAN, prompts()), False),
        ("after: prompts from data + every response at 128 (the cap)", at_step(j, 128, prompts()), False),
    ]


def report() -> str:
    phases = ("gen", "old_log_prob", "update_actor", "update_weights", "adv")
    lines = [
        "# The throughput model vs the real verl 0.9.1 run",
        "",
        "Generated by `python -m benchmarks.real_verl_throughput`. The run: random-weight 2-layer Qwen2 (hidden 256, "
        "vocab 136) on 1 x H100, GRPO 8 prompts x 4, max 128 + 128 tokens, Megatron actor, vLLM 0.24 with CUDA "
        "graphs (verl 0.9.1's default), `../shared/gpu-verl/` (make_tiny.py, job_gpu.yaml, verl_cmd.sh). Measured: "
        f"**{MEASURED_THROUGHPUT:.0f} tokens/s/GPU** at step 3, **step ~{MEASURED_STEP_S:.0f} s** (steps 1-3 ended "
        "273/277/281 s after launch, whole seconds), memory 59.3 GiB (predicted 60.0). Not kept: per-phase times "
        "and response lengths, so only the step and the throughput can be compared.",
        "",
        f"Lengths: prompts {PROMPT_MEAN:.1f} tokens (the run's parquet, its tokenizer); mean response "
        f"**{RESPONSE_MEAN:.0f} inferred** from verl's own formula (throughput x step time = tokens per step: "
        f"{MEASURED_THROUGHPUT:.0f} x {MEASURED_STEP_S:.0f} = {MEASURED_THROUGHPUT * MEASURED_STEP_S:.0f} tokens "
        "over 32 sequences), 81-112 over the timeline's resolution; random weights sampling near-uniformly over 136 "
        "tokens with one EOS give 83 expected and the longest at the 128 cap. Responses all at the cap would make "
        "the step 5.0 s, which the 4-s timeline rules out.",
        "",
        "| what the model knows | tokens/step | gen | old_log_prob | update_actor | update_weights | fixed (adv) "
        "| step s | tokens/s/GPU | vs measured |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for what, ln, before in cases():
        t = predict(ln, before)
        ph = dict(t.phases)
        cells = " | ".join(f"{ph.get(p, 0.0):.2f}" for p in phases)
        lines.append(f"| {what} | {t.tokens_per_step:.0f} | {cells} | {t.step_time:.2f} | {t.throughput:.0f} | "
                     f"{100 * (t.throughput / MEASURED_THROUGHPUT - 1):+.0f}% |")
    lines.append(f"| **measured** | ~{MEASURED_THROUGHPUT * MEASURED_STEP_S:.0f} (inferred) | - | - | - | - | - | "
                 f"~{MEASURED_STEP_S:.1f} | **{MEASURED_THROUGHPUT:.0f}** | |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--output", type=Path, default=HERE / "results" / "real_verl_throughput.md")
    args = ap.parse_args()
    text = report()
    head = args.output.read_text().split("\n## ", 1) if args.output.exists() else [""]
    # The hand-written sections below the generated table (what changed, the tables before/after) are kept.
    tail = "\n## " + head[1] if len(head) > 1 else ""
    args.output.write_text(text + tail)
    print(text)


if __name__ == "__main__":
    main()
