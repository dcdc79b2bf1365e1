# Sourced by the calibration campaign's lease plans (issue 23): one study database per model size under
# /root/smoke/<study>.db, trials under /root/smoke/trials/<study>/, and nothing launched that cannot end before the
# lease's deadline (DEADLINE, epoch seconds, exported by device.sh).
stamp() { echo "[$(date -u +%T) lease +$(( $(date +%s) - $(cat /root/lease_t0) ))s] $*"; }
GPU_TYPE=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -qi h200 && echo h200 || echo h100)

# workload MODEL: the folder of MODEL's random-weight checkpoint (written by device.sh setup), waiting for it.
workload() {
    local m=$1 d=/root/work-$1 t=0  # device.sh setup links its own model's folder there too
    while [ ! -f "$d/model/config.json" ] && [ $t -lt "${2:-600}" ]; do sleep 5; t=$((t + 5)); done
    [ -f "$d/model/config.json" ] || { stamp "no workload for $m in $d" >&2; return 1; }
    sed "s|/root/work/model|$d/model|" /root/at_src/benchmarks/gpu_verl/job_smoke.yaml > "/root/smoke/job-$m.yaml"
    echo "$d"
}

# at MODEL STUDY N_TRIALS NEED_S [autotune run options...]: run STUDY of MODEL up to N_TRIALS launched trials,
# launching none that the lease cannot finish (NEED_S: the wall time one trial of it is expected to take).
at() {
    local m=$1 study=$2 n=$3 need=$4; shift 4
    local d left
    d=$(workload "$m") || return 1
    left=$(( DEADLINE - $(date +%s) ))
    if [ "$left" -lt "$need" ]; then stamp "$study: not started, ${left}s left in the lease < ${need}s a trial"; return 1; fi
    stamp "$study ($m): up to $n trials, $left s left"
    python3 -m autotune run --backend verl --model "$d/model" --gpus 1 --gpu-type "$GPU_TYPE" \
        --job "/root/smoke/job-$m.yaml" --storage "sqlite:////root/smoke/$study.db" --study "$study" \
        --workdir /root/smoke/trials --confirm 0 --trial-timeout 1200 --stall-timeout 240 --startup-timeout 600 \
        --n-trials "$n" --timeout $((left - need)) "$@" >> "/root/smoke/$study.out" 2>> "/root/smoke/$study.err"
    stamp "$study: exit $?"
}

# Configurations of the spread (rollout TP 1: one GPU); ON/OFF differ only in offload.
R1=rollout_tp=1
DYN16=$R1,use_dynamic_bsz=true,ppo_max_token_len_per_gpu=16384,log_prob_max_token_len_per_gpu=32768
OFFLOAD_OFF=$DYN16,gpu_memory_utilization=0.5
OFFLOAD_ON=$DYN16,gpu_memory_utilization=0.5,param_offload=true,optimizer_offload=true
MICRO=$R1,use_dynamic_bsz=false,ppo_micro_batch_size_per_gpu=4,log_prob_micro_batch_size_per_gpu=8,gpu_memory_utilization=0.6
FULL_RC=$R1,use_dynamic_bsz=true,ppo_max_token_len_per_gpu=8192,log_prob_max_token_len_per_gpu=16384,recompute=full,gpu_memory_utilization=0.7
MICRO_OOM=$R1,use_dynamic_bsz=false,ppo_micro_batch_size_per_gpu=64,log_prob_micro_batch_size_per_gpu=64,gpu_memory_utilization=0.5
