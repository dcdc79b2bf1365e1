"""Offline validation against the real verl 0.9.1: every kind of candidate autotune can launch, rendered to verl
overrides exactly as the verl runner launches them (and as `autotune export` writes them), composes with verl's own
Hydra config and passes verl's validate_config and dataclass checks.

Needs verl importable (CPU torch is enough): CI runs scripts/install-verl-cpu.sh first. Skipped otherwise.
"""

from __future__ import annotations

import heapq
import itertools
import os
import random
from pathlib import Path

import pytest

from autotune import verl
from autotune.candidate import Candidate
from autotune.job import Job
from autotune.results.export import launch_argv, tuned_values
from autotune.runners.verl import VerlRunner
from autotune.verl.launch_script import read_script
from autotune.verl.preflight import hydra_overrides, validate_overrides, verl_importable
from tests.conftest import REPO, make_setup
from tests.fake_verl import make_spec

pytestmark = pytest.mark.skipif(
    not verl_importable(),
    reason="verl 0.9.1 is not importable here: run scripts/install-verl-cpu.sh (CI does) to validate configs offline",
)
# Candidates passing the constraints, sampled per model/space (POOL of them); validated as the trial launches them
# (~0.2 s each on a 2-core machine): a pairwise cover of the pool, every pair of values of two dimensions that any
# pooled candidate holds validated together (50-60 candidates; the pool's first 100, the random draw this test
# validated before, hold fewer pairs). AUTOTUNE_VERL_VALIDATE_N=200 also validates the pool's first 200.
POOL = 2000
N_RANDOM = int(os.environ.get("AUTOTUNE_VERL_VALIDATE_N", "0"))
N_EXPORT = 25  # of those, also validated as `autotune export` writes them (same keys minus the short-run ones)


def feasible_candidates(model: str, n: int, seed: int = 0) -> tuple[object, list[Candidate]]:
    """n distinct candidates sampled from the space that pass autotune's static constraints (what the study may
    launch; the memory model prunes further, e.g. most MoE layouts of the default 8k-response job on 8 H100s)."""
    setup = make_setup(model)
    rng = random.Random(seed)
    found: dict[str, Candidate] = {}
    for _ in range(100 * n):
        params = setup.space.sample(rng, setup.context)
        cand = Candidate.from_params(params, setup.base)
        if cand.key() not in found and not setup.evaluate(cand).violations:
            found[cand.key()] = cand
            if len(found) == n:
                break
    return setup, list(found.values())


def value_pairs(cand: Candidate) -> set[tuple]:
    """The candidate's parameter values, two dimensions at a time."""
    return set(itertools.combinations(sorted((k, repr(v)) for k, v in cand.params().items()), 2))


def pairwise_cover(cands: list[Candidate]) -> list[Candidate]:
    """A few of `cands` that hold every value pair (value_pairs) any of them holds: greedily, the candidate adding the
    most pairs not held yet first (its gain recomputed when it comes up)."""
    pairs = [value_pairs(c) for c in cands]
    left = set().union(*pairs)
    heap = [(-len(p), i) for i, p in enumerate(pairs)]
    heapq.heapify(heap)
    chosen: list[Candidate] = []
    while left:
        _, i = heapq.heappop(heap)
        gain = len(pairs[i] & left)
        if heap and gain < -heap[0][0]:
            heapq.heappush(heap, (-gain, i))
            continue
        chosen.append(cands[i])
        left -= pairs[i]
    return chosen


def trial_overrides(setup, cand: Candidate, tmp: Path) -> list[str]:
    runner = VerlRunner()
    spec = make_spec(setup, tmp, cand=cand)
    return hydra_overrides(runner.argv(spec, runner.short_run_overrides(spec, tmp / "m.jsonl", "/tmp/at-ray-x", 1)))


@pytest.mark.slow
@pytest.mark.parametrize("model", ["qwen2.5-7b", "qwen3-30b-a3b"])
def test_sampled_candidates_pass_verls_own_validation(model: str, tmp_path: Path) -> None:
    setup, pool = feasible_candidates(model, POOL)
    assert len(pool) == POOL, f"only {len(pool)} candidates passing the constraints found for {model}"
    cands = pairwise_cover(pool)
    assert set().union(*map(value_pairs, cands)) == set().union(*map(value_pairs, pool))
    chosen = {c.key() for c in cands}
    cands += [c for c in pool[:N_RANDOM] if c.key() not in chosen]
    failures = []
    for i, cand in enumerate(cands):
        checks = [("trial", trial_overrides(setup, cand, tmp_path))]
        if i < N_EXPORT:
            checks.append(("export", hydra_overrides(launch_argv(setup.job, setup.cluster, cand))))
        for what, overrides in checks:
            res = validate_overrides(overrides)
            if not res.ok:
                failures.append(f"{what} {cand.layout()} {cand.params()}: {res.message}")
    assert not failures, f"{len(failures)} rejected by verl:\n" + "\n".join(failures[:10])


def test_fast_compose_equals_hydra_compose(tmp_path: Path) -> None:
    from omegaconf import OmegaConf

    from autotune.verl.preflight import compose, compose_full

    setup, cands = feasible_candidates("qwen2.5-7b", 3, seed=1)
    for cand in cands:
        ov = trial_overrides(setup, cand, tmp_path)
        assert OmegaConf.to_container(compose(ov)) == OmegaConf.to_container(compose_full(ov))


def test_stock_and_short_run_overrides_validate(tmp_path: Path) -> None:
    from autotune.candidate import STOCK

    setup = make_setup()
    res = validate_overrides(trial_overrides(setup, STOCK, tmp_path))
    assert res.ok, res.message


@pytest.mark.parametrize("extra,words", [
    (["actor_rollout_ref.actor.megatron.grad_offload=True"], "grad_offload"),  # removed in 0.9.1
    (["actor_rollout_ref.actor.megatron.tensor_model_parallel_size=3", "actor_rollout_ref.actor.use_dynamic_bsz=false",
      "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2"], "must be divisible"),
    (["actor_rollout_ref.rollout.tensor_model_parallel_size=3"], "not divisible by infer_world_size"),
])
def test_preflight_reports_verls_message(tmp_path: Path, extra: list[str], words: str) -> None:
    setup = make_spec(make_setup(), tmp_path)
    base = trial_overrides(make_setup(), setup.candidate, tmp_path)
    res = validate_overrides(base + extra)
    assert not res.ok and words in res.message


def test_exported_like_script_validates(tmp_path: Path) -> None:
    """A user's script written back with a tuned layout still composes and validates in verl."""
    src = REPO / "tests" / "data" / "scripts" / "run_qwen2.5-7b_dapo_style.sh"
    script = read_script(src, {"HOME": "/root"})
    job = Job.from_launch_script(script)
    cand = Candidate.from_params({"tp": 2, "pp": 2, "vpp": 2, "rollout_tp": 2, "recompute": "selective"},
                                 job.candidate(Candidate()))
    out = tmp_path / "tuned.sh"
    out.write_text(script.render_like(tuned_values(job, cand), Candidate().verl_overrides()))
    again = read_script(out, {"HOME": "/root", "CKPT_DIR": "/ckpt"})
    overrides = [f"{o.key}={o.raw}" for o in again.overrides]
    res = validate_overrides(overrides)
    assert res.ok, res.message
    vals = again.values()
    assert vals["actor_rollout_ref.actor.megatron.virtual_pipeline_model_parallel_size"] == 2


@pytest.mark.parametrize("job_file", ["examples/job_qwen2.5-7b_grpo.yaml", "examples/run_qwen2.5-7b_grpo_megatron.sh"])
def test_shipped_examples_validate(job_file: str, tmp_path: Path) -> None:
    from autotune.job import Job

    setup = make_setup(job=Job.from_file(REPO / job_file))
    res = validate_overrides(trial_overrides(setup, setup.base, tmp_path))
    assert res.ok, res.message


def test_runner_records_config_error_before_launch(tmp_path: Path) -> None:
    """The pre-flight stops a candidate verl rejects: recorded as config_error, nothing started."""
    from autotune.runners.base import TrialStatus
    from tests.fake_verl import env_for, fake_runner, launches

    rec = tmp_path / "rec.jsonl"
    setup = make_setup()
    bad = Candidate.from_params({"tp": 2, "rollout_tp": 3, "use_dynamic_bsz": True}, setup.base)  # 8 % 3 != 0
    res = fake_runner(env_for(rec, FAKE_VERL_MODE="ok")).run(make_spec(setup, tmp_path, cand=bad))
    assert res.status == TrialStatus.CONFIG_ERROR
    assert "not divisible by infer_world_size" in res.reason and "before launch" in res.reason
    assert launches(rec) == []
    good = fake_runner(env_for(rec, FAKE_VERL_MODE="ok")).run(make_spec(setup, tmp_path, number=1))
    assert good.status == TrialStatus.OK and good.extra["preflight"]["ok"]


def test_ray_cluster_trial_and_multi_node_export_pass_verls_validation(tmp_path: Path) -> None:
    """A trial placed by the Ray executor (joins the cluster, adopts its groups) and a 2-node export."""
    import dataclasses

    from autotune.candidate import STOCK
    from autotune.runners.verl import VerlOptions

    setup = make_setup(gpus=8, nodes=2)
    runner = VerlRunner(VerlOptions(ray_address="10.0.0.1:6379"))
    spec = dataclasses.replace(make_spec(setup, tmp_path, cand=STOCK),
                               placement={"groups": ["autotune:s:t00001:n0", "autotune:s:t00001:n1"]})
    ov = hydra_overrides(runner.argv(spec, runner.short_run_overrides(spec, tmp_path / "m.jsonl", "/tmp/x", 1)))
    assert f"{verl.RAY_ADDRESS_KEY}=10.0.0.1:6379" in ov and f"{verl.NNODES}=2" in ov
    assert any(o.startswith(verl.RAY_SETUP_HOOK_KEY + "=") for o in ov)
    res = validate_overrides(ov)
    assert res.ok, res.message
    exported = hydra_overrides(launch_argv(setup.job, setup.cluster, STOCK))
    assert f"{verl.NNODES}=2" in exported and f"{verl.N_GPUS_PER_NODE}=8" in exported
    res = validate_overrides(exported)
    assert res.ok, res.message
