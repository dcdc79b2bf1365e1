#!/usr/bin/env bash
# Calibration campaign, lease 13 (nvidia-h200; issue 23): the user's own 7B example once the model knows the host.
#   Leases 9 and 12 lost three 7B trials to Ray's memory monitor (the host's 128 GiB: optimizer state on the CPU);
#   the memory model now checks a node's host memory (autotune/estimate/host.py, read on the node). A fresh study's
#   first launch, then the next pick: the two measured 7B trials issue 23.2 asks for.
# Start with AT_MODEL=qwen2.5-7b.
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh
at qwen2.5-7b c-7b-h 2 1300 --extra-steps 0  # two trials in one run: one doctor; three 7B steps a trial
stamp "plan done"
