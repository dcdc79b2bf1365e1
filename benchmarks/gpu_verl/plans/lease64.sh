#!/usr/bin/env bash
# Calibration campaign, lease 64 (issue 23.5), written 2026-12-06 (thirty-eighth session) for the next session, by
# the workload set up.
# first_launch.md now says, per replay table, the first launch's share of the best on each lease that ran both
# (`verl_landscapes.one_host`); two tables never ran the two on one host.
# With AT_MODEL=qwen2.5-7b (an H200: ask for `nvidia-h200`): the 7B table's replayed first launch (selective
# [core_attn,mlp] at dyn24k/96k util 0.3, half the optimizer on the CPU, its parameters kept: lease 52's 3,114.2) and
# its best (full recompute at dyn24k/96k util 0.4, parameters offloaded: lease 50's 3,153.3, run once) on one host,
# the first launch first (the cold trial), steps 1-3 only. The H200 7B orders at 0.07 over single runs on fifteen
# hosts; on one host the model orders 8 of its 10 pairs as measured (`step_order.one_host_pairs`).
# With AT_MODEL=qwen2.5-1.5b (an H100): lease 61 ran the 1.5B table's first launch cold beside its best warm (84 %),
# lease 63 its best cold beside the first launch warm (112 % past the best's recompile, which cost its step 3 27 %);
# this runs the first launch cold, the best warm, then the first launch again warm in a second study: the two warm on
# one host.
# With AT_MODEL=qwen2.5-0.5b (an H200 with too little budget left for the 7B's two trials): the H200 0.5B table's
# first launch (dyn64k/96k util 0.5, 16.7 s a step over two hosts) and its best (dyn32k/96k util 0.5 with
# max_num_batched_tokens 16384: lease 39's 14.5 s, run once) on one host, the first launch first (cold), then the first
# launch again warm in a second study: the H200 0.5B's first launch never ran beside its best.
# Either: AT_MORE_MODELS="", LEASE_S as the budget holds; stage with the committed trials out (lease_tree.sh out), and
# on the setup call `mkdir -p /root/smoke && touch /root/smoke/importtime.txt` first.
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh

if [ -e /root/work-qwen2.5-7b ]; then
    at qwen2.5-7b c-7b-h64 2 500 --extra-steps 0 \
        --enqueue "$(dyn 24576 98304 0.3),$SEL2,$CPU_ADAM05" \
        --enqueue "$(dyn 24576 98304 0.4),$FULL,$CPU_ADAM05,param_offload=true"
elif [ -e /root/work-qwen2.5-0.5b ]; then
    at qwen2.5-0.5b c-0.5b-h64 2 250 --extra-steps 0 \
        --enqueue "$(dyn 65536 98304 0.5)" \
        --enqueue "$(dyn 32768 98304 0.5),max_num_batched_tokens=16384"
    at qwen2.5-0.5b c-0.5b-h64b 1 200 --extra-steps 0 --enqueue "$(dyn 65536 98304 0.5)"
else
    at qwen2.5-1.5b c-1.5b-h64 2 380 --extra-steps 0 \
        --enqueue "$(dyn 12288 98304 0.4)" \
        --enqueue "$(dyn 12288 32768 0.5)"
    at qwen2.5-1.5b c-1.5b-h64b 1 250 --extra-steps 0 --enqueue "$(dyn 12288 98304 0.4)"
fi
stamp "plan done"
