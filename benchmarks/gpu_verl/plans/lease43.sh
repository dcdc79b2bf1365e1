#!/usr/bin/env bash
# Calibration campaign, lease 43 (issues 23.3 and 23.5), written for the next session. Lease 42's H200s ran the 7B's
# own first pick (dyn32k/96k, ok: 2,615.9) and three of the 3B's spread; a 7B and a 3B trial were killed at once by
# Ray's memory monitor for the node (two lanes, each counting the whole host: lanes now pass their share,
# --host-memory). At its data's prompts (161 tokens, 243 at most) today's model launches dyn16k/96k util0.4 first on
# the H200 3B job, never measured (134.3 GiB of 140.4 at the job's 512-token prompts, at the limit; safe at the
# data's): benchmarks/results/first_launch.md.
#   H100 node: lease 41's H100 branch (never run): lane 0 the 1.5B, lane 1 the 3B, one spread study each.
#   H200 node: lane 0 the 3B as a user's study runs it (the model's own first launch, then what lease 42's spread did
#              not run); lane 1 the 7B as a user's study, one extra step (the noise of its pick, measured twice).
# A 7B trial ~550 s (two in a lane), a 3B ~400 s cold, 290-390 s warm. Ask nvidia-h100-x2; start with
# AT_MODEL=qwen2.5-3b AT_MORE_MODELS="qwen2.5-1.5b" on H100s, AT_MODEL=qwen2.5-3b AT_MORE_MODELS="qwen2.5-7b" on H200s,
# LEASE_S=1600 where the machine counts in full; stage with the committed trials out (lease_tree.sh out).
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh

if [ "$GPU_TYPE" = h100 ]; then
    spread_h100 c-1.5b-h25 c-3b-h26
else
    # the model's own first launch (nothing enqueued), then two of lease 42's spread in the same study
    three_b() {
        at qwen2.5-3b c-3b-h27 1 300 --extra-steps 1
        at qwen2.5-3b c-3b-h27 +2 300 --extra-steps 1 \
            --enqueue "$(dyn 4096 8192 0.4),optimizer_offload=true" \
            --enqueue "$(dyn 16384 98304 0.4),$FULL,$CPU_ADAM1"
    }
    lane 0 three_b
    lane 1 at qwen2.5-7b c-7b-h28 2 600 --extra-steps 1
fi
wait
stamp "plan done"
