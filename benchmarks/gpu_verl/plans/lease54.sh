#!/usr/bin/env bash
# Calibration campaign, lease 54 (issues 23.2, 23.3), written for the next session. Lease 53 (one H200) ran the 7B
# table's best (selective [core_attn,mlp] dyn24k/96k util 0.3, parameters offloaded, half the optimizer on the CPU) and
# its micro-batches of 2/8 on one host: 51.8 and 59.1 s a step, 14 % apart where the model said 29 %; the GEMMs timed
# at small micro-batches said why (a larger layer's GEMMs reach their rate at fewer tokens) and the model prices that
# since (tokens_half_layer_params): 19 % apart now. The 7B table's other leaders were each run on one host only: no
# recompute at micro-batches of 4/16 (51.7-55.8 s on three hosts; the model 51.2 s, the pick 54.4 s) and full
# recompute at dyn24k/96k (48.2 s on lease 50's fast host, once; the model 57.6 s, its second forward's fixed cost,
# which the 7B pays 0.2 s of). Beside the pick on one host the three order without the hosts between them.
# Every branch first times the host's AdamW and Megatron's hybrid optimizer (cpu_adam_probe, ~55 s).
#   One H200 (nvidia-h200): the pick, then no recompute at 4/16, then full recompute at dyn24k/96k util 0.4. A 7B
#              trial took 512 s cold and 406-417 s warm on lease 52's host, 584 s and 497 s on lease 53's: the study
#              starts with 500 s left, and its --deadline (campaign.sh `at`, since lease 53) launches the third only
#              where the longest of the first two says it ends before the lease does.
#   H200 node of two: the Qwen2.5-14B on both GPUs (TP 2), its study's own first launch and second pick.
#   H100 node: lease 41's H100 branch: lane 0 the 1.5B, lane 1 the 3B, one spread study each (asked since lease 41).
# Start with AT_MODEL=qwen2.5-7b AT_MORE_MODELS="" on one H200, AT_MODEL=qwen2.5-14b on two (on an H100 node:
# AT_MODEL=qwen2.5-3b AT_MORE_MODELS="qwen2.5-1.5b"), LEASE_S=1600 where the machine counts in full; stage with the
# committed trials out (lease_tree.sh out). The three 7B configurations each ran before on one H200 (ok).
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh

cpu_adam_probe
seven_leaders() {
    at qwen2.5-7b c-7b-h54 3 500 --extra-steps 1 \
        --enqueue "$(dyn 24576 98304 0.3),$SEL2,$CPU_ADAM05,param_offload=true" \
        --enqueue "$(mbs 4 16 0.4),$CPU_ADAM05,param_offload=true" \
        --enqueue "$(dyn 24576 98304 0.4),$FULL,$CPU_ADAM05,param_offload=true"
}
by_node seven_leaders
wait
stamp "plan done"
