#!/usr/bin/env bash
# Installs verl 0.9.1 into the current Python environment for CPU-only use: enough to compose verl's Hydra config and
# run its validation (tests/test_verl_validate.py, the verl runner's pre-flight), and to run verl.trainer.main_ppo up
# to where it first needs a GPU (tests/test_real_verl.py). No CUDA, no vLLM, no Megatron.
#
# torch comes first and pinned to the CPU build, so that nothing later pulls the multi-GB CUDA wheels: verl itself
# is installed with --no-deps and its import-time dependencies are listed here explicitly.
# Usage: scripts/install-verl-cpu.sh            (uses `python3 -m pip`; set PYTHON=... to choose the interpreter)
set -euo pipefail
PY=${PYTHON:-python3}
PIP=("$PY" -m pip install --disable-pip-version-check)

# 1. CPU torch, asked for by its local version (+cpu), which PyPI does not have: PyPI's Linux torch is the CUDA build,
# with several GB of nvidia-* wheels. From pip's configured sources where they hold it (the test machines ship
# torch-2.13.0+cpu in pip's find-links, /opt/wheels), else from PyTorch's own CPU index.
TORCH_CPU_INDEX=${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}
if ! "$PY" -c 'import torch, sys; sys.exit(0 if torch.__version__.startswith("2.13.0") else 1)' 2>/dev/null; then
    "${PIP[@]}" "torch==2.13.0+cpu" 2>/dev/null \
        || "${PIP[@]}" --index-url "$TORCH_CPU_INDEX" --extra-index-url https://pypi.org/simple "torch==2.13.0+cpu"
fi
"$PY" -c 'import torch; assert not torch.version.cuda or torch.version.cuda is None, "CUDA torch installed"' \
    || { echo "install-verl-cpu.sh: a CUDA build of torch is installed; this script wants the CPU build" >&2; exit 1; }

# 2. verl without its GPU requirements, then what `verl.utils.config` / `verl.workers.config` import.
"${PIP[@]}" --no-deps "verl==0.9.1"
# Pinned: unpinned, pip picks tensordict and transformers outside verl 0.9.1's supported range.
"${PIP[@]}" hydra-core==1.3.8 omegaconf==2.3.1 ray==2.60.0 tensordict==0.10.0 transformers==5.10.4 \
    codetiming==1.4.0 orjson==3.13.0 pydantic numpy packaging pyarrow

# 2b. What `python -m verl.trainer.main_ppo` imports on its way to the first GPU request (Hydra, its own Ray, the
# TaskRunnerV1 actor, TransferQueue, the dataset and dataloader): tests/test_real_verl.py runs it this far.
# TransferQueue without its deps (they pull Ray's dashboard extras); verl asks for 0.1.10.
"${PIP[@]}" --no-deps TransferQueue==0.1.10
# Pillow (verl's dataset and agent loop import PIL), uvicorn and fastapi (its rollout and reward servers) are
# listed here: this script must stand alone in a fresh environment, not lean on what autotune's extras bring.
"${PIP[@]}" datasets==5.2.0 torchdata==0.11.0 peft==0.21.2 accelerate==1.15.0 aiohttp==3.14.5 cachetools==6.2.4 \
    pyzmq==27.3.0 msgspec==0.22.0 prometheus_client==0.26.0 psutil==7.2.2 pillow==13.0.0 uvicorn==0.54.0 \
    fastapi==0.165.0
"$PY" -c 'import datasets, torchdata, peft, transfer_queue, aiohttp, cachetools, PIL, uvicorn, fastapi
from verl.trainer.ppo.v1 import get_trainer_cls  # the TaskRunnerV1 path of verl.trainer.main_ppo'

# 3. Check: verl's config composes and validates on this CPU-only machine.
"$PY" - <<'PYCHECK'
import os
import torch
from hydra import compose, initialize_config_dir
import verl
from verl.utils.config import validate_config

assert torch.version.cuda is None, f"CUDA torch {torch.version.cuda} got installed"
d = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
with initialize_config_dir(config_dir=d, version_base=None):
    cfg = compose(config_name="ppo_trainer", overrides=[
        "model_engine=megatron", "algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.name=vllm",
        "actor_rollout_ref.actor.use_dynamic_bsz=True"])
validate_config(cfg, use_reference_policy=False, use_critic=False)
print(f"verl {verl.__version__} importable with torch {torch.__version__} (CPU): config validation works")
PYCHECK
