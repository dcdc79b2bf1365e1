"""Large tables printed as rich prints them, in a fraction of rich's time.

rich measures and lays out every cell of a table on every render: 10,000 rows take it 5-50 s. The layout of a table
depends only on its title, headers and, per column, the widest cell and the cell with the longest word. So rich lays
out a small table holding just those cells (same column widths, same title and header lines), and the body is
rendered by rich in chunks with those widths fixed; the lines are then joined. The text is the same as rich's own
rendering of the whole table (tests/test_tables.py compares them).
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Sequence

from rich._wrap import divide_line
from rich.box import HEAVY_HEAD
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table

SMALL = 200  # rows below which rich renders the whole table itself
CHUNK = 500
_TOP = 3  # cells kept per column and measure: ties and rounding never change the widest
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def print_table(console: Console, title: str, columns: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """`console.print(Table(title=title) + columns + rows)`: the same bytes, also on a terminal (styles included)."""
    if len(rows) <= SMALL:
        console.print(_table(title, columns, rows))
        return
    rendered: dict[str, tuple[str, bool]] = {}
    sizes: dict[str, tuple[int, int]] = {}  # shown text -> (cells, cells of its longest word)
    keep: set[int] = set()
    for j in range(len(columns)):
        col = [_size(_text(console, row[j], rendered)[0], sizes) for row in rows]
        keep.update(heapq.nlargest(_TOP, range(len(rows)), key=lambda i: col[i][0]))
        keep.update(heapq.nlargest(_TOP, range(len(rows)), key=lambda i: col[i][1]))
    head = _lines(console, _table(title, columns, [rows[i] for i in sorted(keep)]))
    # The line between the header and the body (┡━━╇━━┩) gives the column widths, padding included
    sep = next(i for i, ln in enumerate(head) if _ANSI.sub("", ln).startswith(HEAVY_HEAD.head_row_left))
    widths = [len(part) for part in _ANSI.sub("", head[sep])[1:-1].split(HEAVY_HEAD.head_row_cross)]
    lines = head[:sep + 1]
    wrapped: dict[tuple[str, int], list[str]] = {}
    pending: list[Sequence[str]] = []  # rows only rich can lay out (markup, tabs, wide characters), in order
    for row in rows:
        fast = _row_lines(console, row, widths, rendered, wrapped)
        if fast is None:
            pending.append(row)
            continue
        lines += _rich_rows(console, columns, pending, widths)
        pending = []
        lines += fast
    lines += _rich_rows(console, columns, pending, widths)
    lines.append(head[-1])
    console.file.write("\n".join(lines) + "\n")
    console.file.flush()


def _rich_rows(console: Console, columns: Sequence[str], rows: Sequence[Sequence[str]],
               widths: Sequence[int]) -> list[str]:
    out: list[str] = []
    for start in range(0, len(rows), CHUNK):
        body = _lines(console, _table(None, columns, rows[start:start + CHUNK], widths, header=False))
        out += body[1:-1]  # without the chunk's own top and bottom borders
    return out


def _text(console: Console, cell: str, seen: dict[str, tuple[str, bool]]) -> tuple[str, bool]:
    """(the cell's text as rich shows it, whether it is one line of unstyled ASCII that _wrap lays out as rich)."""
    got = seen.get(cell)
    if got is None and "[" not in cell and ":" not in cell and cell.isascii() and "\n" not in cell \
            and "\t" not in cell:
        got = seen[cell] = (cell, True)  # neither markup nor emoji codes: rich shows the string as it is
    if got is None:
        text = console.render_str(cell)
        plain = text.plain
        got = seen[cell] = (plain, not text.spans and plain.isascii() and "\n" not in plain and "\t" not in plain)
    return got


def _row_lines(console: Console, row: Sequence[str], widths: Sequence[int], seen: dict[str, tuple[str, bool]],
               wrapped: dict[tuple[str, int], list[str]]) -> list[str] | None:
    """A body row as rich lays it out (left-justified, word-wrapped, ellipsis overflow, one space of padding)."""
    cols = []
    for cell, width in zip(row, widths, strict=True):
        plain, simple = _text(console, cell, seen)
        if not simple:
            return None
        key = (plain, width)
        lines = wrapped.get(key)
        if lines is None:
            lines = wrapped[key] = _wrap(plain, width - 2)
        cols.append(lines)
    height = max(len(c) for c in cols)
    box = HEAVY_HEAD
    return [box.mid_left + box.mid_vertical.join(
        f" {c[i] if i < len(c) else ' ' * (w - 2)} " for c, w in zip(cols, widths, strict=True)) + box.mid_right
        for i in range(height)]


def _wrap(text: str, width: int) -> list[str]:
    """rich's Text.wrap of one ASCII line: justify left, overflow ellipsis."""
    if len(text) <= width:
        return [text + " " * (width - len(text))]
    offsets = divide_line(text, width, fold=False)
    out = []
    for a, b in zip([0, *offsets], [*offsets, len(text)], strict=True):
        line = text[a:b]
        if len(line) > width:  # rstrip_end: trailing spaces beyond the width go
            excess = len(line) - width
            spaces = len(line) - len(line.rstrip())
            line = line[:len(line) - min(spaces, excess)]
        if len(line) > width:
            line = line[:width - 1] + "\u2026"
        out.append(line + " " * (width - len(line)))
    return out


def _size(s: str, seen: dict[str, tuple[int, int]]) -> tuple[int, int]:
    got = seen.get(s)
    if got is None:
        got = seen[s] = (cell_len(s), max((cell_len(w) for w in s.split()), default=0))
    return got


def _table(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[str]],
           widths: Sequence[int] | None = None, header: bool = True) -> Table:
    table = Table(title=title, show_header=header)
    for j, col in enumerate(columns):
        table.add_column(col, width=widths[j] - 2 if widths else None)  # widths include the cell padding
    for row in rows:
        table.add_row(*row)
    return table


def _lines(console: Console, table: Table) -> list[str]:
    """What console.print(table) writes, as lines (with the terminal's escape codes where it writes them)."""
    with console.capture() as cap:
        console.print(table)
    return cap.get().rstrip("\n").split("\n")
