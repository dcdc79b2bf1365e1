"""autotune.cli.tables.print_table writes what rich's own Table writes, byte for byte, in a pipe and on a terminal."""

from __future__ import annotations

import io
import random

import pytest
from rich.console import Console
from rich.table import Table

from autotune.cli import tables

COLUMNS = ("#", "status", "origin", "configuration", "tokens/s/GPU", "predicted", "mem pred GiB", "mem meas GiB",
           "reason")
WORDS = ["tp2pp2", "rtp4", "dyn16k/96k", "util0.7", "offload:params+optim", "rc:sel:core_attn,mlp", "constraint",
         "world_size:", "8", "GPUs", "are", "not", "divisible", "by", "TP*PP*CP", "=", "2*4*2", "predicted", "OOM:",
         "update:", "123.9", "GiB", ">", "79.6", "(largest:", "activations)", "x" * 90]
ODD = ["[bold]markup[/bold] cell", "a\ttab", "two\nlines", "wide 日本語 text", ":thumbs_up: emoji", "[SIMULATED]",
       "trailing   spaces   ", "  leading", ""]


def _rows(n: int, seed: int, odd: bool) -> list[tuple[str, ...]]:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        cells = [str(i)] + [" ".join(rng.choice(WORDS) for _ in range(rng.randint(0, k)))
                            for k in (1, 1, 9, 1, 1, 1, 1, 14)]
        if odd and i % 37 == 5:
            cells[rng.randrange(1, 9)] = rng.choice(ODD)
        rows.append(tuple(cells))
    return rows


def _rich(console: Console, title: str, rows: list[tuple[str, ...]]) -> None:
    """What `autotune status` printed before: rich lays out the whole table."""
    table = Table(title=title)
    for col in COLUMNS:
        table.add_column(col)
    for r in rows:
        table.add_row(*r)
    console.print(table)


@pytest.mark.parametrize("terminal", [False, True])
@pytest.mark.parametrize("width, odd, seed", [(200, False, 1), (200, True, 2), (120, True, 3), (400, False, 4)])
def test_print_table_is_byte_identical_to_rich(terminal, width, odd, seed):
    rows = _rows(tables.SMALL + 700, seed, odd)  # above SMALL: the fast path; over a chunk boundary
    title = "study s: qwen2.5-7b, backend simulate [SIMULATED]"
    outs = []
    for fn in (lambda c: _rich(c, title, rows), lambda c: tables.print_table(c, title, COLUMNS, rows)):
        buf = io.StringIO()
        console = Console(file=buf, width=width, highlight=False, soft_wrap=True, force_terminal=terminal,
                          color_system="truecolor" if terminal else None)
        fn(console)
        outs.append(buf.getvalue())
    assert outs[1] == outs[0]
    if terminal:
        assert "\x1b[1m" in outs[1]  # the header's style survives


def test_small_tables_are_rich_itself():
    rows = _rows(5, 0, True)
    bufs = [io.StringIO(), io.StringIO()]
    _rich(Console(file=bufs[0], width=200), "t", rows)
    tables.print_table(Console(file=bufs[1], width=200), "t", COLUMNS, rows)
    assert bufs[0].getvalue() == bufs[1].getvalue()
