#!/usr/bin/env bash
# The H200's 3B on a one-GPU host of its own (issue 23: Spearman 0.45 over sixteen, every row from lane nodes, lease
# 33's nine HOST_MISSES), one study, trials one after another through one kept Ray head, each with one extra step (its
# noise: lease 35's five had none, and a table of several hosts needs each row's spread):
#   1. the model's first launch on the H200 3B table (lease 22's c-3b-h2 #2: rc:sel core_attn,mlp dyn16k/96k,
#      parameters and optimizer offloaded; 5,152.5 there, 99 % of the best);
#   2. the table's best (lease 22's c-3b-h2 #0: full recompute dyn16k/96k, optimizer offloaded; 5,229.8);
#   3. lease 33's control, the whole optimizer on the CPU without recompute (c-3b-h6 #2, dyn8k/96k);
#   4. lease 33's micro-batches of 2 with the optimizer offloaded (c-3b-mb2 #1, the named outlier: 0.071 s a
#      micro-batch there, 0.112 s the other sizes' fit).
# Steps 1-4. A 3B trial took ~400 s cold and 217-278 s warm on an H100 (steps 1-3). Written for a fresh session's
# device time: start with AT_MODEL=qwen2.5-3b on nvidia-h200 (LEASE_S=1650; read lease.counts in the first reply);
# 30 payload parts of 11 MiB since lease 35 (stage 1 ... 30, the call that stages 30 sets up and starts the plan).
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh
cpu_adam_probe
F=$R1,use_fused_kernels=true,gpu_memory_utilization=0.4
D16=$F,use_dynamic_bsz=true,ppo_max_token_len_per_gpu=16384,log_prob_max_token_len_per_gpu=98304
at qwen2.5-3b c-3b-h12 4 330 --extra-steps 1 \
    --enqueue "$D16,param_offload=true,optimizer_offload=true,recompute=selective,recompute_modules=[core_attn,mlp]" \
    --enqueue "$D16,optimizer_offload=true,recompute=full" \
    --enqueue "$F,use_dynamic_bsz=true,ppo_max_token_len_per_gpu=8192,log_prob_max_token_len_per_gpu=98304,optimizer_cpu_offload=true,optimizer_offload_fraction=1.0" \
    --enqueue "$F,use_dynamic_bsz=false,ppo_micro_batch_size_per_gpu=2,log_prob_micro_batch_size_per_gpu=8,optimizer_offload=true"
stamp "plan done"
