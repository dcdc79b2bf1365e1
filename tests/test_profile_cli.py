"""`autotune profile` and `autotune probe --profile` as a user runs them (on traces laid out as verl writes them: the
test double's writer, which uses verl's own profiler code), the profiles table, and bad input."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from autotune.candidate import Candidate
from autotune.profile.runs import profiler_overrides
from autotune.results.export import launch_argv
from autotune.runners.simulate import SimulateRunner
from autotune.store.store import Store
from autotune.study.study import Tuner
from tests.conftest import REPO, cli_run, make_setup

pytest.importorskip("verl")
pytest.importorskip("torch")

MODEL, GPUS = "qwen2.5-1.5b", 4
# Fused kernels, as users run: without them the logits' passes (~1 s each, Efficiency.unfused_logit_ps) dilute what
# halving this PP=2 bubble saves to 1.0046x the step, under MIN_SPEEDUP, and nothing is advised.
PP2 = {"tp": 1, "pp": 2, "rollout_tp": 1, "use_dynamic_bsz": True, "use_fused_kernels": True}


@pytest.fixture(scope="module")
def verl_traces(tmp_path_factory) -> Path:
    """Step 3's traces of a 4-GPU tp1 pp2 run, written by verl's profiler code (tests/fake_verl/profiled.py)."""
    from tests.fake_verl.main_ppo import parse_overrides
    from tests.fake_verl.profiled import write_traces

    where = tmp_path_factory.mktemp("verl-traces") / "traces"
    setup = make_setup(MODEL, gpus=GPUS)
    argv = launch_argv(setup.job, setup.cluster, Candidate(**PP2).normalized(),
                       extra=profiler_overrides(where, 3, 20))
    write_traces(argv, parse_overrides(argv), 3)
    return where


@pytest.fixture(scope="module")
def study_template(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("study") / "template.db"
    Tuner(make_setup(MODEL, gpus=GPUS), SimulateRunner(), f"sqlite:///{path}", "sim").run(n_trials=2)
    return path


@pytest.fixture
def study_db(tmp_path, study_template) -> tuple[str, str]:
    """A simulated study of 2 trials, a fresh copy per test."""
    path = tmp_path / "p.db"
    shutil.copy(study_template, path)
    return f"sqlite:///{path}", "sim"


def test_profile_traces_of_a_trial_are_stored_with_it(capsys, verl_traces, study_db):
    url, study = study_db
    code, out, err = cli_run(capsys, "profile", "--study", study, "--trial", "0", "--traces", str(verl_traces),
                             "--storage", url, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["study"] == study and doc["trial"] == 0 and doc["backend"] == "traces" and doc["step"] == 3
    phases = {p["phase"]: p for p in doc["analysis"]["phases"]}
    assert {"gen", "old_log_prob", "update_actor"} <= set(phases)
    assert phases["update_actor"]["ranks"] == 4
    assert abs(sum(phases["update_actor"]["shares"].values()) - 1) < 1e-3
    rows = Store(url).profiles(study, 0)
    assert [r.id for r in rows] == [doc["profile_id"]] and rows[0].status == "ok"
    code, out2, _ = cli_run(capsys, "profile", "--show", str(doc["profile_id"]), "--storage", url, "--json")
    assert code == 0 and json.loads(out2)["analysis"] == doc["analysis"]


def test_profile_text_shows_phases_top_kernels_and_checked_advice(capsys, verl_traces, tmp_path):
    url = f"sqlite:///{tmp_path / 'p.db'}"
    sets = [x for k, v in PP2.items() for x in ("--set", f"{k}={str(v).lower()}")]
    Store(url)  # a study database: the profile is kept there
    code, out, err = cli_run(capsys, "profile", "--model", MODEL, "--gpus", str(GPUS), *sets,
                             "--traces", str(verl_traces), "--storage", url)
    assert code == 0, err
    assert "update_actor" in out and "old_log_prob" in out and "gen" in out
    assert "top ops, update_actor:" in out and "aten::" in out
    assert "update_weights: in no trace" in out
    assert "idle or waiting on pipeline neighbours with PP=2" in out  # the later stage's wait, found
    assert "checked by the model" in out or "considered" in out
    code, out, _ = cli_run(capsys, "profile", "--show", "1", "--storage", url, "--json")
    doc = json.loads(out)
    assert doc["study"] is None  # a configuration, not a trial: stored standalone
    for adv in doc["advice"]:
        assert adv["advised"] == (adv["fits"] and (adv["predicted_speedup"] or 0) >= 1.005), adv


@pytest.mark.parametrize("argv,msg", [
    ([], "what to profile"),
    (["--study", "sim"], "needs --trial N or --best"),
    (["--study", "nope", "--trial", "0"], "no study named"),
    (["--study", "sim", "--trial", "99"], "has no trial 99"),
    (["--study", "sim", "--trial", "0", "--model", MODEL], "not both"),
    (["--study", "sim", "--trial", "0", "--traces", "/nonexistent/dir"], "no such folder"),
    (["--study", "sim", "--trial", "0"], "--traces DIR"),  # no GPU here: say what works instead
    (["--show", "42"], "no profile 42"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, study_db, argv, msg):
    url, _ = study_db
    code, out, err = cli_run(capsys, "profile", *argv, "--storage", url)
    assert code == 2 and msg in err and err.count("\n") == 1, err
    assert Store(url).profiles("sim", 0) == []


def test_a_failed_profile_shows_from_a_database_without_a_study(capsys, tmp_path):
    """As on the H100 (2026-11-26): `profile --backend verl --model ...` ran out of memory and stored profile 1, the
    database's only row; --show prints it whole, and the commands that read a study point to it."""
    from autotune.profile.runs import Profile, store_profile
    from autotune.runners.base import TrialResult, TrialStatus

    url = f"sqlite:///{tmp_path / 'p.db'}"
    oom = TrialResult(TrialStatus.OOM, reason="GPU out of memory in training: torch.OutOfMemoryError: CUDA out of "
                      "memory. Tried to allocate 42.36 GiB.")
    prof = Profile(oom, str(tmp_path / "traces"), 3, None, error=f"the profiled run ended oom: {oom.reason}")
    assert store_profile(Store(url), prof, "verl", Candidate(tp=1, rollout_tp=1)) == 1
    code, out, err = cli_run(capsys, "profile", "--show", "1", "--storage", url)
    assert code == 0, err
    assert "profile of tp1 | rollout tp1 failed" in out and "ended oom" in out and "42.36 GiB" in out
    code, out, _ = cli_run(capsys, "profile", "--show", "1", "--storage", url, "--json")
    doc = json.loads(out)
    assert code == 0 and doc["ok"] is False and doc["run"]["status"] == "oom" and doc["study"] is None
    code, _, err = cli_run(capsys, "profile", "--show", "2", "--storage", url)
    assert code == 2 and "no profile 2" in err and "profiles there: 1" in err and err.count("\n") == 1, err
    code, _, err = cli_run(capsys, "status", "--storage", url)
    assert code == 2 and "no study in" in err and "autotune profile --show 1" in err, err
    empty = f"sqlite:///{tmp_path / 'empty.db'}"
    Store(empty)
    code, _, err = cli_run(capsys, "profile", "--show", "1", "--storage", empty)
    assert code == 2 and "holds none" in err, err
    from autotune.cli.options import id_list  # many ids: still one line

    assert id_list(list(range(1, 21))) == "1, 2, 3, 4, 5, 6, 7, ..., 20 (20 in all)"


def test_a_folder_without_traces_is_bad_input_and_stores_nothing(capsys, study_db, tmp_path):
    url, study = study_db
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("hi")
    code, _, err = cli_run(capsys, "profile", "--study", study, "--best", "--traces", str(tmp_path / "empty"),
                           "--storage", url)
    assert code == 2 and "no trace written there" in err and "global_profiler.save_path" in err
    assert err.count("\n") == 1 and "autotune/" not in err  # what to do, not where the code is
    with sqlite3.connect(url.removeprefix("sqlite:///")) as con:
        assert con.execute("select count(*) from autotune_profiles").fetchone()[0] == 0


def test_databases_from_before_profiles_open_and_gain_the_table(tmp_path, study_db):
    url, study = study_db
    path = url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as con:
        con.execute("drop table autotune_profiles")
    store = Store(url)  # the table comes back; every trial is still there
    assert len(store.trials(study)) >= 2 and store.profiles(study, 0) == []
    with sqlite3.connect(path) as con:
        assert con.execute("select count(*) from autotune_profiles").fetchone()[0] == 0


def test_probe_profile_without_gpus_is_a_clear_error(capsys):
    code, _, err = cli_run(capsys, "probe", "--model", MODEL, "--profile")
    assert code == 2 and "GPU" in err


def test_a_measured_trials_own_lengths_inform_the_advice(study_db):
    from autotune import verl
    from autotune.cli.profile import _with_measured_lengths
    from autotune.search.setup import setup_from_row
    from autotune.store.schema import StepRow

    url, study = study_db
    store = Store(url)
    row = store.trial(study, 0)
    setup = setup_from_row(store.get_study(study))
    assert _with_measured_lengths(setup, store, row) is setup  # simulated: no measured lengths
    store.update_trial(row.id, simulated=False)  # as if verl had run it and logged its lengths at the step
    lengths = {verl.M_RESPONSE_LENGTH_MEAN: 700.0, verl.M_RESPONSE_LENGTH_MAX: 2000.0,
               verl.M_PROMPT_LENGTH_MEAN: 300.0, verl.M_PROMPT_LENGTH_MAX: 900.0}
    with store.session() as s:
        step = s.query(StepRow).filter_by(trial_id=row.id, step=setup.measure_step).one_or_none()
        if step is None:
            s.add(StepRow(trial_id=row.id, step=setup.measure_step, metrics=lengths))
        else:
            step.metrics = {**step.metrics, **lengths}
    got = _with_measured_lengths(setup, store, store.trial(study, 0))
    assert got.lengths is not None and got.lengths.response_max == 2000.0


def test_traces_need_no_study_database(capsys, verl_traces, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the default --storage, trials/autotune.db, is not there
    code, out, err = cli_run(capsys, "profile", "--traces", str(verl_traces))
    assert code == 0, err
    assert "update_actor" in out and "not stored: no study database" in out
    assert not (tmp_path / "trials").exists()


def test_best_of_the_only_study(capsys, verl_traces, study_db):
    url, study = study_db
    code, out, err = cli_run(capsys, "profile", "--best", "--traces", str(verl_traces), "--storage", url, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["study"] == study and doc["trial"] == Store(url).best(study).number


def test_a_configuration_predicted_not_to_fit_is_refused_unless_forced(capsys, tmp_path):
    """Lease 10's 0.5B profile (H100, 2026-11-26): 32k-token update micro-batches without fused kernels, predicted
    at over 200 GiB, ran 4.5 minutes into its OOM. It is refused before anything runs; --force passes the check."""
    url = f"sqlite:///{tmp_path}/p.db"
    argv = ["profile", "--model", "qwen2.5-0.5b", "--gpus", "1", "--gpu-type", "h100", "--job",
            str(REPO / "benchmarks" / "gpu_verl" / "job_smoke.yaml"), "--storage", url, "--set", "rollout_tp=1",
            "--set", "use_dynamic_bsz=true", "--set", "ppo_max_token_len_per_gpu=32768", "--set",
            "log_prob_max_token_len_per_gpu=98304", "--set", "gpu_memory_utilization=0.4"]
    code, _, err = cli_run(capsys, *argv)
    assert code == 2 and "predicts it cannot run" in err and "predicted OOM" in err and "--force" in err, err
    code, _, err = cli_run(capsys, *argv, "--force")
    assert code == 2 and "finds none" in err  # past the check: this machine has no GPU to run it on
    code, _, err = cli_run(capsys, *argv, "--set", "use_fused_kernels=true")
    assert code == 2 and "finds none" in err  # the fused kernels fit
