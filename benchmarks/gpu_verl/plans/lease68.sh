#!/usr/bin/env bash
# Calibration campaign, lease 68 (issue 23.3, 23.5), written 2026-12-07 (forty-third session) for the next session, by
# the card and the workload set up.
# On an H200 with AT_MODEL=qwen2.5-7b: the 7B table's replayed first launch and its best on one host (pair_7b, about
# 1,100 s of lease; carried over since lease 63). On an H200 with AT_MODEL=qwen2.5-0.5b: the H200 0.5B table's first
# launch and best on one host (pair_h200_05b). Both tables' first launch and best never ran on one host (23.5).
# On an H100, AT_MODEL=qwen2.5-0.5b: lease 67's 0.5B on one host paid 14 ps a logit without verl's fused kernels at
# dyn8k/16k (ten log-prob micro-batches of 16k tokens, a peak of 54.5 GiB) and 32 ps at dyn16k/32k (five of 32k, 78.0
# GiB of the H100's 79.6; lease 66's host 49 ps). Which of the micro-batch's size or the memory it fills sets that
# price: dyn16k/32k with the actor's parameters and optimizer offloaded (lease 28's c-0.5b-kw #1 without fused kernels:
# 73.7 GiB, the same micro-batches with ~6 GiB less held) with them (the cold trial), then without; then without
# offload without and with them (lease 66's and 67's pair on a third host). Both pairs are offload on/off pairs on one
# host too. A second study runs the offloaded one with fused kernels again, warm. ~0.5B trials take 190-225 s.
# The head alone (benchmarks/unfused_logits.py, forty-fourth session) says the memory: a logit cost 21 ps at 16k and
# 32k with memory to spare, 1.2-2.9x that with the GPU otherwise full; so the offloaded pair should pay less than 32 ps.
# Either: AT_MORE_MODELS="", LEASE_S as the budget holds; stage with the committed trials out (lease_tree.sh out), and
# on the setup call `mkdir -p /root/smoke && touch /root/smoke/importtime.txt` first.
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh

by_card h68 fused_pairs qwen2.5-0.5b c-0.5b-h68 c-0.5b-h68b 250 220 "$OFFLOAD_ON" "$OFFLOAD_OFF" \
        "$OFFLOAD_ON,use_fused_kernels=true"
stamp "plan done"
