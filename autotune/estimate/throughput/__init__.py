"""Analytic step time per phase of a verl GRPO step, and tokens/s/GPU.

It ranks candidates, seeds the study and plans GPU budgets. Lengths: the Setup's where it knows them (measured
in earlier trials, `--response-length`, the job's data), else typical shares of the job's maxima (Workload).
Phases follow verl's timing metrics: gen (vLLM decode: per step the weights read and a cost per sequence in the batch,
plus vLLM's own host overhead, eager, or with CUDA graphs hidden under the GPU's work where that is longer, over at
least as many steps as the longest response), old_log_prob and ref (the forward's GPU work: for verl 0.9.1 each layer's
GEMMs, attention and elementwise traffic as a GPU timed them, benchmarks/forward_pass.py; plus verl 0.9.1's engine cost
per pass and per micro-batch), update_actor (the same forward and backward, TP/CP/DP communication, MoE all-to-all,
pipeline bubble, recompute and selective recompute's checkpoint per layer and micro-batch, the engine's cost per pass,
the CPU optimizer per mini-batch), update_weights (reshard: local on one unsharded GPU). Error against measured
tables: benchmarks/step_time_error.py (the band shown with every prediction); rank correlation:
benchmarks/throughput_rank.py.

The constants, each with where it was fitted, are in `_constants.py`; the phases' arithmetic in `_step.py`.
"""

from autotune.estimate.throughput._constants import (
    DEFAULT_EFFICIENCY,
    DEFAULT_WORKLOAD,
    REFERENCE_TFLOPS,
    SMALL_MICRO_BATCH_COSTS,
    SMALL_MICRO_BATCH_TOKENS,
    VERL_04_EFFICIENCY,
    Efficiency,
    Workload,
)
from autotune.estimate.throughput._step import (
    ThroughputEstimate,
    active_params,
    attention_flops,
    checkpointed_layers,
    decode_step_seconds,
    decode_weights,
    elementwise_seconds,
    error_band,
    estimate_throughput,
    layer_gemm_params,
    micro_batches_of_one,
    moe_dispatch_s,
    reshard_seconds,
    small_micro_batch_kind,
    small_micro_batch_seconds,
    small_micro_batches,
    step_error_percent,
    step_lengths,
    step_time_label,
    unfused_logits,
    unfused_logits_by_phase,
)

__all__ = [
    "DEFAULT_EFFICIENCY",
    "DEFAULT_WORKLOAD",
    "Efficiency",
    "REFERENCE_TFLOPS",
    "SMALL_MICRO_BATCH_COSTS",
    "SMALL_MICRO_BATCH_TOKENS",
    "ThroughputEstimate",
    "VERL_04_EFFICIENCY",
    "Workload",
    "active_params",
    "attention_flops",
    "checkpointed_layers",
    "decode_step_seconds",
    "decode_weights",
    "elementwise_seconds",
    "error_band",
    "estimate_throughput",
    "layer_gemm_params",
    "micro_batches_of_one",
    "moe_dispatch_s",
    "reshard_seconds",
    "small_micro_batch_kind",
    "small_micro_batch_seconds",
    "small_micro_batches",
    "step_error_percent",
    "step_lengths",
    "step_time_label",
    "unfused_logits",
    "unfused_logits_by_phase",
]
