#!/usr/bin/env bash
# Calibration campaign, lease 75 (issue 23.3, 23.5), written 2026-12-07 (fiftieth session) as lease74.sh; the
# fifty-first session's lease 74 came with 480 s of budget after twelve failed asks and four refusals and ran only
# lease74b.sh's first trial, so this plan moved on to lease 75 unchanged but for its tags. By the card and the
# workload set up.
# On an H200 with AT_MODEL=qwen2.5-7b: the 7B table's replayed first launch and its best on one host (pair_7b, about
# 1,100 s of lease). On an H200 with AT_MODEL=qwen2.5-0.5b: the H200 0.5B table's first launch and best on one host
# (pair_h200_05b). Both tables' first launch and best never ran on one host (23.5).
# On an H100, AT_MODEL=qwen2.5-0.5b: lease 68's one-host 0.5B spread (spread_05b), which lease 69 cut to two trials,
# on another host: the H100 0.5B is at 0.58 over single runs (23.3), and lease 73's five 3B on one host ordered at 0.90
# where two hosts 1.4x apart put the same eight at 0.29. Five configurations of one host say whether the 0.5B's miss is
# the hosts or the model. ~0.5B trials 130-225 s: about 1,150 s of lease with setup. The host probed before and after
# (the seventh probed lease: leases 69-74's levels follow the Python loop timed before the first trial at Spearman
# 0.93, the kernel launch at 0.83; calibration.md, "The hosts' speed").
# With 400 s or more left after it on an H100, `plans/lease75b.sh` adds the 0.5B table's first launch and best.
# Either: AT_MORE_MODELS="", LEASE_S as the budget holds; stage with the committed trials out (lease_tree.sh out), and
# on the setup call `mkdir -p /root/smoke && touch /root/smoke/importtime.txt` first.
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh

host_probe before
by_card h75 spread_05b c-0.5b-h75
host_probe after
stamp "plan done"
