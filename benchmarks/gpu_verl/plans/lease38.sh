#!/usr/bin/env bash
# The H200's 1.5B on a one-GPU host of its own (issue 23: the H200 1.5B's Spearman 0.59 over twenty-one, every row from
# the lane nodes of leases 19, 20, 22, 32 and 33, whose hosts ran the small models 5-30 % slow; lease 36's one-GPU
# host took the H200 3B's from 0.45 to 0.77). First the model's own first launch on a fresh study (origin model-seed:
# the first-launch report's "not measured", dyn32k/96k util0.4 when this was written), alone so that nothing queued
# runs before it; then four of the table's rows across its range on the same host, through the same study:
#   1. dyn8k/16k util0.5 (lease 20's c-1.5b-rc #1, 8,771.9: the table's best);
#   2. the same with full recompute (c-1.5b-rc #0, 7,586.9);
#   3. dyn12k/96k util0.4 (lease 33's c-1.5b-h8 #1, 5,755.8: its steps 58 % apart on that node);
#   4. micro-batches of 4/8 without fused kernels (c-1.5b-h8 #0, 6,231.9).
# One extra step each (the noise). A 1.5B trial took ~300 s cold and 213-245 s warm on a lane (steps 1-3), lease 36's
# 3B 321 s cold with its extra step. For nvidia-h200 with needs_h200 (the util0.5 rows hold ~100 GiB; an H100 cannot),
# AT_MODEL=qwen2.5-1.5b, LEASE_S=1650 where the machine counts 50-67 % (1,200 where it counts in full: then the first
# two trials); 33 payload parts of 10 MiB since lease 37 (stage 1 ... 33, the call that stages 33 sets up and starts
# the plan).
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh
F=$R1,use_fused_kernels=true
D8=$F,use_dynamic_bsz=true,ppo_max_token_len_per_gpu=8192,log_prob_max_token_len_per_gpu=16384,gpu_memory_utilization=0.5
at qwen2.5-1.5b c-1.5b-h15 1 330 --extra-steps 1
at qwen2.5-1.5b c-1.5b-h15 +4 250 --extra-steps 1 --enqueue "$D8" --enqueue "$D8,recompute=full" \
    --enqueue "$F,use_dynamic_bsz=true,ppo_max_token_len_per_gpu=12288,log_prob_max_token_len_per_gpu=98304,gpu_memory_utilization=0.4" \
    --enqueue "$R1,use_dynamic_bsz=false,ppo_micro_batch_size_per_gpu=4,log_prob_micro_batch_size_per_gpu=8,gpu_memory_utilization=0.5"
stamp "plan done"
