#!/usr/bin/env bash
# Calibration campaign, lease 25 (issue 23): one H100 (nvidia-h100-x1), lease 22's 3B plan as it was written for the
# H100 (it ran on H200s). The H100's 3B ordering is the campaign's weakest figure (Spearman 0.40 over four trials,
# three of them CPU-Adam twins predicted within 1 s of each other): three trials predicted apart, the optimizer
# offloaded with full recompute, the whole optimizer on the CPU with full recompute, and parameters plus optimizer
# offloaded with selective recompute (c-3b-fl #0 of lease 10 with the optimizer offloaded too: an offload pair).
# Then, if the lease still holds a trial, the 1.5B with micro-batches of 2/8 without dynamic batching: the update's
# cost below ~4 sequences a micro-batch (lease 22's mbs 1/4 took 28.4 s where the model said 9.8 s; mbs 4/8 fit).
# Start with AT_MODEL=qwen2.5-3b AT_MORE_MODELS=qwen2.5-1.5b
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh
F=$R1,use_fused_kernels=true
D3=$F,use_dynamic_bsz=true,ppo_max_token_len_per_gpu=16384,log_prob_max_token_len_per_gpu=98304,gpu_memory_utilization=0.4
CPU1=optimizer_cpu_offload=true,optimizer_offload_fraction=1.0
at qwen2.5-3b c-3b-h3 3 480 --enqueue "$D3,optimizer_offload=true,recompute=full" \
    --enqueue "$D3,$CPU1,recompute=full" \
    --enqueue "$D3,param_offload=true,optimizer_offload=true,recompute=selective,recompute_modules=[core_attn,mlp]"
at qwen2.5-1.5b c-1.5b-mb 1 420 \
    --enqueue "$F,use_dynamic_bsz=false,ppo_micro_batch_size_per_gpu=2,log_prob_micro_batch_size_per_gpu=8,gpu_memory_utilization=0.5"
stamp "plan done"
