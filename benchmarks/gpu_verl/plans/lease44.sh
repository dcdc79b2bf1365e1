#!/usr/bin/env bash
# Calibration campaign, lease 44 (issue 23.3), written for the next session. Lease 43's H200s ran every first pick of
# today (the H200 3B's dyn16k/96k: ok, 5,473.9) and the 7B as a user's study twice more; the 7B's table (Spearman 0.78
# over eight trials on four hosts, its step 3 against its repeat 0.69) has its two leaders, lease 13's micro-batches of
# 4/16 and lease 32's dyn32k/32k, 2% apart, each run on another host. The H100's 1.5B and 3B spreads (0.62 and 0.58
# pooled over hosts) were never run: the last three leases asked for H100s and got H200s.
# Every 3B trial with selective recompute of core_attn alone (rc:sel) had the CPU optimizer on too, and ran its update
# 2-7 s over the model, on every host (benchmarks/gpu_verl/plans/campaign.sh rc_sel_by_cpu_adam): the two apart, on
# one host. Only on the H200: without the CPU optimizer the 3B's dyn8k/96k does not fit an H100 (predicted 87.8 GiB).
#   H100 node: lease 41's H100 branch: lane 0 the 1.5B, lane 1 the 3B, one spread study each.
#   H200 node: lane 0 the 7B's two leaders in one study (one host), steps 1-4; lane 1 the 3B's rc:sel by CPU
#              optimizer. Not two 7B lanes: the model puts each 7B at 107 GiB of the node's 252 GiB host memory,
#              and lease 42's two lanes were killed at 239 GiB with 195 GiB predicted; the 7B with the whole optimizer
#              on the CPU (164 GiB) does not fit a lane's share.
# A 7B trial ~550-590 s (two in a lane), a 1.5B or 3B ~400 s cold, 240-390 s warm. Ask nvidia-h100-x2; start with
# AT_MODEL=qwen2.5-3b AT_MORE_MODELS="qwen2.5-1.5b" on H100s, AT_MODEL=qwen2.5-3b AT_MORE_MODELS="qwen2.5-7b" on
# H200s, LEASE_S=1600 where the machine counts in full; stage with the committed trials out (lease_tree.sh out).
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh

if [ "$GPU_TYPE" = h100 ]; then
    spread_h100 c-1.5b-h25 c-3b-h26
else
    SEVEN=param_offload=true,$CPU_ADAM05
    lane 0 at qwen2.5-7b c-7b-h29 2 600 --extra-steps 1 \
        --enqueue "$(mbs 4 16 0.4),$SEVEN" \
        --enqueue "$(dyn 32768 32768 0.4),$SEL2,$SEVEN"
    lane 1 rc_sel_by_cpu_adam c-3b-h30
fi
wait
stamp "plan done"
