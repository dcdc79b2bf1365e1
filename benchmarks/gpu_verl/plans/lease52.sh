#!/usr/bin/env bash
# Calibration campaign, lease 52 (issues 23.2, 23.3), written for the next session. Lease 51 (one H200) ran the 3B's
# full recompute and none at dyn8k/96k, each with half the optimizer on the CPU and without: the host's torch AdamW
# alone ran 7.8e8 parameters a second, its two pairs 4.4e8 and 5.5e8 (the model keeps the pairs' median, 5.4e8), and
# full recompute's second forward left 2.8-4.2 s above its FLOPs (the 1.5B's pairs 1.7 s, the 7B's one 0.15 s).
# The one phase over the target's reach held out is the 7B's old_log_prob (21 %): its log-prob pass leaves 0.85 s
# above its FLOPs where every smaller size leaves 2.2-2.8 s, and every 7B trial so far had its parameters offloaded
# (the model adds their reload, 0.59 s, to the pass). Is the 7B's smaller cost its size's or the offload's?
# Every branch first times the host's AdamW and Megatron's hybrid optimizer (cpu_adam_probe, ~30 s; after lease 51 a
# fresh H200 ran them at 8.3e8 and 5.2e8 parameters a second).
#   One H200 (nvidia-h200): the 7B job's pick (selective [core_attn,mlp] dyn24k/96k, half the optimizer on the CPU)
#              at util 0.3 with the parameters offloaded and without (without: predicted 131.4 GiB of the 140.4 it
#              may use; at util 0.4 145.5, not asked), then the pick as leases 47 and 50 ran it (util 0.4, offloaded)
#              if the lease leaves the time: this host against theirs. ~380-460 s a trial.
#   H200 node of two: lease 51's: the Qwen2.5-14B on both GPUs (TP 2), its study's own first launch and second pick.
#   H100 node: lease 41's H100 branch: lane 0 the 1.5B, lane 1 the 3B, one spread study each (asked since lease 41).
# Start with AT_MODEL=qwen2.5-7b AT_MORE_MODELS="" on one H200, AT_MODEL=qwen2.5-14b on two (on an H100 node:
# AT_MODEL=qwen2.5-3b AT_MORE_MODELS="qwen2.5-1.5b"), LEASE_S=1600 where the machine counts in full; stage with the
# committed trials out (lease_tree.sh out). Each configuration was checked with a simulated dry run on this job (the
# 7B with the whole optimizer on the CPU needs 149.7 GiB of host memory: refused, so not asked).
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh

cpu_adam_probe
PICK=$SEL2,$CPU_ADAM05
seven_offload_pair() {
    at qwen2.5-7b c-7b-h50 3 600 --extra-steps 1 \
        --enqueue "$(dyn 24576 98304 0.3),$PICK,param_offload=true" \
        --enqueue "$(dyn 24576 98304 0.3),$PICK" \
        --enqueue "$(dyn 24576 98304 0.4),$PICK,param_offload=true"
}
if [ "$GPU_TYPE" = h100 ]; then
    spread_h100 c-1.5b-h47 c-3b-h48
elif [ "$(nvidia-smi -L | grep -c '^GPU')" = 1 ]; then
    seven_offload_pair
else
    two_gpu_study qwen2.5-14b c-14b-x2 2 800 --extra-steps 1
fi
wait
stamp "plan done"
