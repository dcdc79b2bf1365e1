#!/usr/bin/env bash
# Calibration campaign, lease 64's last study (issue 23.3), written on the lease when c-1.5b-h64c's offload trial
# (dyn16k/32k util 0.5, parameters and optimizer offloaded) ran out of memory with 390 s of budget left: the pair's
# off side on the same host, warm.
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh

at qwen2.5-1.5b c-1.5b-h64d 1 230 --extra-steps 0 --enqueue "$OFFLOAD_OFF"
stamp "plan done"
