#!/usr/bin/env bash
# Calibration campaign, lease 71 (issue 23.3, 23.5), written 2026-12-07 (forty-seventh session) for the next session,
# by the card and the workload set up: lease 70's plan again, since its lease ran one trial of four.
# On an H200 with AT_MODEL=qwen2.5-7b: the 7B table's replayed first launch and its best on one host (pair_7b, about
# 1,100 s of lease). On an H200 with AT_MODEL=qwen2.5-0.5b: the H200 0.5B table's first launch and best on one host
# (pair_h200_05b). Both tables' first launch and best never ran on one host (23.5).
# On an H100, AT_MODEL=qwen2.5-1.5b: full recompute's second forward on one host at the 1.5B (the model charges it a
# log-prob pass's fixed cost, 2.0 s; two 0.5B pairs on H100s left 0.16-0.25 s above the FLOPs, the H200s' 1.5B pairs
# 1.7 s). Lease 70 (LEASE_S=706) ran the cold trial only: it took 322 s (steps 1-3 compiled), and with 251 s left the
# study's --deadline, which allows for its longest trial, launched no second. The pair needs LEASE_S >= ~780 (setup
# ~95 s, the cold trial ~320 s, the deadline's allowance for the second as long); then micro-batches of 2/8 and dyn4k/8k
# at util 0.4 as time allows. The host's speed probed before and after (the third lease with it).
# Either: AT_MORE_MODELS="", LEASE_S as the budget holds; stage with the committed trials out (lease_tree.sh out), and
# on the setup call `mkdir -p /root/smoke && touch /root/smoke/importtime.txt` first.
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh

host_probe before
by_card h71 recompute_15b c-1.5b-h71
host_probe after
stamp "plan done"
