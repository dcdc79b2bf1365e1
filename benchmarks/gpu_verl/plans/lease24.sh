#!/usr/bin/env bash
# Start-up, lease 24 (issue 24, for the next session's first device time): lease 4's 0.5B study again on one H100,
# now with the bytecode cache (autotune/verl/caches.py; lease 23 timed a worker's imports at 20.5 s without it,
# 14.0 s with it): the study's first launch on cold caches, then lease 4's warm trials of the same job (the offload
# on/off pair). Lease 4 measured 386 s cold and 325-333 s warm, start-up 259 s / 196-206 s: the same figures with
# the cache say what it saves in a trial, and the study-of-eight GPU-hours in benchmarks/results/trial_cost.md.
# Start with AT_MODEL=qwen2.5-0.5b on nvidia-h100-x1.
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh
at qwen2.5-0.5b c-0.5b-bc 1 420
at qwen2.5-0.5b c-0.5b-bc 3 300 --enqueue "$OFFLOAD_OFF" --enqueue "$OFFLOAD_ON"
stamp "plan done"
