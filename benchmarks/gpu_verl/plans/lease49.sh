#!/usr/bin/env bash
# Calibration campaign, lease 49 (issues 23.2, 23.3), written for the next session. Lease 48's two-lane H200 node ran
# the 7B's first spread on one host: full recompute at dyn16k/96k measured 2,997.7 tokens/s/GPU, the 7B's best, 0.3 %
# over the job's own pick of lease 47 (selective recompute [core_attn,mlp] at dyn24k/96k, another node), where the model
# puts full recompute 7 % slower: its update cost ~1 s over selective recompute's, the model says 4 s (one log-prob
# pass's fixed cost, 2.27 s, and the second forward's FLOPs). Every full-recompute update the fixed cost was fitted on
# ran without the CPU optimizer; the 7B's runs with half of it on the CPU. The lease asks which.
#   H100 node: lease 41's H100 branch: lane 0 the 1.5B, lane 1 the 3B, one spread study each (asked since lease 41).
#   H200 node: lane 0 the 7B on one host: the job's pick (rc:sel [core_attn,mlp] dyn24k/96k), full recompute at
#              dyn16k/96k beside it (lease 48's once more), then full recompute at dyn24k/96k if the lease leaves it
#              the time (~450-520 s a trial); lane 1 the 1.5B's recompute by the CPU optimizer at dyn16k/32k util 0.5
#              on one host: full, selective [core_attn,mlp] and none with half the optimizer on the CPU, then full and
#              selective without it (lease 48's #5 and #4 once more): whether the CPU optimizer hides full
#              recompute's fixed cost at a size where a trial is ~200-250 s.
# On one H200 (nvidia-h200): AT_MODEL=qwen2.5-1.5b AT_MORE_MODELS="", the 1.5B's six alone.
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
elif [ "$(nvidia-smi -L | grep -c '^GPU')" = 1 ]; then
    # One H200 (session 53: only nvidia-h200 was lent): the 1.5B's question alone, as pairs by the CPU optimizer so
    # that a cut lease keeps whole pairs, and no recompute without it to close the 3 x 2 grid.
    at qwen2.5-1.5b c-1.5b-h46 6 260 --extra-steps 1 \
        --enqueue "$(dyn 16384 32768 0.5),$FULL,$CPU_ADAM05" \
        --enqueue "$(dyn 16384 32768 0.5),$FULL" \
        --enqueue "$(dyn 16384 32768 0.5),$SEL2,$CPU_ADAM05" \
        --enqueue "$(dyn 16384 32768 0.5),$SEL2" \
        --enqueue "$(dyn 16384 32768 0.5),$CPU_ADAM05" \
        --enqueue "$(dyn 16384 32768 0.5)"
else
    SEVEN=param_offload=true,$CPU_ADAM05
    lane 0 at qwen2.5-7b c-7b-h45 3 600 --extra-steps 1 \
        --enqueue "$(dyn 24576 98304 0.4),$SEL2,$SEVEN" \
        --enqueue "$(dyn 16384 98304 0.4),$FULL,$SEVEN" \
        --enqueue "$(dyn 24576 98304 0.4),$FULL,$SEVEN"
    lane 1 at qwen2.5-1.5b c-1.5b-h46 5 260 --extra-steps 1 \
        --enqueue "$(dyn 16384 32768 0.5),$FULL,$CPU_ADAM05" \
        --enqueue "$(dyn 16384 32768 0.5),$SEL2,$CPU_ADAM05" \
        --enqueue "$(dyn 16384 32768 0.5),$CPU_ADAM05" \
        --enqueue "$(dyn 16384 32768 0.5),$FULL" \
        --enqueue "$(dyn 16384 32768 0.5),$SEL2"
fi
wait
stamp "plan done"
