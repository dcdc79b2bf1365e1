"""`autotune models` and `autotune spaces`: what autotune ships, the model catalog and the built-in search
spaces.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Any

from rich.table import Table

from autotune import units
from autotune.cli.options import out
from autotune.model import CATALOG
from autotune.search.space import builtin_spaces, load_space


def cmd_models(args: argparse.Namespace) -> int:
    if args.json:
        print(json.dumps({k: dataclasses.asdict(m) | {"params_b": round(m.total_params() / 1e9, 2)}
                          for k, m in CATALOG.items()}, indent=2))
        return 0
    table = Table(title="model catalog (or pass --model PATH to a Hugging Face config)")
    for col in ("name", "params", "layers", "hidden", "heads/kv", "vocab", "MoE"):
        table.add_column(col)
    for m in CATALOG.values():
        moe = f"{m.num_experts} experts, top-{m.moe_top_k}" if m.is_moe else "-"
        table.add_row(m.name, f"{m.total_params() / 1e9:.2f}B", str(m.num_layers), str(m.hidden_size),
                      f"{m.num_attention_heads}/{m.num_kv_heads}", str(m.vocab_size), moe)
    out.print(table)
    return 0


def cmd_spaces(args: argparse.Namespace) -> int:
    spaces = {name: load_space(str(path)) for name, path in builtin_spaces().items()}
    if args.json:
        print(json.dumps({n: {"source": s.source, "dimensions": s.describe()} for n, s in spaces.items()}, indent=2))
        return 0
    for name, s in spaces.items():
        out.print(f"[bold]{name}[/] ({s.source}): {s.description}")
        out.print("  dimensions:", markup=False)
        for d in s.dimensions:  # as the space file writes them: YAML, not Python values
            spec: dict[str, Any] = {"choices": list(d.choices)}
            if d.when:
                spec["when"] = {c.name: c.value if c.op == "eq" else {c.op: c.value} for c in d.when}
            out.print(f"    {d.name + ':':35} {units.yaml_value(spec)}", markup=False)
    return 0
