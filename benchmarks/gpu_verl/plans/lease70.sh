#!/usr/bin/env bash
# Calibration campaign, lease 70 (issue 23.3, 23.5), written 2026-12-07 (forty-sixth session) for the next session, by
# the card and the workload set up.
# On an H200 with AT_MODEL=qwen2.5-7b: the 7B table's replayed first launch and its best on one host (pair_7b, about
# 1,100 s of lease; carried over since lease 63). On an H200 with AT_MODEL=qwen2.5-0.5b: the H200 0.5B table's first
# launch and best on one host (pair_h200_05b). Both tables' first launch and best never ran on one host (23.5).
# On an H100, AT_MODEL=qwen2.5-1.5b: full recompute's second forward on one host at the 1.5B. Leases 68 and 69 measured
# it at the 0.5B on two fast H100 hosts: 0.25 and 0.16 s above its FLOPs, where the model charges a log-prob pass's
# fixed cost (logprob_pass_s, 2.0 s); the H200s' pairs left 1.7 s (1.5B) and 2.9 s (3B). Whether the cost beyond the
# FLOPs grows with the layer (so priced on the FLOPs, not the pass) needs the 1.5B's pair on an H100: dyn16k/32k util
# 0.5 without recompute (the cold trial), with full recompute, then micro-batches of 2/8 and dyn4k/8k at util 0.4 (the
# host-bound two lease 69 had no time for, at the 1.5B). ~1.5B trials 200-260 s. The host's speed probed before and
# after (host_probe: the second lease with it).
# Either: AT_MORE_MODELS="", LEASE_S as the budget holds; stage with the committed trials out (lease_tree.sh out), and
# on the setup call `mkdir -p /root/smoke && touch /root/smoke/importtime.txt` first.
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh

host_probe before
by_card h70 recompute_15b c-1.5b-h70
host_probe after
stamp "plan done"
