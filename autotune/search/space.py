"""Search spaces: YAML files listing the dimensions the tuner may turn, their choices and when they apply.

A dimension is active only when its `when` conditions hold; inactive dimensions keep the job's (or verl's)
value. Conditions may name earlier dimensions or the context: `moe` (bool), `world_size`, `gpus_per_node`,
`ref` (bool: the job has a reference model).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from autotune import verl
from autotune.candidate import RECOMPUTE_CHOICES, Candidate
from autotune.job import yaml_error

# The built-in spaces: inside the installed package (a wheel, `pip install .`: setup.py ships search_spaces/ there),
# else at the checkout's top (a checkout, an editable install).
_PACKAGE = Path(__file__).resolve().parent.parent  # autotune/
_PACKAGED_SPACES = _PACKAGE / "search_spaces"
SPACES_DIR = _PACKAGED_SPACES if _PACKAGED_SPACES.is_dir() else _PACKAGE.parent / "search_spaces"
CONTEXT_NAMES = ("moe", "world_size", "gpus_per_node", "ref")  # ref: the job has a reference model (KL)
OPS = ("eq", "ne", "gt", "ge", "lt", "le", "in")
_TYPES: dict[str, tuple[type, ...]] = {
    "bool": (bool,),
    "int": (int,),
    "float": (float, int),
    "str": (str,),
}
# Allowed value types per parameter (None allowed where the candidate's field is optional).
PARAM_TYPES: dict[str, tuple[str, bool]] = {
    "tp": ("int", False), "pp": ("int", False), "vpp": ("int", True), "cp": ("int", False),
    "ep": ("int", False), "etp": ("int", True), "sequence_parallel": ("bool", False),
    "recompute": ("str", False), "recompute_method": ("str", False), "recompute_num_layers": ("int", False),
    "recompute_modules": ("str", False), "use_dynamic_bsz": ("bool", False),
    "ppo_max_token_len_per_gpu": ("int", False), "log_prob_max_token_len_per_gpu": ("int", False),
    "ppo_micro_batch_size_per_gpu": ("int", False), "log_prob_micro_batch_size_per_gpu": ("int", False),
    "rollout_tp": ("int", False), "gpu_memory_utilization": ("float", False),
    "max_num_batched_tokens": ("int", False), "param_offload": ("bool", False),
    "optimizer_offload": ("bool", False), "use_fused_kernels": ("bool", False),
    "ref_param_offload": ("bool", True), "optimizer_cpu_offload": ("bool", False),
    "optimizer_offload_fraction": ("float", True),
}
_ENUMS = {"recompute": RECOMPUTE_CHOICES, "recompute_method": ("uniform", "block")}


_FAST_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's, where PyYAML was built with it


def value_error(name: str, value: Any) -> str | None:
    """Why `value` cannot be parameter `name` (its type, range or allowed words); None when it can."""
    kind, nullable = PARAM_TYPES[name]
    if value is None:
        return None if nullable else f"{name} cannot be null"
    ok = isinstance(value, _TYPES[kind]) and not (kind in ("int", "float") and isinstance(value, bool))
    words = {"int": "a whole number", "float": "a number", "bool": "true or false", "str": "a word"}
    if name in _ENUMS and value not in _ENUMS[name]:
        return f"{name} takes one of {', '.join(_ENUMS[name])}, not {value!r}"
    if not ok:
        return f"{name} takes {words[kind]}{' or null' if nullable else ''}, not {value!r}"
    if kind == "int" and value < 1:
        return f"{name} takes a whole number of at least 1, not {value!r}"
    if name == "gpu_memory_utilization" and not 0 < value < 1:
        return f"{name} takes a fraction between 0 and 1, not {value!r}"
    if name == "optimizer_offload_fraction" and not 0 <= value <= 1:
        return f"{name} takes a fraction from 0 to 1, not {value!r}"
    return None


class SpaceError(ValueError):
    """A search-space file that cannot be used; the message names the file, the line or key, and what is allowed."""


@dataclass(frozen=True)
class Condition:
    name: str
    op: str
    value: Any

    def holds(self, values: Mapping[str, Any]) -> bool:
        v = values.get(self.name)
        if self.op == "eq":
            return v == self.value
        if self.op == "ne":
            return v != self.value
        if self.op == "in":
            return v in self.value
        if v is None:
            return False
        return {"gt": v > self.value, "ge": v >= self.value, "lt": v < self.value, "le": v <= self.value}[self.op]

    def describe(self) -> str:
        return f"{self.name} {self.op} {self.value!r}"


@dataclass(frozen=True)
class Dimension:
    name: str
    choices: tuple[Any, ...]
    when: tuple[Condition, ...] = ()

    def active(self, values: Mapping[str, Any]) -> bool:
        return all(c.holds(values) for c in self.when)


@dataclass(frozen=True)
class SearchSpace:
    name: str
    dimensions: tuple[Dimension, ...]
    source: str
    text_hash: str
    description: str = ""

    def __getitem__(self, name: str) -> Dimension:
        for d in self.dimensions:
            if d.name == name:
                return d
        raise KeyError(name)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(d.name for d in self.dimensions)

    def assign(self, choose: Any, context: Mapping[str, Any]) -> dict[str, Any]:
        """Walk the dimensions in order; `choose(dim)` picks a value for each active one."""
        values: dict[str, Any] = dict(context)
        params: dict[str, Any] = {}
        for dim in self.dimensions:
            if dim.active(values):
                params[dim.name] = values[dim.name] = choose(dim)
        return params

    def suggest(self, trial: Any, context: Mapping[str, Any]) -> dict[str, Any]:
        """Parameters of an Optuna trial (define-by-run: only active dimensions are asked)."""
        return self.assign(lambda d: trial.suggest_categorical(d.name, list(d.choices)), context)

    def sample(self, rng: random.Random, context: Mapping[str, Any]) -> dict[str, Any]:
        return self.assign(lambda d: rng.choice(d.choices), context)

    def project(self, params: Mapping[str, Any], context: Mapping[str, Any]) -> dict[str, Any]:
        """Only the active dimensions of `params`, as a trial of this space would hold them."""
        return self.assign(
            lambda d: params[d.name] if d.name in params and params[d.name] in d.choices else d.choices[0], context
        )

    def contains(self, params: Mapping[str, Any], context: Mapping[str, Any]) -> bool:
        return all(d in params and params[d] in self[d].choices for d in self.project(params, context))

    def size(self, context: Mapping[str, Any]) -> int:
        """Number of distinct parameter settings (conditional dimensions counted where active).

        What follows dimension i depends only on the values its conditions and the later ones name, so the count is
        memoised on those: the shipped dense space's 33 million settings are counted without visiting each."""
        dims = self.dimensions
        read: list[tuple[str, ...]] = [()] * (len(dims) + 1)
        for i in range(len(dims) - 1, -1, -1):
            read[i] = tuple(sorted({*read[i + 1], *(c.name for c in dims[i].when)}))
        memo: dict[tuple[Any, ...], int] = {}

        def count(i: int, values: dict[str, Any]) -> int:
            if i == len(dims):
                return 1
            key = (i, *(values.get(n) for n in read[i]))
            if key not in memo:
                dim = dims[i]
                memo[key] = (sum(count(i + 1, {**values, dim.name: c}) for c in dim.choices) if dim.active(values)
                             else count(i + 1, values))
            return memo[key]

        return count(0, dict(context))

    def describe(self) -> list[dict[str, Any]]:
        return [
            {"name": d.name, "choices": list(d.choices), "when": [c.describe() for c in d.when]}
            for d in self.dimensions
        ]


def space_context(is_moe: bool, world_size: int, gpus_per_node: int, ref: bool = False) -> dict[str, Any]:
    return {"moe": is_moe, "world_size": world_size, "gpus_per_node": gpus_per_node, "ref": ref}


def builtin_spaces() -> dict[str, Path]:
    return {p.stem: p for p in sorted(SPACES_DIR.glob("*.yaml"))}


def default_space_name(is_moe: bool) -> str:
    return "moe" if is_moe else "dense"


def load_space(name_or_path: str) -> SearchSpace:
    """A built-in space by name (`dense`, `moe`) or a user's YAML file."""
    builtin = builtin_spaces()
    path = builtin.get(name_or_path) or Path(name_or_path)
    if not path.is_file():
        raise SpaceError(
            f"search space {name_or_path!r} is neither a built-in space ({', '.join(builtin)}) nor a file"
        )
    return parse_space(path.read_text(), str(path))


def _line_of(node: yaml.Node | None, *path: str) -> int | None:
    """1-based line of a key path in a composed YAML document."""
    for key in path:
        if not isinstance(node, yaml.MappingNode):
            return None
        for k, v in node.value:
            if k.value == key:
                if key == path[-1]:
                    return k.start_mark.line + 1
                node = v
                break
        else:
            return None
    return None


def parse_space(text: str, source: str = "<string>") -> SearchSpace:
    try:  # libyaml where PyYAML has it (every study's setup parses its space); PyYAML's own words for an error
        data = yaml.load(text, Loader=_FAST_LOADER)
    except yaml.YAMLError:
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise SpaceError(f"{source}: not valid YAML: {yaml_error(e)}") from None

    def fail(msg: str, *path: str) -> SpaceError:
        line = _line_of(yaml.compose(text), *path) if path else None  # the node tree only to say where
        where = f"{source}:{line}" if line else source
        key = f" ({'.'.join(path)})" if path else ""
        return SpaceError(f"{where}{key}: {msg}")

    if not isinstance(data, Mapping):
        raise fail("a search space is a mapping with `name` and `dimensions`")
    extra = set(data) - {"name", "description", "dimensions"}
    if extra:
        first = sorted(extra)[0]
        raise fail(f"unknown top-level key(s) {sorted(extra)}; allowed: name, description, dimensions", first)
    dims_data = data.get("dimensions")
    if not isinstance(dims_data, Mapping) or not dims_data:
        raise fail("`dimensions` must be a non-empty mapping of parameter name -> {choices: [...], when: {...}}")
    allowed = Candidate.param_names()
    dims: list[Dimension] = []
    for name, spec in dims_data.items():
        path = ("dimensions", str(name))
        if name not in allowed:
            if name in verl.TRAINING_SEMANTICS or str(name).startswith(verl.TRAINING_SEMANTIC_PREFIXES):
                raise fail(
                    f"{name!r} changes the training itself ({verl.TRAINING_SEMANTICS.get(name, name)}); the tuner "
                    "never changes it: set it in the job file instead", *path)
            param = verl.param_for_key(str(name))
            hint = f" (that verl key is the parameter {param!r})" if param else ""
            raise fail(f"unknown dimension {name!r}{hint}; allowed: {', '.join(allowed)}", *path)
        if isinstance(spec, list):
            spec = {"choices": spec}
        if not isinstance(spec, Mapping) or "choices" not in spec:
            raise fail("a dimension is a mapping with `choices: [...]` and optionally `when: {...}`", *path)
        bad_keys = set(spec) - {"choices", "when"}
        if bad_keys:
            raise fail(f"unknown key(s) {sorted(bad_keys)}; allowed: choices, when", *path)
        choices = spec["choices"]
        if not isinstance(choices, list) or not choices:
            raise fail("`choices` must be a non-empty list", *path, "choices")
        if len(set(map(repr, choices))) != len(choices):
            raise fail("`choices` has duplicates", *path, "choices")
        kind, nullable = PARAM_TYPES[name]
        for c in choices:
            if c is None and nullable:
                continue
            ok = isinstance(c, _TYPES[kind]) and not (kind in ("int", "float") and isinstance(c, bool))
            if not ok:
                raise fail(f"choice {c!r} is not a {kind}{' or null' if nullable else ''}", *path, "choices")
            if name in _ENUMS and c not in _ENUMS[name]:
                raise fail(f"choice {c!r} is not one of {list(_ENUMS[name])}", *path, "choices")
            if kind == "int" and c < 1:
                raise fail(f"choice {c!r} must be at least 1", *path, "choices")
            if name == "gpu_memory_utilization" and not 0 < c < 1:
                raise fail(f"choice {c!r} must be between 0 and 1", *path, "choices")
        when = _parse_when(spec.get("when"), [d.name for d in dims], lambda m, p=path: fail(m, *p, "when"))
        dims.append(Dimension(str(name), tuple(choices), when))
    return SearchSpace(
        name=str(data.get("name") or Path(source).stem),
        dimensions=tuple(dims),
        source=source,
        text_hash=hashlib.sha1(text.encode()).hexdigest()[:12],
        description=str(data.get("description") or ""),
    )


def _parse_when(raw: Any, earlier: list[str], fail: Any) -> tuple[Condition, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, Mapping):
        raise fail("`when` must be a mapping of name -> value or {op: value}")
    out = []
    for name, test in raw.items():
        if name not in earlier and name not in CONTEXT_NAMES:
            raise fail(
                f"condition on {name!r}: it must be an earlier dimension ({', '.join(earlier) or 'none yet'}) "
                f"or one of {', '.join(CONTEXT_NAMES)}"
            )
        if isinstance(test, Mapping):
            if len(test) != 1 or next(iter(test)) not in OPS:
                raise fail(f"condition on {name!r}: use one operator of {', '.join(OPS)}, e.g. {{gt: 1}}")
            op, value = next(iter(test.items()))
            if op == "in" and not isinstance(value, list):
                raise fail(f"condition on {name!r}: `in` takes a list")
        elif isinstance(test, list):
            op, value = "in", test
        else:
            op, value = "eq", test
        out.append(Condition(str(name), op, tuple(value) if op == "in" else value))
    return tuple(out)
