#!/usr/bin/env bash
# Calibration campaign, lease 65's last study (issue 23.3), written on the lease when c-1.5b-h65 had run micro-batches
# of 4/8 at 7,582.4 tokens/s/GPU without verl's fused kernels and 6,332.9 with them (warm, one host): the fused side
# again in a second study, warm, to tell a host's step noise from the kernels' cost.
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh

at qwen2.5-1.5b c-1.5b-h65c 1 230 --extra-steps 0 --enqueue "$MICRO_05,use_fused_kernels=true"
stamp "plan done"
