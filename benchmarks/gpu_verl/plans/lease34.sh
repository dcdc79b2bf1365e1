#!/usr/bin/env bash
# The 3B on a one-GPU H100 host of its own (issue 23), four trials of one study one after another (no lanes):
#   1. lease 10's c-3b#3 (rc:sel core_attn dyn8k/96k util0.4 cpu-adam0.5): its update ran 2-10 s over the model on
#      three hosts (lease 10's H100, lease 19's H200, lease 33's lane node), CPU Adam alone +1.1-1.4 s. On a host of its
#      own it says which: the configuration (recompute with the CPU optimizer) or the hosts.
#   2. lease 10's c-3b-fl#0 (the 3B's first launch: rc:sel core_attn,mlp dyn16k/96k util0.4 params offloaded), the H100
#      table's best, measured only on lease 10's host (whose gen ran 12 s where lease 30's ran 8 s).
#   3. lease 30's c-3b-h5#0 (#1 without the recompute): the control for 1 on the same host.
#   4. #1 with the parameters offloaded (lease 10's c-3b#4): an offload pair with 1.
# Lease 10's three rows are HOST_MISSES of the H100 3B ordering (0.45 over eight, 1.00 without them). First the host's
# CPU AdamW rate, then the study, steps 1-3 only. Start with AT_MODEL=qwen2.5-3b on nvidia-h100-x1 (LEASE_S=1650).
# Tried 2026-11-27 10:44 with 391 s left as one trial: the H100 counted its held time in full, given back (32 s).
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh
cpu_adam_probe
B=$R1,use_fused_kernels=true,use_dynamic_bsz=true,log_prob_max_token_len_per_gpu=98304,gpu_memory_utilization=0.4
C0=$B,ppo_max_token_len_per_gpu=8192,optimizer_cpu_offload=true,optimizer_offload_fraction=0.5
SEL=recompute=selective,recompute_modules=core_attn
FL=$B,ppo_max_token_len_per_gpu=16384,recompute=selective,recompute_modules=[core_attn,mlp],param_offload=true
at qwen2.5-3b c-3b-h10 4 360 --extra-steps 0 --enqueue "$C0,$SEL" --enqueue "$FL" --enqueue "$C0" \
    --enqueue "$C0,$SEL,param_offload=true"
stamp "plan done"
