"""Runtime fixes of known incompatibilities in the pinned GPU stack (constraints/gpu-node-torch2.11.txt), applied
inside verl's Ray worker processes instead of by editing installed files.

- mbridge 0.15.1 (the newest release) compares model types with `ModelType.encoder_and_decoder`, which
  megatron-core 0.19 removed: every Megatron actor then dies with an AttributeError while building the model.
  megatron-core 0.19 has two ModelType enums (megatron.core.enums and megatron.core.transformer.enums; mbridge
  takes the second through megatron.core.models.gpt.gpt_model), so the shim patches the class mbridge/core/util.py
  itself holds, and both of megatron-core's: it gives ModelType that name as an alias no model type equals (None),
  which is what the hand fix `getattr(ModelType, "encoder_and_decoder", None)` in mbridge/core/util.py did (seen on
  an H100, 2026-11-24: patching megatron.core.enums alone left the AttributeError). Where megatron-core still has
  the member, nothing changes.

How it gets there: Ray's runtime_env `worker_process_setup_hook` runs `install()` in every worker process of the
trial (the verl runner's own local Ray passes SETUP_HOOK; the Ray executor's hook, verl/ray_hook.py, calls
install() too). A patch is applied when its module is first imported, so a worker that never imports Megatron
(vLLM's servers, TransferQueue) pays nothing. vLLM's engine processes are not Ray workers and need no shim.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable
from typing import Any

SETUP_HOOK = "autotune.verl.shims.install"


def _model_type_alias(mod: Any) -> None:
    model_type = getattr(mod, "ModelType", None)
    if model_type is not None and not hasattr(model_type, "encoder_and_decoder"):
        # an attribute, not a member: `x == ModelType.encoder_and_decoder` is False for every model type
        model_type.encoder_and_decoder = None


# module -> the patch applied right after it is first executed
SHIMS: dict[str, Callable[[Any], None]] = {
    "megatron.core.enums": _model_type_alias,
    "megatron.core.transformer.enums": _model_type_alias,
    "mbridge.core.util": _model_type_alias,  # whichever ModelType it imported
}


def install() -> None:
    """The setup hook: patch what is imported already, and the rest as soon as it is."""
    pending = []
    for name, patch in SHIMS.items():
        mod = sys.modules.get(name)
        if mod is not None:
            patch(mod)
        else:
            pending.append(name)
    if pending and not any(isinstance(f, _PatchOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport(set(pending)))


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Wraps the loader of each pending module so that its patch runs right after the module's own code."""

    def __init__(self, names: set[str]):
        self.names = names

    def find_spec(self, name: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name not in self.names:
            return None
        self.names.discard(name)
        if not self.names:
            sys.meta_path.remove(self)
        spec = None
        for finder in sys.meta_path:  # the spec the import system would have found without this finder
            if finder is not self and hasattr(finder, "find_spec"):
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    break
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        exec_module = loader.exec_module
        patch = SHIMS[name]

        def exec_and_patch(module: Any) -> None:
            exec_module(module)
            patch(module)

        loader.exec_module = exec_and_patch  # type: ignore[method-assign]
        return spec
