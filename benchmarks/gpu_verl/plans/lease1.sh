#!/usr/bin/env bash
# GPU smoke, first lease (started by `device.sh start lease1`, runs detached in /root/smoke): the model's best
# first, then configurations chosen to vary rollout and training knobs and to fail for real (vLLM start OOM,
# update OOM), then a hang, then the sampler. Each `autotune run` resumes the same study with a larger budget.
set -u
cd /root/smoke
AT=(python3 -m autotune run --backend verl --model /root/work/model --gpus 1 --gpu-type h100
    --job /root/at_src/benchmarks/gpu_verl/job_smoke.yaml --storage sqlite:////root/smoke/smoke.db
    --study smoke-h100 --workdir /root/smoke/trials --confirm 0 --trial-timeout 1200 --stall-timeout 150)
R1=rollout_tp=1
stamp() { echo "[$(date -u +%T)] $*"; }
stamp "run 1: the model's best"
"${AT[@]}" --startup-timeout 600 --n-trials 1 > run1.out 2> run1.err
stamp "run 2: vLLM start OOM, update OOM, recompute+offload+budgets, no dynamic batching"
"${AT[@]}" --startup-timeout 600 --n-trials 5 \
    --enqueue "$R1,gpu_memory_utilization=0.95" \
    --enqueue "$R1,use_dynamic_bsz=false,ppo_micro_batch_size_per_gpu=64,log_prob_micro_batch_size_per_gpu=8" \
    --enqueue "$R1,use_dynamic_bsz=true,ppo_max_token_len_per_gpu=8192,log_prob_max_token_len_per_gpu=16384,recompute=full,param_offload=true,optimizer_offload=true,gpu_memory_utilization=0.6" \
    --enqueue "$R1,use_dynamic_bsz=false,ppo_micro_batch_size_per_gpu=4,log_prob_micro_batch_size_per_gpu=8,gpu_memory_utilization=0.8,max_num_batched_tokens=8192" \
    > run2.out 2> run2.err
stamp "run 3: a hang at vLLM start (inject_hang.py stops the engine core), caught by --startup-timeout"
python3 /root/at_src/benchmarks/gpu_verl/inject_hang.py --timeout 900 > inject.out 2>&1 &
"${AT[@]}" --startup-timeout 150 --n-trials 6 --enqueue "$R1,gpu_memory_utilization=0.55" > run3.out 2> run3.err
stamp "run 4: selective recompute + fused kernels, then the sampler"
"${AT[@]}" --startup-timeout 600 --n-trials 20 \
    --enqueue "$R1,use_dynamic_bsz=true,ppo_max_token_len_per_gpu=16384,recompute=selective,recompute_modules=core_attn,gpu_memory_utilization=0.4,use_fused_kernels=true" \
    > run4.out 2> run4.err
stamp "plan done"
