#!/usr/bin/env bash
# Calibration campaign, lease 9 (an nvidia-h200 lease; issue 23): the user's own 7B example on one GPU.
#   1. A fresh study, c-7b-fl: today's model's first launch for it (issue 23.5: it must run and come within 90% of
#      the best); predicted `tp1 rtp1 rc:sel:core_attn,mlp dyn32k/96k util0.4 offload:params cpu-adam0.5`.
#   2. Study c-7b of lease 8 resumed (its first pick ran out of memory in the update at step 1): one more trial, the
#      corrected model's next pick. `+1`: --n-trials counts the study's launched trials, the OOM among them.
# Lease 8 measured the 7B trial's start-up (launch to the OOM at step 1): 520 s cold.
# Start with AT_MODEL=qwen2.5-7b AT_RESUME=tests/data/real_verl_gpu/h200_2026-11-25_l8/c-7b.db.
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh
at qwen2.5-7b c-7b-fl 1 720
at qwen2.5-7b c-7b +1 620
stamp "plan done"
