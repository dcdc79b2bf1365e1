"""The Megatron-core probe's profiled step on CPU (the step itself is a small torch model here: Megatron needs a GPU),
its trace named the verl way, and the profiling mcore runner asking the worker for it."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from autotune import verl
from autotune.candidate import Candidate
from autotune.profile.analysis import analyse
from autotune.profile.runs import ProfilingMcoreRunner, trace_dir
from autotune.profile.traces import classify, discover
from autotune.runners.base import TrialResult, TrialStatus
from autotune.runners.mcore import profile as mcore_profile
from autotune.runners.mcore.spec import validate_spec
from tests.conftest import make_setup


def test_probe_marks_its_step_with_verls_stage_name():
    assert verl.PROFILE_STAGES[mcore_profile.UPDATE_STAGE] == "update_actor"


def test_trace_name_is_verls_layout():
    name = mcore_profile.trace_basename(3, 8, {"tp": 1, "pp": 1, "dp": 0, "cp": 0}, 4, pid=42,
                                        when=dt.datetime(2026, 11, 23, 12, 0, 0, 123000))
    assert name == "mcore_train_step4_rank3-of-8_tp1-pp1-dp0-cp0_pid42_20261123120000123"
    f = classify(Path("/x") / (name + ".json.gz"))
    assert (f.source, f.rank, f.world, f.step, f.parallel) == ("probe", 3, 8, 4, {"tp": 1, "pp": 1, "dp": 0, "cp": 0})


def test_profiled_step_writes_a_trace_the_analysis_reads(tmp_path):
    torch = pytest.importorskip("torch")
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256))
    opt = torch.optim.AdamW(model.parameters())
    x = torch.randn(128, 256)

    def step():
        for _ in range(2):  # micro-batches
            model(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()

    path = mcore_profile.profile_step(step, str(tmp_path), 0, 1, 5, {"tp": 0, "pp": 0, "dp": 0, "cp": 0})
    assert Path(path).parent == tmp_path and path.endswith(".json.gz")
    files, _ = discover(tmp_path)
    a = analyse(files)
    ph = a.phase("update_actor")
    assert ph.source == "probe" and ph.device == "cpu" and ph.ranks[0].rank == 0
    # what each kind's share is depends on the machine's load (a CPU trace): that the GEMMs are found does not
    assert ph.share("gemm") > 0 and abs(sum(ph.shares().values()) - 1) < 1e-6
    assert not a.unprofiled  # the probe's trace is the whole step: nothing of it is outside


def test_profiling_runner_asks_the_worker_for_one_traced_step(tmp_path, monkeypatch):
    setup = make_setup("qwen2.5-1.5b", gpus=1)
    cand = Candidate(tp=1, use_dynamic_bsz=True, ppo_max_token_len_per_gpu=8192).normalized()
    ev = setup.evaluate(cand)
    runner = ProfilingMcoreRunner(steps=1, local_gpus=1)
    seen = {}

    def run_specs(workdir, specs, world):
        seen["specs"], seen["world"] = specs, world
        return [TrialResult(TrialStatus.OK, "ok", extra={"probe": {"num_microbatches": specs[0]["num_microbatches"]}})]

    monkeypatch.setattr(runner, "run_specs", run_specs)
    from autotune.runners.base import TrialSpec

    spec = TrialSpec("s", 0, setup.model, setup.cluster, setup.job, cand, ev.memory, ev.throughput,
                     workdir=tmp_path / "probe")
    runner.run(spec)
    (pspec,) = seen["specs"]
    assert pspec["profile_dir"] == str(trace_dir(tmp_path / "probe", 1))
    assert validate_spec(pspec, seen["world"])["profile_dir"] == pspec["profile_dir"]  # the worker accepts it
    assert validate_spec({k: v for k, v in pspec.items() if k != "profile_dir"}, 1)["profile_dir"] is None
