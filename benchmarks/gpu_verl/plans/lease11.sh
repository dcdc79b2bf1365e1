#!/usr/bin/env bash
# Calibration campaign, lease 11 (the H100; issue 23): the 1.5B size, which has one measured step (lease 5).
#   1. A fresh study, c-1.5b-fl: today's model's first launch for Qwen2.5-1.5B on the smoke job (issue 23.5),
#      predicted `tp1 rtp1 dyn12k/96k util0.4`.
#   2. Study c-1.5b of lease 5 resumed: full recompute with small budgets, then micro-batches without dynamic
#      batching (both with verl's unfused logits), enqueued: the spread of knobs issue 23.2 asks of every size.
# A 1.5B trial took 444 s cold in lease 5.
# Start with AT_MODEL=qwen2.5-1.5b AT_RESUME=tests/data/real_verl_gpu/h100_2026-11-25_l5/c-1.5b.db.
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh
at qwen2.5-1.5b c-1.5b-fl 1 480
at qwen2.5-1.5b c-1.5b +2 420 --enqueue "$FULL_RC_05" --enqueue "$MICRO_05"  # one doctor run for both
stamp "plan done"
