#!/usr/bin/env bash
# Calibration campaign, lease 32 (issue 23): four one-GPU lanes on one H100 node (asked as nvidia-h100-x4), aimed at
# the H100 landscapes whose Spearman is under 0.8 and at the small micro-batches no rule yet prices:
#   GPU 0: the 3B's CPU Adam on a clean host. Lease 10's host ran its three half-CPU-Adam 3B trials 4.7-5.9 s slow in
#          the update (HOST_MISSES; lease 30 re-ran #0 on another host: as priced). First the host's CPU AdamW rate,
#          then lease 10's c-3b#3 (+ selective core_attn) and #4 (+ params offloaded) once more, then the whole
#          optimizer on the CPU (fraction 1.0 vs 0.5 on one host). No extra step, so three 3B trials fit.
#   GPU 1: the 3B's small micro-batches (the third size after lease 26's 1.5B and lease 29's 0.5B: a 4k/8k budget and
#          micro-batches of 2/8), the optimizer offloaded as lease 25's micro-batches of one, then micro-batches of
#          4/8 with half the optimizer on the CPU, as lease 19's H200 lane ran them (merely offloaded, the model puts
#          the optimizer's return at 86 GiB). No extra step.
#   GPU 2: the 1.5B on the H100: lease 18's mbs4/8 without fused kernels (19.3 s measured, 24.9 predicted) and lease
#          11's dyn12k/96k (18.4 vs 22.1) once more, then selective recompute and a parameter+optimizer offload pair.
#   GPU 3: the 0.5B: lease 28's #6 (the fused table's best) and #2 (the model's first pick, a tie within #6's noise)
#          in one fresh study, then the whole optimizer on the CPU, full and selective recompute.
# Asked as nvidia-h100-x4, four H200s came (2026-11-27, 08:02): there GPU 0 runs two more 7B trials instead (lease
# 13's first launch with a 32k log-prob budget, and with util 0.3: the 7B's old_log_prob is 28% over, its known miss).
# Start with AT_MODEL=qwen2.5-3b AT_MORE_MODELS="qwen2.5-1.5b qwen2.5-0.5b qwen2.5-7b" (in full: LEASE_S=1600).
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh
F=$R1,use_fused_kernels=true
C0=$F,use_dynamic_bsz=true,ppo_max_token_len_per_gpu=8192,log_prob_max_token_len_per_gpu=98304
C0=$C0,gpu_memory_utilization=0.4,optimizer_cpu_offload=true,optimizer_offload_fraction=0.5
SEL=recompute=selective,recompute_modules=core_attn
OPT=gpu_memory_utilization=0.4,optimizer_offload=true
D12_05=$F,use_dynamic_bsz=true,ppo_max_token_len_per_gpu=12288,log_prob_max_token_len_per_gpu=32768
D12_05=$D12_05,gpu_memory_utilization=0.5
D32=$F,use_dynamic_bsz=true,ppo_max_token_len_per_gpu=32768,gpu_memory_utilization=0.4

S7=$F,recompute=selective,recompute_modules=[core_attn,mlp],use_dynamic_bsz=true,ppo_max_token_len_per_gpu=32768
S7=$S7,param_offload=true,optimizer_cpu_offload=true,optimizer_offload_fraction=0.5
gpu0() {
    if [ "$GPU_TYPE" = h200 ]; then
        at qwen2.5-7b c-7b-l32 2 560 --extra-steps 0 --enqueue "$S7,log_prob_max_token_len_per_gpu=32768,gpu_memory_utilization=0.4" \
            --enqueue "$S7,log_prob_max_token_len_per_gpu=98304,gpu_memory_utilization=0.3"
        return
    fi
    cpu_adam_probe
    at qwen2.5-3b c-3b-h6 3 440 --extra-steps 0 --enqueue "$C0,$SEL" --enqueue "$C0,$SEL,param_offload=true" \
        --enqueue "${C0%0.5}1.0"
}
lane 0 gpu0
lane 1 at qwen2.5-3b c-3b-mb 3 440 --extra-steps 0 \
    --enqueue "$F,$OPT,use_dynamic_bsz=true,ppo_max_token_len_per_gpu=4096,log_prob_max_token_len_per_gpu=8192" \
    --enqueue "$F,$OPT,use_dynamic_bsz=false,ppo_micro_batch_size_per_gpu=2,log_prob_micro_batch_size_per_gpu=8" \
    --enqueue "$F,gpu_memory_utilization=0.4,optimizer_cpu_offload=true,optimizer_offload_fraction=0.5,use_dynamic_bsz=false,ppo_micro_batch_size_per_gpu=4,log_prob_micro_batch_size_per_gpu=8"
lane 2 at qwen2.5-1.5b c-1.5b-h7 4 300 \
    --enqueue "$R1,use_dynamic_bsz=false,ppo_micro_batch_size_per_gpu=4,log_prob_micro_batch_size_per_gpu=8,gpu_memory_utilization=0.5" \
    --enqueue "$F,use_dynamic_bsz=true,ppo_max_token_len_per_gpu=12288,log_prob_max_token_len_per_gpu=98304,gpu_memory_utilization=0.4" \
    --enqueue "$D12_05,recompute=selective,recompute_modules=[core_attn,mlp]" \
    --enqueue "$D12_05,param_offload=true,optimizer_offload=true"
lane 3 at qwen2.5-0.5b c-0.5b-t 5 240 \
    --enqueue "$D32,log_prob_max_token_len_per_gpu=32768" --enqueue "$D32,log_prob_max_token_len_per_gpu=98304" \
    --enqueue "$F,use_dynamic_bsz=true,ppo_max_token_len_per_gpu=16384,log_prob_max_token_len_per_gpu=32768,gpu_memory_utilization=0.4,optimizer_cpu_offload=true,optimizer_offload_fraction=1.0" \
    --enqueue "$F,use_dynamic_bsz=true,ppo_max_token_len_per_gpu=8192,log_prob_max_token_len_per_gpu=16384,gpu_memory_utilization=0.5,recompute=full" \
    --enqueue "$F,use_dynamic_bsz=true,ppo_max_token_len_per_gpu=16384,log_prob_max_token_len_per_gpu=32768,gpu_memory_utilization=0.5,$SEL"
wait
stamp "plan done"
