"""`autotune doctor`: whether this node can run a verl trial, one line per check, and what to fix."""

from __future__ import annotations

import argparse
import json

from autotune.cli.options import out
from autotune.model import get_model
from autotune.verl.doctor import run_doctor

READY = "ready: this node can run verl trials"  # the last line of a node that can, before its time in seconds


def cmd_doctor(args: argparse.Namespace) -> int:
    head_dim, what = 128, "head size 128 (pass --model for your model's)"
    if args.model:
        model = get_model(args.model)
        head_dim, what = model.head_dim, f"{model.name}'s head size {model.head_dim}"
    if not args.json:
        out.print(f"checking the verl stack of this node for {what} (heavy imports: up to {args.timeout:g} s) ...",
                  markup=False)
    diagnosis = run_doctor(head_dim, timeout_s=args.timeout)
    if args.json:
        out.print(json.dumps(diagnosis.as_dict(), indent=1), markup=False)
    else:
        for line in diagnosis.lines():
            out.print(line, markup=False)
        n = len(diagnosis.problems())
        out.print(f"{'ready' if diagnosis.ok else 'NOT READY'}: {n} problem(s) to fix before a verl trial can run "
                  f"({diagnosis.seconds:.0f} s)" if n else f"{READY} ({diagnosis.seconds:.0f} s)", markup=False)
    return 0 if diagnosis.ok else 1
