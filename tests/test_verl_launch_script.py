"""A user's verl launch script as the job: reading its bash subset, the baseline, writing it back tuned."""

from __future__ import annotations

import difflib
import subprocess
import sys
from pathlib import Path

import pytest

from autotune import verl
from autotune.candidate import Candidate
from autotune.cluster import make_cluster
from autotune.job import Job
from autotune.results.export import launch_values, tuned_values
from autotune.verl.launch_script import ScriptError, parse_script, read_script
from tests.conftest import REPO

SCRIPTS = REPO / "tests" / "data" / "scripts"
MATH = SCRIPTS / "run_qwen2-7b_math_megatron.sh"
DAPO = SCRIPTS / "run_qwen2.5-7b_dapo_style.sh"


def test_variables_lists_quotes_and_continuations() -> None:
    s = read_script(MATH, {"HOME": "/home/u"})
    v = s.values()
    assert v[verl.TRAIN_FILES] == ["/home/u/data/gsm8k/train.parquet", "/home/u/data/math/train.parquet"]
    assert v["data.truncation"] == "error"
    assert v["actor_rollout_ref.actor.optim.lr"] == pytest.approx(1e-6)
    assert v["trainer.logger"] == ["console", "wandb"]
    assert v[verl.ROLLOUT_N] == 5 and v["data.filter_overlong_prompts"] is True
    assert s.flags == ["--config-path=config", "--config-name=ppo_megatron_trainer.yaml"]
    assert any("$HOME taken from this shell's environment" in n for n in s.notes)


def test_arithmetic_and_defaults_are_expanded_and_unreadable_parts_reported() -> None:
    s = read_script(DAPO, {"HOME": "/home/u", "NNODES": "2"})
    v = s.values()
    assert v[verl.MAX_PROMPT_LENGTH] == 2048 and v[verl.MAX_RESPONSE_LENGTH] == 8192
    assert v["actor_rollout_ref.actor.ppo_max_token_len_per_gpu"] == 10240  # $(((a + b) * 1))
    assert v["actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu"] == 20480
    assert v["trainer.nnodes"] == 2  # ${NNODES:-1} with NNODES set in the environment
    assert v["trainer.n_gpus_per_node"] == 8  # ${NGPUS_PER_NODE:-8}
    assert v[verl.MODEL_PATH] == "Qwen/Qwen2.5-7B"
    assert "+actor_rollout_ref.actor.megatron.override_transformer_config.apply_rope_fusion" in v
    # $(pwd) is never run: the override it feeds is left out and reported
    assert "trainer.default_local_dir" not in v
    assert any("CKPT_DIR" in n and "not run" in n for n in s.notes)
    assert any("trainer.default_local_dir" in n and "left out" in n for n in s.notes)


def test_script_job_and_baseline() -> None:
    job = Job.from_file(MATH)
    assert job.source == str(MATH)
    base = job.baseline_params()
    assert base == {"tp": 2, "pp": 2, "rollout_tp": 2, "gpu_memory_utilization": 0.6,
                    "ppo_micro_batch_size_per_gpu": 4, "log_prob_micro_batch_size_per_gpu": 4}
    assert job.train_batch_size == 1024 and job.max_seq_len == 2048 and job.has_ref_model
    # explicit reference layout keys are dropped: the ref follows the actor's tuned layout
    assert not any(k.startswith("actor_rollout_ref.ref.megatron.") for k, _ in job.overrides)


def test_shape_keys_the_script_leaves_out_take_verls_defaults_not_autotunes() -> None:
    s = parse_script("python3 -m verl.trainer.main_ppo model_engine=megatron algorithm.adv_estimator=grpo\n")
    job = Job.from_launch_script(s)
    for key, value in verl.VERL_JOB_DEFAULTS.items():
        assert job.get(key) == value


@pytest.mark.parametrize("text,words", [
    ("echo hi\n", "no `python -m verl.trainer.main_ppo` command"),
    ("python3 -m verl.trainer.main_ppo a=1\npython3 -m verl.trainer.main_ppo a=2\n", "more than once"),
])
def test_scripts_autotune_cannot_use(text: str, words: str) -> None:
    with pytest.raises(ScriptError, match=words):
        parse_script(text)


def test_unset_variable_is_reported_not_guessed() -> None:
    s = parse_script("python3 -m verl.trainer.main_ppo data.train_files=$DATA/x.parquet a.b=1\n", environ={})
    assert "data.train_files" not in s.values() and s.values()["a.b"] == 1
    assert any("$DATA is set nowhere" in n for n in s.notes)


def test_control_flow_is_reported() -> None:
    s = parse_script("if [ -z $X ]; then X=1; fi\npython3 -m verl.trainer.main_ppo a.b=1\n", environ={})
    assert any("control flow" in n for n in s.notes)


def test_render_like_changes_only_the_tuned_keys() -> None:
    s = read_script(MATH, {"HOME": "/home/u"})
    cand = Candidate.from_params({"tp": 4, "pp": 1, "rollout_tp": 4, "gpu_memory_utilization": 0.7,
                                  "recompute": "full"}, Job.from_launch_script(s).candidate(Candidate()))
    job = Job.from_launch_script(s)
    out = s.render_like(tuned_values(job, cand), Candidate().verl_overrides(), header="# tuned by autotune")
    diff = [ln for ln in difflib.unified_diff(s.text.splitlines(), out.splitlines(), lineterm="", n=0)
            if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
    removed = {ln[1:].strip().rstrip("\\").strip() for ln in diff if ln.startswith("-")}
    added = {ln[1:].strip().rstrip("\\").strip() for ln in diff if ln.startswith("+")}
    assert removed == {
        "actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=2",
        "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=2",
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.6",
        "actor_rollout_ref.ref.megatron.pipeline_model_parallel_size=2",
        "actor_rollout_ref.ref.megatron.tensor_model_parallel_size=2",
        "trainer.total_epochs=15 $@",
    }
    assert "# tuned by autotune" in added
    assert "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=4" in added
    assert "actor_rollout_ref.ref.megatron.tensor_model_parallel_size=4" in added  # follows the actor
    assert "actor_rollout_ref.actor.megatron.override_transformer_config.recompute_granularity=full" in added
    assert "trainer.total_epochs=15" in added and "$@" in out.splitlines()[-1]
    # vLLM's context as the plain export and the runner set it (left null, vLLM sizes its KV cache for the model's
    # whole context)
    assert any(a.startswith(f"{verl.MAX_MODEL_LEN}={job.max_seq_len}") for a in added)
    # the written script reads back to the tuned values, everything else unchanged
    again = parse_script(out, environ={"HOME": "/home/u"}).values()
    before = s.values()
    tuned = tuned_values(job, cand)
    for k, v in again.items():
        if k in tuned:
            assert v == tuned[k]
        elif not k.startswith("actor_rollout_ref.ref.megatron."):
            assert before[k] == v, k


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autotune", *args], cwd=cwd, capture_output=True, text=True,
                          env={"PYTHONPATH": str(REPO), "HOME": "/home/u", "PATH": "/usr/bin:/bin"}, timeout=300)


@pytest.mark.slow
def test_cli_run_with_a_script_and_export_like(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'db.sqlite'}"
    r = _cli("run", "--model", "qwen2.5-7b", "--job", str(MATH), "--storage", db, "--n-trials", "3",
             "--workdir", str(tmp_path / "t"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "36 verl overrides read" in r.stderr and "SIMULATED" in r.stdout
    r = _cli("status", "--storage", db, "--json", cwd=tmp_path)
    assert '"origin": "baseline"' in r.stdout
    out = tmp_path / "tuned.sh"
    r = _cli("export", "--storage", db, "--format", "sh", "--like", str(MATH), "-o", str(out), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    text = out.read_text()
    assert text.startswith("#!/usr/bin/env bash\n# autotune") and "SIMULATED" in text.splitlines()[1]
    assert "data.train_files=\"$train_files\"" in text  # the user's own lines are kept as written
    r = _cli("export", "--storage", db, "--format", "yaml", "--like", str(MATH), cwd=tmp_path)
    assert r.returncode == 2 and "--like" in r.stderr


def test_both_exports_write_the_same_tuned_keys() -> None:
    """`export --like SCRIPT` and the plain export (and the runner) write one set of keys: export.tuned_values."""
    s = read_script(MATH, {"HOME": "/home/u"})
    job = Job.from_launch_script(s)
    cand = Candidate.from_params({"tp": 4, "use_dynamic_bsz": True}, job.candidate(Candidate()))
    like = parse_script(s.render_like(tuned_values(job, cand), Candidate().verl_overrides()),
                        environ={"HOME": "/home/u"}).values()
    plain = launch_values(job, make_cluster(8, 1, "h100"), cand)
    defaults = Candidate().verl_overrides()  # what --like leaves out where the script runs verl's default anyway
    for key in tuned_values(job, cand):
        assert like.get(key, defaults.get(key)) == plain[key], key
    assert like[verl.MAX_MODEL_LEN] == job.max_seq_len
