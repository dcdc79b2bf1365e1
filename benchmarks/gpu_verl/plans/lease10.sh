#!/usr/bin/env bash
# Calibration campaign, lease 10 (the H100; issue 23): the 3B size's first launch, an offload pair, the first profile.
#   1. A fresh study, c-3b-fl: today's model's first launch for Qwen2.5-3B on the smoke job (issue 23.5), predicted
#      `tp1 rtp1 rc:sel:core_attn,mlp dyn16k/96k util0.4 offload:params` (without the parameter offload the model
#      puts its rollout at 87.8 GiB of 79.6: the offload is what fits it, not a free choice).
#   2. Study c-3b of lease 7 resumed: its best measured trial (#3, `rc:sel dyn8k/96k util0.4 cpu-adam0.5`, 3,618.6
#      tokens/s/GPU) with the parameters offloaded, enqueued: the on/off pair issue 23.3 checks offload on (the model:
#      +1 s a step). `+1`: --n-trials counts the study's three launched trials.
#   3. verl's profiler on lease 4's best 0.5B configuration, where the lease has room.
# A 3B trial took 500 s cold and 432 s warm in lease 7.
# Start with AT_MODEL=qwen2.5-3b AT_MORE_MODELS="qwen2.5-0.5b" AT_RESUME=tests/data/real_verl_gpu/h100_2026-11-25_l7/c-3b.db.
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh
# shellcheck source=profile.sh
. /root/at_src/benchmarks/gpu_verl/plans/profile.sh
at qwen2.5-3b c-3b-fl 1 540
at qwen2.5-3b c-3b +1 460 --enqueue "$OFFLOAD_PAIR_3B"
profile qwen2.5-0.5b 450 --set rollout_tp=1 --set use_dynamic_bsz=true --set ppo_max_token_len_per_gpu=32768 \
    --set log_prob_max_token_len_per_gpu=98304 --set gpu_memory_utilization=0.4
stamp "plan done"
