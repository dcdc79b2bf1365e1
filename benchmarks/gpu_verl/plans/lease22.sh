#!/usr/bin/env bash
# Calibration campaign, lease 22 (issue 23): two H100s of one host (nvidia-h100-x2), two one-GPU lanes. The H100's
# per-size ordering is the campaign's weakest figure (Spearman 0.40 over the 3B's four trials, three of them CPU-Adam
# twins predicted within 1 s of each other; 0.70 over the 1.5B's five, predicted 22-26 s): trials predicted apart.
#   GPU 0, the 3B: the optimizer offloaded with full recompute (pred 34 s), the whole optimizer on the CPU with full
#          recompute (42 s; the H100 host's CPU Adam ran 5-6 s over the model in lease 10), and parameters plus
#          optimizer offloaded with selective recompute (31 s: c-3b-fl #0 of lease 10 with the optimizer offloaded too,
#          an offload pair).
#   GPU 1, the 1.5B: the whole optimizer on the CPU with full recompute (30 s), without recompute (26 s), and
#          micro-batches of 1/4 without dynamic batching (25 s).
# Before the lanes, ~20 s: why a process's imports take ~20 s on these machines (issue 24): the file systems, whether
# the image's packages carry bytecode, one stat's cost, `import torch` twice.
# Start with AT_MODEL=qwen2.5-3b AT_MORE_MODELS=qwen2.5-1.5b
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh
{
    stamp "import probe"
    uname -r; nproc; grep -m1 "model name" /proc/cpuinfo
    for d in /opt/torch/.venv /root/site /root/smoke /dev/shm /tmp; do echo "$d: $(stat -f -c %T "$d" 2>&1)"; done
    tp=$(python3 -c 'import importlib.util, os; print(os.path.dirname(importlib.util.find_spec("torch").origin))')
    echo "torch at $tp; .py files $(find "$tp" -name '*.py' | wc -l), .pyc files $(find "$tp" -name '*.pyc' | wc -l)"
    echo "PYTHONDONTWRITEBYTECODE=${PYTHONDONTWRITEBYTECODE:-unset}; writable: $([ -w "$tp" ] && echo yes || echo no)"
    python3 -c 'import os, time
t = time.perf_counter(); n = 100000
for _ in range(n): os.stat("/opt")
print(f"os.stat: {(time.perf_counter() - t) / n * 1e6:.1f} us")
t = time.perf_counter()
for _ in range(20000):
    try: os.stat("/opt/no-such-file")
    except FileNotFoundError: pass
print(f"os.stat of a missing file: {(time.perf_counter() - t) / 20000 * 1e6:.1f} us")'
    for i in 1 2; do TIMEFORMAT="import torch ($i): %R s wall, %U s user, %S s sys"; time python3 -c 'import torch'; done
    TIMEFORMAT="import verl.trainer.main_ppo: %R s wall, %U s user, %S s sys"
    time python3 -c 'import verl.trainer.main_ppo' > /dev/null 2>&1
    stamp "import probe done"
} > /root/smoke/import_probe.txt 2>&1
F=$R1,use_fused_kernels=true
D3=$F,use_dynamic_bsz=true,ppo_max_token_len_per_gpu=16384,log_prob_max_token_len_per_gpu=98304,gpu_memory_utilization=0.4
D15=$F,use_dynamic_bsz=true,ppo_max_token_len_per_gpu=16384,log_prob_max_token_len_per_gpu=32768,gpu_memory_utilization=0.4
CPU1=optimizer_cpu_offload=true,optimizer_offload_fraction=1.0
lane 0 at qwen2.5-3b c-3b-h2 3 420 --enqueue "$D3,optimizer_offload=true,recompute=full" \
    --enqueue "$D3,$CPU1,recompute=full" \
    --enqueue "$D3,param_offload=true,optimizer_offload=true,recompute=selective,recompute_modules=[core_attn,mlp]"
lane 1 at qwen2.5-1.5b c-1.5b-h2 3 330 --enqueue "$D15,$CPU1,recompute=full" --enqueue "$D15,$CPU1" \
    --enqueue "$F,use_dynamic_bsz=false,ppo_micro_batch_size_per_gpu=1,log_prob_micro_batch_size_per_gpu=4,gpu_memory_utilization=0.5"
wait
stamp "plan done"
