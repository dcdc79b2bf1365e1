#!/usr/bin/env bash
# Calibration campaign, lease 26 (issue 23): one H100 (nvidia-h100-x1), the same session as lease 25. The H100's
# 1.5B ordering is at 0.70 over five trials predicted 22-26 s a step, most within a step's noise of each other: one
# study of trials predicted well apart, in the order they teach most,
#   micro-batches of 1/4 without dynamic batching (predicted 44 s: micro_batch_of_one_s, held out at 3B in lease 25),
#   the whole optimizer on the CPU (26 s: the H100 host's CPU Adam at the 1.5B, lease 21's second trial, never run),
#   micro-batches of 2/8 (23 s: the model says micro-batches of two pay nothing of micro_batch_of_one_s; not measured),
#   and a 4k/8k token budget (22 s: many small dynamic micro-batches), if the lease still holds one.
# Start with AT_MODEL=qwen2.5-1.5b; LEASE_S as the budget allows (1640 where the machine counts half its held time).
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh
F=$R1,use_fused_kernels=true,gpu_memory_utilization=0.4
MB=$F,use_dynamic_bsz=false
at qwen2.5-1.5b c-1.5b-h4 4 330 --enqueue "$MB,ppo_micro_batch_size_per_gpu=1,log_prob_micro_batch_size_per_gpu=4" \
    --enqueue "$F,use_dynamic_bsz=true,ppo_max_token_len_per_gpu=16384,log_prob_max_token_len_per_gpu=32768,optimizer_cpu_offload=true,optimizer_offload_fraction=1.0" \
    --enqueue "$MB,ppo_micro_batch_size_per_gpu=2,log_prob_micro_batch_size_per_gpu=8" \
    --enqueue "$F,use_dynamic_bsz=true,ppo_max_token_len_per_gpu=4096,log_prob_max_token_len_per_gpu=8192"
stamp "plan done"
