#!/usr/bin/env bash
# Calibration campaign, lease 62 (issues 23.3 and 23.5), written 2026-12-06 for the next session, by the GPU lent.
# On one H200 (ask for `nvidia-h200`): lease 57's 7B pair, never run (lease 61 got an H100): dyn4k/8k beside the job's
# pick on one host, steps 1-3 only; the H200 7B's trials order at 0.07 over single runs, 0.32 over configurations,
# mostly across hosts. Start with AT_MODEL=qwen2.5-7b.
# On one H100: the 0.5B fused table on one host with NVML's utilization in the traces (lease 61's were the first):
# its first launch (dyn32k/96k at util 0.4, cold), its best (lease 28's dyn32k/32k, which ran its step 3 one 2 s poll
# shorter), then the best once more in a second study. The 0.5B's rollout is the largest share of its step, so its
# idle tail (verl's host work after the last token, then the poll's wait: autotune/results/rollout_wait.py) says most
# of how the poll splits its runs. Start with AT_MODEL=qwen2.5-0.5b.
# The branch follows the workload the setup wrote (AT_MODEL), not the GPU: an H200 that comes when only minutes are
# left runs the 0.5B's (its H200 table orders at 0.59 over single runs, the poll's 2 s being most of its step's noise).
# Either: AT_MORE_MODELS="", LEASE_S as the budget holds; stage with the committed trials out (lease_tree.sh out), and
# on the setup call `mkdir -p /root/smoke && touch /root/smoke/importtime.txt` first.
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh

if [ ! -e /root/work-qwen2.5-7b ]; then
    at qwen2.5-0.5b c-0.5b-h62 2 300 --extra-steps 0 \
        --enqueue "$(dyn 32768 98304 0.4)" \
        --enqueue "$(dyn 32768 32768 0.4)"
    at qwen2.5-0.5b c-0.5b-h62b 1 200 --extra-steps 0 --enqueue "$(dyn 32768 32768 0.4)"
else
    at qwen2.5-7b c-7b-h62 2 500 --extra-steps 0 \
        --enqueue "$(dyn 4096 8192 0.3),$SEL2,$CPU_ADAM05,param_offload=true" \
        --enqueue "$(dyn 24576 98304 0.3),$SEL2,$CPU_ADAM05,param_offload=true"
fi
stamp "plan done"
