#!/usr/bin/env bash
# Calibration campaign, lease 60 (issues 23.5 and 24.3), written 2026-12-06 for the next session, by the GPU lent.
# On one H100: the 1.5B's first launch measured cold and warm on one host. Lease 59's cold first trial ran it with
# step 3's update at 15.2 s against 7.7 s at step 2: a torch.compile recompile in the step (the worker's backward
# warning came back there; trial_cost.md "Steps that recompiled": 32 of 62 studies' first trials recompiled in a step
# from 2 on, 7 of 138 later ones). Study c-1.5b-h60 runs it first (cold), then full recompute at util 0.5 (lease 59's
# fastest) and the CPU optimizer (its second); study c-1.5b-h60w, on the caches the first warmed (one workdir), runs
# the first launch again, warm: a study never launches one configuration twice. One extra step each (the noise); the
# runner names a measured step that recompiled (extra.noise.recompiled). A 1.5B trial on one H100: ~305 s cold, 217-248 s warm without the extra step (lease 59).
# On one H200: lease 57's 7B pair (dyn4k/8k beside the job's pick on one host).
# Start with AT_MODEL=qwen2.5-1.5b (qwen2.5-7b on an H200) AT_MORE_MODELS="", LEASE_S as the budget holds (less what the
# machine's start held before the first command; leases 58's and 59's H100s counted in full); stage with the committed
# trials out (lease_tree.sh out), and on the setup call `mkdir -p /root/smoke && touch /root/smoke/importtime.txt` first.
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh

if [ "$GPU_TYPE" = h100 ]; then
    at qwen2.5-1.5b c-1.5b-h60 3 360 --extra-steps 1 \
        --enqueue "$(dyn 12288 98304 0.4)" \
        --enqueue "$(dyn 16384 32768 0.5),$FULL" \
        --enqueue "$(dyn 16384 32768 0.4),$CPU_ADAM1"
    at qwen2.5-1.5b c-1.5b-h60w 1 300 --extra-steps 1 \
        --enqueue "$(dyn 12288 98304 0.4)"
else
    at qwen2.5-7b c-7b-h60 2 500 --extra-steps 0 \
        --enqueue "$(dyn 4096 8192 0.3),$SEL2,$CPU_ADAM05,param_offload=true" \
        --enqueue "$(dyn 24576 98304 0.3),$SEL2,$CPU_ADAM05,param_offload=true"
fi
stamp "plan done"
