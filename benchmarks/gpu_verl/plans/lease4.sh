#!/usr/bin/env bash
# Calibration campaign, lease 4 (issues 23 and 24): fused attention (TE's cuDNN fixed by the doctor's environment),
# shared compile caches. Qwen2.5-0.5B first: the model's best on cold caches, then warm trials of the same job (an
# offload on/off pair, micro-batches without dynamic batching): the start-up they save. Then Qwen2.5-1.5B.
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh
at qwen2.5-0.5b c-0.5b 1 420
at qwen2.5-0.5b c-0.5b 4 300 --enqueue "$OFFLOAD_OFF" --enqueue "$OFFLOAD_ON" --enqueue "$MICRO"
at qwen2.5-1.5b c-1.5b 1 480
at qwen2.5-1.5b c-1.5b 3 360 --enqueue "$MICRO_OOM" --enqueue "$OFFLOAD_ON"
stamp "plan done"
