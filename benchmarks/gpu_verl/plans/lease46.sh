#!/usr/bin/env bash
# Calibration campaign, lease 46 (issue 23.3), written for the next session. Lease 45's H200s tested selective
# recompute's checkpoint where it was not fitted (1.2 ms a layer and micro-batch since, refitted on ten pairs) and ran
# each lane's four trials in 1,016-1,122 s (213-345 s a trial, one extra step): a lane holds five. The H200's 0.5B
# (0.59 over twenty-two) and 1.5B (0.64 over thirty-five) are the sizes furthest from Spearman 0.8, their trials mostly
# budgets the model calls a tie. Each lane runs one size's spread on one host, configurations whose predicted steps
# span ~2x (micro-batches of one sequence, full recompute, the passes without fused kernels) and an offload pair, on
# knobs those tables lack on an H200: the 0.5B never ran micro-batches of one or an offload pair there, the 1.5B never
# ran its offload pair on one host with its others.
#   H100 node: lease 41's H100 branch: lane 0 the 1.5B, lane 1 the 3B, one spread study each (asked since lease 41).
#   H200 node: lane 0 the 0.5B's spread, lane 1 the 1.5B's; a sixth trial each where time is left (lease 45's lanes
#   ended 377-443 s before the deadline): each size's own first pick, dyn32k/96k util 0.4, run on other hosts before,
#   which ties this host to theirs.
# Ask nvidia-h200-x2 (no H100 kind was lent to lease 45); start with AT_MODEL=qwen2.5-1.5b AT_MORE_MODELS="qwen2.5-0.5b"
# (on an H100 node: AT_MODEL=qwen2.5-3b AT_MORE_MODELS="qwen2.5-1.5b"), LEASE_S=1600 where the machine counts in full;
# stage with the committed trials out (lease_tree.sh out).
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh

OFFLOAD=param_offload=true,optimizer_offload=true
if [ "$GPU_TYPE" = h100 ]; then
    spread_h100 c-1.5b-h31 c-3b-h32
else
    lane 0 at qwen2.5-0.5b c-0.5b-h35 6 260 --extra-steps 1 \
        --enqueue "$(dyn 16384 32768 0.5)" \
        --enqueue "$(dyn 16384 32768 0.5),$OFFLOAD" \
        --enqueue "$(mbs 1 4 0.5)" \
        --enqueue "$(dyn 8192 16384 0.5),$FULL" \
        --enqueue "$MICRO_05" \
        --enqueue "$(dyn 32768 98304 0.4)"
    lane 1 at qwen2.5-1.5b c-1.5b-h36 6 300 --extra-steps 1 \
        --enqueue "$(dyn 12288 32768 0.5)" \
        --enqueue "$(dyn 12288 32768 0.5),$OFFLOAD" \
        --enqueue "$(mbs 1 4 0.5)" \
        --enqueue "$(dyn 8192 16384 0.5),$FULL" \
        --enqueue "$(dyn 16384 32768 0.4),$CPU_ADAM1" \
        --enqueue "$(dyn 32768 98304 0.4)"
fi
wait
stamp "plan done"
