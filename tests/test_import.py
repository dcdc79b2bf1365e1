"""`autotune import`: verl runs made by hand recorded as measured trials; bad and foreign files refused one line
each with the database left exactly as it was (SQLite and PostgreSQL); the same file never imported twice.

The console logs here are built the way verl 0.9.1 prints them: the head of a real run's log
(tests/data/real_verl_cpu.log: Ray's lines, then TaskRunnerV1's `pprint` of the resolved config, re-printed with
the same pprint after changing the run's knobs), then the trainer's progress bar and step lines, and the
DataLoader teardown traceback a real finished run ends with.
"""

from __future__ import annotations

import ast
import copy
import json
import pprint
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from sqlalchemy import create_engine, inspect, text

from autotune import verl
from autotune.store.store import Store
from tests.conftest import cli_run

REAL = Path(__file__).parent / "data" / "real_verl_cpu.log"
PRE = "\x1b[36m(TaskRunnerV1 pid=23000)\x1b[0m "


def real_config() -> tuple[list[str], dict[str, Any]]:
    """The real log's lines before its config print, and the config verl printed."""
    lines = REAL.read_text().split("\n")
    start = next(i for i, ln in enumerate(lines) if "{'actor_rollout_ref': " in ln)
    end = next(i for i in range(start, len(lines)) if lines[i].rstrip().endswith("}") and _parses(lines[start:i + 1]))
    body = "\n".join(ln.split("\x1b[0m ", 1)[1] for ln in lines[start:end + 1])
    return lines[:start], ast.literal_eval(body)


def _parses(chunk: list[str]) -> bool:
    try:
        ast.literal_eval("\n".join(ln.split("\x1b[0m ", 1)[1] for ln in chunk))
        return True
    except (SyntaxError, ValueError, IndexError):
        return False


def set_key(cfg: dict[str, Any], dotted: str, value: Any) -> None:
    node = cfg
    *parents, last = dotted.split(".")
    for p in parents:
        node = node[p]
    node[last] = value


def step_line(step: int, thr: float) -> str:
    m = {"training/global_step": step, "training/epoch": 0, "actor/pg_loss": -0.0123, "actor/grad_norm": 0.51,
         "actor/perf/max_memory_allocated_gb": 31.25 + step, "actor/perf/max_memory_reserved_gb": 40.5,
         "response_length/mean": 96.5, "response_length/max": 128.0, "prompt_length/mean": 60.0,
         "prompt_length/max": 64.0, "timing_s/gen": 2.5, "timing_s/old_log_prob": 0.4, "timing_s/adv": 0.0123,
         "timing_s/update_actor": 0.9, "timing_s/update_weights": 0.3, "timing_s/step": 4.25,
         "perf/total_num_tokens": 1234, "perf/time_per_step": 4.25, "perf/throughput": thr}
    return PRE + "step:" + str(step) + " - " + " - ".join(f"{k}:{v!r}" for k, v in m.items())


def verl_log(path: Path, steps: int = 3, knobs: dict[str, Any] | None = None, tail: str = "finish",
             thr: float = 900.0) -> Path:
    head, cfg = real_config()
    cfg = copy.deepcopy(cfg)
    set_key(cfg, verl.TOTAL_TRAINING_STEPS, steps)
    for k, v in (knobs or {}).items():
        set_key(cfg, k, v)
    out = head + [PRE + ln for ln in pprint.pformat(cfg).split("\n")]
    out.append(PRE + f"Training Progress:   0%|          | 0/{steps} [00:00<?, ?it/s]")
    for s in range(1, steps + 1):
        out.append(step_line(s, thr * (0.1 if s == 1 else 1.0) + s))
    if tail == "finish":
        out += [PRE + f"Training Progress: 100%|##########| {steps}/{steps} [00:15<00:00,  4.1s/it]",
                "Traceback (most recent call last):",
                "RuntimeError: DataLoader worker (pid 51234) is killed by signal: Terminated."]
    elif tail == "oom":
        out += ["ray.exceptions.RayTaskError(OutOfMemoryError): ray::WorkerDict.actor_rollout_update_actor()",
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.64 GiB."]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(out) + "\n")
    return path


def dump(url: str) -> dict[str, list]:
    """Every row of every table (Optuna's and autotune's): what must not change."""
    eng = create_engine(url)
    try:
        with eng.connect() as c:
            return {t: sorted(map(repr, c.execute(text(f'SELECT * FROM "{t}"')).all()))
                    for t in inspect(eng).get_table_names()}
    finally:
        eng.dispose()


ARGS = ("--model", "qwen2.5-0.5b", "--gpu-type", "h100")


def test_a_finished_run_is_a_measured_trial(tmp_path: Path, sqlite_url: str, capsys) -> None:
    log = verl_log(tmp_path / "run1" / "verl.log", knobs={verl.PARAM_KEYS["gpu_memory_utilization"][0]: 0.6})
    code, out, err = cli_run(capsys, "import", str(log), *ARGS, "--storage", sqlite_url, "--study", "s")
    assert code == 0, err
    assert "as trial 0" in out and "903.0 tokens/s/GPU at step 3" in out and err == ""
    store = Store(sqlite_url)
    (row,) = store.trials("s")
    assert (row.status, row.backend, row.simulated, row.launched, row.origin) == ("ok", "import", False, True,
                                                                                 "import")
    assert row.throughput == 903.0 and row.params["gpu_memory_utilization"] == 0.6
    assert row.phase_timings == {"step": 4.25, "gen": 2.5, "old_log_prob": 0.4, "adv": 0.0123,
                                 "update_actor": 0.9, "update_weights": 0.3}
    assert row.framework_memory_gib == 34.25 and row.predicted_throughput and row.predicted_memory
    assert [s.step for s in store.steps(row.id)] == [1, 2, 3]
    assert row.extra["imported"]["kind"] == "console" and len(row.extra["imported"]["sha256"]) == 64
    assert row.extra["failure"] is None and row.log_path == str(log.resolve())
    study = optuna.load_study(study_name="s", storage=sqlite_url)
    (t,) = study.trials
    assert t.state == optuna.trial.TrialState.COMPLETE and t.value == 903.0 and t.user_attrs["origin"] == "import"
    # the study holds the run's workload, read from what verl printed
    srow = store.get_study("s")
    job = dict(map(tuple, srow.job))
    assert job[verl.TRAIN_BATCH_SIZE] == 4 and job[verl.ROLLOUT_N] == 2 and srow.backend == "verl"
    # `status` shows it like any trial
    code, out, _ = cli_run(capsys, "status", "--storage", sqlite_url, "--study", "s")
    assert code == 0 and "import" in out and "903.0" in out


def test_reimport_and_bad_files_change_nothing(tmp_path: Path, sqlite_url: str, capsys) -> None:
    log = verl_log(tmp_path / "verl.log")
    assert cli_run(capsys, "import", str(log), *ARGS, "--storage", sqlite_url, "--study", "s")[0] == 0
    before = dump(sqlite_url)
    (tmp_path / "bin.log").write_bytes(b"\x00\x01\x02verl")
    (tmp_path / "empty.log").write_text("")
    (tmp_path / "notes.txt").write_text("my notes about a run\nthroughput was good\n")
    fsdp = verl_log(tmp_path / "fsdp" / "verl.log")
    fsdp.write_text(fsdp.read_text().replace("'megatron': {", "'fsdp_config': {"))
    other = verl_log(tmp_path / "other" / "verl.log", knobs={verl.TRAIN_BATCH_SIZE: 64, verl.PPO_MINI_BATCH_SIZE: 8})
    gpus = verl_log(tmp_path / "gpus" / "verl.log", knobs={verl.N_GPUS_PER_NODE: 8})
    files = [log, tmp_path / "bin.log", tmp_path / "empty.log", tmp_path / "notes.txt", tmp_path / "missing.log",
             fsdp, other, gpus]
    code, out, err = cli_run(capsys, "import", *map(str, files), *ARGS, "--storage", sqlite_url, "--study", "s")
    assert code == 2 and out == ""
    lines = err.strip().split("\n")
    assert len(lines) == len(files) + 1, err  # one line each, then the verdict
    assert "already imported as trial 0" in lines[0]
    assert "binary file" in lines[1] and "empty" in lines[2] and "not a verl run's output" in lines[3]
    assert "no such file" in lines[4] and "not a Megatron actor" in lines[5]
    assert "data.train_batch_size is 64 in the run, 4 in the study's job" in lines[6]
    assert "trainer.n_gpus_per_node is 8 in the run, 1 in the study" in lines[7]
    assert "nothing imported" in lines[-1] and "unchanged" in lines[-1]
    assert dump(sqlite_url) == before


@pytest.mark.postgres
def test_nothing_importable_leaves_postgresql_as_it_was(tmp_path: Path, postgres_url: str, capsys) -> None:
    log = verl_log(tmp_path / "verl.log")
    study = f"imp-{tmp_path.name}"[-60:]
    assert cli_run(capsys, "import", str(log), *ARGS, "--storage", postgres_url, "--study", study)[0] == 0
    before = dump(postgres_url)
    (tmp_path / "notes.txt").write_text("nothing of verl here\n")
    code, _, err = cli_run(capsys, "import", str(log), str(tmp_path / "notes.txt"), *ARGS, "--storage", postgres_url,
                           "--study", study)
    assert code == 2 and "already imported" in err and "not a verl run's output" in err
    assert dump(postgres_url) == before


def test_nothing_importable_creates_no_database(tmp_path: Path, capsys) -> None:
    (tmp_path / "notes.txt").write_text("no verl\n")
    url = f"sqlite:///{tmp_path / 'new.db'}"
    code, _, err = cli_run(capsys, "import", str(tmp_path / "notes.txt"), *ARGS, "--storage", url)
    assert code == 2 and "not a verl run's output" in err
    assert not (tmp_path / "new.db").exists()


def test_an_oom_run_and_an_unfinished_one(tmp_path: Path, sqlite_url: str, capsys) -> None:
    oom = verl_log(tmp_path / "a" / "verl.log", steps=3, tail="oom",
                   knobs={verl.PARAM_KEYS["tp"][0]: 1, verl.PARAM_KEYS["gpu_memory_utilization"][0]: 0.7})
    oom.write_text("\n".join(ln for ln in oom.read_text().split("\n") if "step:3 " not in ln))
    cut = verl_log(tmp_path / "b" / "verl.log", steps=3, tail="none")
    cut.write_text("\n".join(ln for ln in cut.read_text().split("\n") if "step:3 " not in ln))
    code, out, err = cli_run(capsys, "import", str(oom), str(cut), *ARGS, "--storage", sqlite_url, "--study", "s")
    assert code == 0, err
    rows = {Path(r.log_path).parent.name: r for r in Store(sqlite_url).trials("s")}
    assert (rows["a"].status, rows["a"].extra["failure"]) == ("oom", "gpu_oom")
    assert "Tried to allocate 4.64 GiB" in rows["a"].reason and rows["a"].throughput is None
    assert (rows["b"].status, rows["b"].extra["failure"]) == ("failed", "incomplete")
    assert "ends after 2 step(s)" in rows["b"].reason
    states = {t.number: t.state for t in optuna.load_study(study_name="s", storage=sqlite_url).trials}
    assert states[rows["a"].number] == optuna.trial.TrialState.PRUNED
    assert states[rows["b"].number] == optuna.trial.TrialState.FAIL


def _jsonl_from(log: Path, path: Path) -> Path:
    from autotune.verl.runs import steps_from_console

    steps = steps_from_console(log.read_text())
    path.write_text("".join(json.dumps({"step": s, "data": {**m, "perf/throughput": m["perf/throughput"] + 0.25}})
                            + "\n" for s, m in sorted(steps.items())))
    return path


def test_a_metrics_jsonl_takes_its_config_from_the_console_log_beside_it(tmp_path: Path, sqlite_url: str,
                                                                          capsys) -> None:
    log = verl_log(tmp_path / "trial" / "verl.log", knobs={verl.PARAM_KEYS["rollout_tp"][0]: 1})
    jl = _jsonl_from(log, tmp_path / "trial" / "metrics.jsonl")
    code, out, err = cli_run(capsys, "import", str(jl), *ARGS, "--storage", sqlite_url, "--study", "s")
    assert code == 0, err
    (row,) = Store(sqlite_url).trials("s")
    assert row.throughput == 903.25  # the file logger's value wins
    assert row.extra["imported"]["kind"] == "jsonl" and row.extra["imported"]["config_from"] == str(log)
    # given together, the log and its metrics are one run
    code, _, err = cli_run(capsys, "import", str(log), str(jl), *ARGS, "--storage", sqlite_url, "--study", "s2")
    assert code == 0 and "the metrics of" in err and len(Store(sqlite_url).trials("s2")) == 1


def test_a_lone_jsonl_needs_the_job(tmp_path: Path, sqlite_url: str, capsys) -> None:
    log = verl_log(tmp_path / "x" / "verl.log")
    jl = _jsonl_from(log, tmp_path / "alone" / "metrics.jsonl") if (tmp_path / "alone").mkdir() is None else None
    code, _, err = cli_run(capsys, "import", str(jl), *ARGS, "--storage", sqlite_url)
    assert code == 2 and "--job" in err
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({verl.TRAIN_BATCH_SIZE: 4, verl.PPO_MINI_BATCH_SIZE: 4, verl.ROLLOUT_N: 2,
                                   verl.PARAM_KEYS["tp"][0]: 1, verl.PARAM_KEYS["rollout_tp"][0]: 1}))
    code, out, err = cli_run(capsys, "import", str(jl), *ARGS, "--gpus", "1", "--job", str(job), "--storage",
                             sqlite_url, "--study", "j")
    assert code == 0, err
    (row,) = Store(sqlite_url).trials("j")
    assert row.status == "ok" and row.params["tp"] == 1 and row.extra["imported"]["config_from"] == "job"


def test_into_a_simulated_study_is_refused(tmp_path: Path, sqlite_url: str, capsys) -> None:
    code, _, _ = cli_run(capsys, "run", "--model", "qwen2.5-0.5b", "--gpus", "1", "--backend", "simulate",
                         "--n-trials", "1", "--storage", sqlite_url, "--study", "sim", "--confirm", "0")
    assert code == 0
    before = dump(sqlite_url)
    code, _, err = cli_run(capsys, "import", str(verl_log(tmp_path / "verl.log")), "--storage", sqlite_url,
                           "--study", "sim")
    assert code == 2 and "'simulate' study" in err and dump(sqlite_url) == before


def test_the_dashboard_shows_imported_trials(tmp_path: Path, sqlite_url: str, capsys) -> None:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from autotune.dashboard.app import create_app

    log = verl_log(tmp_path / "verl.log")
    oom = verl_log(tmp_path / "b" / "verl.log", tail="oom", knobs={verl.PARAM_KEYS["gpu_memory_utilization"][0]: 0.8})
    oom.write_text("\n".join(ln for ln in oom.read_text().split("\n") if "step:3 " not in ln))
    assert cli_run(capsys, "import", str(log), str(oom), *ARGS, "--storage", sqlite_url, "--study", "s")[0] == 0
    client = TestClient(create_app(sqlite_url), base_url="http://127.0.0.1:8080")
    assert client.get("/study/s").status_code == 200
    page = client.get("/study/s/trial/0")
    assert page.status_code == 200 and "903.0" in page.text
    data = client.get("/api/study/s/trials").json()
    assert "import" in json.dumps(data) and "Tried to allocate 4.64 GiB" in json.dumps(data)


def test_a_runner_trials_own_log_imports_as_the_same_configuration(tmp_path: Path, sqlite_url: str, capsys) -> None:
    """A trial folder the verl runner wrote (here through the test double, which prints the config as verl does)
    imports back as the candidate that ran, with the same measured numbers."""
    from autotune.candidate import Candidate
    from tests.conftest import make_setup
    from tests.fake_verl import env_for, fake_runner, make_spec

    setup = make_setup(model="qwen2.5-0.5b", gpus=2)
    cand = Candidate(tp=2, pp=1, rollout_tp=1, ppo_micro_batch_size_per_gpu=2, gpu_memory_utilization=0.6,
                     log_prob_micro_batch_size_per_gpu=4).normalized()
    res = fake_runner(env_for(tmp_path / "rec.jsonl", FAKE_VERL_TEARDOWN_S="0.1"), preflight=False).run(
        make_spec(setup, tmp_path / "t", cand=cand))
    assert res.status.value == "ok"
    log = Path(res.log_path)
    code, out, err = cli_run(capsys, "import", str(log.parent / "metrics.jsonl"), "--model", "qwen2.5-0.5b",
                             "--storage", sqlite_url, "--study", "back")
    assert code == 0, err
    (row,) = Store(sqlite_url).trials("back")
    assert row.candidate_key == cand.key() and row.throughput == pytest.approx(res.throughput)
    assert row.phase_timings == pytest.approx(res.phase_timings)


GPU = Path(__file__).parent / "data" / "real_verl_gpu"
REAL_ARGS = ("--model", "qwen2.5-0.5b", "--gpus", "1", "--gpu-type", "h100")


def test_a_jsonl_without_its_config_is_never_the_study_configuration(tmp_path: Path, capsys) -> None:
    """A real run's metrics alone, into a study made from another run's console log: refused (it would be recorded
    as a configuration nobody ran), with --study and with the database's only study alike, unless --job says."""
    url = f"sqlite:///{tmp_path / 'a.db'}"
    l3 = GPU / "h100_2026-11-24_l3"
    assert cli_run(capsys, "import", str(l3 / "l3_trial_0000" / "verl.log"), *REAL_ARGS, "--storage", url,
                   "--study", "s")[0] == 0
    before = dump(url)
    for study in (("--study", "s"), ()):
        code, out, err = cli_run(capsys, "import", str(l3 / "l3_trial_0001" / "metrics.jsonl"), "--storage", url,
                                 *study)
        assert code == 2 and out == "" and "pass --job" in err and "nothing imported" in err, err
        assert dump(url) == before
    job = tmp_path / "job.yaml"  # what the run was launched with (its command.json)
    job.write_text(yaml.safe_dump({verl.TRAIN_BATCH_SIZE: 16, verl.PPO_MINI_BATCH_SIZE: 8, verl.ROLLOUT_N: 8,
                                   verl.MAX_PROMPT_LENGTH: 512, verl.MAX_RESPONSE_LENGTH: 1024,
                                   verl.PARAM_KEYS["rollout_tp"][0]: 1, verl.PARAM_KEYS["use_dynamic_bsz"][0]: True}))
    code, out, err = cli_run(capsys, "import", str(l3 / "l3_trial_0001" / "metrics.jsonl"), "--job", str(job),
                             "--storage", url)
    assert code == 0, err
    row = Store(url).trial("s", 1)
    assert row.params["rollout_tp"] == 1 and row.params["use_dynamic_bsz"] is True
    assert row.extra["imported"]["config_from"] == "job"


def _real_study(tmp_path: Path, capsys) -> tuple[str, str]:
    """Six real verl runs of Qwen2.5-0.5B on one H100 (4 ok, 1 OOM, 1 stopped), imported as one study."""
    url = f"sqlite:///{tmp_path / 'r.db'}"
    logs = sorted(map(str, (GPU / "h100_2026-11-25_l4").glob("*/verl.log"))) + \
        sorted(map(str, (GPU / "h100_2026-11-25_l5").glob("*/verl.log")))
    code, out, err = cli_run(capsys, "import", *logs, *REAL_ARGS, "--storage", url, "--study", "s")
    assert code == 0, err
    return url, out


def test_imported_runs_calibrate_the_model(tmp_path: Path, capsys) -> None:
    url, out = _real_study(tmp_path, capsys)
    assert "model corrected on 5 measured trials" in out
    saved = Store(url).correction("s")
    assert saved is not None and saved.trials == 5
    for argv in (("status",), ("best",)):
        code, text, _ = cli_run(capsys, *argv, "--storage", url)
        assert code == 0 and "model corrected on 5 measured trials" in text and "not corrected" not in text
    # the runs differ on dynamic batching, so the study's job leaves it at verl's default: set it as they ran
    code, text, _ = cli_run(capsys, "estimate", "--study", "s", "--storage", url, "--set", "use_dynamic_bsz=true",
                            "--json")
    assert code == 0 and json.loads(text)["model_correction"]["trials"] == 5
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from autotune.dashboard.app import create_app

    page = TestClient(create_app(url), base_url="http://127.0.0.1:8080").get("/study/s")
    assert page.status_code == 200 and "model corrected on 5 measured trials" in page.text


def test_an_imported_study_knows_what_its_runs_fixed(tmp_path: Path, capsys) -> None:
    url, _ = _real_study(tmp_path, capsys)
    job = dict(map(tuple, Store(url).get_study("s").job))
    # every run had rollout TP 1 and fused attention: the study's job says so (verl's defaults: TP 2, flash)
    assert job[verl.PARAM_KEYS["rollout_tp"][0]] == 1 and job[verl.ATTENTION_BACKEND] == "fused"
    assert verl.PARAM_KEYS["use_dynamic_bsz"][0] not in job  # the runs differ there: not fixed
    best = Store(url).trial("s", 0)  # the 9241.6 tokens/s/GPU run
    sets = [x for k in ("use_dynamic_bsz", "ppo_max_token_len_per_gpu", "log_prob_max_token_len_per_gpu",
                        "gpu_memory_utilization", "use_fused_kernels")
            for x in ("--set", f"{k}={json.dumps(best.params[k])}")]
    code, text, err = cli_run(capsys, "estimate", "--study", "s", "--storage", url, *sets, "--json")
    assert code == 0, err
    doc = json.loads(text)
    assert doc["fits"] and doc["params"]["rollout_tp"] == 1 and not doc["violations"]
    steps = {s.step: s.metrics for s in Store(url).steps(best.id)}
    assert doc["lengths"]["at_step"]["response_max"] == steps[3][verl.M_RESPONSE_LENGTH_MAX]
    code, text, _ = cli_run(capsys, "status", "--storage", url)
    assert code == 0 and f"{best.framework_memory_gib:.1f} (verl)" in text and verl.M_MAX_MEM_ALLOCATED in text


def test_into_the_only_study_and_reasons_cut_at_a_word(tmp_path: Path, sqlite_url: str, capsys) -> None:
    assert cli_run(capsys, "import", str(verl_log(tmp_path / "a" / "verl.log")), *ARGS, "--storage", sqlite_url,
                   "--study", "s")[0] == 0
    oom = verl_log(tmp_path / "b" / "verl.log", tail="oom", knobs={verl.PARAM_KEYS["gpu_memory_utilization"][0]: 0.8})
    oom.write_text(oom.read_text().replace("Tried to allocate 4.64 GiB.", "Tried to allocate 4.64 GiB. " + " ".join(
        f"word{i:03d}" for i in range(60))).replace("step:3 ", "stepx "))
    code, out, err = cli_run(capsys, "import", str(oom), "--storage", sqlite_url)  # no --model, no --study
    assert code == 0, err
    (row,) = [r for r in Store(sqlite_url).trials("s") if r.status == "oom"]
    shown = next(ln for ln in out.split("\n") if "as trial 1" in ln).split("oom: ", 1)[1]
    assert shown.endswith("\u2026") and (row.reason + " ").startswith(shown[:-1] + " "), shown


def test_a_job_of_another_workload_is_refused_for_an_existing_study(tmp_path: Path, sqlite_url: str, capsys) -> None:
    log = verl_log(tmp_path / "x" / "verl.log")
    assert cli_run(capsys, "import", str(log), *ARGS, "--storage", sqlite_url, "--study", "s")[0] == 0
    before = dump(sqlite_url)
    (tmp_path / "alone").mkdir()
    jl = _jsonl_from(verl_log(tmp_path / "y" / "verl.log"), tmp_path / "alone" / "metrics.jsonl")
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({verl.TRAIN_BATCH_SIZE: 64, verl.PPO_MINI_BATCH_SIZE: 8}))
    code, out, err = cli_run(capsys, "import", str(jl), "--job", str(job), "--storage", sqlite_url, "--study", "s")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "another workload than study 's'" in err and "data.train_batch_size is 64" in err
    assert dump(sqlite_url) == before
