"""A fake GPU node's Python stack for `autotune doctor`'s own checks: a directory of stub packages (torch that
reports a GPU, pynvml, Transformer Engine, Megatron-core, mbridge, vLLM, verl) and their dist-info, put first on
PYTHONPATH of the doctor's child process. It stands in for the node's packages, not for verl's behaviour: each
stub only answers what the doctor asks (a version, an import, CUDA's device query), and a test breaks one of them.
"""

from __future__ import annotations

import os
from pathlib import Path

from autotune import verl

ROOT = Path(__file__).resolve().parent.parent

TORCH = '''
__version__ = "2.11.0+cu130"
bfloat16 = "bfloat16"
class version:
    cuda = "13.0"
class cuda:
    @staticmethod
    def is_available(): return {cuda}
    @staticmethod
    def device_count(): return 1
    @staticmethod
    def get_device_capability(i=0): return (9, 0)
    @staticmethod
    def get_device_name(i=0): return "NVIDIA H100 80GB HBM3"
class backends:
    class cudnn:
        @staticmethod
        def is_available(): return True
        @staticmethod
        def version(): return 91900
'''
PYNVML = '''
class _Mem:
    total = 80 * 2**30
    used = {used}
def nvmlInit():
    {nvml_init}
def nvmlDeviceGetCount(): return 1
def nvmlDeviceGetHandleByIndex(i): return i
def nvmlDeviceGetName(h): return "NVIDIA H100 80GB HBM3"
def nvmlDeviceGetMemoryInfo(h): return _Mem()
def nvmlSystemGetDriverVersion(): return "580.159.04"
'''
ENUMS = '''
import enum
class ModelType(enum.Enum):
    encoder_or_decoder = 1
'''
# mbridge 0.15.1's use of the name megatron-core 0.19 removed (mbridge/core/util.py), at import time here. As in
# the real packages, mbridge takes ModelType from gpt_model, i.e. megatron.core.transformer.enums's own enum (not
# megatron.core.enums's, which is another class).
MBRIDGE_UTIL = '''
from megatron.core.models.gpt.gpt_model import ModelType
IS_ENC_DEC = ModelType.encoder_or_decoder == ModelType.encoder_and_decoder
'''
GPT_MODEL = "from megatron.core.transformer.enums import ModelType\n"


def write_stack(root: Path, versions: dict[str, str | None] | None = None, modules: dict[str, str] | None = None,
                cuda: bool = True, nvml_init: str = "pass", gpu_used_gib: float = 0.5,
                flash_attn: bool = False) -> Path:
    """Stub packages under `root`: every GPU_STACK distribution at its pin unless `versions` says otherwise (None:
    not installed), modules from `modules` (dotted name -> source) replacing or adding to the defaults."""
    root.mkdir(parents=True, exist_ok=True)
    vers: dict[str, str | None] = {**verl.GPU_STACK, **(versions or {})}
    for dist, v in vers.items():
        if v is None:
            continue
        d = root / f"{dist.replace('-', '_')}-{v}.dist-info"
        d.mkdir(exist_ok=True)
        (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {v}\n")
    mods = {
        "torch": TORCH.format(cuda=cuda),
        "pynvml": PYNVML.format(used=int(gpu_used_gib * 2**30), nvml_init=nvml_init),
        "transformer_engine": "", "transformer_engine.pytorch": "",
        "megatron": "", "megatron.core": "__version__ = '0.19.2'", "megatron.core.enums": ENUMS,
        "megatron.core.transformer": "", "megatron.core.transformer.enums": ENUMS,
        "megatron.core.models": "", "megatron.core.models.gpt": "", "megatron.core.models.gpt.gpt_model": GPT_MODEL,
        "mbridge": "", "mbridge.core": "", "mbridge.core.util": MBRIDGE_UTIL,
        "vllm": "__version__ = '0.24.0'",
        "verl": "__version__ = '0.9.1'", "verl.trainer": "", "verl.trainer.main_ppo": "",
        "verl.workers": "", "verl.workers.engine": "", "verl.workers.engine.megatron": "",
        "verl.workers.engine.megatron.transformer_impl": "import mbridge.core.util\n",
    }
    if flash_attn:
        mods["flash_attn"] = ""
    mods.update(modules or {})
    missing = {name for name, v in vers.items() if v is None}
    for name, src in mods.items():
        top = name.split(".")[0]
        if top in {"vllm"} and "vllm" in missing or top == "mbridge" and "mbridge" in missing:
            continue
        parts = name.split(".")
        has_children = any(m.startswith(name + ".") for m in mods)
        path = root.joinpath(*parts, "__init__.py") if has_children else root.joinpath(*parts[:-1], parts[-1] + ".py")
        path.parent.mkdir(parents=True, exist_ok=True)
        for i in range(1, len(parts)):
            init = root.joinpath(*parts[:i], "__init__.py")
            if not init.exists():
                init.write_text("")
        path.write_text(src)
    return root


def stack_env(root: Path) -> dict[str, str]:
    """The environment of a process that should see the stub stack first (then this autotune)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(root), str(ROOT)])
    return env
