"""Pre-flight of a verl trial, before any GPU is touched: verl's own config checks, and the job's data.

`validate_overrides` does what `python -m verl.trainer.main_ppo` does before it starts Ray (Hydra composition of
verl's `ppo_trainer` config with the overrides, then `verl.utils.config.validate_config`), then what the workers do
with the config on the GPUs (resolve it, build the actor/rollout/ref dataclasses, the rollout world-size assert in
verl/workers/engine_workers.py). It needs verl importable (torch, hydra, ray, transformers, tensordict; no GPU, no
Megatron). A config error costs about a second here instead of a Ray start and a model load.
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import io
import json
import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune import verl
from autotune.units import OPTUNA_REASON_CHARS, cut


def verl_importable() -> bool:
    return importlib.util.find_spec("verl") is not None and importlib.util.find_spec("hydra") is not None


@dataclass(frozen=True)
class Preflight:
    ok: bool
    message: str = ""
    skipped: str = ""  # why nothing was checked


def hydra_overrides(argv: Sequence[str]) -> list[str]:
    """The Hydra overrides of a launch argv (everything after `python -m verl.trainer.main_ppo`)."""
    items = list(argv)
    if items[:3] == list(verl.ENTRY) or (len(items) >= 3 and items[1:3] == list(verl.ENTRY[1:])):
        items = items[3:]
    return [a for a in items if "=" in a and not a.startswith("-")]


def _need_reference_policy(config: Any) -> bool:
    try:
        from verl.trainer.ppo.utils import need_reference_policy

        return bool(need_reference_policy(config))
    except ImportError:  # that module pulls `datasets`; same rule (verl/trainer/ppo/utils.py)
        return bool(config.algorithm.get("use_kl_in_reward", False) or config.actor_rollout_ref.actor.use_kl_loss)


def _need_critic(config: Any) -> bool:
    try:
        from verl.trainer.ppo.utils import need_critic

        return bool(need_critic(config))
    except ImportError:
        if config.critic.enable is not None:
            return bool(config.critic.enable)
        return config.algorithm.adv_estimator == "gae"


def _config_dir() -> str:
    import verl as verl_pkg

    return os.path.join(os.path.dirname(verl_pkg.__file__), "trainer", "config")


def compose_full(overrides: Sequence[str]) -> Any:
    """verl's full config for these overrides, composed by Hydra from verl's own config directory."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=_config_dir(), version_base=None):
        return hydra_compose(config_name="ppo_trainer", overrides=list(overrides))


_BASE: dict[tuple[str, ...], Any] = {}


def _is_group(override: str, config_dir: str) -> bool:
    key = override.split("=", 1)[0].lstrip("+~")
    return "@" in key or os.path.isdir(os.path.join(config_dir, key.replace(".", os.sep)))


def compose(overrides: Sequence[str]) -> Any:
    """As compose_full, faster for many candidates: Hydra composes the config-group choices (model_engine=...)
    once; the value overrides are then applied to a copy by Hydra's own `_apply_overrides_to_config`, the step
    compose runs last (hydra/_internal/config_loader_impl.py), so the result and the errors are the same."""
    try:
        from hydra._internal.config_loader_impl import ConfigLoaderImpl
        from hydra.core.override_parser.overrides_parser import OverridesParser
    except ImportError:  # another Hydra: the plain path
        return compose_full(overrides)
    config_dir = _config_dir()
    groups = tuple(o for o in overrides if _is_group(o, config_dir))
    values = [o for o in overrides if o not in groups]
    if groups not in _BASE:
        _BASE[groups] = compose_full(groups)
    cfg = copy.deepcopy(_BASE[groups])
    ConfigLoaderImpl._apply_overrides_to_config(OverridesParser.create().parse_overrides(values), cfg)
    return cfg


def validate_overrides(overrides: Sequence[str]) -> Preflight:
    """verl's own verdict on a launch's overrides; the message is verl's (or Hydra's) own."""
    if not verl_importable():
        return Preflight(True, skipped="verl is not importable here: config not validated before launch")
    from omegaconf import OmegaConf, open_dict

    try:
        cfg = compose(overrides)
    except Exception as e:  # ConfigCompositionException, OverrideParseException, MissingConfigException
        return Preflight(False, _first(e))
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    buf = io.StringIO()
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(buf):
            warnings.simplefilter("ignore")
            use_ref = _need_reference_policy(cfg)
            validate_config(config=cfg, use_reference_policy=use_ref, use_critic=_need_critic(cfg))
            resolved = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))  # TaskRunner resolves it
            arr = resolved.actor_rollout_ref
            omega_conf_to_dataclass(arr.actor)
            rollout = omega_conf_to_dataclass(arr.rollout)
            if use_ref:  # the remap of engine_workers.py before it builds the ref's dataclass
                ref = OmegaConf.create(OmegaConf.to_container(arr.ref))
                with open_dict(ref):
                    ref.ppo_mini_batch_size = arr.actor.ppo_mini_batch_size
                    ref.ppo_micro_batch_size = ref.pop("log_prob_micro_batch_size", None)
                    ref.ppo_micro_batch_size_per_gpu = ref.pop("log_prob_micro_batch_size_per_gpu", None)
                    ref.use_dynamic_bsz = ref.pop("log_prob_use_dynamic_bsz", False)
                    ref.ppo_max_token_len_per_gpu = ref.pop("log_prob_max_token_len_per_gpu", None)
                omega_conf_to_dataclass(ref)
            # verl/workers/engine_workers.py, asserted in every rollout worker on the GPUs
            world = resolved.trainer.n_gpus_per_node * resolved.trainer.nnodes
            infer = (rollout.tensor_model_parallel_size * rollout.data_parallel_size
                     * rollout.pipeline_model_parallel_size)
            assert world % infer == 0, f"rollout world_size: {world} is not divisible by infer_world_size: {infer}"
            assert arr.actor.use_dynamic_bsz == arr.rollout.log_prob_use_dynamic_bsz, (
                "actor.use_dynamic_bsz != rollout.log_prob_use_dynamic_bsz (asserted in engine_workers.py)")
            if arr.actor.use_dynamic_bsz:
                assert arr.rollout.log_prob_max_token_len_per_gpu is not None, (
                    "rollout.log_prob_max_token_len_per_gpu is None (asserted in engine_workers.py)")
                assert arr.actor.ppo_max_token_len_per_gpu is not None, (
                    "actor.ppo_max_token_len_per_gpu is None (asserted in engine_workers.py)")
            else:
                assert arr.rollout.log_prob_micro_batch_size_per_gpu is not None, (
                    "rollout.log_prob_micro_batch_size_per_gpu is None (asserted in engine_workers.py)")
                assert arr.actor.ppo_micro_batch_size_per_gpu is not None, (
                    "actor.ppo_micro_batch_size_per_gpu is None (asserted in engine_workers.py)")
    except Exception as e:
        return Preflight(False, _first(e))
    return Preflight(True)


def _first(e: BaseException) -> str:
    """The exception as verl/Hydra word it (Hydra chains the real cause)."""
    text = f"{type(e).__name__}: {e}".strip()
    cause = e.__cause__ or e.__context__
    if cause is not None and str(cause) and str(cause) not in text:
        text += f" (caused by {type(cause).__name__}: {cause})"
    return cut(text, OPTUNA_REASON_CHARS)


# Data ------------------------------------------------------------------------------------------------------------
def _files(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    text = str(value).strip()
    if text.startswith("[") and text.endswith("]"):  # a Hydra list written as one string
        return [t.strip().strip("'\"") for t in text[1:-1].split(",") if t.strip()]
    return [text]


def count_rows(path: Path) -> int | None:
    """Rows (prompts) in a parquet/jsonl/json data file; None where the format cannot be counted here."""
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            return None
        return int(pq.ParquetFile(path).metadata.num_rows)
    if suffix == ".jsonl":
        with path.open("rb") as f:
            return sum(1 for line in f if line.strip())
    if suffix == ".json":
        doc = json.loads(path.read_text())
        return len(doc) if isinstance(doc, list) else None
    return None


def check_data(train_files: Any, train_batch_size: int) -> Preflight:
    """The train files exist and hold at least one batch of prompts (else verl divides by zero at its first epoch)."""
    files = _files(train_files)
    if not files:
        return Preflight(True, skipped=f"{verl.TRAIN_FILES} not set in the job: verl's default path is used")
    total, uncounted = 0, []
    for f in files:
        if "://" in f:
            uncounted.append(f)
            continue
        p = Path(os.path.expandvars(os.path.expanduser(f)))
        if not p.exists():
            return Preflight(False, f"{verl.TRAIN_FILES}: {p} does not exist; fix the path in the job file "
                                    "(relative paths are read from the directory autotune runs in)")
        try:
            n = count_rows(p)
        except Exception as e:
            return Preflight(False, f"{verl.TRAIN_FILES}: cannot read {p}: {type(e).__name__}: {e}")
        if n is None:
            uncounted.append(str(p))
        else:
            total += n
    if not uncounted and total < train_batch_size:
        return Preflight(False, f"{verl.TRAIN_FILES} holds {total} prompts, fewer than {verl.TRAIN_BATCH_SIZE} "
                                f"({train_batch_size}): verl cannot form one batch (it divides by zero computing the "
                                "epoch). Use a larger data set or a smaller batch.")
    return Preflight(True, skipped=f"rows not counted in {', '.join(uncounted)}" if uncounted else "")


# verl's config key set, snapshot of verl VERL_VERSION shipped with the package (scripts/verl_config_keys.py writes it):
# the unknown-key check where verl is not installed.
CONFIG_KEYS_SNAPSHOT = Path(__file__).resolve().parent.parent / "data" / "verl_config_keys.json"


def config_schema() -> tuple[dict[str, Any], Callable[[str], bool], str]:
    """verl's config key tree (a key maps to its sub-tree, or to a non-mapping for a value), whether an override
    selects a config group (`model_engine=...`, not a key), and where both come from: the installed verl's flattened
    reference of its Megatron config (a YAML file, no Hydra or torch import: milliseconds), else the snapshot."""
    spec = importlib.util.find_spec("verl")
    ref = Path(spec.origin).parent / verl.CONFIG_REFERENCE if spec is not None and spec.origin else None
    if ref is not None and ref.is_file():
        import yaml

        config_dir = str(ref.parent)
        return yaml.safe_load(ref.read_text()), lambda key: _is_group(key, config_dir), "the installed verl"
    snap = json.loads(CONFIG_KEYS_SNAPSHOT.read_text())
    groups = set(snap["groups"])

    def is_group(override: str) -> bool:
        key = override.split("=", 1)[0].lstrip("+~")
        return "@" in key or key.replace(".", "/") in groups

    return snap["keys"], is_group, f"autotune's snapshot of verl {snap['verl_version']}'s keys (verl is not installed)"


def unknown_keys(values: dict[str, Any]) -> list[str]:
    """Keys of a job (key -> value) that verl's config does not have, each with the closest key verl has (checked
    against the installed verl, else the snapshot shipped with autotune). Hydra would refuse such a key at launch
    ("not in struct"). A `+` key adds one on purpose and is not checked, nor is a key under an open mapping
    (override_transformer_config)."""
    import difflib

    root, is_group, _ = config_schema()
    found = []
    for key in values:
        if key.startswith(("+", "~")) or is_group(key):
            continue
        node: Any = root
        parts = key.split(".")
        for i, part in enumerate(parts):
            if not isinstance(node, dict) or not node:
                break  # a value or an open mapping: the rest is not verl's schema to check
            if part not in node:
                where = ".".join(parts[:i])
                close = difflib.get_close_matches(part, [str(k) for k in node], n=1)
                hint = f"; did you mean {'.'.join([*parts[:i], close[0]])}?" if close else (
                    f"; {where or 'the top level'} has: {', '.join(map(str, list(node)[:12]))}")
                found.append(f"{key} is not a key of verl {verl.VERL_VERSION}'s config{hint}")
                break
            node = node[part]
    return found
