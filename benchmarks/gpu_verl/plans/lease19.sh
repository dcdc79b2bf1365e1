#!/usr/bin/env bash
# Calibration campaign, lease 19 (issue 23): one machine of four GPUs (asked as nvidia-h100-x4; four H200s came),
#   four one-GPU lanes at once (campaign.sh's `lane`: each lane sees its GPU only and 16 of the host's 64 cores, as a
#   one-GPU lent machine has), so a lease measures four times what a one-GPU lease does for the same device time:
#   GPU 0: the 3B profile (its best, lease 10's c-3b-fl #0; lease 14's pick, 78 of 80 GiB measured on the H100, left
#          no room for the profiler), then an offload pair's other half for the 3B (c-3b-fl #0 + optimizer offload)
#   GPU 1: the 1.5B profile (lease 11's first launch, the 1.5B's best), then the 1.5B's selective recompute and full
#          recompute with everything offloaded
#   GPU 2: the 1.5B spread: the optimizer on the CPU (whole and half), and a parameter+optimizer offload pair
#   GPU 3: the 3B spread: full recompute, micro-batches without dynamic batching, the whole optimizer on the CPU
#   As first written, lanes 2 and 3 resumed the H100 studies of leases 18 and 10 (c-1.5b-s, c-3b); with H200s they
#   are new studies (a study is one GPU type), c-1.5b-h and c-3b-h.
# Start with AT_MODEL=qwen2.5-1.5b AT_MORE_MODELS=qwen2.5-3b (ran 2026-11-26, LEASE_S=1540, all lanes done at +1476 s)
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh
# shellcheck source=profile.sh
. /root/at_src/benchmarks/gpu_verl/plans/profile.sh
F=$R1,use_fused_kernels=true
CA05=optimizer_cpu_offload=true,optimizer_offload_fraction=0.5
CA10=optimizer_cpu_offload=true,optimizer_offload_fraction=1.0
D16_04=$F,use_dynamic_bsz=true,ppo_max_token_len_per_gpu=16384,log_prob_max_token_len_per_gpu=32768,gpu_memory_utilization=0.4
D12_05=$F,use_dynamic_bsz=true,ppo_max_token_len_per_gpu=12288,log_prob_max_token_len_per_gpu=32768,gpu_memory_utilization=0.5
SEL=recompute=selective,recompute_modules=[core_attn,mlp]
FL3B=$F,$SEL,use_dynamic_bsz=true,ppo_max_token_len_per_gpu=16384,log_prob_max_token_len_per_gpu=98304
FL3B=$FL3B,gpu_memory_utilization=0.4,param_offload=true
RC8=$F,use_dynamic_bsz=true,ppo_max_token_len_per_gpu=8192,log_prob_max_token_len_per_gpu=16384
SEL3B=$F,recompute=selective,recompute_modules=[core_attn],use_dynamic_bsz=true,ppo_max_token_len_per_gpu=8192
SEL3B=$SEL3B,log_prob_max_token_len_per_gpu=98304,gpu_memory_utilization=0.4

gpu0() {
    profile qwen2.5-3b 600 --set rollout_tp=1 --set recompute=selective --set recompute_modules=core_attn,mlp \
        --set use_dynamic_bsz=true --set ppo_max_token_len_per_gpu=16384 --set log_prob_max_token_len_per_gpu=98304 \
        --set gpu_memory_utilization=0.4 --set use_fused_kernels=true --set param_offload=true
    at qwen2.5-3b c-3b-g0 1 480 --enqueue "$FL3B,optimizer_offload=true"
}
gpu1() {
    profile qwen2.5-1.5b 420 --set rollout_tp=1 --set use_dynamic_bsz=true --set ppo_max_token_len_per_gpu=12288 \
        --set log_prob_max_token_len_per_gpu=98304 --set gpu_memory_utilization=0.4 --set use_fused_kernels=true
    at qwen2.5-1.5b c-1.5b-g1 2 340 --enqueue "$D12_05,$SEL" \
        --enqueue "$RC8,gpu_memory_utilization=0.5,recompute=full,param_offload=true,optimizer_offload=true"
}
lane 0 gpu0
lane 1 gpu1
lane 2 at qwen2.5-1.5b c-1.5b-h 4 340 --enqueue "$D16_04,$CA10" --enqueue "$D12_05,param_offload=true,optimizer_offload=true" \
    --enqueue "$D12_05" --enqueue "$D16_04,$CA05"
lane 3 at qwen2.5-3b c-3b-h 3 480 --enqueue "$RC8,recompute=full,gpu_memory_utilization=0.4,$CA05" \
    --enqueue "$F,use_dynamic_bsz=false,ppo_micro_batch_size_per_gpu=4,log_prob_micro_batch_size_per_gpu=8,gpu_memory_utilization=0.4,$CA05" \
    --enqueue "$SEL3B,$CA10"
wait
stamp "plan done"
