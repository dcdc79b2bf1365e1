"""The late-OOM verdict in words where users look: the trial page, the best card and every export format."""

from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("fastapi", reason="the dashboard's dependencies are not installed: pip install -e '.[dashboard]'")

from fastapi.testclient import TestClient  # noqa: E402

from autotune.candidate import Candidate  # noqa: E402
from autotune.dashboard.app import create_app  # noqa: E402
from autotune.results.export import FORMATS, export_text  # noqa: E402
from autotune.runners.simulate import SimulateRunner  # noqa: E402
from autotune.study.study import Tuner  # noqa: E402
from tests.conftest import make_setup  # noqa: E402

RISKY = {"tp": 2, "rollout_tp": 1, "use_dynamic_bsz": False, "ppo_micro_batch_size_per_gpu": 2,
         "log_prob_micro_batch_size_per_gpu": 4, "param_offload": True, "optimizer_offload": True,
         "use_fused_kernels": True}


def test_late_oom_words_on_the_dashboard_and_in_exports(tmp_path):
    url = f"sqlite:///{tmp_path / 's.db'}"
    setup = dataclasses.replace(make_setup(), response_length=1500.0)
    tuner = Tuner(setup, SimulateRunner(), url, "late")
    tuner._enqueue(Candidate.from_params(RISKY, setup.base).params(), origin="user")
    tuner.run(n_trials=1)
    row = next(r for r in tuner.store.trials("late") if r.launched)
    verdict = row.predicted_memory["verdict"]
    assert verdict.startswith("fits at step 3; OOM in update_actor once responses reach ")
    assert verdict.endswith(" tokens")
    page = TestClient(create_app(url)).get(f"/study/late/trial/{row.number}").text
    assert verdict in page and "--response-length 1500" in page and "grows with the responses" in page
    assert verdict in TestClient(create_app(url)).get("/study/late").text  # the best card
    for fmt in FORMATS:
        assert verdict in export_text(tuner.store, "late", row, fmt), fmt
