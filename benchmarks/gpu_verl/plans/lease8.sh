#!/usr/bin/env bash
# Calibration campaign, lease 8 (an nvidia-h200 lease; issue 23): the user's own example on one GPU,
# `autotune run --model qwen2.5-7b --backend verl`, with the optimizer on the CPU where the model needs it
# (optimizer_cpu_offload / optimizer_offload_fraction are knobs of the dense space). Two measured 7B trials: the
# model's first pick, then the next it proposes. Start with AT_MODEL=qwen2.5-7b.
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh
at qwen2.5-7b c-7b 1 720
at qwen2.5-7b c-7b 2 600
stamp "plan done"
