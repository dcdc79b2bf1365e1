"""How each quantity is written wherever it is shown (CLI, dashboard, exports, reasons): one function and one
precision per quantity, so that the same trial never reads 3897.0 in one view and 3897.1 in another.

Views that get numbers as JSON (the dashboard's plots and tables) get them rounded to the same precision by
`rounded`, and print them with exactly that many decimals: a value is rounded once, from the measurement.
"""

from __future__ import annotations

import math
from typing import Any

import yaml

THROUGHPUT_DECIMALS = 1  # tokens/s/GPU
GIB_DECIMALS = 1  # GiB: predicted and measured peaks, GPU capacity
SECONDS_DECIMALS = 1
SPEEDUP_DECIMALS = 2
DECIMALS = {"throughput": THROUGHPUT_DECIMALS, "gib": GIB_DECIMALS, "seconds": SECONDS_DECIMALS,
            "speedup": SPEEDUP_DECIMALS}


def throughput(x: float) -> str:
    """3897.0 (tokens/s/GPU; the unit and how it was obtained are the caller's words)."""
    return f"{x:.{THROUGHPUT_DECIMALS}f}"


def gib(x: float) -> str:
    return f"{x:.{GIB_DECIMALS}f}"


def seconds(x: float) -> str:
    return f"{x:.{SECONDS_DECIMALS}f}"


def speedup(x: float) -> str:
    return f"{x:.{SPEEDUP_DECIMALS}f}x"


def factor(x: float, log_sd: float = 0.0) -> str:
    """A learned factor of the model with its uncertainty: "x11.2 (x9.8-12.7)", the range one posterior sd either
    side (in log); without an sd, "x11.2". Three significant digits: x0.44 and x61.6 alike."""
    text = f"x{x:.3g}"
    if log_sd <= 0:
        return text
    return f"{text} (x{x * math.exp(-log_sd):.3g}-{x * math.exp(log_sd):.3g})"


def rounded(x: Any, decimals: int = THROUGHPUT_DECIMALS) -> float | None:
    """A JSON-safe number at a view's precision (NaN, infinities and non-numbers become null)."""
    if x is None:
        return None
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) or math.isinf(f) else round(f, decimals)


def _cut_at_space(text: str, width: int, trailing: str | None) -> str:
    """`text` cut to at most `width` characters at its last whitespace past the half (else where it must), with an
    ellipsis when cut; `trailing` the characters stripped before the ellipsis (None: whitespace)."""
    if len(text) <= width:
        return text
    head = text[: width - 1]
    space = max(head.rfind(" "), head.rfind("\n"))
    return (head[:space] if space > width // 2 else head).rstrip(trailing) + "\u2026"


def clip(text: str, width: int) -> str:
    """`text` on one line, cut to at most `width` characters at a word boundary, with an ellipsis when cut (never
    mid-word)."""
    return _cut_at_space(" ".join(str(text).split()), width, " ,;:")


def cut(text: str, width: int) -> str:
    """`text` cut to at most `width` characters at whitespace, its lines kept, with an ellipsis when cut: stored
    reasons (Optuna's user attributes) hold tracebacks whose layout matters and a bounded size."""
    return _cut_at_space(text, width, None)


OPTUNA_REASON_CHARS = 2000  # a reason kept as an Optuna user attribute (the database's reason column keeps it whole)


def yaml_value(v: Any) -> str:
    """A parameter value as a space file writes it (null, true, [1, 2], core_attn), not as Python's repr."""
    return yaml.safe_dump([v], default_flow_style=True, width=10**6).strip()[1:-1]
