#!/usr/bin/env bash
# Calibration campaign, lease 73 (issue 23.3, 23.5), written 2026-12-07 (forty-ninth session) for the next session,
# by the card and the workload set up.
# On an H200 with AT_MODEL=qwen2.5-7b: the 7B table's replayed first launch and its best on one host (pair_7b, about
# 1,100 s of lease). On an H200 with AT_MODEL=qwen2.5-0.5b: the H200 0.5B table's first launch and best on one host
# (pair_h200_05b). Both tables' first launch and best never ran on one host (23.5).
# On an H100, AT_MODEL=qwen2.5-3b: lease 72's plan on another host. Its host was the slowest H100 yet (steps 1.2-1.4x
# the model's, a host miss) and its full-recompute pair at dyn8k/96k with half the optimizer on the CPU left 5.7 s for
# the second forward where the model charges 2.08 s: a second pair tells the host from the charge. About 1,250 s of
# lease (setup ~125 s, the cold 3B ~420 s, two warm ~340 s each on a slow host). The host's speed probed before and
# after: the fifth lease with it (leases 69-72's levels 0.83 / 0.91 / 0.98 / 1.29 rose with their kernel launch before
# the first trial, 6.0 / 8.4 / 9.9 / 10.9 us: calibration.md, "The hosts' speed").
# Either: AT_MORE_MODELS="", LEASE_S as the budget holds; stage with the committed trials out (lease_tree.sh out), and
# on the setup call `mkdir -p /root/smoke && touch /root/smoke/importtime.txt` first.
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh

host_probe before
by_card h73 recompute_3b c-3b-h73
host_probe after
stamp "plan done"
