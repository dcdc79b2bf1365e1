# Sourced by the lease plans after lease 1: the resumed study's `autotune run` (AT) and a time stamp for the log.
AT=(python3 -m autotune run --backend verl --model /root/work/model --gpus 1 --gpu-type h100
    --job /root/at_src/benchmarks/gpu_verl/job_smoke.yaml --storage sqlite:////root/smoke/smoke.db
    --study smoke-h100 --workdir /root/smoke/trials --confirm 0 --trial-timeout 1200 --stall-timeout 150
    --startup-timeout 600)
stamp() { echo "[$(date -u +%T)] $*"; }
