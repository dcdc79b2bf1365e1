"""What the node's software needs where the job sets nothing (`autotune doctor`'s job defaults, e.g. unfused
attention where cuDNN's fused attention fails): the estimates see it, the user's job and the study's fingerprint
do not change."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune import verl
from autotune.candidate import Candidate
from autotune.estimate.memory import estimate_memory
from autotune.job import Job
from autotune.search.ranking import make_ranking
from autotune.study.study import Tuner
from autotune.verl.doctor import Diagnosis
from tests.conftest import make_setup
from tests.fake_verl import fake_runner

UNFUSED = {verl.ATTENTION_BACKEND: "unfused"}


def test_the_jobs_own_key_wins_and_the_fingerprint_is_the_users() -> None:
    job = Job.default()
    node = job.with_node_defaults({**UNFUSED, verl.VANILLA_MBRIDGE: True})
    assert node.attention_backend == "unfused" and node.get(verl.VANILLA_MBRIDGE) is True
    assert node.mapping == job.mapping and node.fingerprint() == job.fingerprint()
    assert job.attention_backend == verl.ATTENTION_BACKEND_DEFAULT
    own = Job.from_mapping({verl.ATTENTION_BACKEND: "fused"}).with_node_defaults(UNFUSED)
    assert own.attention_backend == "fused" and own.node_defaults == ()


def test_unfused_scores_grow_with_the_square_of_the_length_and_core_attn_recompute_drops_them() -> None:
    s = make_setup("qwen2.5-0.5b", gpus=1)
    cand = Candidate(use_dynamic_bsz=False, ppo_micro_batch_size_per_gpu=4, log_prob_micro_batch_size_per_gpu=4)
    sel = Candidate(use_dynamic_bsz=False, ppo_micro_batch_size_per_gpu=4, log_prob_micro_batch_size_per_gpu=4,
                    recompute="selective", recompute_modules="core_attn")

    def acts(c: Candidate, response: int, unfused: bool) -> float:
        job = Job.from_mapping({verl.MAX_PROMPT_LENGTH: 512, verl.MAX_RESPONSE_LENGTH: response})
        job = job.with_node_defaults(UNFUSED) if unfused else job
        return dict(estimate_memory(s.model, s.cluster, job, c).moment("update").terms)["activations"]

    extra_short = acts(cand, 1536, True) - acts(cand, 1536, False)  # 2048 tokens a sequence
    extra_long = acts(cand, 3584, True) - acts(cand, 3584, False)  # 4096
    assert extra_short > 0 and extra_long / extra_short == pytest.approx(4.0, rel=0.01)
    # recomputed core attention keeps one layer's scores at a time, not every layer's
    assert acts(sel, 3584, True) - acts(sel, 3584, False) < extra_long / s.model.num_layers * 1.01


def test_the_tuner_estimates_with_the_nodes_defaults_and_resumes_without_them(tmp_path: Path) -> None:
    setup = make_setup("qwen2.5-0.5b", gpus=1)
    make_ranking(setup)  # the plain job's ranking, kept in this process: the node's must not reuse it
    url = f"sqlite:///{tmp_path / 's.db'}"
    runner = fake_runner()
    runner.diagnosis = Diagnosis(findings=(), job_defaults=dict(UNFUSED))  # as the H100's doctor found it
    tuner = Tuner(setup, runner, url, "node")
    assert tuner.setup.job.attention_backend == "unfused"
    assert any("attention_backend=unfused" in n for n in tuner.notes), tuner.notes
    best = tuner.ranking().best(tuner.setup.correction)
    # the model's best keeps no unfused scores of every layer: it recomputes core attention or stays small
    assert estimate_memory(setup.model, setup.cluster, tuner.setup.job, best.candidate).fits
    # the same study resumed on a node that needs nothing: the fingerprint is the user's job's
    again = Tuner(setup, fake_runner(), url, "node")
    assert again.setup.job.attention_backend == verl.ATTENTION_BACKEND_DEFAULT
