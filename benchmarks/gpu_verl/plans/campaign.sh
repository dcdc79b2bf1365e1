# Sourced by the calibration campaign's lease plans (issue 23): one study database per model size under
# /root/smoke/<study>.db, trials under /root/smoke/trials/<study>/, and nothing launched that cannot end before the
# lease's deadline (DEADLINE, epoch seconds, exported by device.sh).
stamp() {
    local t0
    t0=$(cat /root/lease_t0 2> /dev/null) || t0=$(date +%s)  # no lease clock (a CPU test): seconds from now
    echo "[$(date -u +%T) lease +$(( $(date +%s) - t0 ))s] $*"
}
GPU_TYPE=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -qi h200 && echo h200 || echo h100)

# workload MODEL: the folder of MODEL's random-weight checkpoint (written by device.sh setup), waiting for it.
workload() {
    local m=$1 d=/root/work-$1 t=0  # device.sh setup links its own model's folder there too
    while [ ! -f "$d/model/config.json" ] && [ $t -lt "${2:-600}" ]; do sleep 5; t=$((t + 5)); done
    [ -f "$d/model/config.json" ] || { stamp "no workload for $m in $d" >&2; return 1; }
    sed "s|/root/work/model|$d/model|" /root/at_src/benchmarks/gpu_verl/job_smoke.yaml > "/root/smoke/job-$m.yaml"
    echo "$d"
}

# launched STUDY: how many trials STUDY's database (/root/smoke/STUDY.db) holds launched (0 where there is none).
launched() {
    local db=${SMOKE:-/root/smoke}/$1.db
    [ -f "$db" ] || { echo 0; return; }
    python3 -c 'import sys
from autotune.store.store import Store
store = Store(sys.argv[1])
names = {s.name for s in store.list_studies()}
print(sum(1 for r in store.trials(sys.argv[2]) if r.launched) if sys.argv[2] in names else 0)' "sqlite:///$db" "$1"
}

# target STUDY N: the --n-trials that launches N more trials ("+N": autotune run's --n-trials counts the study's
# launched trials, a resumed study's too; lease 9 and 10 as first written asked for 1 of a study that held 1 and 3,
# which launches nothing), or N itself.
target() {
    case $2 in
        +*) local have
            have=$(launched "$1") && [[ $have =~ ^[0-9]+$ ]] \
                || { stamp "$1: could not count its launched trials ($have)" >&2; return 1; }
            echo $(( have + ${2#+} )) ;;
        *) echo "$2" ;;
    esac
}

# at MODEL STUDY N_TRIALS NEED_S [autotune run options...]: run STUDY of MODEL up to N_TRIALS launched trials (+N:
# N more than it holds), launching none that the lease cannot finish: the study starts only with NEED_S left (the wall
# time one trial is expected to take), and its --deadline (the lease's end) launches each next trial only while the
# longest of its trials so far would end in time (a fixed NEED_S asked of every trial stopped lease 53's 7B study at
# two of three on a slow host, and would have on a fast one a trial early).
at() {
    local m=$1 study=$2 n need=$4
    local d left smoke=${SMOKE:-/root/smoke}  # SMOKE: a CPU test's folder
    n=$(target "$study" "$3") || return 1
    shift 4
    d=$(workload "$m") || return 1
    left=$(( DEADLINE - $(date +%s) ))
    if [ "$left" -lt "$need" ]; then stamp "$study: not started, ${left}s left in the lease < ${need}s a trial"; return 1; fi
    stamp "$study ($m): up to $n trials, $left s left"
    local logged  # what the study's log held before this run: a resumed study's log holds its earlier runs'
    logged=$(wc -c 2> /dev/null < "$smoke/$study.out" || echo 0)
    python3 -m autotune run --backend verl --model "$d/model" --gpus 1 --gpu-type "$GPU_TYPE" \
        --job "$smoke/job-$m.yaml" --storage "sqlite:///$smoke/$study.db" --study "$study" \
        --workdir "$smoke/trials${LANE:+/g$LANE}" --confirm 0 --trial-timeout 1200 --stall-timeout 240 \
        --startup-timeout 600 --n-trials "$n" --deadline "$left" ${LANE_HOST_GIB:+--host-memory "$LANE_HOST_GIB"} "$@" \
        >> "$smoke/$study.out" 2>> "$smoke/$study.err"
    local rc=$? have
    have=$(launched "$study" 2> /dev/null)
    # a study its --deadline stopped short of N_TRIALS says so, with why (the longest trial against the time left)
    local why
    why=$(tail -c +$((logged + 1)) "$smoke/$study.out" 2> /dev/null | grep -o 'reached --deadline[^)]*' | tail -1)
    stamp "$study: exit $rc, $have of $n launched$([ -n "$why" ] && [ "${have:-0}" -lt "$n" ] && echo ": $why")"
    return $rc
}

# cpu_adam_probe: the host's CPU AdamW rate and Megatron's hybrid optimizer's step there (benchmarks.cpu_adam_rate
# --hybrid) into /root/smoke/cpu_adam_rate.json, ~30 s.
cpu_adam_probe() {
    (cd /root/at_src && python3 -m benchmarks.cpu_adam_rate --hybrid --out /root/smoke/cpu_adam_rate.json \
        > /root/smoke/cpu_adam_rate.txt 2>&1)
    stamp "cpu adam: $(tail -1 /root/smoke/cpu_adam_rate.txt)"
}

# host_probe TAG: how fast the host's CPU drives its GPU (benchmarks.host_speed: a Python loop, a CPU tensor op, a
# kernel launch and a launch's round trip) into /root/smoke/host_speed_TAG.json, ~10 s: the per-host speed that
# trials of one configuration differ by (plans from lease 69 on).
host_probe() {
    (cd /root/at_src && python3 -m benchmarks.host_speed --out "/root/smoke/host_speed_$1.json" \
        > "/root/smoke/host_speed_$1.txt" 2>&1)
    stamp "host speed ($1): $(tail -1 "/root/smoke/host_speed_$1.txt")"
}

# lane GPU COMMAND...: COMMAND (a plan's `at`/`profile` line) in the background on GPU GPU of a node of several, as on
# a one-GPU machine: CUDA_VISIBLE_DEVICES (Ray, vLLM and autotune's NVML monitor see that GPU only), the GPU's share of
# the host's cores (taskset: a one-GPU lent machine has 16), its own work dir (LANE: trials/gGPU, its own compile
# caches), its share of the host's memory (LANE_HOST_GIB, passed as --host-memory: Ray's memory monitor kills any
# lane's workers once the node as a whole passes 95 %; lease 42's two lanes each counted the whole host and a 7B and a
# 3B trial were killed at once), its log in lane<GPU>.out. A plan ends with `wait` for its lanes.
lane() {
    local g=$1 n per
    shift
    n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU') || n=1
    [ "$n" -ge 1 ] || n=1
    per=$(( $(nproc) / n ))
    (
        export CUDA_VISIBLE_DEVICES=$g LANE=$g
        LANE_HOST_GIB=$(awk -v n="$n" '/^MemTotal:/ {printf "%.1f", $2 / 1048576 / n}' /proc/meminfo)
        export LANE_HOST_GIB
        [ "$per" -ge 1 ] && command -v taskset > /dev/null && taskset -cp "$((g * per))-$((g * per + per - 1))" $BASHPID \
            > /dev/null 2>&1
        stamp "lane $g: GPU $g, cores $(taskset -cp $BASHPID 2>/dev/null | sed 's/.*: //'): $*"
        "$@"
    ) >> "${SMOKE:-/root/smoke}/lane$g.out" 2>&1 &
}

# Configurations of the spread (rollout TP 1: one GPU); ON/OFF differ only in offload.
R1=rollout_tp=1
DYN16=$R1,use_dynamic_bsz=true,ppo_max_token_len_per_gpu=16384,log_prob_max_token_len_per_gpu=32768
OFFLOAD_OFF=$DYN16,gpu_memory_utilization=0.5
OFFLOAD_ON=$DYN16,gpu_memory_utilization=0.5,param_offload=true,optimizer_offload=true
MICRO=$R1,use_dynamic_bsz=false,ppo_micro_batch_size_per_gpu=4,log_prob_micro_batch_size_per_gpu=8,gpu_memory_utilization=0.6
FULL_RC=$R1,use_dynamic_bsz=true,ppo_max_token_len_per_gpu=8192,log_prob_max_token_len_per_gpu=16384,recompute=full,gpu_memory_utilization=0.7
# Lease 7's best 3B trial (c-3b #3) with the actor's parameters offloaded: the other half of an offload pair.
OFFLOAD_PAIR_3B=$R1,recompute=selective,recompute_modules=core_attn,use_dynamic_bsz=true,ppo_max_token_len_per_gpu=8192
OFFLOAD_PAIR_3B=$OFFLOAD_PAIR_3B,log_prob_max_token_len_per_gpu=98304,gpu_memory_utilization=0.4,use_fused_kernels=true
OFFLOAD_PAIR_3B=$OFFLOAD_PAIR_3B,optimizer_cpu_offload=true,optimizer_offload_fraction=0.5,param_offload=true
# The 1.5B's spread at gpu_memory_utilization 0.5 (at 0.6-0.7 the model puts their rollout at or over the H100).
FULL_RC_05=$R1,use_dynamic_bsz=true,ppo_max_token_len_per_gpu=8192,log_prob_max_token_len_per_gpu=16384,recompute=full
FULL_RC_05=$FULL_RC_05,gpu_memory_utilization=0.5
MICRO_05=$R1,use_dynamic_bsz=false,ppo_micro_batch_size_per_gpu=4,log_prob_micro_batch_size_per_gpu=8
MICRO_05=$MICRO_05,gpu_memory_utilization=0.5
MICRO_OOM=$R1,use_dynamic_bsz=false,ppo_micro_batch_size_per_gpu=64,log_prob_micro_batch_size_per_gpu=64,gpu_memory_utilization=0.5

# The spread studies (leases 41-42): one study per size on one host, configurations whose predicted steps span
# 1.4-1.5x. dyn PPO_TOKENS LOGPROB_TOKENS UTIL / mbs PPO_MB LOGPROB_MB UTIL: a configuration with fused kernels.
FUSED=$R1,use_fused_kernels=true
dyn() { echo "$FUSED,use_dynamic_bsz=true,ppo_max_token_len_per_gpu=$1,log_prob_max_token_len_per_gpu=$2,gpu_memory_utilization=$3"; }
mbs() { echo "$FUSED,use_dynamic_bsz=false,ppo_micro_batch_size_per_gpu=$1,log_prob_micro_batch_size_per_gpu=$2,gpu_memory_utilization=$3"; }
CPU_ADAM1=optimizer_cpu_offload=true,optimizer_offload_fraction=1.0
CPU_ADAM05=optimizer_cpu_offload=true,optimizer_offload_fraction=0.5
FULL=recompute=full
SEL2=recompute=selective,recompute_modules=[core_attn,mlp]
SEL1=recompute=selective,recompute_modules=core_attn

# rc_sel_by_cpu_adam STUDY: the 3B's selective recompute (core_attn, verl's default modules) by the CPU optimizer at
# dyn8k/96k, in one study (one host; lease 44). Every 3B trial of rc:sel so far had the CPU optimizer on too, and ran its
# update 2-7 s over the model (lease 34's one-GPU H100: +6.9 s, the same without rc:sel -1.7 s): which of the two costs it
# is not known. Then rc:sel core_attn,mlp at the same budget (the modules the model's picks use). An H200's: without the
# CPU optimizer the 3B's dyn8k/96k does not fit an H100.
rc_sel_by_cpu_adam() {
    at qwen2.5-3b "$1" 5 300 --extra-steps 1 \
        --enqueue "$(dyn 8192 98304 0.4),$SEL1" \
        --enqueue "$(dyn 8192 98304 0.4)" \
        --enqueue "$(dyn 8192 98304 0.4),$SEL1,$CPU_ADAM05" \
        --enqueue "$(dyn 8192 98304 0.4),$CPU_ADAM05" \
        --enqueue "$(dyn 8192 98304 0.4),$SEL2"
}

# pair_7b STUDY: the H200 7B table's replayed first launch (selective [core_attn,mlp] at dyn24k/96k util 0.3, half the
# optimizer on the CPU) and its best (full recompute at dyn24k/96k util 0.4, parameters offloaded) on one host, the
# first launch first (the cold trial), steps 1-3 only: about 1,100 s of lease (plans from lease 63 on).
pair_7b() {
    at qwen2.5-7b "$1" 2 500 --extra-steps 0 \
        --enqueue "$(dyn 24576 98304 0.3),$SEL2,$CPU_ADAM05" \
        --enqueue "$(dyn 24576 98304 0.4),$FULL,$CPU_ADAM05,param_offload=true"
}

# pair_h200_05b STUDY STUDY_B: the H200 0.5B table's first launch (dyn64k/96k util 0.5) and its best (dyn32k/96k util
# 0.5, max_num_batched_tokens 16384) on one host, the first launch first (cold), then the first launch again warm in a
# second study (plans from lease 63 on).
pair_h200_05b() {
    at qwen2.5-0.5b "$1" 2 250 --extra-steps 0 \
        --enqueue "$(dyn 65536 98304 0.5)" \
        --enqueue "$(dyn 32768 98304 0.5),max_num_batched_tokens=16384"
    at qwen2.5-0.5b "$2" 1 200 --extra-steps 0 --enqueue "$(dyn 65536 98304 0.5)"
}

# recompute_15b STUDY: the 1.5B's full-recompute pair on one host (dyn16k/32k at util 0.5 without recompute, the cold
# trial, then with full recompute), then the host-bound two (micro-batches of 2/8, dyn4k/8k) at util 0.4, steps 1-3
# only (plans from lease 70 on).
recompute_15b() {
    at qwen2.5-1.5b "$1" 4 260 --extra-steps 0 \
        --enqueue "$(dyn 16384 32768 0.5)" \
        --enqueue "$(dyn 16384 32768 0.5),$FULL" \
        --enqueue "$(mbs 2 8 0.4)" \
        --enqueue "$(dyn 4096 8192 0.4)"
}

# recompute_3b STUDY: the H100 3B table's first launch (selective [core_attn,mlp] at dyn16k/96k util 0.4, parameters
# offloaded; the cold trial), then full recompute's pair on one host at dyn8k/96k util 0.4 with half the optimizer on
# the CPU (without it, then with it), steps 1-3 only (plans from lease 72 on: no H100 3B pair yet).
recompute_3b() {
    at qwen2.5-3b "$1" 3 320 --extra-steps 0 \
        --enqueue "$(dyn 16384 98304 0.4),$SEL2,param_offload=true" \
        --enqueue "$(dyn 8192 98304 0.4),$CPU_ADAM05" \
        --enqueue "$(dyn 8192 98304 0.4),$FULL,$CPU_ADAM05"
}

# spread_05b STUDY: lease 68's one-host H100 0.5B spread (plans from lease 69 on): dyn16k/32k at util 0.5 (the cold
# trial), full recompute at the same budgets, micro-batches of 2/8 and dyn4k/8k at util 0.4, dyn8k/16k at util 0.5;
# the host-bound two (full recompute, micro-batches of 2/8) early, so that a short lease gets them. ~130-225 s a trial.
spread_05b() {
    at qwen2.5-0.5b "$1" 5 220 --extra-steps 0 \
        --enqueue "$(dyn 16384 32768 0.5)" \
        --enqueue "$(dyn 16384 32768 0.5),$FULL" \
        --enqueue "$(mbs 2 8 0.4)" \
        --enqueue "$(dyn 4096 8192 0.4)" \
        --enqueue "$(dyn 8192 16384 0.5)"
}

# first_and_best_05b STUDY: the H100 0.5B table's replayed first launch (dyn32k/96k util 0.4) and its best (dyn32k/32k
# util 0.4) on one host, steps 1-3 only; the host probed before them where no earlier plan of the lease did (plans from
# lease 74 on).
first_and_best_05b() {
    [ -e "${SMOKE:-/root/smoke}/host_speed_before.json" ] || host_probe before
    at qwen2.5-0.5b "$1" 2 200 --extra-steps 0 \
        --enqueue "$(dyn 32768 98304 0.4)" \
        --enqueue "$(dyn 32768 32768 0.4)"
}

# fused_pairs MODEL STUDY STUDY_B NEED NEED_B A B AGAIN: configurations A and B each with and without verl's fused
# kernels on one host (A with them first, the cold trial; then A without, B without, B with), steps 1-3 only, then
# AGAIN once more in a second study (plans from lease 65 on: unfused_logit_ps is fitted on such pairs).
fused_pairs() {
    local m=$1 study=$2 study_b=$3 need=$4 need_b=$5 a=$6 b=$7 again=$8
    at "$m" "$study" 4 "$need" --extra-steps 0 \
        --enqueue "$a,use_fused_kernels=true" --enqueue "$a" --enqueue "$b" --enqueue "$b,use_fused_kernels=true"
    at "$m" "$study_b" 1 "$need_b" --extra-steps 0 --enqueue "$again"
}

# by_card TAG H100_COMMAND...: the one-GPU plans' branch by the card and the workload set up (leases 66 on): with the
# 7B workload (an H200) the 7B pair (c-7b-TAG); on an H200 with another the H200 0.5B pair (c-0.5b-TAG, c-0.5b-TAGb);
# on an H100 the plan's own COMMAND.
by_card() {
    local tag=$1
    shift
    if [ -e /root/work-qwen2.5-7b ]; then
        pair_7b "c-7b-$tag"
    elif [ "$GPU_TYPE" = h200 ]; then
        pair_h200_05b "c-0.5b-$tag" "c-0.5b-${tag}b"
    else
        "$@"
    fi
}

# spread_h100 STUDY_1_5B STUDY_3B: the H100's 1.5B and 3B spreads, one lane each (lease 41's H100 branch).
spread_h100() {
    lane 0 at qwen2.5-1.5b "$1" 5 240 --extra-steps 1 \
        --enqueue "$(dyn 12288 98304 0.4)" \
        --enqueue "$(mbs 2 8 0.4)" \
        --enqueue "$(dyn 16384 32768 0.5),$FULL" \
        --enqueue "$(dyn 4096 8192 0.4)" \
        --enqueue "$(dyn 16384 32768 0.4),$CPU_ADAM1"
    lane 1 at qwen2.5-3b "$2" 5 280 --extra-steps 1 \
        --enqueue "$(dyn 16384 98304 0.4),$SEL2,param_offload=true" \
        --enqueue "$(dyn 8192 98304 0.4),$CPU_ADAM05" \
        --enqueue "$(dyn 16384 98304 0.4),$FULL,$CPU_ADAM1" \
        --enqueue "$(mbs 2 8 0.4),optimizer_offload=true" \
        --enqueue "$(dyn 16384 98304 0.4),$FULL,optimizer_offload=true"
}

# two_gpu_study MODEL STUDY N NEED ARGS...: one study over both GPUs of a node of two (`at` with --gpus 2). NVLink
# multicast stays off (the device's KINDS.md: set on the machine; kept here for every process the study starts), and
# the host's memory is given (its MemTotal may read low until it is used).
two_gpu_study() {
    export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
    at "$@" --gpus 2 --host-memory 250  # the last --gpus counts
}

# by_node ONE_GPU_COMMAND...: the plans' branch by the machine lent (leases 50-53 wrote it out each): on an H100 node
# lease 41's H100 branch (the 1.5B and the 3B, one spread study a lane); on one H200 the plan's own COMMAND; on a node of
# two H200s the Qwen2.5-14B over both GPUs (TP 2), its study's own first launch and second pick.
by_node() {
    if [ "$GPU_TYPE" = h100 ]; then
        spread_h100 c-1.5b-h47 c-3b-h48
    elif [ "$(nvidia-smi -L | grep -c '^GPU')" = 1 ]; then
        "$@"
    else
        two_gpu_study qwen2.5-14b c-14b-x2 2 800 --extra-steps 1
    fi
}
