#!/usr/bin/env bash
# Calibration campaign, lease 51 (issues 23.2, 23.3), written for the next session. Lease 50 (one H200) ran the 7B
# job's pick beside full recompute on one host: full recompute cost the update 1.2-1.9 s over the pick (steps 2-4),
# the model 3.3-3.7 s; and that host ran the pick 13 % faster than the one-GPU H200s of leases 13 and 32 (its update
# 30.7 s against 35.2-35.9 s), where half the update is the CPU optimizer's step. Whether a host's CPU is what moves
# the 7B's update is what this lease asks: every branch first measures the host's CPU AdamW rate (cpu_adam_probe,
# ~10 s, into cpu_adam_rate.json), then runs pairs with the CPU optimizer and without it on that host.
#   One H200 (nvidia-h200): the 3B's full recompute and none at dyn8k/96k util 0.4, each with half the optimizer on
#              the CPU and without it (lease 50's lane 1, four trials ~280-320 s each): two more CPU-optimizer pairs on
#              a host whose microbenchmark is measured, and full recompute's fixed cost at the next size on one host.
#   H200 node of two: a size never measured, the user's way: the Qwen2.5-14B architecture on both GPUs (TP 2), its
#              study's own first launch and second pick, nothing enqueued (the model, uncorrected, held out by
#              construction: the 14B does not fit one H200, and no 14B trial has run). Simulated on this job it
#              launches tp2 rtp2 dyn8k/96k util0.4 with the parameters offloaded and half the optimizer on the CPU.
#   H100 node: lease 41's H100 branch: lane 0 the 1.5B, lane 1 the 3B, one spread study each (asked since lease 41).
# Start with AT_MODEL=qwen2.5-3b AT_MORE_MODELS="" on one H200, AT_MODEL=qwen2.5-14b on two (on an H100 node:
# AT_MODEL=qwen2.5-3b AT_MORE_MODELS="qwen2.5-1.5b"), LEASE_S=1600 where the machine counts in full; stage with the
# committed trials out (lease_tree.sh out). Each configuration was checked with a simulated dry run on this job.
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh

cpu_adam_probe
three_pairs() {
    at qwen2.5-3b c-3b-h49 4 330 --extra-steps 1 \
        --enqueue "$(dyn 8192 98304 0.4),$FULL,$CPU_ADAM05" \
        --enqueue "$(dyn 8192 98304 0.4),$FULL" \
        --enqueue "$(dyn 8192 98304 0.4),$CPU_ADAM05" \
        --enqueue "$(dyn 8192 98304 0.4)"
}
if [ "$GPU_TYPE" = h100 ]; then
    spread_h100 c-1.5b-h47 c-3b-h48
elif [ "$(nvidia-smi -L | grep -c '^GPU')" = 1 ]; then
    three_pairs
else
    # Two GPUs in one study: NVLink multicast stays off (the device's KINDS.md: set on the machine; kept here for
    # every process the study starts), and the host's memory is given (its MemTotal may read low until it is used).
    export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
    at qwen2.5-14b c-14b-x2 2 800 --gpus 2 --host-memory 250 --extra-steps 1  # the last --gpus counts
fi
wait
stamp "plan done"
