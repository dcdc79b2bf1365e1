#!/usr/bin/env bash
# Calibration campaign, lease 42 (issue 23.3 and 23.5), written for the next session. Lease 41 measured the model's
# ordering where the host is the same on the H200 (0.90 over the 0.5B's five, 1.00 over the 1.5B's four); the H100's
# 1.5B and 3B landscapes (Spearman 0.62 and 0.58 pooled over hosts, step 3 against its repeat 0.65 and 0.94) have no
# such study yet, and the 7B's own first pick (rc:sel core_attn,mlp dyn24k/96k util0.4, parameters offloaded, half the
# optimizer on the CPU: at the limit at the worst case since lease 40, never measured) has not run.
#   H100 node: lease 41's H100 branch: lane 0 the 1.5B, lane 1 the 3B, one spread study each.
#   H200 node: lane 0 the 7B as a user's study runs it (the model's own first launch, then its sampler), steps 1-3;
#              lane 1 the 3B's spread on one host (the H200 3B pools eight hosts: 0.77, its repeat 0.92).
# A 7B trial ~450-600 s (two in a lane), a 3B ~400 s cold, 220-310 s warm. Ask nvidia-h100-x2; start with
# AT_MODEL=qwen2.5-3b AT_MORE_MODELS="qwen2.5-1.5b" on H100s, AT_MODEL=qwen2.5-3b AT_MORE_MODELS="qwen2.5-7b" on H200s,
# LEASE_S=1600 where the machine counts in full; stage with the committed trials out (lease_tree.sh out).
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh

if [ "$GPU_TYPE" = h100 ]; then
    spread_h100 c-1.5b-h21 c-3b-h22
else
    lane 0 at qwen2.5-7b c-7b-h23 2 600 --extra-steps 0
    lane 1 at qwen2.5-3b c-3b-h24 5 300 --extra-steps 1 \
        --enqueue "$(dyn 12288 98304 0.4)" \
        --enqueue "$(mbs 2 8 0.4),optimizer_offload=true" \
        --enqueue "$(dyn 16384 98304 0.4),$FULL,$CPU_ADAM1" \
        --enqueue "$(dyn 16384 98304 0.4),$SEL2" \
        --enqueue "$(dyn 4096 8192 0.4),optimizer_offload=true"
fi
wait
stamp "plan done"
