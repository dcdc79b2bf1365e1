#!/usr/bin/env bash
# The verl GPU smoke on a lent GPU machine, one step per device call (README.md beside this file says the order).
# Runs in the repository root of the device's copy of the working tree. Everything it keeps between calls lives
# under /root (a warm machine keeps it; a fresh one starts bare): /root/chunks (payload parts), /root/site (the
# packages the machine lacks), /root/at_src (a frozen copy of autotune for the background study), /root/work (the
# workload), /root/smoke (the study's database, trials and logs).
#
#   device.sh stage K               move this call's payload part (.stageK/) to /root/chunks
#   device.sh setup                 unpack the payload, byte-compile it, check imports, write the workloads
#   device.sh start PLAN            start the smoke plan (plans/PLAN.sh) in the background, detached from the call
#   device.sh wait SECONDS          follow the plan until it ends, SECONDS pass or the lease's deadline comes; print
#                                   its progress and pack what was measured so far into $OUT (collect)
#   device.sh collect               trim logs, pack the results into $OUT (one bundle of at most 16 MiB)
#   device.sh stop                  SIGTERM the running study (its running trial is recorded interrupted), then collect
#
# The lease's clock: the first call on a machine writes /root/lease_t0; the plan stops launching trials that would
# not end before t0 + LEASE_S (as the lease's last call to name it said; default 1500 s: the machine is held at most
# 30 minutes, its start and the last call's transfer included), and `wait` stops the plan there, so the last call
# collects before the machine goes.
set -uo pipefail
REPO=$(pwd)
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /root/chunks /root/smoke
[ -f /root/lease_t0 ] || date +%s > /root/lease_t0
# the LEASE_S a call names holds for the lease's later calls too (lease 25's `wait` calls, which named none, stopped
# the plan at the default 1500 s, 40 s before its running trial's end, with 140 s of the lease left)
[ -n "${LEASE_S:-}" ] && echo "$LEASE_S" > /root/lease_s
LEASE_S=$(cat /root/lease_s 2> /dev/null || echo 1500)
DEADLINE=$(( $(cat /root/lease_t0) + LEASE_S ))
export DEADLINE
export PYTHONPATH=/root/at_src:/root/site PATH=/root/site/bin:$PATH
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 PYTHONUNBUFFERED=1 HYDRA_FULL_ERROR=1
log() { echo "[$(date -u +%T) lease +$(( $(date +%s) - $(cat /root/lease_t0) ))s] $*" | tee -a /root/smoke/device.log; }

stage() {
    local k=$1
    mv ".stage$k"/* /root/chunks/ 2>/dev/null || { log "stage $k: no .stage$k in the working tree"; exit 1; }
    log "stage $k: $(ls /root/chunks | wc -l) files, $(du -sh /root/chunks | cut -f1) held; disk $(df -h /root | tail -1 | awk '{print $4}') free"
}

setup() {
    if [ ! -d /root/site ]; then
        local expected
        expected=$(cut -c1-64 /root/chunks/payload.sha256)
        cat /root/chunks/payload.tar.xz.part* > /root/payload.tar.xz
        [ "$(sha256sum /root/payload.tar.xz | cut -c1-64)" = "$expected" ] || { log "payload checksum differs"; exit 1; }
        xz -d -T0 < /root/payload.tar.xz | tar xf - -C /root || { log "unpack failed"; exit 1; }
        rm -f /root/payload.tar.xz
        log "unpacked: $(du -sh /root/site | cut -f1)"
        # The payload is installed with --no-compile (its parts stay small); a user's pip compiles bytecode at
        # install, so the trials import as a user's node does, not recompiling every module in every process.
        python3 -m compileall -q -j 0 /root/site > /dev/null 2>&1
        log "byte-compiled"
    fi
    # Extra wheels carried with a later part (e.g. the trace analysis), and a study database to resume; a wheel
    # larger than a part came in pieces (<wheel>.partNN): joined first
    for p in /root/chunks/*.whl.part00; do
        [ -f "$p" ] && cat "${p%.part00}".part* > "${p%.part00}" && rm -f "${p%.part00}".part*
    done
    for w in /root/chunks/*.whl; do
        [ -f "$w" ] && python3 -m pip install -q --no-deps --no-index --no-compile --target /root/site "$w" 2>&1 \
            | grep -v "already exists" | tail -2
    done
    for db in ${AT_RESUME:-}; do  # study databases committed in the repo (AT_RESUME="tests/data/.../c-7b.db"), to resume
        [ -f "/root/smoke/$(basename "$db")" ] || { cp "$REPO/$db" /root/smoke/ && log "resuming the studies of $db"; }
    done
    for db in /root/chunks/*.db; do  # study databases of an earlier lease, to resume
        [ -f "$db" ] && [ ! -f "/root/smoke/$(basename "$db")" ] && cp "$db" /root/smoke/ \
            && log "resuming the studies of $(basename "$db")"
    done
    if [ "${AT_PATCH_MBRIDGE:-0}" = 1 ]; then  # the hand fix of the 2026-11-23 run (autotune's own shim replaces it)
        sed -i 's/ModelType\.encoder_and_decoder/getattr(ModelType, "encoder_and_decoder", None)/g' \
            /root/site/mbridge/core/util.py && log "mbridge patched by hand (AT_PATCH_MBRIDGE=1)"
    fi
    rm -rf /root/at_src && mkdir -p /root/at_src && cp -r "$REPO"/autotune "$REPO"/benchmarks "$REPO"/search_spaces \
        "$REPO"/pyproject.toml /root/at_src/
    # autotune's shim for mbridge 0.15.1 vs megatron-core 0.19 (autotune/verl/shims.py), checked on the real packages
    local cudnn
    cudnn=$(cd /root/at_src && python3 -c 'from autotune.verl.doctor import torch_cudnn_lib; print(torch_cudnn_lib() or "")')
    if (cd /root/at_src && LD_LIBRARY_PATH=$cudnn:${LD_LIBRARY_PATH:-} python3 -c 'from autotune.verl import shims as verl_shims
verl_shims.install()
from megatron.core.models.gpt.gpt_model import ModelType
import mbridge.core.util
assert ModelType.encoder_and_decoder is None' 2>/dev/null); then log "mbridge shim: works on the real packages"
    else  # keep the lease's trials: the hand fix, said loudly (results must say the shim did not work)
        sed -i 's/ModelType\.encoder_and_decoder/getattr(ModelType, "encoder_and_decoder", None)/g' \
            /root/site/mbridge/core/util.py
        log "mbridge shim: FAILED on the real packages; mbridge patched by hand instead"
    fi
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee -a /root/smoke/device.log
    python3 -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__)' \
        | tee -a /root/smoke/device.log
    # `autotune doctor` (what the verl runner also runs before its first trial) beside the workload's writing
    (cd /root/smoke && python3 -m autotune doctor --model "${AT_MODEL:-qwen2.5-0.5b}" > doctor.txt 2>&1; echo "doctor exit $?" >> doctor.txt) &
    if [ ! -f /root/work/model/config.json ]; then
        python3 "$REPO"/benchmarks/gpu_verl/workload.py /root/work --model "${AT_MODEL:-qwen2.5-0.5b}" 2>&1 \
            | tail -1 | tee -a /root/smoke/device.log
    fi
    wait
    # the plans find every size as /root/work-<model> (campaign.sh), the setup's own model too
    ln -sfn /root/work "/root/work-${AT_MODEL:-qwen2.5-0.5b}"
    cat /root/smoke/doctor.txt
    # Where a trial's start-up goes (issue 24): each new process of a trial (TaskRunner, Megatron worker, vLLM's
    # server and engine, agent-loop workers) took 20-37 s before its first line in lease 4; one timed import of what
    # they import says which packages cost that (importtime.txt, brought home by collect). ~30 s, once a machine.
    if [ ! -f /root/smoke/importtime.txt ]; then
        local t0=$SECONDS
        (cd /root/smoke && LD_LIBRARY_PATH=$cudnn:${LD_LIBRARY_PATH:-} timeout 180 python3 -X importtime -c \
            'import verl.trainer.main_ppo, verl.workers.engine_workers, megatron.core, transformer_engine.pytorch, vllm' \
            2> importtime.raw)
        log "imports of one worker's stack: $((SECONDS - t0)) s"
        python3 "$REPO"/benchmarks/gpu_verl/importtime.py /root/smoke/importtime.raw > /root/smoke/importtime.txt \
            && head -12 /root/smoke/importtime.txt
    fi
    # Other sizes (AT_MORE_MODELS="qwen2.5-1.5b qwen2.5-3b"), written on the CPU in the background while the first
    # study runs (the GPU stays the trials'): /root/work-<model>/ appears whole (renamed) when it is ready.
    for m in ${AT_MORE_MODELS:-}; do
        [ -d "/root/work-$m" ] && continue
        (CUDA_VISIBLE_DEVICES="" setsid nohup bash -c "python3 '$REPO/benchmarks/gpu_verl/workload.py' \
            /root/.work-$m --model $m > /root/smoke/workload-$m.out 2>&1 && mv /root/.work-$m /root/work-$m" \
            < /dev/null > /dev/null 2>&1 &)
        log "workload $m: being written in the background"
    done
    log "setup done"
}

start() {
    local plan="$REPO/benchmarks/gpu_verl/plans/$1.sh"
    [ -f "$plan" ] || { log "no plan $plan"; exit 1; }
    cp "$plan" /root/smoke/plan.sh
    cd /root/smoke || exit 1
    # setsid: the plan outlives this device call (the machine keeps it running until it is given back). Appended: a
    # second plan started on the warm machine (leases 68, 71, 73) keeps the first's lines in the bundle's plan.out.
    setsid nohup bash /root/smoke/plan.sh >> /root/smoke/plan.out 2>&1 < /dev/null &
    echo $! > /root/smoke/plan.pid
    log "plan $1 started (pid $(cat /root/smoke/plan.pid))"
}

progress() {
    for db in /root/smoke/*.db; do
        [ -f "$db" ] && python3 -m autotune status --storage "sqlite:///$db" 2>&1 | tail -12
    done
    tail -3 /root/smoke/plan.out
    local last
    for f in /root/smoke/lane*.out; do [ -f "$f" ] && { echo "-- $f"; tail -2 "$f"; }; done
    # the newest trial of each lane (plans/campaign.sh's `lane`: trials/g<GPU>/<study>/), or of the one study
    for last in $( (ls -td /root/smoke/trials/*/trial_* 2>/dev/null | head -1; \
                    for g in /root/smoke/trials/g*; do ls -td "$g"/*/trial_* 2>/dev/null | head -1; done) | sort -u); do
        echo "-- $last"; tail -3 "$last"/verl.ts.log 2>/dev/null | cut -c1-240
    done
    nvidia-smi --query-gpu=index,memory.used,utilization.gpu --format=csv,noheader
}

running() { [ -f /root/smoke/plan.pid ] && kill -0 "$(cat /root/smoke/plan.pid)" 2>/dev/null; }

wait_for() {
    local limit=$1 t0=$SECONDS
    while running && [ $((SECONDS - t0)) -lt "$limit" ] && [ "$(date +%s)" -lt "$DEADLINE" ]; do sleep 10; done
    if running && [ "$(date +%s)" -ge "$DEADLINE" ]; then
        log "lease deadline (t0 + ${LEASE_S}s): stopping the plan"; stop_plan
    elif running; then log "plan still running after ${limit}s"
    else log "plan ended"; fi
    progress
    collect  # what was measured so far comes back with every call
}

stop_plan() {
    # SIGTERM, not SIGINT: a study started detached by a non-interactive shell inherits SIGINT ignored (POSIX
    # background jobs), so SIGINT did nothing on the H100 (2026-11-24). The pattern is anchored: an unanchored
    # `pkill -f "autotune run"` also matches the shell running this call's command line.
    [ -f /root/smoke/plan.pid ] && kill -TERM "$(cat /root/smoke/plan.pid)" 2>/dev/null
    pkill -TERM -f "^[^ ]*python3? -m autotune run"
    local t=0
    while pgrep -f "^[^ ]*python3? -m autotune run" > /dev/null && [ $t -lt 90 ]; do sleep 3; t=$((t + 3)); done
}

collect() {
    local b=/root/bundle
    rm -rf $b && mkdir -p $b
    cp /root/smoke/*.db /root/smoke/*.out /root/smoke/*.err /root/smoke/*.log /root/smoke/*.txt /root/smoke/*.json $b/ 2>/dev/null
    for db in /root/smoke/*.db; do
        [ -f "$db" ] || continue
        python3 -m autotune status --storage "sqlite:///$db" --all > "$b/status-$(basename "$db" .db).txt" 2>&1
    done
    # Each trial's console (byte-exact, with the time-stamped copy) and metrics; logs over 2 MB keep head and tail.
    # trials/<study>/trial_NNNN/, or trials/g<GPU>/<study>/trial_NNNN/ for a plan's lanes (plans/campaign.sh)
    find /root/smoke/trials -maxdepth 4 -type f -not -path "*/cache/*" \( -name '*.log' -o -name '*.jsonl' -o -name '*.csv' \
        -o -name '*.json' \) | while read -r f; do
        rel=${f#/root/smoke/trials/}; mkdir -p "$b/trials/$(dirname "$rel")"
        if [ "$(stat -c %s "$f")" -gt 2000000 ]; then
            { head -c 1000000 "$f"; printf '\n[... trimmed by device.sh collect: %s bytes in all ...]\n' \
                "$(stat -c %s "$f")"; tail -c 900000 "$f"; } > "$b/trials/$rel"
        else cp "$f" "$b/trials/$rel"; fi
    done
    # Ray's worker logs of failed trials (kept by the runner): the .err/.out files, tails only.
    for d in /tmp/at-ray-*; do
        [ -d "$d" ] || continue
        find "$d" -path '*logs*' \( -name '*.err' -o -name '*.out' \) -size +0 | while read -r f; do
            dst="$b/ray/$(basename "$d")/$(basename "$f")"; mkdir -p "$(dirname "$dst")"; tail -c 200000 "$f" > "$dst"
        done
    done
    tar cf - -C /root bundle | xz -6 -T0 > "$OUT/smoke_bundle.tar.xz"
    ls -la "$OUT"
}

case "${1:-}" in
    stage) stage "$2" ;;
    setup) setup ;;
    start) start "$2" ;;
    wait) wait_for "$2" ;;
    collect) collect ;;
    stop) stop_plan; progress; collect ;;
    *) echo "usage: device.sh stage K | setup | start PLAN | wait SECONDS | collect | stop" >&2; exit 2 ;;
esac
