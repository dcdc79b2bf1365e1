#!/usr/bin/env bash
# Calibration campaign, lease 15 (the H100, after lease 11's c-1.5b-fl in the same lease; issue 23): lease 5's 1.5B
#   study cannot resume (the space has gained knobs since, so its fingerprint differs), so the 1.5B spread starts a
#   new study: full recompute with small budgets (verl's unfused logits), then micro-batches without dynamic batching.
# Start with AT_MODEL=qwen2.5-7b AT_MORE_MODELS=qwen2.5-1.5b (or any setup whose workloads include the 1.5B).
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh
at qwen2.5-1.5b c-1.5b-s 2 420 --enqueue "$FULL_RC_05" --enqueue "$MICRO_05"
stamp "plan done"
