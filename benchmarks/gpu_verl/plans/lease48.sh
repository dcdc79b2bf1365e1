#!/usr/bin/env bash
# Calibration campaign, lease 48 (issues 23.2, 23.3), written for the next session. Lease 47's two-lane H200 node ran
# the user's 7B example at the job's 512-token prompts: its own first pick (rc:sel core_attn,mlp dyn24k/96k, params
# offloaded, half the optimizer on the CPU), never run before, measured 2,987.8 tokens/s/GPU (121.7 GiB on NVML against
# 118.1 predicted), the 7B table's best; dyn32k/96k beside it 2,798.2. Pooled over hosts the 7B's twelve are at 0.30
# (held out): the model puts eleven of them within 2 % of each other, a tie that one step's noise and a 2 s poll of gen
# order. The 7B has no spread of knobs on one host yet: full recompute and micro-batches without dynamic batching never
# ran on it (the whole optimizer on the CPU needs 164 GiB of host memory, more than a lane's half of this node).
#   H100 node: lease 41's H100 branch: lane 0 the 1.5B, lane 1 the 3B, one spread study each (asked since lease 41).
#   H200 node: lane 0 a 7B spread on one host: full recompute at dyn16k/96k (predicted 7 % slower than the pick),
#              micro-batches of 2/8 (33 % slower), then the job's pick (dyn24k/96k) beside them (~520 s cold, ~450-560 s
#              warm with the extra step: the third only if the lease leaves it the time); lane 1 the H200 1.5B's spread
#              of knobs never run there on one host: its first pick (dyn32k/96k util 0.4, not launched in lease 46),
#              a 4k budget, micro-batches of 2/8, micro-batches of 4/8 without fused kernels, core_attn,mlp recompute
#              at dyn16k/32k and full recompute at the same (predicted steps spanning 1.5x).
# Ask nvidia-h200-x2; start with AT_MODEL=qwen2.5-7b AT_MORE_MODELS="qwen2.5-1.5b" (on an H100 node: AT_MODEL=qwen2.5-3b
# AT_MORE_MODELS="qwen2.5-1.5b"), LEASE_S=1600 where the machine counts in full; stage with the committed trials out
# (lease_tree.sh out). Each configuration was checked with a simulated dry run on this job (all fit; the lane's host
# memory share passed).
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh

if [ "$GPU_TYPE" = h100 ]; then
    spread_h100 c-1.5b-h41 c-3b-h42
else
    SEVEN=param_offload=true,$CPU_ADAM05
    lane 0 at qwen2.5-7b c-7b-h43 3 600 --extra-steps 1 \
        --enqueue "$(dyn 16384 98304 0.4),$FULL,$SEVEN" \
        --enqueue "$(mbs 2 8 0.4),$SEL2,$SEVEN" \
        --enqueue "$(dyn 24576 98304 0.4),$SEL2,$SEVEN"
    lane 1 at qwen2.5-1.5b c-1.5b-h44 6 260 --extra-steps 1 \
        --enqueue "$(dyn 32768 98304 0.4)" \
        --enqueue "$(dyn 4096 8192 0.4)" \
        --enqueue "$(mbs 2 8 0.4)" \
        --enqueue "$MICRO_05,use_fused_kernels=false" \
        --enqueue "$(dyn 16384 32768 0.5),$SEL2" \
        --enqueue "$(dyn 16384 32768 0.5),$FULL"
fi
wait
stamp "plan done"
