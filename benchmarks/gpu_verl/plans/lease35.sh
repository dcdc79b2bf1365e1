#!/usr/bin/env bash
# The H100's 1.5B ordering (issue 23: Spearman 0.77 over nine, the target 0.8), one study on a one-GPU H100 host of its
# own, five trials one after another through one kept Ray head (no lanes: lanes make small models' steps noisy):
#   1. lease 11's c-1.5b-fl#0 (dyn12k/96k util0.4), the table's best, once more: how far one host's step moves;
#   2. selective recompute of core_attn and mlp at a 12k/32k budget (lease 19's c-1.5b-g1#0 on H200s, never on an H100);
#   3. the same budget with parameters and optimizer offloaded (an offload pair with 4);
#   4. the same budget, nothing offloaded;
#   5. lease 26's micro-batches of two (its step 3 ran 18-23 % faster than its steps 2 and 4).
# Steps 1-3 only. A 1.5B trial took ~330 s cold and 213-282 s warm. Written for a fresh session's device time: start
# with AT_MODEL=qwen2.5-1.5b on nvidia-h100-x1 (LEASE_S=1650).
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh
F=$R1,use_fused_kernels=true
D12=$F,use_dynamic_bsz=true,ppo_max_token_len_per_gpu=12288,log_prob_max_token_len_per_gpu=32768,gpu_memory_utilization=0.5
at qwen2.5-1.5b c-1.5b-h11 5 280 --extra-steps 0 \
    --enqueue "$F,use_dynamic_bsz=true,ppo_max_token_len_per_gpu=12288,log_prob_max_token_len_per_gpu=98304,gpu_memory_utilization=0.4" \
    --enqueue "$D12,recompute=selective,recompute_modules=[core_attn,mlp]" \
    --enqueue "$D12,param_offload=true,optimizer_offload=true" --enqueue "$D12" \
    --enqueue "$F,use_dynamic_bsz=false,ppo_micro_batch_size_per_gpu=2,log_prob_micro_batch_size_per_gpu=8,gpu_memory_utilization=0.4"
stamp "plan done"
