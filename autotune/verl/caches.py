"""What a node's trials share so that each pays its start-up once per study, not once per trial (issue 24): the
compile and dataset caches, and Python's bytecode where the environment would otherwise compile every module in every
process. Nothing here changes what a trial measures: its steps run the same kernels with the same settings.
"""

from __future__ import annotations

import re
from collections.abc import Callable, MutableMapping
from pathlib import Path

from autotune import verl
from autotune.verl.doctor import bytecode_forbidden, has_bytecode

BYTECODE_SUB = "pycache"
BYTECODE_EXTRA = "bytecode_cache"  # a trial's extra: its processes kept their bytecode under the shared caches


def share_caches(env: MutableMapping[str, str], root: Path,
                 bytecode: Callable[[], bool | None] = has_bytecode) -> tuple[str, bool]:
    """Point the trial's caches at `root` (a study's `<workdir>/cache`) where the environment has not chosen.

    Returns "warm" or "cold" (whether vLLM's compile cache already held something) and whether the trial keeps its
    bytecode under `root` (`bytecode_cache`)."""
    for var, sub in verl.SHARED_CACHE_ENV.items():
        # torch's Inductor writes its default folder into os.environ once imported (the pre-flight imports verl):
        # that value is torch's choice, not the user's
        if not env.get(var) or re.fullmatch(r".*/torchinductor_[^/]*", env[var]):
            env[var] = str(root / sub)
            Path(env[var]).mkdir(parents=True, exist_ok=True)
    env.setdefault(verl.VLLM_COMPILE_CACHE_OFF_ENV, "0")
    vllm_cache = Path(env["VLLM_CACHE_ROOT"])
    warm = "warm" if vllm_cache.is_dir() and any(vllm_cache.iterdir()) else "cold"
    return warm, bytecode_cache(env, root, bytecode)


def bytecode_cache(env: MutableMapping[str, str], root: Path,
                   bytecode: Callable[[], bool | None] = has_bytecode) -> bool:
    """Keep compiled bytecode under `root/pycache` where the environment forbids writing it and the packages lack it.

    PYTHONDONTWRITEBYTECODE=1 (a common container default) over packages installed without .pyc files makes every
    process compile each module it imports, every time: on the lent machines' image, torch has no .pyc and `import
    verl.trainer.main_ppo` took 13.9 s, in each of the ~6 processes a trial starts one after another (lease 22).
    PYTHONPYCACHEPREFIX writes the bytecode beside the other caches instead, never into the packages' folders (which
    is what the setting keeps clean). A user's own PYTHONPYCACHEPREFIX, or packages that carry bytecode, stay as
    they are."""
    if not bytecode_forbidden(env) or bytecode() is True:
        return False
    del env[verl.NO_BYTECODE_ENV]
    env[verl.BYTECODE_PREFIX_ENV] = str(root / BYTECODE_SUB)
    Path(env[verl.BYTECODE_PREFIX_ENV]).mkdir(parents=True, exist_ok=True)
    return True
