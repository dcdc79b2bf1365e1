#!/usr/bin/env bash
# GPU smoke, second lease, after TE's fused attention failed at step 1 on this stack (cuDNN 9.19:
# "CUDNN_BACKEND_TENSOR_DESCRIPTOR cudnnFinalize failed" in fused_attn_f16_arbitrary_seqlen.cu): the doctor's
# job default was switched to `unfused` on the device (see results) and the queued configurations re-run; then a
# Megatron-core probe profiled (benchmarks/gpu_profile/run.sh).
set -u
cd /root/smoke
AT=(python3 -m autotune run --backend verl --model /root/work/model --gpus 1 --gpu-type h100
    --job /root/at_src/benchmarks/gpu_verl/job_smoke.yaml --storage sqlite:////root/smoke/smoke.db
    --study smoke-h100 --workdir /root/smoke/trials --confirm 0 --trial-timeout 1200 --stall-timeout 150
    --startup-timeout 600)
stamp() { echo "[$(date -u +%T)] $*"; }
stamp "run 5b: what lease 1 queued, with unfused attention"
"${AT[@]}" --n-trials 5 > run5b.out 2> run5b.err
stamp "mcore probe profile"
(cd /root/at_src && OUT=/root/smoke/gpu_profile bash benchmarks/gpu_profile/run.sh > /root/smoke/gpu_profile.out 2>&1)
stamp "plan done"
