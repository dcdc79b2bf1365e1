#!/usr/bin/env bash
# Calibration campaign, lease 59 (issue 23.3: Spearman per size), written 2026-12-06 for the next session, by the GPU
# lent. On one H100: the 1.5B's H100 spread (campaign.sh's spread_h100, lane 0, never run) as one study on one host, as
# lease 58 ran the 3B's (its five ordered as measured, held out): the H100's 1.5B orders at 0.63 over its 14 trials on
# three hosts, 0.68 within a study, and step 3 against its own repeat only 0.65 (lease 35's host ran its five 14-26 %
# over the model). A 1.5B trial on one H100 took 366 s cold and 236-266 s warm (lease 35): five a lease, steps 1-3 only.
# On one H200: lease 57's 7B pair (dyn4k/8k beside the job's pick on one host).
# Start with AT_MODEL=qwen2.5-1.5b (qwen2.5-7b on an H200) AT_MORE_MODELS="", LEASE_S as the budget holds (less what the
# machine's start held before the first command; lease 58's H100 counted in full); stage with the committed trials out
# (lease_tree.sh out), and on the setup call `mkdir -p /root/smoke && touch /root/smoke/importtime.txt` first.
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh

if [ "$GPU_TYPE" = h100 ]; then
    at qwen2.5-1.5b c-1.5b-h59 5 380 --extra-steps 0 \
        --enqueue "$(dyn 12288 98304 0.4)" \
        --enqueue "$(mbs 2 8 0.4)" \
        --enqueue "$(dyn 16384 32768 0.5),$FULL" \
        --enqueue "$(dyn 4096 8192 0.4)" \
        --enqueue "$(dyn 16384 32768 0.4),$CPU_ADAM1"
else
    at qwen2.5-7b c-7b-h59 2 500 --extra-steps 0 \
        --enqueue "$(dyn 4096 8192 0.3),$SEL2,$CPU_ADAM05,param_offload=true" \
        --enqueue "$(dyn 24576 98304 0.3),$SEL2,$CPU_ADAM05,param_offload=true"
fi
stamp "plan done"
