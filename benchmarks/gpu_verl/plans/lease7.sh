#!/usr/bin/env bash
# Calibration campaign, lease 7 (the next H100 lease; issue 23): the 3B size, then why the Megatron passes of verl
# 0.9.1 take 2-6x the model on small models (benchmarks/results/calibration.md: a size-independent 2-5 s per phase).
#   1. Qwen2.5-3B: the model's first pick (cold), then micro-batches of 64 without dynamic batching (must OOM).
#   2. verl's profiler on the 0.5B configuration lease 4 measured best (tp1 rtp1 dyn32k/96k util0.4, fused
#      attention), where the lease has room for it: the traces say what old_log_prob and update_actor spend outside
#      the GEMMs. (The new size first: a profile never run for real may fail; the trials must not depend on it.)
# Run on 2026-11-25 (lease 7): its profile step failed at once (`--study` named a database not yet made, and the
# payload lacked the trace analysis); both fixed since (plans/profile.sh, build_payload.sh profile).
# Start with AT_MODEL=qwen2.5-0.5b AT_MORE_MODELS="qwen2.5-3b".
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh
at qwen2.5-3b c-3b 1 560
at qwen2.5-3b c-3b 2 300 --enqueue "$MICRO_OOM"
# shellcheck source=profile.sh
. /root/at_src/benchmarks/gpu_verl/plans/profile.sh
profile qwen2.5-0.5b 450 --set rollout_tp=1 --set use_dynamic_bsz=true --set ppo_max_token_len_per_gpu=32768 \
    --set log_prob_max_token_len_per_gpu=98304 --set gpu_memory_utilization=0.4
stamp "plan done"
