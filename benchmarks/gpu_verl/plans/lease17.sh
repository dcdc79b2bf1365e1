#!/usr/bin/env bash
# Calibration campaign, lease 17 (the H200 of leases 13 and 16, its last ~8 minutes; issue 23): lease 14's first
#   profile, the 0.5B's best with fused kernels (`autotune profile`).
# Start with AT_MORE_MODELS=qwen2.5-0.5b.
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh
# shellcheck source=profile.sh
. /root/at_src/benchmarks/gpu_verl/plans/profile.sh
profile qwen2.5-0.5b 420 --set rollout_tp=1 --set use_dynamic_bsz=true --set ppo_max_token_len_per_gpu=32768 \
    --set log_prob_max_token_len_per_gpu=98304 --set gpu_memory_utilization=0.4 --set use_fused_kernels=true
stamp "plan done"
