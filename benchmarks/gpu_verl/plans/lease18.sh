#!/usr/bin/env bash
# Calibration campaign, lease 18 (the H100, a short lease on the session's last ~10 minutes of device time; issue
#   23): lease 15's 1.5B study resumed for the trial it had enqueued and not reached: micro-batches without dynamic
#   batching (MICRO_05), the 1.5B's spread.
# Start with AT_MODEL=qwen2.5-1.5b AT_RESUME=tests/data/real_verl_gpu/h100_2026-11-26_l11/c-1.5b-s.db.
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh
at qwen2.5-1.5b c-1.5b-s +1 340
stamp "plan done"
