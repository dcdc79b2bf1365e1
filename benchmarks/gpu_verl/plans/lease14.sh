#!/usr/bin/env bash
# Calibration campaign, lease 14 (the H100; issue 23): real verl profiles (`autotune profile`), one per size.
#   The 0.5B's (fused kernels, as lease 4's best ran) ran in lease 17 on an H200 (plans/lease17.sh); left: the 3B's
#   best (lease 7's #3).
# Start with AT_MODEL=qwen2.5-3b.
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh
# shellcheck source=profile.sh
. /root/at_src/benchmarks/gpu_verl/plans/profile.sh
profile qwen2.5-3b 480 --set rollout_tp=1 --set recompute=selective --set recompute_modules=core_attn \
    --set use_dynamic_bsz=true --set ppo_max_token_len_per_gpu=8192 --set log_prob_max_token_len_per_gpu=98304 \
    --set gpu_memory_utilization=0.4 --set use_fused_kernels=true --set optimizer_cpu_offload=true \
    --set optimizer_offload_fraction=0.5
stamp "plan done"
