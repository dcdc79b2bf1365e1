#!/usr/bin/env bash
# Calibration campaign, lease 6 (the session's last ~10 minutes of device time): the 0.5B configuration lease 4's
# deadline interrupted, micro-batches of 4/8 without dynamic batching, on cold caches.
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh
at qwen2.5-0.5b c-0.5b-l6 1 420 --enqueue "$MICRO"
stamp "plan done"
