#!/usr/bin/env bash
# Calibration campaign, lease 55 (issue 23.3: Spearman per size), written 2026-12-02. The 7B's 24 measured trials are
# the table's leaders, 46.7-60.6 s a step across hosts that run one configuration up to 18 % apart: the model orders
# them at 0.01 (0.24 over configurations), and within each study of one host at 0.75. The 0.5B-3B had spread studies
# (configurations whose predicted steps span 1.4-1.5x on one host, leases 41-42); the 7B's one (lease 48: full
# recompute, micro-batches of 2/8) ran without the pick beside it. This is a wider one on one H200, from the table's
# best:
#   the pick: selective [core_attn,mlp] at dyn24k/96k util 0.3, parameters offloaded, half the optimizer on the CPU
#             (predicted 51.1 s a step at the measured lengths; measured 46.7-54.6 s on six hosts);
#   micro-batches of 1/4 without dynamic batching, no recompute (predicted 68.6 s: 128 update micro-batches of one
#             sequence, micro_batch_of_one_s fitted on the 0.5B-3B, never on a 7B);
#   selective [core_attn,mlp] at dyn4k/8k (predicted 59.0 s: update micro-batches of ~4k tokens, small_budget
#             micro-batches, never on a 7B).
# A 7B trial took 459-584 s cold and 380-497 s warm on one H200; --extra-steps 0 (steps 1-3 only) to hold three in
# a lease: the study starts with 500 s left, and its --deadline launches each next trial only where the longest so far
# ends in time. No CPU AdamW probe (leases 51-53 measured three hosts). Start with AT_MODEL=qwen2.5-7b
# AT_MORE_MODELS="" on one H200, LEASE_S=1600 where the machine counts in full; stage with the committed trials out
# (lease_tree.sh out). On a node of two or an H100 node, by_node's other branches.
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh

seven_spread() {
    at qwen2.5-7b c-7b-h55 3 500 --extra-steps 0 \
        --enqueue "$(dyn 24576 98304 0.3),$SEL2,$CPU_ADAM05,param_offload=true" \
        --enqueue "$(mbs 1 4 0.3),$CPU_ADAM05,param_offload=true" \
        --enqueue "$(dyn 4096 8192 0.3),$SEL2,$CPU_ADAM05,param_offload=true"
}
by_node seven_spread
wait
stamp "plan done"
