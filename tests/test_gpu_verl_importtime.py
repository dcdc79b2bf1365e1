"""The lease's import-time summary (benchmarks/gpu_verl/importtime.py): what a trial's processes pay to import."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from benchmarks.gpu_verl import importtime

RAW = """import time: self [us] | cumulative | imported package
import time:       100 |        100 |   _io
import time:      2000 |       2000 |     vllm.config
import time:      1000 |       3000 |   vllm
import time:      7000 |       7000 | torch
not a line of importtime
"""


def test_parse_and_summary_rank_packages_by_their_own_time() -> None:
    rows = importtime.parse(RAW)
    assert [r[0] for r in rows] == ["_io", "vllm.config", "vllm", "torch"]
    assert rows[1] == ("vllm.config", 2000, 2000, 2)
    text = importtime.summary(rows)
    assert text.startswith("imports: 0.0 s in 4 modules")
    pkgs = text.split("by top-level package")[1].split("slowest")[0]
    assert pkgs.index("torch") < pkgs.index("vllm") < pkgs.index("_io") and "29.7%  vllm" in pkgs


def test_a_real_python_importtime_is_read_and_a_wrong_file_refused(tmp_path: Path) -> None:
    raw = tmp_path / "it.raw"
    raw.write_text(subprocess.run([sys.executable, "-X", "importtime", "-c", "import json"],
                                  capture_output=True, text=True).stderr)
    assert "json" in {r[0] for r in importtime.parse(raw.read_text())}
    assert importtime.main([str(raw)]) == 0
    bad = tmp_path / "bad.txt"
    bad.write_text("nothing here\n")
    assert importtime.main([str(bad)]) == 1 and importtime.main([]) == 2
