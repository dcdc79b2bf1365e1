"""benchmarks.host_speed: the per-host probe a lease plan runs (campaign.sh host_probe) and a bundle brings home."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import host_speed
from benchmarks.gpu_verl import import_bundle


def test_the_probe_times_the_cpu_and_says_which_cpu(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    out = tmp_path / "host_speed_before.json"
    host_speed.main(["--out", str(out)])
    got = json.loads(out.read_text())
    assert got["cpu"] and got["cpus"] >= 1
    assert 0 < got["python_loop_s"] < 30 and 0 < got["torch_cpu_op_us"] < 1000
    # the GPU's launch path only where there is a GPU (CI has none: the keys are left out, not zeroed)
    assert ("cuda_launch_us" in got) == torch.cuda.is_available() == ("cuda_sync_us" in got)


def test_a_bundle_brings_the_probe_home() -> None:
    assert any(Path(f"host_speed_{tag}.json").match(p) for p in import_bundle.RECORDS for tag in ("before", "after"))
