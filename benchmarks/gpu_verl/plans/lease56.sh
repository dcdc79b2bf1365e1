#!/usr/bin/env bash
# Calibration campaign, lease 56 (issue 23.3: Spearman per size), written 2026-12-02 for the next session. Lease 55
# ran the 7B's pick and its micro-batches of 1/4 on one H200 (55.8 and 77.7 s a step: 1.39x, the model 1.38x held out);
# its third configuration, selective [core_attn,mlp] at dyn4k/8k (update micro-batches of ~4k tokens and log-prob
# micro-batches of 8k, 19 a step: small_budget_micro_batch_s and logprob_micro_batch_s, neither ever on a 7B; the model
# says ~59 s), was not launched for want of time. This runs it beside the pick on one host.
# A 7B trial takes 459-584 s cold and 380-506 s warm on one H200: two a lease, steps 1-3 only (--extra-steps 0).
# Start with AT_MODEL=qwen2.5-7b AT_MORE_MODELS="" on one H200, LEASE_S=1600 where the machine counts in full (less
# what its start held before the first command: lease 55's took 184 s); stage with the committed trials out
# (lease_tree.sh out), and on the setup call `mkdir -p /root/smoke && touch /root/smoke/importtime.txt` first (the import
# probe's answer is in; it cost lease 55 28 s).
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh

seven_small() {
    at qwen2.5-7b c-7b-h56 2 500 --extra-steps 0 \
        --enqueue "$(dyn 4096 8192 0.3),$SEL2,$CPU_ADAM05,param_offload=true" \
        --enqueue "$(dyn 24576 98304 0.3),$SEL2,$CPU_ADAM05,param_offload=true"
}
by_node seven_small
wait
stamp "plan done"
