#!/usr/bin/env bash
# Calibration campaign, lease 47 (issues 23.2, 23.3, 23.5), written for the next session. Lease 46's two-lane H200 node
# ran the 0.5B's and the 1.5B's spreads on one host each: within its study the model orders the 1.5B's five at 0.90
# and the 0.5B's six at 0.54 (0.90 without its lane's cold first trial, whose update ran 2x at steps 2-3); pooled over
# hosts the H200's 0.5B is at 0.60 (twenty-eight) and its 1.5B at 0.67 (forty).
# The user's own example, `autotune run --model qwen2.5-7b --backend verl` on one H200, launches first, at the job's
# 512-token prompts, selective recompute (core_attn,mlp) at dyn24k/96k with the parameters and half the optimizer
# offloaded: never measured (every 7B run so far was at dyn32k/96k, the pick at the data's 161-token prompts, which the
# model puts 0.1% faster and at the memory limit, 138.2 of 140.4 GiB). It is also where the 7B's pick goes if
# core_attn's recompute stops saving the attention output in the memory model (lease 45's pairs: it does not).
#   H100 node: lease 41's H100 branch: lane 0 the 1.5B, lane 1 the 3B, one spread study each (asked since lease 41).
#   H200 node: lane 0 the 7B's first pick at the job's prompts, then dyn32k/96k beside it on one host (two 7B trials,
#              ~600 s cold and ~450 s warm with the extra step); lane 1 a 0.5B spread on one host: its first pick
#              (dyn32k/96k util 0.4, which ties this host to the others), core_attn,mlp recompute at dyn16k/32k (never
#              run on the 0.5B), the replay's pick dyn64k/96k util 0.5, lease 46's cold outlier warm (dyn16k/32k util
#              0.5), micro-batches of 2 and the CPU optimizer (lease 41's, on this host).
# Ask nvidia-h200-x2; start with AT_MODEL=qwen2.5-7b AT_MORE_MODELS="qwen2.5-0.5b" (on an H100 node: AT_MODEL=qwen2.5-3b
# AT_MORE_MODELS="qwen2.5-1.5b"), LEASE_S=1600 where the machine counts in full; stage with the committed trials out
# (lease_tree.sh out).
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh

if [ "$GPU_TYPE" = h100 ]; then
    spread_h100 c-1.5b-h37 c-3b-h38
else
    SEVEN=param_offload=true,$CPU_ADAM05
    lane 0 at qwen2.5-7b c-7b-h39 2 600 --extra-steps 1 \
        --enqueue "$(dyn 24576 98304 0.4),$SEL2,$SEVEN" \
        --enqueue "$(dyn 32768 98304 0.4),$SEL2,$SEVEN"
    lane 1 at qwen2.5-0.5b c-0.5b-h40 6 260 --extra-steps 1 \
        --enqueue "$(dyn 32768 98304 0.4)" \
        --enqueue "$(dyn 16384 32768 0.5),$SEL2" \
        --enqueue "$(dyn 65536 98304 0.5)" \
        --enqueue "$(dyn 16384 32768 0.5)" \
        --enqueue "$(mbs 2 8 0.5)" \
        --enqueue "$(dyn 16384 32768 0.4),$CPU_ADAM1"
fi
wait
stamp "plan done"
