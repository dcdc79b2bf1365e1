#!/usr/bin/env bash
# GPU profile of one Megatron-core probe on one lent GPU (README.md beside this file): Qwen2.5-0.5B's architecture
# with random weights, its training step timed (2 steps after a warm-up) and then one more step traced with
# torch.profiler (CPU + CUDA); the traces analysed with HolisticTraceAnalysis (autotune.profile), the advice checked by
# the model, the profile stored in a SQLite study database, the traces trimmed. Everything goes to $OUT (or
# ./gpu_profile), 7 files: env.txt, log.txt, probe.json, profile.json, profile.txt, profile.db,
# traces_trimmed.tar.xz (with trim.jsonl: each trace's events before and after).
# Needs torch with CUDA, megatron-core, HolisticTraceAnalysis and plotly, and autotune's own dependencies
# (optuna, sqlalchemy, rich, pyyaml) importable: carried wheels on PYTHONPATH, as benchmarks/gpu_verl stages them.
set -uo pipefail
OUT=${OUT:-gpu_profile}; mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# As verl does for its torch profiler (verl/trainer/constants_ppo.py): an NVTX hook that loads CUPTI would take the
# one CUPTI subscriber slot and the traces would hold no kernels.
export NVTX_INJECTION64_PATH=/nonexistent/autotune-disabled-nvtx-injection.so
MODEL=${MODEL:-qwen2.5-0.5b}
SETS=(--set tp=1 --set pp=1 --set rollout_tp=1 --set use_dynamic_bsz=true --set ppo_max_token_len_per_gpu=${TOKENS:-16384})
{
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    python3 -c 'import sys, torch, megatron.core as m, hta, plotly; print("python", sys.version.split()[0], "torch",
torch.__version__, "megatron-core", m.__version__, "hta", getattr(hta, "__version__", "0.5.0"), "plotly",
plotly.__version__)'
} 2>&1 | tee "$OUT/env.txt"

# 1. autotune probe --profile: the measured step (tokens/s/GPU, memory) and the profiled step's breakdown, printed
python3 -m autotune.cli probe --model "$MODEL" --gpus 1 --gpu-type h100 "${SETS[@]}" --steps 2 --profile \
    --workdir "$OUT/probe" --json > "$OUT/probe.json" 2>> "$OUT/log.txt"; echo "probe exit $?"
tail -5 "$OUT/log.txt"

# 2. autotune profile --backend mcore: the same configuration profiled and stored in the database, then read back
db="sqlite:///$OUT/profile.db"
python3 -m autotune.cli profile --backend mcore --model "$MODEL" --gpus 1 --gpu-type h100 "${SETS[@]}" \
    --workdir "$OUT/runs" --storage "$db" --json > "$OUT/profile.json" 2>> "$OUT/log.txt"; echo "profile exit $?"
tail -5 "$OUT/log.txt"
python3 -m autotune.cli profile --show 1 --storage "$db" > "$OUT/profile.txt" 2>&1
cat "$OUT/profile.txt"

# 3. the traces, trimmed (the analysis above is of the whole ones), in one archive
traces=$(find "$OUT/runs" -type d -name traces | head -1)
if [ -n "$traces" ]; then
    du -sh "$traces"
    python3 -m autotune.profile.trim "$traces" "$OUT/traces_trimmed" > "$OUT/trim.jsonl" && cat "$OUT/trim.jsonl"
    tar -C "$OUT" -cJf "$OUT/traces_trimmed.tar.xz" traces_trimmed trim.jsonl && rm -rf "$OUT/traces_trimmed" \
        "$OUT/trim.jsonl"
fi
for f in "$OUT"/probe/*/probe.log "$OUT"/runs/configs/*/probe.log; do
    [ -f "$f" ] && { echo "== $f"; tail -60 "$f"; } >> "$OUT/log.txt"
done
rm -rf "$OUT/runs" "$OUT/probe"  # whole traces and probe folders stay on the device (sizes above)
ls -la "$OUT"
