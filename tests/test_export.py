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
from autotune.job import Job
from autotune.results.export import FILL_IN, MISSING, ExportInfo, launch_argv, launch_values, render
from tests.conftest import make_setup

JOB = Job.from_mapping({
    "actor_rollout_ref.model.path": "/models/Qwen2.5 7B (instruct)",  # spaces and parentheses must survive bash
    "data.train_files": "['/data/a b.parquet', \"/data/c.parquet\"]",
    "data.val_files": "/data/val.parquet",
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


def _fake_python(tmp_path: Path) -> dict[str, str]:
    shim = tmp_path / "bin"
    shim.mkdir(exist_ok=True)
    (shim / "python").write_text(f'#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done > {tmp_path}/ran\n')
    (shim / "python").chmod(0o755)
    return {k: v for k, v in os.environ.items() if k not in ("MODEL_PATH", "TRAIN_FILES", "VAL_FILES")} | {
        "PATH": f"{shim}:{os.environ['PATH']}"}


@pytest.mark.parametrize("fmt", ["sh", "ray"])
def test_a_job_without_model_and_data_exports_a_script_that_refuses_to_run_until_they_are_set(tmp_path, fmt):
    """`autotune run` without --job tunes a job with no model path or data: the export says what to fill in, in its
    header, and stops with that message before anything runs."""
    cl = make_setup().cluster
    text = render(fmt, INFO, Job.default(), cl, CAND)
    head = text.split("set -euo pipefail")[0]
    assert "TO FILL IN" in head
    for key, (var, _) in FILL_IN.items():
        assert f"#   {var}" in head and key in head
        assert f'{key}="${var}"' in text  # the value comes from the variable, never a guess
    script = tmp_path / "job.sh"
    script.write_text(text)
    env = _fake_python(tmp_path)
    if fmt == "ray":  # `ray job submit` is the program the script runs: a fake one prints its arguments
        (tmp_path / "bin" / "ray").write_text((tmp_path / "bin" / "python").read_text())
        (tmp_path / "bin" / "ray").chmod(0o755)
    r = subprocess.run(["bash", str(script)], capture_output=True, text=True, env=env)
    assert r.returncode != 0 and "set MODEL_PATH to" in r.stderr and verl.MODEL_PATH in r.stderr
    assert not (tmp_path / "ran").exists()  # nothing ran
    r = subprocess.run(["bash", str(script)], capture_output=True, text=True,
                       env={**env, "MODEL_PATH": "/m/Qwen 7B", "TRAIN_FILES": "/d/t.parquet"})
    assert r.returncode != 0 and "set VAL_FILES to" in r.stderr and not (tmp_path / "ran").exists()
    r = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=True,
                       env={**env, "MODEL_PATH": "/m/Qwen 7B", "TRAIN_FILES": "/d/t.parquet", "VAL_FILES": "/d/v"})
    ran = (tmp_path / "ran").read_text().splitlines()
    assert f"{verl.MODEL_PATH}=/m/Qwen 7B" in ran and f"{verl.TRAIN_FILES}=/d/t.parquet" in ran
    assert f"{verl.VAL_FILES}=/d/v" in ran


def test_yaml_and_json_of_a_job_without_model_and_data_mark_what_to_fill_in():
    cl = make_setup().cluster
    text = render("yaml", INFO, Job.default(), cl, CAND)
    values = yaml.safe_load(text)
    assert all(values[k] == MISSING for k in FILL_IN) and "TO FILL IN" in text.split("\nmodel_engine")[0]
    doc = json.loads(render("json", INFO, Job.default(), cl, CAND))
    assert set(doc["fill_in"]) == set(FILL_IN) and all(doc["verl_overrides"][k] == MISSING for k in FILL_IN)
    # a job that sets them: nothing to fill in, nothing in the header
    assert "TO FILL IN" not in render("sh", INFO, JOB, cl, CAND)
    assert json.loads(render("json", INFO, JOB, cl, CAND))["fill_in"] == {}


def test_export_header_says_how_the_number_was_obtained():
    replayed = ExportInfo("s", 1, 26050.8, False, "tp2", "m", replayed=True).headline()
    assert "REPLAYED 26050.8 tokens/s/GPU" in replayed and "measured 26050.8" not in replayed
    assert "measured 26050.8 tokens/s/GPU" in ExportInfo("s", 1, 26050.8, False, "tp2", "m").headline()
    doc = json.loads(render("json", ExportInfo("s", 1, 1.0, False, "tp2", "m", replayed=True), JOB,
                            make_setup().cluster, CAND))
    assert doc["replayed"] is True and doc["measured"] is False


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
    implied = [k for v in verl.IMPLIED_KEYS.values() for k in v]
    for param, vkeys in [*verl.PARAM_KEYS.items(), ("implied", tuple(implied))]:
        for k in vkeys:
            # A `++` key adds to a mapping verl's config leaves open (override_optimizer_config): the mapping exists.
            assert (k.lstrip("+").rsplit(".", 1)[0] if k.startswith("+") else k) in keys, (param, k)


def test_what_the_node_needed_is_exported_with_the_winner(tmp_path):
    """A trial ran with the doctor's additions (no flash-attn, no Megatron-Bridge): the export runs the same way and
    says why; a key the job sets itself is the job's."""
    node = ((verl.ATTENTION_BACKEND, "unfused"), (verl.VANILLA_MBRIDGE, True))
    info = ExportInfo("s", 3, 982.0, False, CAND.layout(), "m", node_defaults=node)
    cl = make_setup().cluster
    text = render("sh", info, JOB, cl, CAND)
    assert f"{verl.ATTENTION_BACKEND}=unfused" in text and f"{verl.VANILLA_MBRIDGE}=true" in text
    assert "needed it (autotune doctor)" in text.splitlines()[2]
    values = yaml.safe_load(render("yaml", info, JOB, cl, CAND))
    assert values[verl.ATTENTION_BACKEND] == "unfused" and values[verl.VANILLA_MBRIDGE] is True
    assert verl.ATTENTION_BACKEND not in yaml.safe_load(render("yaml", INFO, JOB, cl, CAND))


def _study_with(db: str, capsys, *rows: tuple[str, str, Candidate], **kw) -> str:
    """A simulated study of one launched trial, with `rows` (status, reason, candidate) recorded after it (`kw`:
    more TrialRow fields, a list per field, one value per row)."""
    from autotune.store.schema import TrialRow
    from autotune.store.store import Store
    from tests.conftest import cli_run

    assert cli_run(capsys, "run", "--model", "qwen2.5-7b", "--storage", db, "--n-trials", "1", "--confirm", "0",
                   "--json")[0] == 0
    store = Store(db)
    name = store.list_studies()[0].name
    for i, (status, reason, cand) in enumerate(rows):
        store.add_finished_trial(TrialRow(study=name, number=100 + i, status=status, reason=reason,
                                          candidate_key=cand.key(), params=cand.applied_params(),
                                          verl_overrides=cand.verl_overrides(),
                                          **{k: v[i] for k, v in kw.items()}))
    return name


def test_export_refuses_a_trial_that_breaks_a_rule_and_warns_of_a_predicted_oom(tmp_path, capsys):
    from tests.conftest import cli_run

    db = f"sqlite:///{tmp_path / 'a.db'}"
    broken = Candidate.from_params({"tp": 3})
    setup = make_setup()
    oom = Candidate.from_params({"use_dynamic_bsz": True, "ppo_max_token_len_per_gpu": 65536})  # TP 1: OOM
    reason = setup.evaluate(oom).prune_reason()
    assert reason.startswith("predicted OOM: ")
    _study_with(db, capsys, ("pruned", setup.evaluate(broken).prune_reason(), broken), ("pruned", reason, oom))
    code, out, err = cli_run(capsys, "export", "--storage", db, "--trial", "100", "--format", "sh")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "trial 100 cannot run: it breaks world_size: 8 GPUs" in err and "export one that can" in err
    code, out, err = cli_run(capsys, "export", "--storage", db, "--trial", "101", "--format", "sh")
    assert code == 0 and out.startswith("#!/usr/bin/env bash")
    assert "WARNING: trial 101 was never launched: predicted OOM" in err and "expect it to run out of memory" in err
    code, out, err = cli_run(capsys, "export", "--storage", db, "--format", "sh")  # the best: no warning
    assert code == 0 and "WARNING" not in err


def test_best_and_export_prefer_a_safe_trial_within_the_models_error(tmp_path, capsys):
    """A winner at the memory limit 0.9% ahead of a safe trial: `best` and `export` hand over the safe one and say
    why; the ranking's own notion of near-equals (safer.SAFE_TOLERANCE) decides."""
    from tests.conftest import cli_run

    db = f"sqlite:///{tmp_path / 'a.db'}"
    risky, safe = (Candidate.from_params({"tp": tp, "use_dynamic_bsz": True}) for tp in (2, 4))
    limit = {"verdict": "fits at step 3 and at the longest sequences the job allows, at the limit", "at_limit": True,
             "worst_case_fits": True}
    fits = {"verdict": "fits at step 3 and at the longest sequences the job allows", "at_limit": False,
            "worst_case_fits": True}
    _study_with(db, capsys, ("ok", "", risky), ("ok", "", safe), throughput=[100000.0, 100000.0 / 1.009],
                predicted_memory=[limit, fits], launched=[True, True], simulated=[True, True])
    code, out, _ = cli_run(capsys, "best", "--storage", db, "--json")
    doc = json.loads(out)
    assert code == 0 and doc["trial"] == 101 and doc["preferred_over"]["trial"] == 100
    code, out, _ = cli_run(capsys, "best", "--storage", db)
    assert "best trial 101" in out and "trial 100 is 0.9% faster, but its memory is not safe" in out
    code, out, err = cli_run(capsys, "export", "--storage", db, "--format", "sh")
    assert code == 0 and "trial 101" in out.splitlines()[1] and "trial 100 is 0.9% faster" in err
    code, out, err = cli_run(capsys, "export", "--storage", db, "--format", "sh", "--trial", "100")
    assert code == 0 and "trial 100" in out.splitlines()[1]  # asked for by number: given as asked


def test_a_safe_trial_beyond_the_models_error_does_not_win(tmp_path, capsys):
    from tests.conftest import cli_run

    db = f"sqlite:///{tmp_path / 'a.db'}"
    risky, safe = (Candidate.from_params({"tp": tp, "use_dynamic_bsz": True}) for tp in (2, 4))
    _study_with(db, capsys, ("ok", "", risky), ("ok", "", safe), throughput=[100000.0, 95000.0],
                predicted_memory=[{"at_limit": True, "worst_case_fits": True}, {"worst_case_fits": True}])
    code, out, _ = cli_run(capsys, "best", "--storage", db, "--json")
    assert json.loads(out)["trial"] == 100 and json.loads(out)["preferred_over"] is None
