#!/usr/bin/env bash
# Start-up, lease 23 (issue 24): the session's last ~320 s of device time on one GPU (counted at half its held time).
# Lease 22's probe: the image sets PYTHONDONTWRITEBYTECODE=1 and its torch has no .pyc, so every process of a trial
# compiled torch's 2,141 modules (`import verl.trainer.main_ppo` 13.9 s). The verl runner now keeps the bytecode under
# the study's shared caches (autotune/runners/caches.py). Here:
#   1. the same import three times, on the same machine: as the image has it, then with the runner's bytecode cache
#      cold and warm (the warm one fills the cache the trial below uses, as a study's first trial would);
#   2. one trial of the job whose cold start-up was measured before on this GPU type (H100: lease 4's c-0.5b #0, 259 s
#      launch to step 1; H200: the 1.5B's first trials of leases 19 and 20, 180-260 s), its vLLM compile cache cold.
# Start with AT_MODEL=qwen2.5-0.5b AT_MORE_MODELS=qwen2.5-1.5b
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh
STACK='import verl.trainer.main_ppo, verl.workers.engine_workers, megatron.core, transformer_engine.pytorch, vllm'
PREFIX=/root/smoke/trials/cache/pycache  # <workdir>/cache/pycache for --workdir /root/smoke/trials
{
    stamp "import probe: PYTHONDONTWRITEBYTECODE=${PYTHONDONTWRITEBYTECODE:-unset}"
    TIMEFORMAT="as the image has it: %R s wall, %U s user, %S s sys"
    time python3 -c "$STACK" > /dev/null 2>&1
    mkdir -p $PREFIX
    TIMEFORMAT="bytecode cache, cold: %R s wall, %U s user, %S s sys"
    time env -u PYTHONDONTWRITEBYTECODE PYTHONPYCACHEPREFIX=$PREFIX python3 -c "$STACK" > /dev/null 2>&1
    TIMEFORMAT="bytecode cache, warm: %R s wall, %U s user, %S s sys"
    time env -u PYTHONDONTWRITEBYTECODE PYTHONPYCACHEPREFIX=$PREFIX python3 -c "$STACK" > /dev/null 2>&1
    echo "bytecode files: $(find $PREFIX -name '*.pyc' | wc -l), $(du -sh $PREFIX | cut -f1)"
    stamp "import probe done"
} > /root/smoke/import_probe23.txt 2>&1
cat /root/smoke/import_probe23.txt
F=$R1,use_fused_kernels=true
if [ "$GPU_TYPE" = h100 ]; then
    at qwen2.5-0.5b c-0.5b-bc 1 330 --extra-steps 1 --enqueue \
        "$F,use_dynamic_bsz=true,ppo_max_token_len_per_gpu=32768,log_prob_max_token_len_per_gpu=98304,gpu_memory_utilization=0.4"
else
    at qwen2.5-1.5b c-1.5b-bc 1 330 --extra-steps 1 --enqueue \
        "$F,use_dynamic_bsz=true,ppo_max_token_len_per_gpu=16384,log_prob_max_token_len_per_gpu=32768,gpu_memory_utilization=0.5"
fi
stamp "plan done"
