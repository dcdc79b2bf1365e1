#!/usr/bin/env bash
# GPU smoke, second lease (the study of lease 1 resumed from its database, carried back in): the configurations
# lease 1 queued but did not reach (no dynamic batching at gpu_memory_utilization 0.8; full recompute with offload,
# re-queued after its interrupt), then the best measured trial profiled with verl's own profiler (autotune profile),
# a Megatron-core probe profiled (benchmarks/gpu_profile/run.sh), then more of the study while the lease lasts.
set -u
cd /root/smoke
# shellcheck source=study.sh
. /root/at_src/benchmarks/gpu_verl/plans/study.sh  # AT, stamp (device.sh copies the plan away)
R1=rollout_tp=1
stamp "run 5: what lease 1 queued"
"${AT[@]}" --n-trials 5 > run5.out 2> run5.err
stamp "profile: the best measured trial with verl's profiler"
python3 -m autotune profile --study smoke-h100 --best --storage sqlite:////root/smoke/smoke.db \
    --workdir /root/smoke/profiles --rollout-iterations 50 --trial-timeout 1200 --json > verl_profile.json 2> verl_profile.err
python3 -m autotune profile --show 1 --storage sqlite:////root/smoke/smoke.db > verl_profile.txt 2>&1
traces=$(ls -d /root/smoke/profiles/*/trial_*/*/traces 2>/dev/null | tail -1)
[ -n "$traces" ] && python3 -m autotune.profile.trim "$traces" /root/smoke/verl_traces_trimmed > verl_trim.jsonl 2>&1 \
    && tar -C /root/smoke -cJf /root/smoke/verl_traces_trimmed.tar.xz verl_traces_trimmed verl_trim.jsonl
stamp "mcore probe profile"
(cd /root/at_src && OUT=/root/smoke/gpu_profile bash benchmarks/gpu_profile/run.sh > /root/smoke/gpu_profile.out 2>&1)
stamp "run 6: selective recompute + fused kernels at util 0.4, then the sampler"
"${AT[@]}" --n-trials 12 \
    --enqueue "$R1,use_dynamic_bsz=true,ppo_max_token_len_per_gpu=16384,recompute=selective,recompute_modules=core_attn,gpu_memory_utilization=0.4,use_fused_kernels=true" \
    > run6.out 2> run6.err
stamp "plan done"
