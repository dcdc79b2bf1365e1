import dataclasses
import datetime as dt
import re
import time

import optuna
import pytest
from optuna.trial import TrialState

from autotune.estimate.safer import SAFE_TOLERANCE, verdict_safe
from autotune.job import Job
from autotune.runners.base import Runner, TrialResult, TrialSpec, TrialStatus
from autotune.runners.simulate import SimulateRunner
from autotune.search.setup import StudyMismatchError
from autotune.store.access import open_storage
from autotune.store.schema import TrialRow, utcnow
from autotune.store.store import Store, StoreError
from autotune.study.study import Tuner
from tests.conftest import make_setup


class CountingRunner(SimulateRunner):
    """The simulate runner, counting launches and optionally raising on the n-th (to play Ctrl-C or a bug)."""

    def __init__(self, raise_on: int | None = None, exc: BaseException | None = None):
        self.calls: list[TrialSpec] = []
        self.raise_on, self.exc = raise_on, exc

    def run(self, spec: TrialSpec) -> TrialResult:
        self.calls.append(spec)
        if self.raise_on is not None and len(self.calls) == self.raise_on:
            raise self.exc
        return super().run(spec)


def test_study_runs_records_every_trial_and_mirrors_optuna(setup7b, sqlite_url):
    runner = CountingRunner()
    tuner = Tuner(setup7b, runner, sqlite_url, "s1")
    summary = tuner.run(n_trials=6)
    rows = tuner.store.trials("s1")
    launched = [r for r in rows if r.launched]
    assert summary["launched"] == len(launched) == len(runner.calls) == 6
    assert all(r.status != "running" and r.finished_at for r in rows)
    assert all(r.simulated and r.throughput and r.status == "ok" for r in launched)
    for r in rows:
        if not r.launched:
            assert r.status == "pruned" and r.reason.startswith(("constraint", "predicted OOM", "duplicate"))
    # origins: the model's best first, then verl's stock configuration (pruned here: predicted OOM for 2k+8k).
    assert rows[0].origin == "model-seed" and rows[1].origin == "stock"
    assert rows[1].status == "pruned" and "predicted OOM" in rows[1].reason and rows[1].predicted_memory
    trials = {t.number: t for t in tuner.study.get_trials()}
    for r in rows:
        t = trials[r.number]
        assert t.user_attrs["status"] == r.status and t.user_attrs["simulated"] is True
        assert t.state == (TrialState.COMPLETE if r.status == "ok" else TrialState.PRUNED)
        if r.status == "ok":
            assert t.value == pytest.approx(r.throughput)
    assert len({r.candidate_key for r in launched}) == len(launched)  # a configuration is launched once
    fastest, best = tuner.store.fastest("s1"), tuner.store.best("s1")
    assert fastest.throughput == max(r.throughput for r in launched)
    assert best is fastest or best.throughput >= fastest.throughput * (1 - SAFE_TOLERANCE)  # a safe near-equal
    assert verdict_safe(best.predicted_memory) or best.number == fastest.number


def test_resume_continues_the_same_study(setup7b, sqlite_url):
    Tuner(setup7b, SimulateRunner(), sqlite_url, "s").run(n_trials=3)
    tuner = Tuner(setup7b, SimulateRunner(), sqlite_url, "s")
    tuner.run(n_trials=5)
    rows = tuner.store.trials("s")
    assert sum(r.launched for r in rows) == 5
    assert sum(r.origin == "stock" for r in rows) == 1  # seeds are enqueued once, not again on resume
    assert [r.number for r in rows] == sorted(r.number for r in rows)


@pytest.mark.parametrize("change, what", [
    (lambda s: dataclasses.replace(s, model=make_setup("llama3.1-8b").model), "model"),
    (lambda s: dataclasses.replace(s, cluster=dataclasses.replace(s.cluster, gpus_per_node=4)), "cluster"),
    (lambda s: dataclasses.replace(s, job=Job.from_mapping({"data.max_response_length": 4096})), "job"),
    (lambda s: dataclasses.replace(s, space=make_setup(space="moe").space), "space"),
    (lambda s: dataclasses.replace(s, measure_step=5), "measure_step"),
])
def test_same_name_different_setup_is_refused(setup7b, sqlite_url, change, what):
    Tuner(setup7b, SimulateRunner(), sqlite_url, "s").run(n_trials=1)
    with pytest.raises(StudyMismatchError, match=rf"(?s)study 's'.*{what}: study has .*another --study name"):
        Tuner(change(setup7b), SimulateRunner(), sqlite_url, "s")


def test_ctrl_c_records_interrupted_and_resume_requeues(setup7b, sqlite_url):
    runner = CountingRunner(raise_on=2, exc=KeyboardInterrupt())
    tuner = Tuner(setup7b, runner, sqlite_url, "s")
    with pytest.raises(KeyboardInterrupt):
        tuner.run(n_trials=5)
    interrupted = tuner.store.trials("s", "interrupted")
    assert len(interrupted) == 1 and "Ctrl-C" in interrupted[0].reason
    assert tuner.study.get_trials()[interrupted[0].number].state == TrialState.FAIL
    lost_key = interrupted[0].candidate_key
    resumed = Tuner(setup7b, CountingRunner(), sqlite_url, "s")
    resumed.run(n_trials=5)
    rows = resumed.store.trials("s")
    requeued = [r for r in rows if r.origin == "requeue"]
    assert len(requeued) == 1 and requeued[0].candidate_key == lost_key and requeued[0].status == "ok"
    assert not [r for r in rows if r.status == "running"]


def test_trial_left_running_by_a_dead_tuner_is_closed_and_requeued(setup7b, sqlite_url):
    tuner = Tuner(setup7b, SimulateRunner(), sqlite_url, "s")
    tuner.run(n_trials=2)
    # A tuner on another machine died mid-trial: Optuna RUNNING, our row running, heartbeat long ago.
    orphan = tuner.study.ask()
    old = utcnow() - dt.timedelta(hours=1)
    done = tuner.store.trials("s")[0]
    tuner.store.add_trial(TrialRow(study="s", number=orphan.number, status="running", launched=True,
                                   candidate_key="orphan", params=done.params, verl_overrides={},
                                   worker="elsewhere:4242", heartbeat_at=old, started_at=old))
    again = Tuner(setup7b, SimulateRunner(), sqlite_url, "s")
    assert orphan.number in again.recover()
    row = again.store.trial("s", orphan.number)
    assert row.status == "interrupted" and "elsewhere:4242" in row.reason
    assert again.study.get_trials()[orphan.number].state == TrialState.FAIL
    assert again.study.get_trials(states=(TrialState.WAITING,))  # re-queued


def test_a_live_trial_of_another_worker_is_left_alone(setup7b, sqlite_url):
    tuner = Tuner(setup7b, SimulateRunner(), sqlite_url, "s")
    tuner.run(n_trials=1)
    live = tuner.study.ask()
    tuner.store.add_trial(TrialRow(study="s", number=live.number, status="running", launched=True,
                                   candidate_key="x", params=tuner.store.trials("s")[0].params, verl_overrides={},
                                   worker="otherhost:1", heartbeat_at=utcnow()))
    assert live.number not in Tuner(setup7b, SimulateRunner(), sqlite_url, "s").recover()


def test_runner_bug_ends_the_trial_as_failed(setup7b, sqlite_url):
    tuner = Tuner(setup7b, CountingRunner(raise_on=1, exc=RuntimeError("boom")), sqlite_url, "s")
    tuner.run(n_trials=2)
    failed = tuner.store.trials("s", "failed")
    assert len(failed) == 1 and "RuntimeError: boom" in failed[0].reason
    assert tuner.study.get_trials()[failed[0].number].state == TrialState.FAIL


def test_a_long_reason_in_optunas_attributes_is_cut_at_whitespace_and_kept_whole_in_the_row(setup7b, sqlite_url):
    long = "Traceback (most recent call last):\n" + "  File \"x.py\", line 1, in frame_function_name\n" * 60
    tuner = Tuner(setup7b, CountingRunner(raise_on=1, exc=RuntimeError(long)), sqlite_url, "s")
    tuner.run(n_trials=1)
    row = tuner.store.trials("s", "failed")[0]
    attr = tuner.study.get_trials()[row.number].user_attrs["reason"]
    assert long.strip() in row.reason and len(attr) <= 2000 and attr.endswith("\u2026")
    assert row.reason.startswith(attr[:-1]) and row.reason[len(attr) - 1] in " \n"  # never mid-word
    assert "\n  File" in attr  # the traceback's lines kept


def test_unreachable_database_is_a_clear_error(tmp_path):
    with pytest.raises(StoreError, match=r"cannot open the study database postgresql\+psycopg://u:\*\*\*@127.0.0.1:9/x"):
        open_storage("postgresql+psycopg://u:secret@127.0.0.1:9/x")
    blocked = tmp_path / "file"
    blocked.write_text("")
    with pytest.raises(StoreError, match="cannot open the study database"):
        open_storage(f"sqlite:///{blocked}/sub/db.sqlite")


@pytest.mark.postgres
def test_study_in_postgresql(postgres_url):
    setup = make_setup()
    tuner = Tuner(setup, SimulateRunner(), postgres_url, "pg-study")
    tuner.run(n_trials=4)
    again = Tuner(setup, SimulateRunner(), postgres_url, "pg-study")
    assert again.launched_count() == 4
    assert optuna.load_study(study_name="pg-study", storage=postgres_url).best_value == pytest.approx(
        again.store.fastest("pg-study").throughput)  # Optuna's best is the fastest; `best` may prefer a safe one


def test_moe_study_runs(sqlite_url):
    setup = make_setup("qwen3-30b-a3b")
    tuner = Tuner(setup, SimulateRunner(), sqlite_url, "moe")
    tuner.run(n_trials=4)
    best = tuner.store.best("moe")
    assert best is not None and best.params["ep"] >= 1


class _NeverRuns(Runner):
    name = "never"

    def run(self, spec):  # pragma: no cover - must not be called
        raise AssertionError("an infeasible space launched a trial")


def test_infeasible_space_is_refused_before_anything_is_written(sqlite_url):
    from autotune.search.space import parse_space
    from autotune.search.split import InfeasibleSpaceError

    space = parse_space("name: bad\ndimensions:\n  tp: {choices: [8]}\n  rollout_tp: {choices: [8]}\n", "bad.yaml")
    setup = dataclasses.replace(make_setup(), space=space)
    with pytest.raises(InfeasibleSpaceError, match=r"heads_per_tp x1 \(e.g. 28 attention heads are not divisible"):
        Tuner(setup, _NeverRuns(), sqlite_url, "bad", space_text="x")
    assert Store(sqlite_url).get_study("bad") is None
    assert "bad" not in optuna.get_all_study_names(sqlite_url)


def test_a_space_whose_settings_are_all_launched_stops_as_exhausted(sqlite_url):
    from autotune.search.space import parse_space

    space = parse_space("name: one\ndimensions:\n  tp: {choices: [4]}\n  use_dynamic_bsz: {choices: [true]}\n",
                        "one.yaml")
    setup = dataclasses.replace(make_setup(), space=space)
    tuner = Tuner(setup, SimulateRunner(), sqlite_url, "one", space_text="x")
    summary = tuner.run(n_trials=3)
    assert summary["launched"] == 1 and "exhausted" in summary["stopped"]
    assert summary["runnable_left"] == 0 and "(0 runnable candidates of the space not launched)" in summary["stopped"]
    # It knows, exactly: no 300 proposals of duplicates before it stops.
    assert len(tuner.store.trials("one")) < 10


def test_statuses_are_the_documented_set():
    assert {s.value for s in TrialStatus} >= {"ok", "oom", "pruned", "timeout", "failed"}


def test_the_jobs_own_layout_is_the_baseline_trial(sqlite_url):
    job = Job.from_mapping({
        "actor_rollout_ref.actor.megatron.tensor_model_parallel_size": 4,
        "actor_rollout_ref.actor.use_dynamic_bsz": True,
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": 20480,
        "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu": 32768,
        "actor_rollout_ref.rollout.tensor_model_parallel_size": 1,
    })
    setup = make_setup(job=job)
    tuner = Tuner(setup, SimulateRunner(), sqlite_url, "b")
    tuner.run(n_trials=3)
    rows = tuner.store.trials("b")
    assert [r.origin for r in rows[:3]] == ["model-seed", "baseline", "stock"]
    base = rows[1].params
    assert (base["tp"], base["rollout_tp"], base["ppo_max_token_len_per_gpu"]) == (4, 1, 20480)


def test_a_job_that_fixes_only_untuned_keys_has_no_baseline(sqlite_url, tmp_path):
    from autotune.search.space import parse_space

    text = "name: small\ndimensions:\n  tp: {choices: [2, 4]}\n  rollout_tp: {choices: [1, 2]}\n"
    space = parse_space(text, "s.yaml")
    job = Job.from_mapping({"actor_rollout_ref.actor.use_dynamic_bsz": True,
                            "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": 16384,
                            "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu": 32768})
    setup = dataclasses.replace(make_setup(job=job), space=space)
    tuner = Tuner(setup, SimulateRunner(), sqlite_url, "nb", space_text="x")
    tuner.run(n_trials=2)
    rows = tuner.store.trials("nb")
    assert "baseline" not in {r.origin for r in rows}
    assert all(r.params["use_dynamic_bsz"] and r.params["ppo_max_token_len_per_gpu"] == 16384 for r in rows)


def test_parameters_that_do_not_apply_are_null_and_do_not_make_a_new_configuration(sqlite_url):
    from autotune.candidate import Candidate

    plain = Candidate.from_params({"recompute": "none", "recompute_modules": "core_attn,mlp", "use_dynamic_bsz": False,
                                   "ppo_max_token_len_per_gpu": 8192, "ppo_micro_batch_size_per_gpu": 2,
                                   "log_prob_micro_batch_size_per_gpu": 4})
    applied = plain.applied_params()
    assert applied["recompute_modules"] is None and applied["ppo_max_token_len_per_gpu"] is None
    assert applied["log_prob_max_token_len_per_gpu"] is None
    assert plain.key() == dataclasses.replace(plain, recompute_modules="core_attn", ppo_max_token_len_per_gpu=1).key()
    # Turned on again, they take verl's defaults (or the value the job gave).
    sel = Candidate.from_params({"recompute": "selective", "use_dynamic_bsz": True}, plain)
    assert sel.recompute_modules == "core_attn,mlp" and sel.ppo_max_token_len_per_gpu == 8192
    assert Candidate.from_params({"recompute": "selective"}, Candidate(recompute_modules=None)).recompute_modules \
        == "core_attn"
    tuner = Tuner(make_setup(), SimulateRunner(), sqlite_url, "s")
    tuner.run(n_trials=4)
    for r in tuner.store.trials("s"):
        assert (r.params["recompute_modules"] is None) == (r.params["recompute"] != "selective")
        assert (r.params["ppo_max_token_len_per_gpu"] is None) == (not r.params["use_dynamic_bsz"])


SMALL = """name: small
dimensions:
  tp: {choices: [1, 2]}
  use_dynamic_bsz: {choices: [true]}
  ppo_max_token_len_per_gpu: {choices: [12288, 16384]}
  rollout_tp: {choices: [1, 2]}
  gpu_memory_utilization: {choices: [0.5, 0.6, 0.7]}
"""


def _small_setup():
    from autotune.search.space import parse_space

    return dataclasses.replace(make_setup("qwen2.5-1.5b"), space=parse_space(SMALL, "small.yaml"))


def test_the_first_launch_of_a_simulate_study_is_the_models_optimum(sqlite_url):
    setup = make_setup(gpus=2)
    tuner = Tuner(setup, SimulateRunner(), sqlite_url, "s")
    tuner.run(n_trials=1)
    first = next(r for r in tuner.store.trials("s") if r.launched)
    best = tuner.ranking().best()
    assert first.origin == "model-seed" and first.candidate_key == best.candidate.key()
    assert first.throughput == pytest.approx(best.throughput)


def test_seeds_left_by_a_spent_budget_launch_first_when_it_grows(tmp_path):
    """--n-trials 1, then 5: the model's other seeds are launched (not recorded as pruned forever), and the study
    holds what a fresh 5-trial study holds."""
    setup = make_setup(gpus=2)
    resumed = f"sqlite:///{tmp_path / 'a.db'}"
    Tuner(setup, SimulateRunner(), resumed, "s").run(n_trials=1)
    again = Tuner(setup, SimulateRunner(), resumed, "s")
    again.run(n_trials=5)
    fresh = Tuner(setup, SimulateRunner(), f"sqlite:///{tmp_path / 'b.db'}", "s")
    fresh.run(n_trials=5)
    rows = again.store.trials("s")
    assert not [r for r in rows if "already holds" in (r.reason or "")]
    seeds = [r.candidate_key for r in rows if r.origin == "model-seed" and r.launched]
    assert seeds == [p.candidate.key() for p in again.ranking().seeds(4)]  # every layout that can run, best first
    key = lambda tuner: [(r.origin, r.candidate_key) for r in tuner.store.trials("s") if r.launched]  # noqa: E731
    assert key(again) == key(fresh)


def test_a_study_runs_until_no_runnable_candidate_is_left_and_says_how_many_remain(sqlite_url):
    setup = _small_setup()
    tuner = Tuner(setup, SimulateRunner(), sqlite_url, "s", space_text="x")
    runnable = tuner.ranking().count()
    assert 1 < runnable <= 24
    s1 = tuner.run(n_trials=3)
    assert s1["runnable_left"] == runnable - 3
    assert f"({runnable - 3} runnable candidates of the space not launched)" in s1["stopped"]
    s2 = Tuner(setup, SimulateRunner(), sqlite_url, "s", space_text="x").run(n_trials=100)
    assert s2["launched"] == runnable and s2["runnable_left"] == 0 and "exhausted" in s2["stopped"]
    s3 = Tuner(setup, SimulateRunner(), sqlite_url, "s", space_text="x").run(n_trials=100)
    assert s3["launched"] == runnable  # nothing more: the space really is spent


class SleepingRunner(SimulateRunner):
    """The simulate runner taking `seconds` a trial (a GPU trial's duration, which cannot happen here); records when
    each trial ended (time.monotonic())."""

    def __init__(self, seconds: float):
        self.seconds, self.ended = seconds, []

    def run(self, spec: TrialSpec) -> TrialResult:
        time.sleep(self.seconds)
        self.ended.append(time.monotonic())
        return super().run(spec)


def test_a_deadline_launches_only_what_the_longest_trial_says_ends_in_time(sqlite_url):
    """--deadline: the first trial launches (nothing says how long one takes), each next one only while the longest so
    far would end within the deadline, and the run says why it stopped short of --n-trials; a resumed run knows the
    earlier runs' trials."""
    setup = make_setup(model="qwen2.5-0.5b", gpus=1)
    runner = SleepingRunner(1.0)
    tuner = Tuner(setup, runner, sqlite_url, "d")
    t0 = time.monotonic()
    summary = tuner.run(n_trials=10, deadline_s=2.6)
    assert 1 <= summary["launched"] <= 2 and summary["launched"] == len(runner.ended)
    assert summary["stopped"].startswith("reached --deadline")
    assert max(runner.ended) - t0 < 2.6 + 0.5  # no trial was launched that the longest one says ends after it
    assert tuner.longest_trial_s() == pytest.approx(1.0, abs=0.5)
    # A deadline the run's own start-up (recovery, seeding) cannot use up on a loaded machine, shorter than a trial:
    first = Tuner(setup, SleepingRunner(3.0), sqlite_url, "fresh").run(n_trials=10, deadline_s=2.5)
    assert first["launched_this_run"] == 1 and first["stopped"].startswith("reached --deadline")
    again = Tuner(setup, runner, sqlite_url, "fresh").run(n_trials=10, deadline_s=2.5)
    assert again["launched_this_run"] == 0
    assert re.match(r"reached --deadline: a trial here took up to 3 s and [0-2] s were left \(", again["stopped"])


def test_a_deadline_holds_back_the_confirmations_that_would_end_after_it(sqlite_url):
    """A confirmation runs `steps` steps where a trial ran from the measured step on: it is asked the longest trial's
    time in proportion, and skipped, saying why, where that would end after the run's --deadline."""
    from autotune.runners.confirm import confirm_top

    class Measured(SimulateRunner):  # the simulate runner's numbers, taken as measured (confirm_top skips simulated)
        simulated = False
        name = "measured-stand-in"

    tuner = Tuner(make_setup(model="qwen2.5-0.5b", gpus=1), SimulateRunner(), sqlite_url, "c")
    tuner.run(n_trials=2)
    tuner.runner = Measured()
    tuner.longest_trial_s = lambda: 100.0  # type: ignore[method-assign]
    tuner.ends_by = time.monotonic() + 60.0
    done = confirm_top(tuner, 1, 6)
    assert done["runs"] == [] and done["skipped"].startswith("reached --deadline: a confirmation may take 150 s and")
    tuner.ends_by = time.monotonic() - 1.0
    assert confirm_top(tuner, 1, 6)["skipped"] == "reached --deadline"


def test_the_run_command_counts_its_deadline_from_its_start_and_says_why_it_stopped(db, capsys):
    """`autotune run --deadline`: the setup and the space's ranking spend the deadline too; a run whose deadline has
    passed before its first launch launches nothing and says so."""
    from tests.conftest import cli_run

    code, out, _ = cli_run(capsys, "run", "--model", "qwen2.5-0.5b", "--gpus", "1", "--storage", db, "--n-trials",
                           "3", "--backend", "simulate", "--deadline", "0.001")
    assert code == 0 and "0 trials launched (reached --deadline (" in out
