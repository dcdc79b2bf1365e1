#!/usr/bin/env bash
# Calibration campaign, lease 68's second plan (issue 23.3), written 2026-12-07 (forty-fifth session) on the same warm
# H100 after lease68.sh ended with ~870 s of device time left: a 0.5B spread on that host (Spearman over single runs of
# one host), configurations whose predicted steps span ~1.5x, with verl's fused kernels; steps 1-3 only.
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh

at qwen2.5-0.5b c-0.5b-h68s 3 200 --extra-steps 0 \
    --enqueue "$(dyn 4096 8192 0.4)" \
    --enqueue "$(dyn 16384 32768 0.5),$FULL" \
    --enqueue "$(mbs 2 8 0.4)"
stamp "plan done"
