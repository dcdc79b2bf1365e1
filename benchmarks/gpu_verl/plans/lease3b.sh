#!/usr/bin/env bash
# GPU smoke, lease 3b (a fresh machine): after lease 3 the memory model counts unfused attention's score
# matrices (the doctor picks `unfused` on this node; the model's best of lease 3, dyn32k without recompute, ran out
# of memory in the update). A new study, uncorrected (no warm start: lease 3's stored correction was fitted to
# the old memory model): the model's best first, then two configurations lease 3 did not finish.
set -u
cd /root/smoke
# shellcheck source=study.sh
. /root/at_src/benchmarks/gpu_verl/plans/study.sh  # AT, stamp, enqueued configurations (device.sh copies the plan away)
AT=("${AT[@]/smoke-h100/smoke-h100-b}")
stamp "run 1: the model's best, unfused attention counted"
"${AT[@]}" --no-warm-start --n-trials 1 > run1.out 2> run1.err
stamp "run 2: small budgets at vLLM 0.7; full recompute with offload"
"${AT[@]}" --n-trials 3 \
    --enqueue "$SMALL_BUDGETS" \
    --enqueue "$OFFLOAD" \
    > run2.out 2> run2.err
stamp "run 3: the study's plan"
"${AT[@]}" --n-trials 8 > run3.out 2> run3.err
stamp "plan done"
