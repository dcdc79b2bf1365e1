#!/usr/bin/env bash
# GPU smoke of the whole study path on one lent GPU: `autotune run --backend mcore` through the (local) executor,
# real Megatron-core steps, the study in SQLite; then status, best and a probe. Writes to $OUT (or ./gpu_smoke).
# Usage on a GPU machine with torch and megatron-core importable: bash benchmarks/gpu_smoke_executor.sh
set -uo pipefail
OUT=${OUT:-gpu_smoke}; mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
db="sqlite:///$OUT/study.db"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c 'import torch, megatron.core as m; print("torch", torch.__version__, "megatron-core", m.__version__)' \
    | tee -a "$OUT/gpu.txt"
python3 -m autotune.cli run --model qwen2.5-1.5b --gpus 1 --gpu-type h100 --backend mcore --n-trials 3 \
    --storage "$db" --study smoke-mcore --json > "$OUT/run.json" 2> "$OUT/run.err"; echo "run exit $?"
python3 -m autotune.cli status --storage "$db" --study smoke-mcore --all > "$OUT/status.txt" 2>&1
python3 -m autotune.cli status --storage "$db" --study smoke-mcore --json > "$OUT/status.json" 2>&1
python3 -m autotune.cli best --storage "$db" --study smoke-mcore --json > "$OUT/best.json" 2>&1
cat "$OUT/status.txt"; tail -5 "$OUT/run.err"
nvidia-smi --query-gpu=memory.used --format=csv,noheader | tee "$OUT/gpu_after.txt"
