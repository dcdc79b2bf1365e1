#!/usr/bin/env bash
# Calibration campaign, lease 69 (issue 23.3, 23.5), written 2026-12-07 (forty-fifth session) for the next session, by
# the card and the workload set up.
# On an H200 with AT_MODEL=qwen2.5-7b: the 7B table's replayed first launch and its best on one host (pair_7b, about
# 1,100 s of lease; carried over since lease 63). On an H200 with AT_MODEL=qwen2.5-0.5b: the H200 0.5B table's first
# launch and best on one host (pair_h200_05b). Both tables' first launch and best never ran on one host (23.5).
# On an H100, AT_MODEL=qwen2.5-0.5b: lease 68's one-host spread (c-0.5b-h68s: dyn4k/8k and micro-batches of 2/8 at util
# 0.4, full recompute at dyn16k/32k, dyn8k/16k; plus dyn16k/32k, its c-0.5b-h68 #3) once more on another host. Lease
# 68's host was fast (rollouts one 2 s poll under every other H100's, small micro-batches nearly free, full recompute
# +0.5 s where the model charges +2.6 s): whether the model's order of the five holds on a host of the usual speed
# (Spearman over single runs of one host, 23.3) and what the same configurations cost there. ~0.5B trials 130-225 s.
# The host-bound two (full recompute, micro-batches of 2/8) second and third: a short lease gets them. The host's speed
# probed before and after (host_probe).
# Either: AT_MORE_MODELS="", LEASE_S as the budget holds; stage with the committed trials out (lease_tree.sh out), and
# on the setup call `mkdir -p /root/smoke && touch /root/smoke/importtime.txt` first.
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh

host_probe before
by_card h69 spread_05b c-0.5b-h69
host_probe after
stamp "plan done"
