# Sourced by the lease plans: `profile MODEL NEED_S [--set NAME=VALUE ...]` runs verl's profiler on one configuration
# of MODEL (`autotune profile --backend verl`, traces analysed on the device with HolisticTraceAnalysis, which the
# payload's last part carries), storing the profile in /root/smoke/p-MODEL.db, unless the lease cannot finish it.
profile() {
    local m=$1 need=$2 d left db; shift 2
    left=$(( DEADLINE - $(date +%s) ))
    if [ "$left" -lt "$need" ]; then stamp "profile $m: not started, ${left}s left in the lease < ${need}s"; return 1; fi
    d=$(workload "$m") || return 1
    db=/root/smoke/p-$m.db
    stamp "profile $m: verl's profiler, $left s left"
    python3 -m autotune profile --backend verl --model "$d/model" --gpus 1 --gpu-type "$GPU_TYPE" \
        --job "/root/smoke/job-$m.yaml" --storage "sqlite:///$db" "$@" --workdir "/root/smoke/profiles${LANE:+/g$LANE}" \
        --trial-timeout $((left - 30)) --json > "verl_profile-$m.json" 2> "verl_profile-$m.err"
    stamp "profile $m: exit $?"
    python3 -m autotune profile --show "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["profile_id"])' \
        "verl_profile-$m.json" 2>/dev/null || echo 1)" --storage "sqlite:///$db" > "verl_profile-$m.txt" 2>&1
}
