#!/usr/bin/env bash
# Calibration campaign, lease 10 (the H100; issue 23): the spread of the 3B size and the first real verl profile.
#   1. verl's profiler on lease 4's best 0.5B configuration (the Megatron passes' size-independent seconds).
#   2. Qwen2.5-3B, resuming study c-3b of lease 7: parameter and optimizer offload as an on/off pair (dynamic
#      batches of 16k/32k tokens, gpu_memory_utilization 0.5; off may run out of memory: the model says which).
# Each warm 3B trial took 430-500 s in lease 7, the micro-batch OOM 312 s.
# Start with AT_MODEL=qwen2.5-0.5b AT_MORE_MODELS="qwen2.5-3b" AT_RESUME=tests/data/real_verl_gpu/h100_2026-11-25_l7/c-3b.db.
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh
# shellcheck source=profile.sh
. /root/at_src/benchmarks/gpu_verl/plans/profile.sh
profile qwen2.5-0.5b 450 --set rollout_tp=1 --set use_dynamic_bsz=true --set ppo_max_token_len_per_gpu=32768 \
    --set log_prob_max_token_len_per_gpu=98304 --set gpu_memory_utilization=0.4
at qwen2.5-3b c-3b 1 500 --enqueue "$OFFLOAD_ON"
at qwen2.5-3b c-3b 1 500 --enqueue "$OFFLOAD_OFF"
stamp "plan done"
