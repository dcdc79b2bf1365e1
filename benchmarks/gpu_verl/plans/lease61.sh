#!/usr/bin/env bash
# Calibration campaign, lease 61 (issues 23.3 and 23.5), written 2026-12-06 for the next session, by the GPU lent.
# On one H100: the H100 1.5B table's configurations measured once, beside its first launch, on one host. Lease 60 ran
# the first launch (dyn12k/96k) six times over four hosts (5,593-8,751 tokens/s/GPU; the row's mean at 91 % of the
# table's best), and the same configuration ran 20 % apart on one host minutes apart: a row of one run says little.
# The table's best (lease 18's micro-batches of 4/8 at util 0.5 without fused kernels, 7,876.8) ran once, on a host
# that ran everything fast; lease 35's 12k/32k trio at util 0.5 (none, selective, the offload pair's "on") once each.
# One study on one host, the first launch first (the cold trial that warms the caches: its step 3 may recompile,
# trial_cost.md "Steps that recompiled"), steps 1-3 only as lease 59 (five in 1,374 s).
# The first lease whose traces carry NVML's utilization beside the memory (gpu.csv gpuN_util_pct, 2026-12-06): each
# step's wait for verl's 2 s rollout poll (extra.rollout_idle_s, autotune/results/rollout_wait.py), to check against
# the committed consoles' gen (2k s + 0.1-0.3 s) and to measure each step without the poll's rounding. After the plan,
# on the same machine (the trials out of the tree): `/opt/torch/.venv/bin/python -m benchmarks.nvml_utilization_lag
# --out $OUT/nvml_utilization_lag_<gpu>.json` (~20 s): how late NVML reads the GPU idle, the idle tail's precision.
# On one H200: lease 57's 7B pair (dyn4k/8k beside the job's pick on one host).
# Start with AT_MODEL=qwen2.5-1.5b (qwen2.5-7b on an H200) AT_MORE_MODELS="", LEASE_S as the budget holds (less what the
# machine's start held before the first command; leases 58-60's H100s counted in full); stage with the committed
# trials out (lease_tree.sh out), and on the setup call `mkdir -p /root/smoke && touch /root/smoke/importtime.txt` first.
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh

if [ "$GPU_TYPE" = h100 ]; then
    at qwen2.5-1.5b c-1.5b-h61 5 380 --extra-steps 0 \
        --enqueue "$(dyn 12288 98304 0.4)" \
        --enqueue "$R1,use_dynamic_bsz=false,ppo_micro_batch_size_per_gpu=4,log_prob_micro_batch_size_per_gpu=8,gpu_memory_utilization=0.5,use_fused_kernels=false" \
        --enqueue "$(dyn 12288 32768 0.5)" \
        --enqueue "$(dyn 12288 32768 0.5),$SEL2" \
        --enqueue "$(dyn 12288 32768 0.5),param_offload=true,optimizer_offload=true"
else
    at qwen2.5-7b c-7b-h61 2 500 --extra-steps 0 \
        --enqueue "$(dyn 4096 8192 0.3),$SEL2,$CPU_ADAM05,param_offload=true" \
        --enqueue "$(dyn 24576 98304 0.3),$SEL2,$CPU_ADAM05,param_offload=true"
fi
stamp "plan done"
