#!/usr/bin/env bash
# Calibration campaign, lease 9 (an nvidia-h200 lease; issue 23): the user's own 7B example again, resuming study
# c-7b of lease 8, whose first pick (tp1 rtp1 dyn8k/96k util0.4 offload:params cpu-adam0.5, predicted 135.9 GiB of
# 140.4 'at limit') ran out of memory in the update at step 1. The resumed study knows that OOM (its correction's
# memory factor) and the memory model has been fixed since: two more trials, the model's next picks, so that at least
# two 7B trials measure a step 3. Lease 8 measured the 7B trial's start-up (launch to the OOM at step 1): 520 s cold.
# Start with AT_MODEL=qwen2.5-7b AT_RESUME=tests/data/real_verl_gpu/h200_2026-11-25_l8/c-7b.db.
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh
at qwen2.5-7b c-7b 1 720
at qwen2.5-7b c-7b 1 660
stamp "plan done"
