#!/usr/bin/env bash
# Calibration campaign, lease 16 (nvidia-h200, after lease 13 in the same lease; issue 23): lease 13's first 7B
#   trial took 485 s launch to exit, so the same lease holds the study's next pick: the second measured 7B trial.
# Start after lease13 on the same machine.
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh
at qwen2.5-7b c-7b-h +1 600 --extra-steps 0
stamp "plan done"
