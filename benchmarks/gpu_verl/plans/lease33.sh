#!/usr/bin/env bash
# Calibration campaign, lease 33 (issue 23): lease 32's plan once more, on another node (asked as nvidia-h100-x4).
# Lease 32 asked for H100s and got four H200s on a node whose 0.5B-3B updates ran 10-30% slower than other nodes ran
# the same configurations (test_time_calibration HOST_MISSES). The same four lanes, under new study names, say on a
# second node whether that was the node or the configurations, and on H100s give the H100 landscapes under Spearman
# 0.8 what lease 32 was written for:
#   GPU 0: the 3B's CPU Adam on a clean host: the host's CPU AdamW rate, lease 10's c-3b#3 (+ selective core_attn) and
#          #4 (+ params offloaded) once more, then the whole optimizer on the CPU (fraction 1.0 vs 0.5 on one host).
#   GPU 1: the 3B's small micro-batches (a 4k/8k budget, micro-batches of 2/8, the optimizer offloaded; micro-batches
#          of 4/8 with half the optimizer on the CPU).
#   GPU 2: the 1.5B: lease 18's mbs4/8 without fused kernels and lease 11's dyn12k/96k once more, then selective
#          recompute and a parameter+optimizer offload pair.
#   GPU 3: the 0.5B: lease 28's #6 and #2 (a tie) in one fresh study, the whole optimizer on the CPU, full and
#          selective recompute.
# The same on either GPU type: on H200s it is lease 32's twelve small-model trials on a second node.
# Start with AT_MODEL=qwen2.5-3b AT_MORE_MODELS="qwen2.5-1.5b qwen2.5-0.5b" (in full: LEASE_S=1600).
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

gpu0() {
    cpu_adam_probe
    at qwen2.5-3b c-3b-h6 3 440 --extra-steps 0 --enqueue "$C0,$SEL" --enqueue "$C0,$SEL,param_offload=true" \
        --enqueue "${C0%0.5}1.0"
}
lane 0 gpu0
lane 1 at qwen2.5-3b c-3b-mb2 3 440 --extra-steps 0 \
    --enqueue "$F,$OPT,use_dynamic_bsz=true,ppo_max_token_len_per_gpu=4096,log_prob_max_token_len_per_gpu=8192" \
    --enqueue "$F,$OPT,use_dynamic_bsz=false,ppo_micro_batch_size_per_gpu=2,log_prob_micro_batch_size_per_gpu=8" \
    --enqueue "$F,gpu_memory_utilization=0.4,optimizer_cpu_offload=true,optimizer_offload_fraction=0.5,use_dynamic_bsz=false,ppo_micro_batch_size_per_gpu=4,log_prob_micro_batch_size_per_gpu=8"
lane 2 at qwen2.5-1.5b c-1.5b-h8 4 300 \
    --enqueue "$R1,use_dynamic_bsz=false,ppo_micro_batch_size_per_gpu=4,log_prob_micro_batch_size_per_gpu=8,gpu_memory_utilization=0.5" \
    --enqueue "$F,use_dynamic_bsz=true,ppo_max_token_len_per_gpu=12288,log_prob_max_token_len_per_gpu=98304,gpu_memory_utilization=0.4" \
    --enqueue "$D12_05,recompute=selective,recompute_modules=[core_attn,mlp]" \
    --enqueue "$D12_05,param_offload=true,optimizer_offload=true"
lane 3 at qwen2.5-0.5b c-0.5b-t2 5 240 \
    --enqueue "$D32,log_prob_max_token_len_per_gpu=32768" --enqueue "$D32,log_prob_max_token_len_per_gpu=98304" \
    --enqueue "$F,use_dynamic_bsz=true,ppo_max_token_len_per_gpu=16384,log_prob_max_token_len_per_gpu=32768,gpu_memory_utilization=0.4,optimizer_cpu_offload=true,optimizer_offload_fraction=1.0" \
    --enqueue "$F,use_dynamic_bsz=true,ppo_max_token_len_per_gpu=8192,log_prob_max_token_len_per_gpu=16384,gpu_memory_utilization=0.5,recompute=full" \
    --enqueue "$F,use_dynamic_bsz=true,ppo_max_token_len_per_gpu=16384,log_prob_max_token_len_per_gpu=32768,gpu_memory_utilization=0.5,$SEL"
wait
stamp "plan done"
