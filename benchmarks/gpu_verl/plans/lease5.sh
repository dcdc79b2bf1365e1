#!/usr/bin/env bash
# Calibration campaign, lease 5 (issue 23): Qwen2.5-1.5B and 3B on the H100, fused attention, shared caches. Each
# size's model's best first (cold for that model), then a configuration that must run out of memory in the update
# (micro-batches of 64 without dynamic batching) and the offload side of a pair, as long as the lease allows.
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh
at qwen2.5-1.5b c-1.5b 1 480
at qwen2.5-3b c-3b 1 540
at qwen2.5-1.5b c-1.5b 3 330 --enqueue "$MICRO_OOM" --enqueue "$OFFLOAD_ON"
at qwen2.5-3b c-3b 2 330 --enqueue "$MICRO_OOM"
stamp "plan done"
