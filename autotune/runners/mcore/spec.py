"""Probe specs of the Megatron-core worker: the layout and run defaults, validation, the specs file.

A spec names a model (architecture dict), a parallel layout (tp, pp, vpp, cp, ep, etp, sequence parallel,
recompute) and the tokens of one micro-batch; ``validate_spec`` fills the defaults and refuses a layout that
cannot run on the model or world size (``SpecError``) before any GPU work. Standard library only, like every
``mcore_*`` module the worker imports (it runs on a machine holding just this package).
"""

from __future__ import annotations

import json

LAYOUT_DEFAULTS = {
    "tp": 1,
    "pp": 1,
    "vpp": None,
    "cp": 1,
    "ep": 1,
    "etp": None,
    "sequence_parallel": False,
    "recompute_granularity": None,
    "recompute_method": None,
    "recompute_num_layers": None,
    "recompute_modules": None,
}

SPEC_DEFAULTS = {
    "num_microbatches": 1,
    "steps": 3,
    "warmup_steps": 1,
    "measure_forward_only": False,
    "forward_steps": 2,
    "world_size": None,
    "lr": 1e-5,
    "seed": 1234,
    "profile_dir": None,  # a folder: one more step after the timed ones, traced there (mcore/profile.py)
}


class SpecError(ValueError):
    """A probe spec that cannot run (bad layout for the model or world size)."""



def validate_spec(spec: dict, world_size: int | None = None) -> dict:
    """Fill defaults and check a probe spec. Returns a new dict; raises SpecError."""
    if not isinstance(spec, dict):
        raise SpecError(f"spec must be an object, got {type(spec).__name__}")
    out = dict(SPEC_DEFAULTS)
    out.update(spec)
    for key in ("id", "model", "layout", "tokens_per_microbatch"):
        if key not in spec:
            raise SpecError(f"spec {spec.get('id', '?')}: missing {key!r}")
    layout = dict(LAYOUT_DEFAULTS)
    unknown = set(spec["layout"]) - set(LAYOUT_DEFAULTS)
    if unknown:
        raise SpecError(f"spec {spec['id']}: unknown layout keys {sorted(unknown)}")
    layout.update(spec["layout"])
    out["layout"] = layout
    m = spec["model"]
    for key in ("hidden_size", "num_layers", "num_attention_heads", "num_kv_heads", "head_dim", "vocab_size"):
        if key not in m:
            raise SpecError(f"spec {spec['id']}: model lacks {key!r}")
    tp, pp, cp, ep = (int(layout[k]) for k in ("tp", "pp", "cp", "ep"))
    vpp = layout["vpp"]
    etp = tp if layout["etp"] is None else int(layout["etp"])
    layout["etp"] = etp
    if min(tp, pp, cp, ep, etp) < 1:
        raise SpecError("tp, pp, cp, ep, etp must be >= 1")
    sid = spec["id"]
    heads, kv = m["num_attention_heads"], m["num_kv_heads"]
    if heads % tp or kv % tp:
        raise SpecError(f"spec {sid}: tp={tp} must divide heads={heads} and kv_heads={kv}")
    L = m["num_layers"]
    chunks = pp * (vpp or 1)
    if vpp is not None:
        vpp = int(vpp)
        layout["vpp"] = vpp
        if pp < 2 or vpp < 2:
            raise SpecError(f"spec {sid}: vpp needs pp >= 2 and vpp >= 2 (got pp={pp}, vpp={vpp})")
        if out["num_microbatches"] % pp:
            raise SpecError(f"spec {sid}: interleaved schedule needs num_microbatches % pp == 0")
    if L % chunks:
        raise SpecError(f"spec {sid}: num_layers={L} not divisible by pp*vpp={chunks}")
    if layout["sequence_parallel"] and tp == 1:
        layout["sequence_parallel"] = False
    tokens = int(out["tokens_per_microbatch"])
    if tokens <= 0:
        raise SpecError(f"spec {sid}: tokens_per_microbatch must be > 0")
    if cp > 1 and tokens % 2:
        raise SpecError(f"spec {sid}: with cp>1 tokens_per_microbatch must be even (2*cp chunking)")
    if layout["sequence_parallel"] and tokens % tp:
        raise SpecError(f"spec {sid}: sequence parallel needs tokens_per_microbatch % tp == 0")
    if m["vocab_size"] % tp:
        raise SpecError(f"spec {sid}: vocab_size not divisible by tp")
    rg = layout["recompute_granularity"]
    if rg not in (None, "full", "selective"):
        raise SpecError(f"spec {sid}: recompute_granularity must be null, 'full' or 'selective'")
    if rg == "full":
        if layout["recompute_method"] not in ("uniform", "block"):
            raise SpecError(f"spec {sid}: full recompute needs recompute_method uniform|block")
        if not layout["recompute_num_layers"]:
            layout["recompute_num_layers"] = 1
    elif rg == "selective":
        if not layout["recompute_modules"]:
            layout["recompute_modules"] = ["core_attn"]
        layout["recompute_method"] = None
        layout["recompute_num_layers"] = None
    else:
        layout["recompute_method"] = None
        layout["recompute_num_layers"] = None
        layout["recompute_modules"] = None
    if m.get("num_experts", 0):
        ne = m["num_experts"]
        if ne % ep:
            raise SpecError(f"spec {sid}: ep={ep} must divide num_experts={ne}")
    elif ep != 1:
        raise SpecError(f"spec {sid}: ep > 1 on a dense model")
    model_parallel = tp * pp * cp
    ws = world_size if world_size is not None else out.get("world_size")
    if ws is not None:
        ws = int(ws)
        if out.get("world_size") is not None and world_size is not None and int(out["world_size"]) != world_size:
            raise SpecError(f"spec {sid}: written for world_size={out['world_size']}, running on {world_size}")
        if ws % model_parallel:
            raise SpecError(f"spec {sid}: world size {ws} not divisible by tp*pp*cp={model_parallel}")
        if m.get("num_experts", 0) and ws % (etp * ep * pp):
            raise SpecError(f"spec {sid}: world size {ws} not divisible by etp*ep*pp={etp * ep * pp}")
        out["world_size"] = ws
    if int(out["steps"]) < 1 or int(out["warmup_steps"]) < 0:
        raise SpecError(f"spec {sid}: steps >= 1 and warmup_steps >= 0 needed")
    out.setdefault("full_num_layers", L)
    if out["full_num_layers"] is None:
        out["full_num_layers"] = L
    return out


def load_specs(path: str) -> list:
    with open(path) as f:
        specs = json.load(f)
    if not isinstance(specs, list):
        raise SpecError("specs file must hold a JSON list")
    return specs
