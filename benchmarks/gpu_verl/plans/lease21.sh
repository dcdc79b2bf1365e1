#!/usr/bin/env bash
# Calibration campaign, lease 21 (issue 23): what the session's last ~400 s of device time hold on one H100 (a
# one-GPU machine counts half its held time): one 1.5B trial, full recompute at a 16k token budget, the twin of
# lease 18's c-1.5b-s #0 (8k), whose update ran 4.5 s above the FLOPs-only model on the H100 where lease 20's H200s
# ran 1.0 s above it; the model now prices the second forward as a log-prob pass. Then the whole optimizer on the
# CPU, if the lease still holds a trial (the H100 host's CPU Adam: lease 10's 3B updates ran 27-31% over the model).
# Start with AT_MODEL=qwen2.5-1.5b, LEASE_S as the budget allows (~730 s).
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh
F=$R1,use_fused_kernels=true
D16=$F,use_dynamic_bsz=true,ppo_max_token_len_per_gpu=16384,log_prob_max_token_len_per_gpu=32768
at qwen2.5-1.5b c-1.5b-h1 2 330 --enqueue "$D16,gpu_memory_utilization=0.5,recompute=full" \
    --enqueue "$D16,gpu_memory_utilization=0.4,optimizer_cpu_offload=true,optimizer_offload_fraction=1.0"
stamp "plan done"
