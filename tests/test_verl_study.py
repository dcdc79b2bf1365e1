"""Whole studies through the verl runner and the test double: mixed outcomes, pruning, confirmation, Ctrl-C,
a killed tuner, resume. Every trial is a real process tree; only verl is a double. verl's own config check before a
launch (preflight: Hydra composes verl's config, ~2 s a trial here) is off: tests/test_verl_validate.py tests it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from autotune import verl
from autotune.runners.confirm import confirm_top
from autotune.store.store import Store
from autotune.study.study import Tuner
from tests.conftest import REPO, make_setup
from tests.fake_verl import env_for, fake_module, fake_runner, leftovers, records

FAKE = fake_module()

# First match wins, as in the double. Values as they appear on verl's command line.
RULES = [
    ({"actor_rollout_ref.actor.megatron.context_parallel_size": "4"}, "config_error"),
    ({"actor_rollout_ref.rollout.gpu_memory_utilization": "0.8"}, "vllm_start_oom"),
    ({"actor_rollout_ref.rollout.tensor_model_parallel_size": "8"}, "kv_cache"),
    ({"actor_rollout_ref.actor.megatron.tensor_model_parallel_size": "1"}, "gpu_oom"),
    ({"actor_rollout_ref.actor.megatron.pipeline_model_parallel_size": "4"}, "hang"),
    ({"actor_rollout_ref.actor.megatron.override_transformer_config.recompute_granularity": "selective"}, "nccl"),
    ({"actor_rollout_ref.rollout.tensor_model_parallel_size": "1"}, "crash_once"),
    ({"actor_rollout_ref.actor.megatron.param_offload": "true"}, "leave_child"),
]
EXPECTED = {  # mode -> (status, failure class, words in the reason)
    "config_error": ("config_error", "config_error", "grad_offload"),
    "vllm_start_oom": ("oom", "vllm_start_oom", "Free memory on device"),
    "kv_cache": ("oom", "kv_cache_too_small", "KV cache is needed"),
    "gpu_oom": ("oom", "gpu_oom", "CUDA out of memory"),
    "hang": ("timeout", "stall", "no progress"),
    "nccl": ("failed", "nccl_error", "NCCL error"),
    "crash_once": ("ok", None, "attempt 2"),
    "leave_child": ("ok", None, "measured"),
    "ok": ("ok", None, "measured"),
}
OPTUNA = {"ok": TrialState.COMPLETE, "oom": TrialState.PRUNED, "config_error": TrialState.PRUNED,
          "timeout": TrialState.FAIL, "failed": TrialState.FAIL}


def mode_for(overrides: dict) -> str:
    ov = {k: verl.format_value(v) for k, v in overrides.items()}
    for when, mode in RULES:
        if all(ov.get(k) == v for k, v in when.items()):
            return mode
    return "ok"


@pytest.mark.slow
def test_dry_run_study_of_20_trials_with_mixed_outcomes(tmp_path: Path, sqlite_url: str) -> None:
    rec = tmp_path / "rec.jsonl"
    env = env_for(rec, FAKE_VERL_RULES=json.dumps([{"when": w, "mode": m} for w, m in RULES]))
    runner = fake_runner(env, stall_timeout_s=1.5, grace_s=1.0, preflight=False)
    # learn=False: the corrected model would walk its own best region, and this test needs TPE's spread of outcomes
    # seed 2: with the memory and time models of issue 23 (fewer TP1 settings fit, a fixed cost per Megatron pass),
    # seeds 0 and 3 launched only ok and failed ones; seed 1 met ok, failed and config errors until lease 19's decode
    # model (a graph replay's roofline, the H200's own overhead) moved TPE's path, where seed 2 meets three outcomes
    tuner = Tuner(make_setup(), runner, sqlite_url, "dry", workdir=tmp_path / "trials", seed=2, learn=False)
    summary = tuner.run(20)
    assert summary["launched"] == 20
    rows = [r for r in tuner.store.trials("dry") if r.launched]
    optuna_states = {t.number: t.state for t in tuner.study.get_trials(deepcopy=False)}
    seen_modes = set()
    for r in rows:
        mode = mode_for(r.verl_overrides)
        seen_modes.add(mode)
        status, failure, words = EXPECTED[mode]
        assert r.status == status, (r.number, mode, r.reason)
        assert words in r.reason, (r.number, mode, r.reason)
        assert (r.extra or {}).get("failure") == failure
        assert optuna_states[r.number] == OPTUNA[status]
        assert not r.simulated and r.backend == "verl"
        if status == "ok":
            steps = tuner.store.steps(r.id)
            assert [s.step for s in steps] == [1, 2, 3, 4]  # the measured step and one more (the noise)
            assert r.throughput == pytest.approx(steps[2].metrics[verl.M_THROUGHPUT])
            assert tuner.study.trials[r.number].intermediate_values.keys() == {1, 2}  # reported steps
        else:
            assert r.log_excerpt
    assert len({EXPECTED[m][0] for m in seen_modes}) >= 3, seen_modes  # the outcomes really are mixed
    assert leftovers(rec) == []
    assert not tuner.store.running("dry")


@pytest.mark.slow
def test_prune_slower_trials_against_the_best_at_the_same_step(tmp_path: Path, sqlite_url: str) -> None:
    rec = tmp_path / "rec.jsonl"
    # trials with rollout TP other than 1 run at 30% of their speed in the double (the model seeds come first with
    # rollout TP 1: fast trials complete before slow ones start)
    rules = [{"when": {"actor_rollout_ref.rollout.tensor_model_parallel_size": str(t)}, "mode": "slow"}
             for t in (2, 4, 8)]
    runner = fake_runner(env_for(rec, FAKE_VERL_RULES=json.dumps(rules)), preflight=False)
    tuner = Tuner(make_setup(), runner, sqlite_url, "prune", workdir=tmp_path / "t", prune_slower_than=0.6,
                  prune_after=1)
    tuner.run(8)
    rows = [r for r in tuner.store.trials("prune") if r.launched]
    fast_done = [r for r in rows if r.status == "ok" and r.params["rollout_tp"] == 1]
    slow = [r for r in rows if r.params["rollout_tp"] != 1 and any(f.number < r.number for f in fast_done)]
    assert fast_done and slow
    for r in slow:
        assert r.status == "pruned" and "stopped at step 1" in r.reason, (r.number, r.reason)
        assert tuner.study.trials[r.number].state == TrialState.PRUNED
        assert tuner.store.steps(r.id)[0].step == 1  # what ran before the stop is kept
    assert leftovers(rec) == []


@pytest.mark.slow
def test_confirmation_averages_later_steps_and_demotes_a_late_oom(tmp_path: Path, sqlite_url: str) -> None:
    rec = tmp_path / "rec.jsonl"
    rules = [{"when": {"actor_rollout_ref.rollout.tensor_model_parallel_size": "1"}, "mode": "late_oom"}]
    runner = fake_runner(env_for(rec, FAKE_VERL_RULES=json.dumps(rules)), preflight=False)
    tuner = Tuner(make_setup(), runner, sqlite_url, "conf", workdir=tmp_path / "t")
    tuner.run(5)
    before = {r.number: r for r in tuner.store.trials("conf", "ok")}
    top2 = sorted(before.values(), key=lambda r: -r.throughput)[:2]
    # k=3: room (2k runs) for every rollout-TP-1 leader the late OOM demotes before a configuration that lasts
    out = confirm_top(tuner, k=3, steps=6)
    assert len(out["runs"]) >= 2
    after = {r.number: r for r in tuner.store.trials("conf")}
    for r in top2:
        a = after[r.number]
        conf = a.extra["confirm"]
        assert conf["steps"] == 6 and conf["window"] == [4, 6]
        if r.params["rollout_tp"] == 1:
            assert a.status == "oom" and "late OOM" in a.reason
        else:
            assert a.status == "ok" and "confirmed over 6 steps" in a.reason
            per = [conf["per_step"][str(s)] for s in (4, 5, 6)]  # JSON keys
            assert a.throughput == pytest.approx(sum(per) / 3)
            assert a.extra["measured_step_throughput"] == pytest.approx(r.throughput)
            # The longest responses it saw (the double's response_length/max grows 400 tokens a step).
            assert conf["longest_response"] == 1800.0 + 400 * 6
            assert "longest response 4200 tokens" in a.reason
            if conf["peak_memory_gib"] is not None:  # the measured headroom of the confirmation run
                cap = tuner.setup.cluster.gpu.memory_gib
                assert conf["headroom_gib"] == pytest.approx(cap - conf["peak_memory_gib"], abs=0.01)
                assert "headroom" in a.reason
    best = tuner.store.best("conf")
    assert best is not None and best.extra["confirm"]["status"] == "ok"
    assert leftovers(rec) == []


def test_confirmation_is_never_faked_for_simulated_results(tmp_path: Path, sqlite_url: str) -> None:
    from autotune.runners.simulate import SimulateRunner

    tuner = Tuner(make_setup(), SimulateRunner(), sqlite_url, "sim", workdir=tmp_path)
    tuner.run(3)
    out = confirm_top(tuner, 2, 6)
    assert "skipped" in out and not any((r.extra or {}).get("confirm") for r in tuner.store.trials("sim"))


def _start_tuner(tmp_path: Path, storage: str, n: int, **env: str) -> subprocess.Popen:
    full = {**os.environ, "PYTHONPATH": str(REPO), **env_for(tmp_path / "rec.jsonl", **env)}
    return subprocess.Popen([sys.executable, "-m", "tests.fake_verl.run_study", storage, str(tmp_path / "t"), str(n)],
                            cwd=REPO, env=full, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _wait_for_trial(rec: Path, proc: subprocess.Popen, timeout: float = 300) -> None:
    # A hang guard, not a timing: the tuner ranks the 8-GPU dense space (about 6 s of CPU) and the double imports
    # its stack; on a loaded 2-core machine that took over 60 s.
    deadline = time.monotonic() + timeout
    while not records(rec):
        assert proc.poll() is None, proc.communicate()[0]
        assert time.monotonic() < deadline, "the tuner never launched a trial"
        time.sleep(0.1)
    time.sleep(0.8)


@pytest.mark.slow
def test_ctrl_c_records_interrupted_and_resume_requeues(tmp_path: Path, sqlite_url: str) -> None:
    rec = tmp_path / "rec.jsonl"
    proc = _start_tuner(tmp_path, sqlite_url, 3, FAKE_VERL_STEP_S="3")
    _wait_for_trial(rec, proc)
    proc.send_signal(signal.SIGINT)
    output = proc.communicate(timeout=60)[0]
    assert proc.returncode == 130, output
    assert leftovers(rec) == []  # Ctrl-C stopped the trial's whole process tree
    store = Store(sqlite_url)
    rows = store.trials("ctrl-c")
    interrupted = [r for r in rows if r.status == "interrupted"]
    assert len(interrupted) == 1 and "Ctrl-C" in interrupted[0].reason
    assert not store.running("ctrl-c")

    # the re-queued trial joins the end of Optuna's queue (after the seeds queued by the first run)
    proc = _start_tuner(tmp_path, sqlite_url, 7, FAKE_VERL_STEP_S="0.05")
    output = proc.communicate(timeout=180)[0]
    assert proc.returncode == 0, output
    rows = store.trials("ctrl-c")
    again = [r for r in rows if r.origin == "requeue"]
    assert len(again) == 1 and again[0].candidate_key == interrupted[0].candidate_key
    assert again[0].status == "ok"
    assert leftovers(rec) == []


def test_ctrl_c_in_the_extra_step_records_the_trial_measured(tmp_path: Path, sqlite_url: str) -> None:
    """A stop in the steps run for the noise, after the measured one, keeps the measurement (lease 25's last 3B
    trial, SIGTERMed there, was recorded interrupted and would have been re-run): the trial is ok, its extra steps
    missing, and the tuner still stops (130)."""
    rec, hold = tmp_path / "rec.jsonl", tmp_path / "never"  # step 4, the extra step, waits for a file never made
    proc = _start_tuner(tmp_path, sqlite_url, 3, FAKE_VERL_MODE="ok", FAKE_VERL_STEP_S="0.05",
                        FAKE_VERL_HOLD_FILE=str(hold), FAKE_VERL_HOLD_STEP="4")
    deadline = time.monotonic() + 300  # a hang guard (ranking and the double's imports on a loaded machine)
    while not any('"training/global_step": 3' in f.read_text() for f in (tmp_path / "t").rglob("metrics.jsonl")):
        assert proc.poll() is None, proc.communicate()[0]
        assert time.monotonic() < deadline, "no trial reached its measured step"
        time.sleep(0.1)
    time.sleep(1.0)  # the runner reads step 3 within its poll
    proc.send_signal(signal.SIGINT)
    output = proc.communicate(timeout=60)[0]
    assert proc.returncode == 130, output
    assert leftovers(rec) == []
    store = Store(sqlite_url)
    (row,) = store.trials("ctrl-c")
    assert row.status == "ok" and row.throughput, (row.status, row.reason)
    assert "interrupted by the user (Ctrl-C)" in row.extra["noise"]["note"]
    assert not store.running("ctrl-c")


@pytest.mark.slow
def test_killed_tuner_leaves_nothing_running_after_resume(tmp_path: Path, sqlite_url: str) -> None:
    rec = tmp_path / "rec.jsonl"
    proc = _start_tuner(tmp_path, sqlite_url, 2, FAKE_VERL_STEP_S="5")
    _wait_for_trial(rec, proc)
    proc.kill()  # SIGKILL: the tuner cannot clean up; its trial's session lives on
    proc.communicate(timeout=30)
    orphans = leftovers(rec)
    assert orphans, "the double should have outlived a SIGKILLed tuner"
    store = Store(sqlite_url)
    assert len(store.running("ctrl-c")) == 1

    proc = _start_tuner(tmp_path, sqlite_url, 7, FAKE_VERL_STEP_S="0.05")
    output = proc.communicate(timeout=180)[0]
    assert proc.returncode == 0, output
    assert not any(p in leftovers(rec) for p in orphans)
    assert leftovers(rec) == []
    rows = store.trials("ctrl-c")
    stale = [r for r in rows if r.status == "interrupted"]
    assert len(stale) == 1 and "stopped while this trial ran" in stale[0].reason
    assert any(r.origin == "requeue" and r.status == "ok" for r in rows)
    assert optuna.load_study(study_name="ctrl-c", storage=sqlite_url).trials[stale[0].number].state == TrialState.FAIL
