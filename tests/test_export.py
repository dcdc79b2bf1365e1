import importlib.util
import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

from autotune import verl
from autotune.candidate import Candidate
from autotune.export import ExportInfo, launch_argv, launch_values, render
from autotune.job import Job
from tests.conftest import make_setup

JOB = Job.from_mapping({
    "actor_rollout_ref.model.path": "/models/Qwen2.5 7B (instruct)",  # spaces and parentheses must survive bash
    "data.train_files": "['/data/a b.parquet', \"/data/c.parquet\"]",
    "trainer.project_name": "it's quoted",
    "actor_rollout_ref.actor.megatron.tensor_model_parallel_size": 2,  # the user's own layout: replaced
    "+actor_rollout_ref.actor.megatron.override_transformer_config.apply_rope_fusion": True,
})
CAND = Candidate.from_params({"tp": 4, "pp": 2, "vpp": 2, "use_dynamic_bsz": True, "ppo_max_token_len_per_gpu": 20480,
                              "log_prob_max_token_len_per_gpu": 65536, "rollout_tp": 1, "recompute": "selective",
                              "recompute_modules": "core_attn,mlp"})
INFO = ExportInfo("study-1", 7, 1234.5, True, CAND.layout(), "qwen2.5-7b")


def test_values_keep_fixed_keys_and_replace_tuned_ones():
    cl = make_setup().cluster
    v = launch_values(JOB, cl, CAND)
    assert v["actor_rollout_ref.actor.megatron.tensor_model_parallel_size"] == 4
    assert v["actor_rollout_ref.model.path"] == "/models/Qwen2.5 7B (instruct)"
    assert v["model_engine"] == "megatron" and v["algorithm.adv_estimator"] == "grpo"
    assert v[verl.N_GPUS_PER_NODE] == 8 and v[verl.NNODES] == 1
    assert v[verl.MAX_MODEL_LEN] == 2048 + 8192
    assert v["actor_rollout_ref.actor.megatron.override_transformer_config.recompute_modules"] == ["core_attn", "mlp"]
    assert v["actor_rollout_ref.ref.log_prob_max_token_len_per_gpu"] == 65536  # the reference model too


def test_sh_script_passes_exact_arguments_through_bash(tmp_path):
    cl = make_setup().cluster
    script = tmp_path / "job.sh"
    script.write_text(render("sh", INFO, JOB, cl, CAND))
    assert "SIMULATED" in script.read_text().splitlines()[1]
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "python").write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done\n')
    (shim / "python").chmod(0o755)
    env = {**os.environ, "PATH": f"{shim}:{os.environ['PATH']}"}
    out = subprocess.run(["bash", str(script), "trainer.total_epochs=2"], capture_output=True, text=True, env=env,
                         check=True).stdout.splitlines()
    assert out == launch_argv(JOB, cl, CAND)[1:] + ["trainer.total_epochs=2"]


def test_yaml_export_is_a_job_file_that_reproduces_the_candidate(tmp_path):
    cl = make_setup().cluster
    text = render("yaml", INFO, JOB, cl, CAND)
    assert text.startswith("# autotune") and "SIMULATED" in text.splitlines()[0]
    path = tmp_path / "tuned.yaml"
    path.write_text(text)
    assert yaml.safe_load(text) == launch_values(JOB, cl, CAND)
    again = Job.from_file(path)
    assert again.candidate(Candidate()) == CAND


def test_json_export_for_tools():
    doc = json.loads(render("json", INFO, JOB, make_setup().cluster, CAND))
    assert doc["simulated"] is True and doc["measured"] is False and doc["throughput"] == 1234.5
    assert doc["params"]["tp"] == 4 and doc["argv"][:3] == list(verl.ENTRY)
    assert doc["verl_overrides"]["actor_rollout_ref.rollout.tensor_model_parallel_size"] == 1


def test_ray_export_submits_the_same_command(tmp_path):
    text = render("ray", INFO, JOB, make_setup().cluster, CAND)
    cmd = [line for line in text.splitlines() if line.startswith("    python")][0]
    assert shlex.split(cmd.replace('"$@"', ""))[:3] == list(verl.ENTRY)
    subprocess.run(["bash", "-n", "-c", text], check=True)


def test_unknown_format():
    with pytest.raises(ValueError, match="sh, yaml, json, ray"):
        render("toml", INFO, JOB, make_setup().cluster, CAND)


def _verl_config_keys() -> set[str]:
    spec = importlib.util.find_spec("verl")
    if spec is None:
        pytest.skip("verl is not installed (scripts/install-verl-cpu.sh installs it for the tests)")
    cfg = Path(spec.origin).parent / "trainer" / "config" / "_generated_ppo_megatron_trainer.yaml"
    keys: set[str] = set()

    def walk(node, prefix=""):
        if isinstance(node, dict):
            for k, v in node.items():
                keys.add(prefix + k)
                walk(v, prefix + k + ".")

    walk(yaml.safe_load(cfg.read_text()))
    return keys


def test_every_exported_key_exists_in_verl_0_9_1():
    keys = _verl_config_keys() | {"model_engine"}
    for key in launch_values(JOB, make_setup().cluster, CAND):
        if key.startswith("+"):
            continue  # a key the user added on purpose, outside verl's config
        assert key in keys, key
    for param, vkeys in verl.PARAM_KEYS.items():
        for k in vkeys:
            assert k in keys, (param, k)
