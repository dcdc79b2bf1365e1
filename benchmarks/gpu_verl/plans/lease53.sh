#!/usr/bin/env bash
# Calibration campaign, lease 53 (issues 23.2, 23.3), written for the next session. Lease 52 (one H200) ran the 7B pick
# (selective [core_attn,mlp] dyn24k/96k, half the optimizer on the CPU) at util 0.3 with its parameters offloaded and
# without, and at util 0.4 offloaded: 3,197.6, 3,114.2 and 3,124.4 tokens/s/GPU, steps within 1.1 s of one another.
# Offload cost the 7B's log-prob pass 0.4 s (6.1-6.5 s against 5.7-6.2 s), so its pass leaves 0.7-0.8 s above its FLOPs
# for its size, not its offload (every smaller size: 2.1-2.3 s). What the 7B's model still misses most is its
# micro-batches: lease 48's selective recompute at micro-batches of 2/8 measured 57.6 s a step where the model says
# 71.2 s (the small sizes' cost per small micro-batch, which the 7B's longer GPU work may hide), and its micro-batches
# of 4/16 ran 51.7-55.8 s on three hosts (the model 54.0 s). Both beside the table's best on one host orders the three
# (the model: 55.0, 71.2, 54.0 s) without the hosts between them.
# Every branch first times the host's AdamW and Megatron's hybrid optimizer (cpu_adam_probe, ~30 s; lease 52's host:
# 7.9e8 and 5.5e8 parameters a second).
#   One H200 (nvidia-h200): the table's best (dyn24k/96k util 0.3, parameters offloaded), selective recompute at
#              micro-batches of 2/8, then no recompute at 4/16 (lease 52's study stopped at two with 600 s asked a
#              trial: its warm 7B trials took 406-417 s, its cold one 512 s; 450 s asked here). ~410-510 s a trial.
#   H200 node of two: the Qwen2.5-14B on both GPUs (TP 2), its study's own first launch and second pick.
#   H100 node: lease 41's H100 branch: lane 0 the 1.5B, lane 1 the 3B, one spread study each (asked since lease 41).
# Start with AT_MODEL=qwen2.5-7b AT_MORE_MODELS="" on one H200, AT_MODEL=qwen2.5-14b on two (on an H100 node:
# AT_MODEL=qwen2.5-3b AT_MORE_MODELS="qwen2.5-1.5b"), LEASE_S=1600 where the machine counts in full; stage with the
# committed trials out (lease_tree.sh out). Each configuration was checked with a simulated dry run on this job.
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh

cpu_adam_probe
seven_micro_batches() {
    at qwen2.5-7b c-7b-h51 3 450 --extra-steps 1 \
        --enqueue "$(dyn 24576 98304 0.3),$SEL2,$CPU_ADAM05,param_offload=true" \
        --enqueue "$(mbs 2 8 0.4),$SEL2,$CPU_ADAM05,param_offload=true" \
        --enqueue "$(mbs 4 16 0.4),$CPU_ADAM05,param_offload=true"
}
by_node seven_micro_batches
wait
stamp "plan done"
