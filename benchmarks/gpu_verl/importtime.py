"""Where a trial's start-up goes, module by module (issue 24): summarises `python -X importtime` of what verl's Ray
workers and vLLM's processes import.

A warm 0.5B trial spends ~196 s before its first step, and its console shows each new process (the TaskRunner, the
Megatron worker, vLLM's server and engine, eight agent-loop workers) taking 20-37 s before its first line
(tests/data/real_verl_gpu/h100_2026-11-25_l4/trial_0001/verl.ts.log): importing the stack, once per process. One
timed import on the device says which packages cost that, and so what a cache or a lazier import could save.

    python3 -X importtime -c 'import vllm, ...' 2> importtime.raw
    python3 importtime.py importtime.raw > importtime.txt
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from pathlib import Path

LINE = re.compile(r"^import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)\s*$")


def parse(text: str) -> list[tuple[str, int, int, int]]:
    """(module, self µs, cumulative µs, depth) of every `-X importtime` line, in the order Python wrote them."""
    out = []
    for line in text.splitlines():
        m = LINE.match(line)
        if m:
            out.append((m.group(4), int(m.group(1)), int(m.group(2)), len(m.group(3)) // 2))
    return out


def summary(rows: list[tuple[str, int, int, int]], top: int = 25) -> str:
    """Total, the top-level packages by their own modules' time, and the slowest single modules."""
    total = sum(r[1] for r in rows)
    by_pkg: dict[str, int] = defaultdict(int)
    for name, own, _, _ in rows:
        by_pkg[name.split(".")[0]] += own
    lines = [f"imports: {total / 1e6:.1f} s in {len(rows)} modules (self time summed)", "",
             "by top-level package (s, share):"]
    for pkg, us in sorted(by_pkg.items(), key=lambda kv: -kv[1])[:top]:
        lines.append(f"  {us / 1e6:7.2f}  {us / total:5.1%}  {pkg}")
    lines += ["", "slowest modules by self time (s):"]
    for name, own, cum, _ in sorted(rows, key=lambda r: -r[1])[:top]:
        lines.append(f"  {own / 1e6:7.2f}  (cumulative {cum / 1e6:.2f})  {name}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    if len(args) != 1:
        print("usage: importtime.py FILE (the stderr of python3 -X importtime)", file=sys.stderr)
        return 2
    rows = parse(Path(args[0]).read_text(errors="replace"))
    if not rows:
        print(f"{args[0]}: no `import time:` lines (was it python3 -X importtime's stderr?)", file=sys.stderr)
        return 1
    sys.stdout.write(summary(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
