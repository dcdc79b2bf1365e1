#!/usr/bin/env bash
# Calibration campaign, lease 66 (issue 23.3, 23.5), written 2026-12-06 (fortieth session) for the next session, by the
# card and the workload set up.
# On an H200 with AT_MODEL=qwen2.5-7b: the 7B table's replayed first launch and its best on one host (pair_7b, about
# 1,100 s of lease; carried over since lease 63). On an H200 with AT_MODEL=qwen2.5-0.5b (too little budget left for the
# 7B's two): the H200 0.5B table's first launch and best on one host (pair_h200_05b).
# On an H100, AT_MODEL=qwen2.5-0.5b: lease 65 priced a logit without verl's fused kernels at zero from the 1.5B's
# pairs on one host, while the 0.5B's nine H100 trials without them (leases 3-28: dyn16k/32k util 0.5, the offload
# pair's off side among them) left a median 52 ps a logit (1.2 s a pass) over its trials with them on other hosts.
# The same pairs on one host for the 0.5B: dyn16k/32k util 0.5 with fused kernels first (the cold trial), then
# without; micro-batches of 4/8 without, then with; a second study re-runs dyn16k/32k with them warm. ~0.5B trials
# take 130-215 s warm.
# Either: AT_MORE_MODELS="", LEASE_S as the budget holds; stage with the committed trials out (lease_tree.sh out), and
# on the setup call `mkdir -p /root/smoke && touch /root/smoke/importtime.txt` first.
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh

by_card h66 fused_pairs qwen2.5-0.5b c-0.5b-h66 c-0.5b-h66b 250 220 "$OFFLOAD_OFF" "$MICRO_05" \
        "$OFFLOAD_OFF,use_fused_kernels=true"
stamp "plan done"
