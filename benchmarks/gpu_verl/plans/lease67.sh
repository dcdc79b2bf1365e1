#!/usr/bin/env bash
# Calibration campaign, lease 67 (issue 23.3, 23.5), written 2026-12-07 (forty-first session) for the next session, by
# the card and the workload set up.
# On an H200 with AT_MODEL=qwen2.5-7b: the 7B table's replayed first launch and its best on one host (pair_7b, about
# 1,100 s of lease; carried over since lease 63). On an H200 with AT_MODEL=qwen2.5-0.5b: the H200 0.5B table's first
# launch and best on one host (pair_h200_05b).
# On an H100, AT_MODEL=qwen2.5-0.5b: lease 66's 0.5B at dyn16k/32k without verl's fused kernels paid 1.0-1.1 s a
# log-prob pass over its twin with them on one host (49 ps a logit), where lease 65's 1.5B pairs paid none (the same
# logits a pass). What differs is the pass's memory (78 GiB of the H100's 80 against 70) and its micro-batches (five
# of 32k tokens against ten of 16k). The 0.5B at dyn8k/16k (ten micro-batches of 16k, lower peak) with and without
# them tells which: with them first (the cold trial), then without; then dyn16k/32k without and with (lease 66's pair
# on another host); a second study runs dyn8k/16k with them again, warm. ~0.5B trials take 140-225 s.
# Either: AT_MORE_MODELS="", LEASE_S as the budget holds; stage with the committed trials out (lease_tree.sh out), and
# on the setup call `mkdir -p /root/smoke && touch /root/smoke/importtime.txt` first.
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh

DYN8_05=$R1,use_dynamic_bsz=true,ppo_max_token_len_per_gpu=8192,log_prob_max_token_len_per_gpu=16384
DYN8_05=$DYN8_05,gpu_memory_utilization=0.5
by_card h67 fused_pairs qwen2.5-0.5b c-0.5b-h67 c-0.5b-h67b 250 220 "$DYN8_05" "$OFFLOAD_OFF" \
        "$DYN8_05,use_fused_kernels=true"
stamp "plan done"
