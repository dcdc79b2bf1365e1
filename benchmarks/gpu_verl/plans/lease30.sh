#!/usr/bin/env bash
# The 3B's CPU Adam on another H100 host (issue 23): lease 10's three 3B trials with half the optimizer on the CPU ran
# their update 4.7-5.9 s over the model (HOST_MISSES; the 3B's H100 Spearman 0.36, 1.00 without them) while lease 25's
# host ran the whole optimizer's CPU Adam as priced. Here, first the host's CPU AdamW rate (benchmarks.cpu_adam_rate,
# into cpu_adam_rate.json), then lease 10's c-3b#0 (dyn8k/96k util0.4 cpu-adam0.5) once more, the same with the whole
# optimizer on the CPU (fraction 0.5 vs 1.0 on one host), and lease 10's c-3b#3 (+ selective core_attn recompute).
# No extra step (three 3B trials fit a lease that way). Start with AT_MODEL=qwen2.5-3b on nvidia-h100-x1.
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh
cpu_adam_probe
C0=$R1,use_fused_kernels=true,use_dynamic_bsz=true,ppo_max_token_len_per_gpu=8192,log_prob_max_token_len_per_gpu=98304
C0=$C0,gpu_memory_utilization=0.4,optimizer_cpu_offload=true,optimizer_offload_fraction=0.5
C1=${C0%0.5}1.0
at qwen2.5-3b c-3b-h5 3 400 --extra-steps 0 --enqueue "$C0" --enqueue "$C1" \
    --enqueue "$C0,recompute=selective,recompute_modules=core_attn"
stamp "plan done"
