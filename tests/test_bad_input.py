"""Bad input: one specific error line, exit code 2, and the study database exactly as it was (a dump compared)."""

from __future__ import annotations

import importlib.util
import json
import sqlite3
from pathlib import Path

import pytest

from autotune.cli import main
from autotune.runners.base import Runner, TrialResult, TrialSpec, TrialStatus
from autotune.runners.simulate import SimulateRunner
from autotune.study.study import Tuner
from tests.conftest import cli_run, make_setup

SPACE_HEAD = "name: bad\ndimensions:\n"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    """A database that already holds a study (two simulated trials): what every bad command must leave alone."""
    db = tmp_path_factory.mktemp("bad") / "study.db"
    Tuner(make_setup("qwen2.5-0.5b"), SimulateRunner(), f"sqlite:///{db}", "kept").run(n_trials=2)
    return db


def dump(db: Path) -> str:
    with sqlite3.connect(db) as c:
        return "\n".join(c.iterdump())


def refused(capsys, db: Path, *argv: str) -> str:
    """Run the command against `db`; assert exit 2, one error line and an unchanged database; return the line."""
    before = dump(db)
    code = main(list(argv))
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert code == 2, (code, out, err)
    assert len(lines) == 1 and lines[0].startswith("autotune: error: "), err
    assert "Traceback" not in out + err
    assert dump(db) == before, "the database changed"
    return lines[0]


def storage(db: Path) -> list[str]:
    return ["--storage", f"sqlite:///{db}"]


@pytest.mark.parametrize("text, expected", [
    (SPACE_HEAD + "  tp: {choices: [1, 2\n", r"not valid YAML: line \d+, column \d+"),  # syntax
    (SPACE_HEAD + "  tensor_parallel: {choices: [1, 2]}\n", r"unknown dimension 'tensor_parallel'.*allowed: tp"),
    (SPACE_HEAD + "  tp: {choices: [banana]}\n", r":3 \(dimensions.tp.choices\): choice 'banana' is not a int"),
    ("", r"a search space is a mapping"),  # empty file
    (SPACE_HEAD, r"`dimensions` must be a non-empty mapping"),  # no dimension
], ids=["syntax", "unknown-dimension", "wrong-type", "empty-file", "no-dimensions"])
def test_malformed_search_space(capsys, recorded, tmp_path, text, expected):
    space = tmp_path / "space.yaml"
    space.write_text(text)
    line = refused(capsys, recorded, "run", "--model", "qwen2.5-7b", "--space", str(space), *storage(recorded))
    assert str(space) in line
    assert __import__("re").search(expected, line), line


def test_infeasible_space_is_explained_in_one_line_before_any_proposal(capsys, recorded):
    line = refused(capsys, recorded, "run", "--model", "qwen2.5-7b", "--gpus", "3", "--study", "three",
                   *storage(recorded))
    assert "no setting of space 'dense' can run qwen2.5-7b on 1x3xh100" in line
    assert "world_size x" in line and "3 GPUs are not divisible by TP*PP*CP" in line
    assert "three" not in dump(recorded)  # no study row, no Optuna study: nothing was proposed


def test_unknown_model(capsys, recorded):
    line = refused(capsys, recorded, "run", "--model", "gpt-17", *storage(recorded))
    assert "unknown model 'gpt-17'" in line and "qwen2.5-7b" in line


@pytest.mark.parametrize("config, expected", [
    ('{"model_type": "qwen2", "hidden_size": 896', "not valid JSON"),
    ('{"model_type": "qwen2"}', "config.json has no 'hidden_size'"),
], ids=["not-json", "missing-field"])
def test_broken_hf_config(capsys, recorded, tmp_path, config, expected):
    (tmp_path / "config.json").write_text(config)
    line = refused(capsys, recorded, "run", "--model", str(tmp_path), *storage(recorded))
    assert expected in line


_QWEN = {"model_type": "qwen2", "num_hidden_layers": 24, "vocab_size": 151936}


@pytest.mark.parametrize("config, expected", [
    ({**_QWEN, "hidden_size": 896, "num_attention_heads": 0},
     "'num_attention_heads' must be a positive integer, got 0"),
    ([{"hidden_size": 896}], "a model config.json must be a JSON object (of hidden_size, num_hidden_layers, ...), "
     "got a JSON list"),
    ({**_QWEN, "hidden_size": "big", "num_attention_heads": 14},
     "'hidden_size' must be a positive integer, got \"big\""),
    ({**_QWEN, "hidden_size": 896, "num_attention_heads": 14, "num_key_value_heads": -2},
     "'num_key_value_heads' must be a whole number (0 or more), got -2"),
], ids=["zero-heads", "json-list", "string-size", "negative-kv-heads"])
@pytest.mark.parametrize("as_dir", [True, False], ids=["dir", "file"])
def test_hf_config_with_a_value_of_the_wrong_kind(capsys, recorded, tmp_path, config, expected, as_dir):
    """Issue 25 item 5: one line naming the file, the key and what it takes (was a ZeroDivisionError or TypeError
    traceback, or a message naming neither file nor key)."""
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(config))
    line = refused(capsys, recorded, "run", "--model", str(tmp_path if as_dir else cfg), *storage(recorded))
    assert f"autotune: error: {cfg}: {expected}" in line, line


@pytest.mark.parametrize("verl_here", [True, False], ids=["verl-installed", "snapshot"])
def test_job_key_verl_does_not_have(capsys, recorded, tmp_path, monkeypatch, verl_here):
    """Checked against the installed verl's config, or, where verl is not installed (README's first command), against
    the snapshot of verl 0.9.1's keys shipped with autotune: the same refusal either way."""
    from autotune.verl import preflight as verl_preflight

    if not verl_here:  # `import verl` would fail: find_spec answers None, as without verl
        real = importlib.util.find_spec
        monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "verl" else real(name, *a))
    assert verl_preflight.config_schema()[2].startswith("the installed verl" if verl_here else "autotune's snapshot")
    job = tmp_path / "job.yaml"
    job.write_text("data.max_prompt_length: 1024\nactor_rollout_ref.actor.ppo_mini_batchsize: 16\n"
                   "model_engine: megatron\nactor_rollout_ref.rollout.engine_kwargs.vllm.swap_space: 1\n")
    line = refused(capsys, recorded, "run", "--model", "qwen2.5-7b", "--job", str(job), *storage(recorded))
    assert "actor_rollout_ref.actor.ppo_mini_batchsize is not a key of verl 0.9.1's config" in line
    assert "did you mean actor_rollout_ref.actor.ppo_mini_batch_size?" in line
    assert "(and" not in line  # the config group and the key under an open mapping are accepted


@pytest.mark.parametrize("text, expected", [
    ("data.max_prompt_length: 1024\ndata.max_response_length: [2048\n", r"not valid YAML: line 3, column 1: "),
    ("data.max_prompt_length: 1024\n  data.train_batch_size: 64\n", r"not valid YAML: line 2, column 24: "),
], ids=["unclosed-list", "bad-indent"])
def test_malformed_job_yaml_names_the_file(capsys, recorded, tmp_path, text, expected):
    """Issue 25 item 7: one line naming the file and where in it (was 7 lines naming `<unicode string>`)."""
    job = tmp_path / "job.yaml"
    job.write_text(text)
    line = refused(capsys, recorded, "run", "--model", "qwen2.5-7b", "--job", str(job), *storage(recorded))
    assert line.startswith(f"autotune: error: {job}: ") and "<unicode string>" not in line
    assert __import__("re").search(expected, line), line


def test_job_that_is_a_directory(capsys, recorded, tmp_path):
    line = refused(capsys, recorded, "run", "--model", "qwen2.5-7b", "--job", str(tmp_path), *storage(recorded))
    assert f"--job {tmp_path} is a directory; pass a YAML file of verl overrides or your verl launch script" in line


def test_replay_table_with_missing_columns(capsys, recorded, tmp_path):
    table = tmp_path / "t.csv"
    table.write_text("tp,pp,status\n2,1,ok\n")
    (tmp_path / "t.meta.yaml").write_text("model: qwen2.5-7b\ngpu_type: h100\ngpus: 8\n")
    line = refused(capsys, recorded, "run", "--backend", "replay", "--table", str(table), *storage(recorded))
    assert "no `throughput` column" in line


@pytest.mark.parametrize("n", ["0", "-1"])
def test_n_trials_zero_or_negative(capsys, recorded, n):
    line = refused(capsys, recorded, "run", "--model", "qwen2.5-7b", "--n-trials", n, *storage(recorded))
    assert f"--n-trials {n}: it counts launched trials and must be at least 1" in line


@pytest.mark.parametrize("setting, expected", [
    ("tp=banana", "--set tp=banana: tp takes a whole number, not 'banana' (e.g. 1, 2, 4, 8)"),
    ("tp=0", "tp takes a whole number of at least 1, not 0"),
    ("recompute=half", "recompute takes one of none, selective, full, not 'half'"),
    ("use_dynamic_bsz=maybe", "use_dynamic_bsz takes true or false, not 'maybe' (e.g. true, false)"),
    ("gpu_memory_utilization=1.5", "gpu_memory_utilization takes a fraction between 0 and 1, not 1.5"),
])
def test_estimate_set_with_a_value_the_parameter_cannot_take(capsys, recorded, setting, expected):
    line = refused(capsys, recorded, "estimate", "--model", "qwen2.5-7b", "--set", setting)
    assert expected in line


class _AlwaysFails(Runner):
    name = "simulate"
    simulated = True

    def run(self, spec: TrialSpec) -> TrialResult:
        return TrialResult(TrialStatus.FAILED, "failed on purpose", simulated=True)


def test_export_of_a_study_with_no_successful_trial(capsys, tmp_path):
    db = tmp_path / "failed.db"
    Tuner(make_setup("qwen2.5-0.5b"), _AlwaysFails(), f"sqlite:///{db}", "nothing-ok").run(n_trials=2)
    line = refused(capsys, db, "export", "--format", "sh", *storage(db))
    assert "study 'nothing-ok' has no trial that ran to its measured step yet" in line


def test_study_name_reused_with_another_setup(capsys, recorded):
    line = refused(capsys, recorded, "run", "--model", "qwen2.5-1.5b", "--study", "kept", *storage(recorded))
    assert "study 'kept'" in line and "different setup" in line and "model: study has 'qwen2.5-0.5b:" in line


def test_the_recorded_study_is_still_whole(capsys, recorded):
    """After all the refusals above: the kept study resumes as if nothing happened."""
    code = main(["status", "--study", "kept", "--json", *storage(recorded)])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["counts"].get("ok") == 2 and len(doc["trials"]) == 2


@pytest.mark.parametrize("option, value, expected", [
    ("--timeout", "0", "argument --timeout: 0: a time limit is a positive number of seconds"),
    ("--timeout", "-60", "argument --timeout: -60: a time limit is a positive number of seconds"),
    ("--deadline", "0", "argument --deadline: 0: a time limit is a positive number of seconds"),
    ("--trial-timeout", "-1", "argument --trial-timeout: -1: a time limit is a positive number of seconds"),
    ("--stall-timeout", "0", "argument --stall-timeout: 0: a time limit is a positive number of seconds"),
    ("--startup-timeout", "-5", "argument --startup-timeout: -5: a time limit is a positive number of seconds"),
    ("--confirm", "-1", "argument --confirm: -1: must be 0 or more (0: off)"),
    ("--gpus", "1000", "argument --gpus: 1000 GPUs per node: no node has more than 16; --gpus counts the GPUs of "
     "one node (e.g. 8), and --nodes the nodes"),
    ("--gpus", "0", "argument --gpus: 0: must be at least 1"),
    ("--nodes", "0", "argument --nodes: 0: must be at least 1"),
])
def test_run_refuses_impossible_limits_and_counts_at_parsing(capsys, tmp_path, option, value, expected):
    """Issue 25 item 9: refused in one line before anything runs; no database is created."""
    db = tmp_path / "never.db"
    with pytest.raises(SystemExit) as e:
        main(["run", "--model", "qwen2.5-0.5b", option, value, *storage(db)])
    out, err = capsys.readouterr()
    assert e.value.code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and f"autotune run: error: {expected}" in err, err
    assert not db.exists()


@pytest.mark.parametrize("gpus", ["1", "3", "8", "16"])
def test_gpus_up_to_a_real_node_are_taken(gpus):
    from autotune.cli import build_parser

    assert build_parser().parse_args(["run", "--gpus", gpus]).gpus == int(gpus)


# Issue 25 item 4: a database autotune can read but not write --------------------------------------------------
def test_a_database_opened_read_only_is_refused_in_one_line(capsys, recorded):
    url = f"sqlite:///file:{recorded}?mode=ro&uri=true"
    line = refused(capsys, recorded, "run", "--model", "qwen2.5-0.5b", "--study", "kept", "--storage", url)
    assert "cannot be written (attempt to write a readonly database)" in line and "drop mode=ro" in line


def test_import_into_a_read_only_database_is_refused_in_one_line(capsys, recorded):
    url = f"sqlite:///file:{recorded}?mode=ro&uri=true"
    log = str(Path(__file__).parent / "data" / "real_verl_cpu.log")
    line = refused(capsys, recorded, "import", log, "--model", "qwen2.5-0.5b", "--storage", url)
    assert "cannot be written (attempt to write a readonly database)" in line


def _immutable(path: Path) -> bool:
    """`chattr +i`: read-only even for root (file permissions are not); False where the filesystem refuses."""
    import shutil
    import subprocess

    return shutil.which("chattr") is not None and subprocess.run(["chattr", "+i", str(path)],
                                                                capture_output=True).returncode == 0


@pytest.mark.parametrize("what", ["file", "directory"])
def test_an_immutable_database_is_refused_in_one_line(capsys, recorded, tmp_path, what):
    import shutil
    import subprocess

    db = tmp_path / "ro" / "study.db"
    db.parent.mkdir()
    shutil.copy(recorded, db)
    target = db if what == "file" else db.parent
    if not _immutable(target):
        pytest.skip("chattr +i does not work here")
    try:
        line = refused(capsys, db, "run", "--model", "qwen2.5-0.5b", "--study", "kept", *storage(db))
    finally:
        subprocess.run(["chattr", "-i", str(target)], check=True)
    assert f"the study database sqlite:///{db} cannot be written" in line and f"chattr -i {db}" in line


# Issue 25 item 6: a refused run creates no database -------------------------------------------------------------
@pytest.mark.parametrize("argv, expected", [
    (["--gpus", "3"], "no setting of space 'dense' can run qwen2.5-0.5b on 1x3xh100"),
    (["--warm-start", "no-such-study"], "--warm-start no-such-study: no such study in this database"),
])
def test_a_refused_run_leaves_no_database_behind(capsys, tmp_path, argv, expected):
    db = tmp_path / "sub" / "new.db"
    code, out, err = cli_run(capsys, "run", "--model", "qwen2.5-0.5b", *argv, *storage(db), "--workdir",
                             str(tmp_path / "w"))
    assert code == 2 and expected in err and len(err.strip().splitlines()) == 1, err
    assert not db.exists() and not db.parent.exists()


# Issue 25 item 8: a PostgreSQL URL without its driver names the extra that installs it --------------------------
@pytest.mark.parametrize("url, expected", [
    ("postgresql://u:secret@127.0.0.1:5432/db", "its driver psycopg is not installed: pip install "
     "'autotune[postgres]' (psycopg 3)"),  # SQLAlchemy 2.1's default driver for postgresql://
    ("postgresql+psycopg://u@127.0.0.1:5432/db", "its driver psycopg is not installed: pip install "
     "'autotune[postgres]' (psycopg 3)"),
    ("postgresql+psycopg2://u@127.0.0.1:5432/db", "its driver psycopg2 is not installed: pip install psycopg2-binary; "
     "or use postgresql+psycopg://... with pip install 'autotune[postgres]'"),
])
@pytest.mark.parametrize("command", ["status", "run"])
def test_a_postgres_url_without_its_driver_names_the_extra(capsys, monkeypatch, tmp_path, url, expected, command):
    import sqlalchemy

    if url.startswith("postgresql://") and tuple(map(int, sqlalchemy.__version__.split(".")[:2])) < (2, 1):
        pytest.skip("SQLAlchemy before 2.1 takes psycopg2 for postgresql://")
    for module in ("psycopg", "psycopg2"):
        monkeypatch.setitem(__import__("sys").modules, module, None)  # as where the driver is not installed
    extra = ["--model", "qwen2.5-0.5b", "--workdir", str(tmp_path)] if command == "run" else []
    code, out, err = cli_run(capsys, command, "--storage", url, *extra)
    assert code == 2 and len(err.strip().splitlines()) == 1 and expected in err, err
    assert "secret" not in err and "-e '.[postgres]'" not in err
