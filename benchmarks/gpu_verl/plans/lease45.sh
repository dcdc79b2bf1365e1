#!/usr/bin/env bash
# Calibration campaign, lease 45 (issue 23.3), written for the next session. Lease 44's H200s ran the 3B's selective
# recompute (core_attn) by the CPU optimizer two by two on one host: the checkpoint, not the CPU optimizer, is what the
# rc:sel updates paid beyond their FLOPs, now priced per layer and update micro-batch (Efficiency.selective_checkpoint_s,
# 1.6 ms, fitted on six pairs: four of the 3B at an 8k budget, two of the 1.5B's core_attn,mlp at 12k). This lease tests
# the price where it was not fitted, each pair on one host: the 3B at a 16k budget (10 micro-batches a step: the model
# puts rc:sel's update +0.8 s over none's, at 8k +1.3 s), and the 1.5B at 8k and 32k budgets (28 layers: +1.0 and
# +0.4 s; 8k: the H200 1.5B table's best, dyn8k/16k util0.5). Without the pairs the H200 1.5B's ordering (0.67 pooled) cannot be told from a
# host's noise. The H100's 1.5B and 3B spreads (0.63 and 0.62 pooled over hosts) were asked for since lease 41; four
# leases got H200s instead.
#   H100 node: lease 41's H100 branch: lane 0 the 1.5B, lane 1 the 3B, one spread study each.
#   H200 node: lane 0 the 1.5B's pairs, lane 1 the 3B's pairs and lease 44's unrun fifth (core_attn,mlp at 8k).
# A 3B trial ~410 s cold, 280-330 s warm; a 1.5B ~390 s cold, 250-330 s warm. Ask nvidia-h100-x2; start with
# AT_MODEL=qwen2.5-3b AT_MORE_MODELS="qwen2.5-1.5b" on either, LEASE_S=1600 where the machine counts in full; stage with
# the committed trials out (lease_tree.sh out).
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh

if [ "$GPU_TYPE" = h100 ]; then
    spread_h100 c-1.5b-h31 c-3b-h32
else
    lane 0 at qwen2.5-1.5b c-1.5b-h33 4 300 --extra-steps 1 \
        --enqueue "$(dyn 8192 16384 0.5),$SEL1" \
        --enqueue "$(dyn 8192 16384 0.5)" \
        --enqueue "$(dyn 32768 98304 0.4),$SEL1" \
        --enqueue "$(dyn 32768 98304 0.4)"
    lane 1 at qwen2.5-3b c-3b-h34 4 330 --extra-steps 1 \
        --enqueue "$(dyn 16384 98304 0.4),$SEL1" \
        --enqueue "$(dyn 16384 98304 0.4)" \
        --enqueue "$(dyn 8192 98304 0.4),$SEL2" \
        --enqueue "$(dyn 16384 98304 0.4),$SEL2"
fi
wait
stamp "plan done"
