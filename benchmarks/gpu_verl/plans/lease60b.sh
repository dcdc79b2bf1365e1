#!/usr/bin/env bash
# Lease 60's remaining minutes (same H100, caches warm from lease60.sh): the 1.5B's first launch once more, warm, in a
# study of its own (c-1.5b-h60w measured it at 8,751 tokens/s/GPU warm against 6,268 cold): its repeat on one host.
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh
at qwen2.5-1.5b c-1.5b-h60x 1 280 --extra-steps 1 --enqueue "$(dyn 12288 98304 0.4)"
stamp "plan done"
