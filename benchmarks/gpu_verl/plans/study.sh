# Sourced by the lease plans after lease 1: the resumed study's `autotune run` (AT) and a time stamp for the log.
AT=(python3 -m autotune run --backend verl --model /root/work/model --gpus 1 --gpu-type h100
    --job /root/at_src/benchmarks/gpu_verl/job_smoke.yaml --storage sqlite:////root/smoke/smoke.db
    --study smoke-h100 --workdir /root/smoke/trials --confirm 0 --trial-timeout 1200 --stall-timeout 150
    --startup-timeout 600)
stamp() { echo "[$(date -u +%T)] $*"; }
# Configurations the plans launch with --enqueue (rollout TP 1: one GPU)
OFFLOAD=rollout_tp=1,use_dynamic_bsz=true,ppo_max_token_len_per_gpu=8192,log_prob_max_token_len_per_gpu=16384,recompute=full,param_offload=true,optimizer_offload=true,gpu_memory_utilization=0.6
SMALL_BUDGETS=rollout_tp=1,use_dynamic_bsz=true,ppo_max_token_len_per_gpu=4096,log_prob_max_token_len_per_gpu=8192,gpu_memory_utilization=0.7
