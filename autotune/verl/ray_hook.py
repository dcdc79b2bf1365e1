"""Runs in every Ray worker process of a verl trial placed by the Ray executor (Ray's runtime_env
`worker_process_setup_hook`): verl's resource pool adopts the placement groups the executor reserved for the trial.

Why: verl's driver creates its own placement groups (one per node, `n_gpus_per_node` bundles of
{"CPU": 3, "GPU": 1}) and first checks that the cluster has that many GPUs *available*. GPUs the executor holds for
the trial are not available, so verl would refuse, or wait for GPUs that another trial could take meanwhile. The
executor reserves the groups in verl's own shape and names them in AUTOTUNE_PLACEMENT_GROUPS; this hook makes
`RayResourcePool.get_placement_groups` return them (verl returns `self.pgs` when set, so its placement logic is
otherwise unchanged) and skips the free-GPU check for that pool. Only a pool with the groups' bundle counts and verl's
own bundle for it ({"CPU": max_colocate_count, "GPU": 1}) adopts them; any other keeps verl's behaviour.
The patch is applied when verl's module is imported, so workers that never import it pay nothing.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from typing import Any

from autotune import verl
from autotune.verl import shims

ENV = "AUTOTUNE_PLACEMENT_GROUPS"
# The Ray namespace the executor reserves its named groups in; verl's driver must join it to find them by name.
NAMESPACE = "autotune"
HOOK = "autotune.verl.ray_hook.install"


def group_names() -> list[str]:
    return [n for n in os.environ.get(ENV, "").split(",") if n]


def install() -> None:
    """The setup hook: patch verl's pool now if it is imported, else as soon as it is (and the stack's shims)."""
    shims.install()
    if not group_names():
        return
    mod = sys.modules.get(verl.RAY_POOL_MODULE)
    if mod is not None:
        patch(mod)
    elif not any(isinstance(f, _PatchOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport())


def _groups() -> tuple[list[Any], list[int], set[tuple[tuple[str, float], ...]]]:
    """The trial's groups, their bundle counts, and the bundle shapes among them."""
    import ray
    from ray.util.placement_group import get_placement_group, placement_group_table

    pgs = [get_placement_group(n) for n in group_names()]
    ray.get([pg.ready() for pg in pgs])
    tables = [placement_group_table(pg) for pg in pgs]
    shapes = {tuple(sorted((str(k), float(v)) for k, v in b.items())) for t in tables for b in t["bundles"].values()}
    return pgs, [len(t["bundles"]) for t in tables], shapes


def verl_shape(max_colocate_count: int) -> tuple[tuple[str, float], ...]:
    """The bundle verl's own pool would ask for (RayResourcePool.get_placement_groups, on GPUs)."""
    return (("CPU", float(max_colocate_count)), ("GPU", 1.0))


def patch(mod: Any) -> None:
    pool_cls, mgr_cls = mod.RayResourcePool, mod.ResourcePoolManager
    if getattr(pool_cls, "_autotune_patched", False):
        return
    orig_get, orig_check = pool_cls.get_placement_groups, mgr_cls._check_resource_available
    state: dict[str, Any] = {"adopted": False}

    def matches(process_on_nodes: list[int], max_colocate_count: int) -> bool:
        """The pool is the one the groups were reserved for: as many bundles per node, each in verl's shape for it
        (its workers take 1 CPU and 1/max_colocate_count GPU each); otherwise verl keeps its own behaviour."""
        if state["adopted"]:
            return False
        _, sizes, shapes = _groups()
        return sorted(process_on_nodes) == sorted(sizes) and shapes == {verl_shape(max_colocate_count)}

    def get_placement_groups(self: Any, strategy: str = "STRICT_PACK", name: str | None = None,
                             device_name: str = "cuda") -> Any:
        if self.pgs is None and self.use_gpu and matches(list(self._store), self.max_colocate_count):
            pgs, _, _ = _groups()
            self.pgs = mod.sort_placement_group_by_node_ip(pgs)  # verl's own order of nodes
            state["adopted"] = True
            print(f"autotune: verl resource pool {self.name_prefix!r} adopted the trial's placement groups "
                  f"{group_names()}", flush=True)
            return self.pgs
        return orig_get(self, strategy=strategy, name=name, device_name=device_name)

    def check(self: Any) -> None:
        specs = list(self.resource_pool_spec.values())
        if len(specs) == 1 and matches(specs[0], self.max_colocate_count):
            return  # the GPUs are in the trial's own groups, so they are not "available": that is expected
        orig_check(self)

    pool_cls.get_placement_groups = get_placement_groups
    mgr_cls._check_resource_available = check
    pool_cls._autotune_patched = True


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Patches verl's pool module right after it is first executed."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name != verl.RAY_POOL_MODULE:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        exec_module = loader.exec_module

        def exec_and_patch(module: Any) -> None:
            exec_module(module)
            patch(module)

        loader.exec_module = exec_and_patch  # type: ignore[method-assign]
        return spec
