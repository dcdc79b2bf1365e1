#!/usr/bin/env bash
# Calibration campaign, lease 72 (issue 23.3, 23.5), written 2026-12-07 (forty-eighth session) for the next session,
# by the card and the workload set up.
# On an H200 with AT_MODEL=qwen2.5-7b: the 7B table's replayed first launch and its best on one host (pair_7b, about
# 1,100 s of lease). On an H200 with AT_MODEL=qwen2.5-0.5b: the H200 0.5B table's first launch and best on one host
# (pair_h200_05b). Both tables' first launch and best never ran on one host (23.5).
# On an H100, AT_MODEL=qwen2.5-3b: the H100 3B table's first launch (cold), then full recompute's pair on one host at
# dyn8k/96k (recompute_3b; lease 71 measured the 1.5B's, 1.3 s for the second forward where the model charges 2.08 s;
# no H100 3B pair yet), about 1,250 s of lease (setup ~95 s, the cold 3B ~420 s, two warm ~280 s each). The host's
# speed probed before and after: the fourth lease with it (leases 69-71's levels 0.83 / 0.91 / 0.98 followed their
# kernel launch before the first trial, 6.0 / 8.4 / 9.9 us).
# Either: AT_MORE_MODELS="", LEASE_S as the budget holds; stage with the committed trials out (lease_tree.sh out), and
# on the setup call `mkdir -p /root/smoke && touch /root/smoke/importtime.txt` first.
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh

host_probe before
by_card h72 recompute_3b c-3b-h72
host_probe after
stamp "plan done"
