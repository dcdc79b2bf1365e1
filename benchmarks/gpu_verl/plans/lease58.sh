#!/usr/bin/env bash
# Calibration campaign, lease 58 (issue 23.3: Spearman per size on the H100), written 2026-12-06. The one-GPU H100 is
# lent again (the last H100 lease was 35, on 2026-11-27). The H100's 3B is where the model, not the noise, orders
# worst: 0.68 over its 12 trials against 0.94 for step 3 against its own repeat, and 0.47 within one study. Its trials
# so far sit near the memory limit (rc:sel with half the optimizer on the CPU). This is lease 41's H100 spread for the
# 3B (campaign.sh's spread_h100, lane 1) as one study on one host: predicted steps 1.9x apart, the first pick among
# them, parameter and optimizer offload, the CPU optimizer, full recompute and micro-batches without dynamic batching.
# A 3B trial on one H100 took 403 s cold and 217-278 s warm (lease 34): four or five a lease, steps 1-3 only.
# Start with AT_MODEL=qwen2.5-3b AT_MORE_MODELS="" on one H100, LEASE_S as the budget holds (less what its start held
# before the first command); stage with the committed trials out (lease_tree.sh out), and on the setup call
# `mkdir -p /root/smoke && touch /root/smoke/importtime.txt` first.
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh

at qwen2.5-3b c-3b-h58 5 420 --extra-steps 0 \
    --enqueue "$(dyn 16384 98304 0.4),$SEL2,param_offload=true" \
    --enqueue "$(mbs 2 8 0.4),optimizer_offload=true" \
    --enqueue "$(dyn 16384 98304 0.4),$FULL,optimizer_offload=true" \
    --enqueue "$(dyn 16384 98304 0.4),$FULL,$CPU_ADAM1" \
    --enqueue "$(dyn 8192 98304 0.4),$CPU_ADAM05"
stamp "plan done"
