#!/usr/bin/env bash
# Calibration campaign, lease 12 (nvidia-h200; issue 23): one more 7B trial, chosen by hand after lease 9.
#   Lease 9's two 7B trials with verl's optimizer offload were killed by Ray's memory monitor (the host's 128 GiB, not
#   the GPU: the update's worker held 107 GB), and lease 8's with cpu-adam 0.5 and the parameters offloaded ran out
#   of GPU memory in the update. Between the two: three quarters of Adam on the CPU, nothing else offloaded, full
#   recompute: the GPU keeps params, grads and a quarter of the optimizer (~69 GB), the host ~91 GB.
# Start with AT_MODEL=qwen2.5-7b AT_RESUME=tests/data/real_verl_gpu/h200_2026-11-26_l9/c-7b.db.
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh
CPU_ADAM_075=$R1,recompute=full,use_dynamic_bsz=true,ppo_max_token_len_per_gpu=8192
CPU_ADAM_075=$CPU_ADAM_075,log_prob_max_token_len_per_gpu=32768,gpu_memory_utilization=0.35,use_fused_kernels=true
CPU_ADAM_075=$CPU_ADAM_075,optimizer_cpu_offload=true,optimizer_offload_fraction=0.75
at qwen2.5-7b c-7b +1 600 --enqueue "$CPU_ADAM_075" --extra-steps 0  # the lease holds three 7B steps, not four
stamp "plan done"
