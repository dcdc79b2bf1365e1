#!/usr/bin/env bash
# GPU smoke, third lease (a fresh study): measured steps. The model's best first, with the attention backend the
# doctor chose on this node (it runs TE's fused attention once and falls back to `unfused` where cuDNN fails); then
# configurations that spread the rollout and training knobs (budgets, micro-batches without dynamic batching,
# recompute, offload, vLLM's share of memory), then the study's own plan. Should TE's fused attention still fail
# at step 1 although the doctor's run passed, the rest runs as a second study whose job sets `unfused`.
set -u
cd /root/smoke
# shellcheck source=study.sh
. /root/at_src/benchmarks/gpu_verl/plans/study.sh  # AT, stamp, enqueued configurations (device.sh copies the plan away)
R1=rollout_tp=1
stamp "run 1: the model's best"
"${AT[@]}" --n-trials 1 > run1.out 2> run1.err
if python3 -m autotune status --storage sqlite:////root/smoke/smoke.db --study smoke-h100 --all 2>&1 \
        | grep -q attention_backend_error; then
    stamp "fused attention failed in verl although the doctor's run passed: the rest with attention_backend=unfused"
    cp /root/at_src/benchmarks/gpu_verl/job_smoke.yaml /root/smoke/job_unfused.yaml
    echo "actor_rollout_ref.actor.megatron.override_transformer_config.attention_backend: unfused" \
        >> /root/smoke/job_unfused.yaml
    AT=("${AT[@]/smoke-h100/smoke-h100-unfused}")
    AT=("${AT[@]/\/root\/at_src\/benchmarks\/gpu_verl\/job_smoke.yaml//root/smoke/job_unfused.yaml}")
    "${AT[@]}" --n-trials 1 > run1u.out 2> run1u.err
fi
stamp "run 2: budgets, micro-batches, recompute, offload, vLLM's share"
"${AT[@]}" --n-trials 5 \
    --enqueue "$R1,use_dynamic_bsz=false,ppo_micro_batch_size_per_gpu=4,log_prob_micro_batch_size_per_gpu=8,gpu_memory_utilization=0.8,max_num_batched_tokens=8192" \
    --enqueue "$R1,use_dynamic_bsz=true,ppo_max_token_len_per_gpu=16384,recompute=selective,recompute_modules=core_attn,gpu_memory_utilization=0.4,use_fused_kernels=true" \
    --enqueue "$OFFLOAD" \
    --enqueue "$SMALL_BUDGETS" \
    > run2.out 2> run2.err
stamp "run 3: the study's plan"
"${AT[@]}" --n-trials 12 > run3.out 2> run3.err
stamp "plan done"
