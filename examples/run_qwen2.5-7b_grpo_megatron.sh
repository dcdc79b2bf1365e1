#!/usr/bin/env bash
# A verl 0.9.1 Megatron GRPO launch script in the usual form; autotune reads it as the job:
#   autotune run --model qwen2.5-7b --backend verl --job examples/run_qwen2.5-7b_grpo_megatron.sh
#   autotune export --format sh --like examples/run_qwen2.5-7b_grpo_megatron.sh -o run_tuned.sh
# (the tuned script is this file with only the tuned layout keys changed).
set -xeuo pipefail

export CUDA_DEVICE_MAX_CONNECTIONS=1  # Megatron communication/computation overlap

DATA_DIR=${DATA_DIR:-$HOME/data/gsm8k}
MODEL_PATH=${MODEL_PATH:-Qwen/Qwen2.5-7B-Instruct}
max_prompt_length=$((1024 * 2))
max_response_length=$((1024 * 8))
n_resp_per_prompt=16

python3 -m verl.trainer.main_ppo \
    model_engine=megatron \
    algorithm.adv_estimator=grpo \
    data.train_files="$DATA_DIR/train.parquet" \
    data.val_files="$DATA_DIR/test.parquet" \
    data.train_batch_size=512 \
    data.max_prompt_length=${max_prompt_length} \
    data.max_response_length=${max_response_length} \
    data.filter_overlong_prompts=True \
    data.truncation='error' \
    actor_rollout_ref.model.path="${MODEL_PATH}" \
    actor_rollout_ref.actor.optim.lr=1e-6 \
    actor_rollout_ref.actor.ppo_mini_batch_size=32 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4 \
    actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2 \
    actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=2 \
    actor_rollout_ref.actor.use_kl_loss=False \
    actor_rollout_ref.rollout.name=vllm \
    actor_rollout_ref.rollout.n=${n_resp_per_prompt} \
    actor_rollout_ref.rollout.tensor_model_parallel_size=2 \
    actor_rollout_ref.rollout.gpu_memory_utilization=0.6 \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4 \
    algorithm.use_kl_in_reward=False \
    trainer.logger='["console","wandb"]' \
    trainer.project_name=grpo_qwen2.5-7b \
    trainer.experiment_name=megatron_tp2pp2 \
    trainer.n_gpus_per_node=8 \
    trainer.nnodes=1 \
    trainer.save_freq=50 \
    trainer.test_freq=10 \
    trainer.total_epochs=10 "$@"
