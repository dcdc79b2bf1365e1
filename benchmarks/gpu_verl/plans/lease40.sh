#!/usr/bin/env bash
# Budgets the model prunes today but verl's micro-batches fit (issue 23.3: memory per moment within 8 %, no
# configuration the model lets through that runs out of memory). The model holds a dynamic-batching micro-batch at
# its token budget; verl 0.9.1 cuts a mini-batch of T tokens into ceil(T / budget) balanced micro-batches
# (`rearrange_micro_batches`). On this job a step's mini-batch is ~76k tokens (64 responses, nearly all at the 1,024
# cap, prompts ~170), at most 98,304. One-GPU H200, one extra step each:
#   1. 1.5B dyn36k/96k util0.4: the model says 139.6 GiB (at the limit of the 140.4); verl cuts three of ~25k,
#      as at dyn32k (lease 38's c-1.5b-h15 #0: 109.3 GiB on NVML), so it should fit at ~110 GiB.
#   2. 0.5B dyn96k/96k util0.5: the model says 150.1 GiB; one micro-batch of ~76k should hold ~118 GiB.
#   3. 0.5B dyn64k/96k util0.5: the model says 104.6 GiB; two of ~38k should hold ~70 GiB.
#   4. 1.5B dyn40k/96k util0.4: two micro-batches of ~38k, ~150 GiB by either rule: the OOM that bounds the rule.
# Then the 0.5B study as a user runs it until the lease's deadline. A 1.5B trial took ~300 s cold, 225 s warm, a 0.5B
# ~250 s cold, 170-200 s warm. AT_MODEL=qwen2.5-1.5b AT_MORE_MODELS=qwen2.5-0.5b on nvidia-h200 with needs_h200,
# LEASE_S=1650 where the machine counts 50 % (1,400 where it counts 67 %); 55 payload parts of 6 MiB. Ran on an H200
# that counted in full, LEASE_S=1600: 1-4 as written (108.9 GiB; 122.5; 82.5, the rollout; out of memory), the last
# line not started (91 s left).
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh
F=$R1,use_fused_kernels=true,use_dynamic_bsz=true,log_prob_max_token_len_per_gpu=98304
at qwen2.5-1.5b c-1.5b-h17 1 330 --extra-steps 1 --enqueue "$F,ppo_max_token_len_per_gpu=36864,gpu_memory_utilization=0.4"
at qwen2.5-0.5b c-0.5b-h18 2 250 --extra-steps 1 --enqueue "$F,ppo_max_token_len_per_gpu=98304,gpu_memory_utilization=0.5" \
    --enqueue "$F,ppo_max_token_len_per_gpu=65536,gpu_memory_utilization=0.5"
at qwen2.5-1.5b c-1.5b-h17 +1 250 --extra-steps 1 --enqueue "$F,ppo_max_token_len_per_gpu=40960,gpu_memory_utilization=0.4"
at qwen2.5-0.5b c-0.5b-h18 +4 200 --extra-steps 1
stamp "plan done"
