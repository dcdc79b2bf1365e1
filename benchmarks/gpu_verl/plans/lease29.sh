#!/usr/bin/env bash
# Small micro-batches, second look (issue 23), on lease 28's warm machine in its last ~10 minutes: the 0.5B fused,
# micro-batches of 2 sequences (mbs 2/8) and a 4k dynamic budget, the two regimes lease 26's 1.5B left as known misses
# (calibration.small_micro_batches), at a second size. Through a kept Ray head, no extra step (noise 0) to fit.
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh
F=$R1,gpu_memory_utilization=0.5,use_fused_kernels=true
at qwen2.5-0.5b c-0.5b-mb 2 260 --keep-ray --extra-steps 0 \
    --enqueue "$F,use_dynamic_bsz=false,ppo_micro_batch_size_per_gpu=2,log_prob_micro_batch_size_per_gpu=8" \
    --enqueue "$F,use_dynamic_bsz=true,ppo_max_token_len_per_gpu=4096,log_prob_max_token_len_per_gpu=8192"
stamp "plan done"
