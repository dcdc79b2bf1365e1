#!/usr/bin/env bash
# Calibration campaign, lease 20 (issue 23): one machine of two H200s (nvidia-h200-x2), two one-GPU lanes
# (campaign.sh's `lane`):
#   GPU 0: the 7B profile (its best, lease 13's c-7b-h #4: micro-batches of 4/16, parameters offloaded, half the
#          optimizer on the CPU), then, if the lease can still hold it, a 7B trial with the whole optimizer on the CPU
#          (the model puts it 12 s a step slower than lease 13's two, whose predictions were within 1 s of each
#          other: a third 7B point for the size's ranking). Its 164 GiB of host memory only once the profile is done.
#   GPU 1: the 1.5B, recompute x token budget, two by two (nothing offloaded, no CPU optimizer): every trial with
#          full recompute so far also had a budget of 8k tokens, and each one's update ran 22-46% over the model,
#          as did the 3B's 8k trials with the optimizer on the CPU; these four say which of the two costs it is.
# Start with AT_MODEL=qwen2.5-7b AT_MORE_MODELS=qwen2.5-1.5b
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh
# shellcheck source=profile.sh
. /root/at_src/benchmarks/gpu_verl/plans/profile.sh
F=$R1,use_fused_kernels=true
D8=$F,use_dynamic_bsz=true,ppo_max_token_len_per_gpu=8192,log_prob_max_token_len_per_gpu=16384,gpu_memory_utilization=0.5
D16=$F,use_dynamic_bsz=true,ppo_max_token_len_per_gpu=16384,log_prob_max_token_len_per_gpu=32768,gpu_memory_utilization=0.5
CA7B=$F,recompute=selective,recompute_modules=[core_attn,mlp],use_dynamic_bsz=true,ppo_max_token_len_per_gpu=32768
CA7B=$CA7B,log_prob_max_token_len_per_gpu=98304,gpu_memory_utilization=0.4,param_offload=true
CA7B=$CA7B,optimizer_cpu_offload=true,optimizer_offload_fraction=1.0

gpu0() {
    profile qwen2.5-7b 780 --set rollout_tp=1 --set use_dynamic_bsz=false --set ppo_micro_batch_size_per_gpu=4 \
        --set log_prob_micro_batch_size_per_gpu=16 --set gpu_memory_utilization=0.4 --set use_fused_kernels=true \
        --set param_offload=true --set optimizer_cpu_offload=true --set optimizer_offload_fraction=0.5
    at qwen2.5-7b c-7b-x2 1 600 --extra-steps 0 --enqueue "$CA7B"
}
lane 0 gpu0
lane 1 at qwen2.5-1.5b c-1.5b-rc 4 360 --enqueue "$D8,recompute=full" --enqueue "$D8" --enqueue "$D16,recompute=full" \
    --enqueue "$D16"
wait
stamp "plan done"
