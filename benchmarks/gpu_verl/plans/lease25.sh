#!/usr/bin/env bash
# Calibration campaign, lease 25 (issue 23): one H100 (nvidia-h100-x1; plan it as costing its whole held time: lease
# 24's one-GPU machine counted 100%). The H100's 3B ordering is the campaign's weakest figure (Spearman 0.40 over four
# trials, three of them CPU-Adam twins predicted within 1 s of each other): one study of trials predicted well apart,
#   the optimizer offloaded with full recompute (predicted 34 s a step),
#   micro-batches of 1/4 without dynamic batching, the optimizer offloaded (55 s: micro_batch_of_one_s, fitted on the
#     0.5B and 1.5B, held out at a third size),
#   the whole optimizer on the CPU with full recompute (42 s; the H100 host's CPU Adam ran 5-6 s over the model in
#     lease 10),
#   and, if the lease still holds a trial, micro-batches of 2/8 (32 s: the model says micro-batches of two pay nothing
#     of micro_batch_of_one_s; not measured).
# At LEASE_S=1640 (a held ~1,700 s: the budget's 1,800 less a margin) three trials fit; the fourth only if the lease
# runs faster than lease 10's 3B trials (500 s cold, 432-448 s warm).
# Start with AT_MODEL=qwen2.5-3b
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh
F=$R1,use_fused_kernels=true
D3=$F,use_dynamic_bsz=true,ppo_max_token_len_per_gpu=16384,log_prob_max_token_len_per_gpu=98304,gpu_memory_utilization=0.4
MB=$F,use_dynamic_bsz=false,gpu_memory_utilization=0.4,optimizer_offload=true
at qwen2.5-3b c-3b-h3 4 440 --enqueue "$D3,optimizer_offload=true,recompute=full" \
    --enqueue "$MB,ppo_micro_batch_size_per_gpu=1,log_prob_micro_batch_size_per_gpu=4" \
    --enqueue "$D3,optimizer_cpu_offload=true,optimizer_offload_fraction=1.0,recompute=full" \
    --enqueue "$MB,ppo_micro_batch_size_per_gpu=2,log_prob_micro_batch_size_per_gpu=8"
stamp "plan done"
