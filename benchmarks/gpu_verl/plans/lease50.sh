#!/usr/bin/env bash
# Calibration campaign, lease 50 (issues 23.2, 23.3), written for the next session. Lease 49 (one H200) ran the 1.5B's
# recompute none / selective / full, each with half the optimizer on the CPU and without it, on one host: full
# recompute cost the update 2.8 s over none with the CPU optimizer and 3.4 s without, the model 3.3 s both. The CPU
# optimizer does not hide full recompute's fixed cost on the 1.5B, so the 7B's ~1 s (lease 48, where the model says
# 4 s) is the 7B's own or its host's: the 7B's pair on one host asks which.
#   One H200 (nvidia-h200): the 7B on one host: the job's pick (rc:sel [core_attn,mlp] dyn24k/96k), full recompute at
#              dyn16k/96k beside it (lease 48's once more), then full recompute at dyn24k/96k if the lease leaves it
#              the time (~450-520 s a trial: the third is rarely started).
#   H200 node of two: lane 0 the same; lane 1 the 3B's full recompute by the CPU optimizer at dyn8k/96k util 0.4 on one
#              host (full and none, each with half the optimizer on the CPU and without): lease 49's question at
#              the next size (~280-320 s a trial).
#   H100 node: lease 41's H100 branch: lane 0 the 1.5B, lane 1 the 3B, one spread study each (asked since lease 41).
# Start with AT_MODEL=qwen2.5-7b AT_MORE_MODELS="" on one H200, AT_MORE_MODELS="qwen2.5-3b" on two (on an H100 node:
# AT_MODEL=qwen2.5-3b AT_MORE_MODELS="qwen2.5-1.5b"), LEASE_S=1600 where the machine counts in full; stage with the
# committed trials out (lease_tree.sh out). Each configuration was checked with a simulated dry run on this job (all
# fit; on two GPUs the lane's host memory share passed).
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh

SEVEN=param_offload=true,$CPU_ADAM05
seven_pair() {
    at qwen2.5-7b c-7b-h45 3 600 --extra-steps 1 \
        --enqueue "$(dyn 24576 98304 0.4),$SEL2,$SEVEN" \
        --enqueue "$(dyn 16384 98304 0.4),$FULL,$SEVEN" \
        --enqueue "$(dyn 24576 98304 0.4),$FULL,$SEVEN"
}
if [ "$GPU_TYPE" = h100 ]; then
    spread_h100 c-1.5b-h47 c-3b-h48
elif [ "$(nvidia-smi -L | grep -c '^GPU')" = 1 ]; then
    seven_pair
else
    lane 0 seven_pair
    lane 1 at qwen2.5-3b c-3b-h49 4 330 --extra-steps 1 \
        --enqueue "$(dyn 8192 98304 0.4),$FULL,$CPU_ADAM05" \
        --enqueue "$(dyn 8192 98304 0.4),$FULL" \
        --enqueue "$(dyn 8192 98304 0.4),$CPU_ADAM05" \
        --enqueue "$(dyn 8192 98304 0.4)"
fi
wait
stamp "plan done"
