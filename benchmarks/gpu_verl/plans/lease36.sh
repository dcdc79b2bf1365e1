#!/usr/bin/env bash
# The H200's 3B on a one-GPU host of its own, and two offload on/off pairs at the 3B (issue 23: the H200 3B's Spearman
# 0.45 over sixteen, every row from lane nodes; the six params+optimizer pairs so far, 0.5B and 1.5B, measured their
# updates 0.8-2.8 s apart over their steady steps where the bytes moved say 0.3-0.8 s, and no 3B pair offloads the
# optimizer). One study, trials one after another through one kept Ray head, each with one extra step (its noise):
#   1. the model's first launch on the H200 3B table (lease 22's c-3b-h2 #2: rc:sel core_attn,mlp dyn16k/96k,
#      parameters and optimizer offloaded; 5,152.5 there, 99 % of the best);
#   2. #1 with nothing offloaded (the pair);
#   3. the table's best (lease 22's c-3b-h2 #0: full recompute dyn16k/96k, optimizer offloaded; 5,229.8);
#   4. #3 with nothing offloaded (the pair);
#   5. lease 33's control, the whole optimizer on the CPU without recompute (c-3b-h6 #2, dyn8k/96k), if time is left.
# Steps 1-4. A 3B trial took ~400 s cold and 217-278 s warm on an H100 (steps 1-3). Written for a fresh session's
# device time: start with AT_MODEL=qwen2.5-3b on nvidia-h200 with needs_h200 (#2 and #4 are predicted at 112 GiB: an
# H100 cannot hold them) (LEASE_S=1650; read lease.counts in the first reply);
# 30 payload parts of 11 MiB since lease 35 (stage 1 ... 30, the call that stages 30 sets up and starts the plan).
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh
cpu_adam_probe
F=$R1,use_fused_kernels=true,gpu_memory_utilization=0.4
D16=$F,use_dynamic_bsz=true,ppo_max_token_len_per_gpu=16384,log_prob_max_token_len_per_gpu=98304
SEL=recompute=selective,recompute_modules=[core_attn,mlp]
at qwen2.5-3b c-3b-h12 5 330 --extra-steps 1 \
    --enqueue "$D16,$SEL,param_offload=true,optimizer_offload=true" --enqueue "$D16,$SEL" \
    --enqueue "$D16,recompute=full,optimizer_offload=true" --enqueue "$D16,recompute=full" \
    --enqueue "$F,use_dynamic_bsz=true,ppo_max_token_len_per_gpu=8192,log_prob_max_token_len_per_gpu=98304,optimizer_cpu_offload=true,optimizer_offload_fraction=1.0"
stamp "plan done"
