#!/usr/bin/env bash
# GPU smoke, second lease, after TE's fused attention failed at step 1 on this stack (cuDNN 9.19:
# "CUDNN_BACKEND_TENSOR_DESCRIPTOR cudnnFinalize failed" in fused_attn_f16_arbitrary_seqlen.cu): the doctor's
# job default was switched to `unfused` on the device (see results) and the queued configurations re-run; then a
# Megatron-core probe profiled (benchmarks/gpu_profile/run.sh).
set -u
cd /root/smoke
# shellcheck source=study.sh
. /root/at_src/benchmarks/gpu_verl/plans/study.sh  # AT, stamp (device.sh copies the plan away)
stamp "run 5b: what lease 1 queued, with unfused attention"
"${AT[@]}" --n-trials 5 > run5b.out 2> run5b.err
stamp "mcore probe profile"
(cd /root/at_src && OUT=/root/smoke/gpu_profile bash benchmarks/gpu_profile/run.sh > /root/smoke/gpu_profile.out 2>&1)
stamp "plan done"
