#!/usr/bin/env bash
# Start-up, lease 28 (issue 24, for the next session): what the kept Ray head saves on the trials that join it. Lease
# 27 ran one cold trial through a head (launch to step 1 201 s against lease 24's 216 s, but the head's 12.5 s start
# paid before it); no trial has yet joined a head an earlier trial started. Lease 24's 0.5B study once more, in ONE
# `autotune run` (one runner, one head): its first trial cold, then lease 24's warm trials of the same job (the offload
# on/off pair, 132-146 s launch to step 1 with a private Ray) and the model's next pick, all joining the head, with
# the default extra step as lease 24's. The study-of-eight GPU-hours with the head: benchmarks/results/trial_cost.md.
# Start with AT_MODEL=qwen2.5-0.5b on nvidia-h100-x1 (LEASE_S=1640 where one GPU counts half its held time).
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh
at qwen2.5-0.5b c-0.5b-kw 4 330 --keep-ray --enqueue "$OFFLOAD_OFF" --enqueue "$OFFLOAD_ON"
stamp "plan done"
