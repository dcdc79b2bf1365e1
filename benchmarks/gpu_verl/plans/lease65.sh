#!/usr/bin/env bash
# Calibration campaign, lease 65 (issue 23.3, 23.5), written 2026-12-06 (thirty-ninth session) for the next session,
# by the workload set up.
# With AT_MODEL=qwen2.5-7b (an H200: ask for `nvidia-h200`): lease 64's 7B branch, never run: the 7B table's replayed
# first launch (selective [core_attn,mlp] at dyn24k/96k util 0.3, half the optimizer on the CPU) and its best (full
# recompute at dyn24k/96k util 0.4, parameters offloaded: lease 50's 3,153.3, run once) on one host, the first launch
# first (the cold trial), steps 1-3 only: about 1,100 s of lease.
# With AT_MODEL=qwen2.5-0.5b (an H200 with too little budget left for the 7B's two trials): the H200 0.5B table's
# first launch (dyn64k/96k util 0.5) and its best (dyn32k/96k util 0.5 with max_num_batched_tokens 16384) on one
# host, then the first launch again warm in a second study.
# With AT_MODEL=qwen2.5-1.5b (an H100): lease 64's host ran full recompute at dyn8k/16k without fused kernels in 20.1
# s a step (update 9.7 s), lease 18's in 28.4 s (update 14.4 s), the model says 27.2 s; its micro-batches of 4/8
# without fused kernels too ran their log-prob pass 1.3 s under the model. Each with and without verl's fused kernels
# on one host prices unfused_logit_ps from one host's pairs, not from medians over hosts: full recompute fused first
# (the cold trial), then without, the micro-batches without then with; a second study re-runs full recompute without.
# Either: AT_MORE_MODELS="", LEASE_S as the budget holds; stage with the committed trials out (lease_tree.sh out), and
# on the setup call `mkdir -p /root/smoke && touch /root/smoke/importtime.txt` first.
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh

if [ -e /root/work-qwen2.5-7b ]; then
    pair_7b c-7b-h65
elif [ -e /root/work-qwen2.5-0.5b ]; then
    pair_h200_05b c-0.5b-h65 c-0.5b-h65b
else
    fused_pairs qwen2.5-1.5b c-1.5b-h65 c-1.5b-h65b 380 250 "$FULL_RC_05" "$MICRO_05" "$FULL_RC_05"
fi
stamp "plan done"
