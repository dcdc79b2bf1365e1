#!/usr/bin/env bash
# Calibration campaign, lease 57 (issue 23.3: Spearman per size), written 2026-12-02 for the next session. Lease 56 ran
# the 7B at selective [core_attn,mlp] dyn4k/8k on one H200 (50.8 s a step, 3,013.3 tokens/s/GPU: faster than the job's
# pick on five other hosts, 51.8-55.8 s), and the model since prices a small micro-batch as the host's work its GPU work
# leaves (nothing on a 7B): it puts dyn4k/8k 5 % slower than the pick (53.5 against 51.0 s), for its log-prob pass's
# 19 micro-batches. Lease 56's deadline held the pick back; this runs the two on one host, which says whether that 5 %
# is there. A 7B trial takes 459-584 s cold and 380-506 s warm on one H200: two a lease, steps 1-3 only.
# Start with AT_MODEL=qwen2.5-7b AT_MORE_MODELS="" on one H200, LEASE_S=1550 where the machine counts in full (less
# what its start held before the first command); stage with the committed trials out (lease_tree.sh out), and on the
# setup call `mkdir -p /root/smoke && touch /root/smoke/importtime.txt` first. Keep each tool call short of the
# 30 s idle release between calls: lease 56's first machine went back while this side's call was cut off.
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh

seven_pair() {
    at qwen2.5-7b c-7b-h57 2 500 --extra-steps 0 \
        --enqueue "$(dyn 4096 8192 0.3),$SEL2,$CPU_ADAM05,param_offload=true" \
        --enqueue "$(dyn 24576 98304 0.3),$SEL2,$CPU_ADAM05,param_offload=true"
}
by_node seven_pair
wait
stamp "plan done"
