"""The committed GPU profile (benchmarks/gpu_profile/run.sh on a lent H100): its trimmed kernel traces read back as
GPU work, and the committed analysis (of the whole traces) agrees with them where both see the same time."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from autotune.profile import kinds as K
from autotune.profile.analysis import analyse
from autotune.profile.traces import discover

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "gpu_profile_h100"
pytestmark = pytest.mark.skipif(not (RESULTS / "traces_trimmed.tar.xz").exists(),
                                reason="no GPU profile committed yet (benchmarks/gpu_profile/README.md)")


def test_committed_kernel_traces_and_analysis_agree(tmp_path):
    with tarfile.open(RESULTS / "traces_trimmed.tar.xz") as tar:
        tar.extractall(tmp_path, filter="data")
    files, _ = discover(tmp_path / "traces_trimmed")
    assert files and all(f.source == "probe" for f in files)
    trimmed = analyse(files)
    assert trimmed.device == "gpu"
    upd = trimmed.phase("update_actor")
    r = upd.ranks[0]
    assert sum(r.kinds.values()) == pytest.approx(r.seconds, rel=1e-6)
    assert upd.share(K.GEMM) > 0.2 and upd.share(K.ATTENTION) > 0  # a transformer's training step on the GPU
    whole = json.loads((RESULTS / "profile.json").read_text())["analysis"]
    full = next(p for p in whole["phases"] if p["phase"] == "update_actor")
    assert full["device"] == "gpu" and full["ranks"] == len(upd.ranks)
    # the trimmed trace is the first part of the whole one: no more GEMM time than the whole step had
    assert r.kinds[K.GEMM] <= full["per_rank"][0]["kinds_s"]["gemm"] + 1e-6
    probe = json.loads((RESULTS / "probe.json").read_text())
    assert probe["status"] == "ok" and probe["profile"]["ok"]
