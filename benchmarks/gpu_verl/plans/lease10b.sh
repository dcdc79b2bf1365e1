#!/usr/bin/env bash
# Calibration campaign, lease 10's tail (the H100; issue 23): the profile lease 10's plan had no room for, run on the
# same warm machine in its last ten minutes (a call in flight ends before the machine goes back).
#   verl's profiler on lease 4's best 0.5B configuration.
# Start with LEASE_S set to the machine's last call (the plan's deadline is fixed at `start`).
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh
# shellcheck source=profile.sh
. /root/at_src/benchmarks/gpu_verl/plans/profile.sh
profile qwen2.5-0.5b 380 --set rollout_tp=1 --set use_dynamic_bsz=true --set ppo_max_token_len_per_gpu=32768 \
    --set log_prob_max_token_len_per_gpu=98304 --set gpu_memory_utilization=0.4
stamp "plan done"
