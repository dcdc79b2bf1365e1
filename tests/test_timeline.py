"""A trial's timeline and measured noise: recorded by the verl runner (through the test double of verl), read back by
autotune.results.timeline and autotune.results.noise, summed per study, and ties between leaders within the noise."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from autotune import verl
from autotune.results.noise import Noise, leaders_tie, measure, noise_words
from autotune.results.timeline import Timeline, step_spans, study_time
from autotune.runners.base import TrialStatus
from tests.conftest import make_setup
from tests.fake_verl import env_for, fake_module, fake_runner, leftovers, make_spec, records

FAKE = fake_module()


def _run(tmp_path: Path, env: dict[str, str] | None = None, **opts: Any) -> tuple[Any, dict[str, str], Path]:
    rec = tmp_path / "rec.jsonl"
    runner = fake_runner(env_for(rec, **(env or {})), **opts)
    res = runner.run(make_spec(make_setup(), tmp_path))
    return res, FAKE.parse_overrides(records(rec)[0]["argv"]), rec


def test_a_trial_runs_one_step_more_and_records_its_noise_and_timeline(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    res, ov, rec = _run(tmp_path, {"FAKE_VERL_STEP_JITTER": "0.02"})
    monkeypatch.setenv("FAKE_VERL_STEP_JITTER", "0.02")  # the double's throughputs, as it computed them
    assert res.status == TrialStatus.OK and ov["trainer.total_training_steps"] == "4"
    # the objective stays the measured step's
    step3, step4 = (FAKE.step_throughput(ov, s, "ok") for s in (3, 4))
    assert res.throughput == pytest.approx(step3) and step4 != step3
    assert [s["step"] for s in res.steps] == [1, 2, 3, 4]
    n = Noise.from_extra(res.extra)
    assert n is not None and n.steps == (3, 4)
    assert n.spread == pytest.approx((step4 - step3) / step3, rel=1e-3)
    assert n.per_step[2] == pytest.approx(FAKE.step_throughput(ov, 2, "ok"))
    assert f"spread {n.spread:.1%}" in res.reason
    tl = Timeline.from_extra(res.extra)
    assert tl is not None
    seen = [e.key for e in tl.milestones]
    assert seen == ["ray_up", "config", "workers", "weights_loaded", "vllm_ready"]  # the double's start-up, in order
    assert [s.step for s in tl.steps] == [1, 2, 3, 4]
    assert all(a.end_s <= b.start_s for a, b in zip(tl.steps, tl.steps[1:], strict=False))
    assert tl.milestones[-1].at_s <= tl.steps[0].end_s <= tl.wall_s == res.extra["timings"]["wall_s"]
    assert 0 < tl.busy_fraction < 1 and tl.startup_s + tl.steps_s + tl.after_s <= tl.wall_s + 1e-6
    assert leftovers(rec) == []


def test_a_measured_step_that_recompiled_is_named_in_the_noise(tmp_path: Path) -> None:
    """The worker's warning a newly traced graph brings back (as real verl printed it: every trial's step 1, and step 3
    of lease 59's cold first trial, whose update took 15.2 s against 7.7 s at step 2) is read per step; a measured step
    that holds one is named where the noise is (the reason, `status`, `best`, the report, the dashboard); step 1's,
    which every trial has, is not."""
    res, _, _ = _run(tmp_path / "a", {"FAKE_VERL_RECOMPILE_STEPS": "1,3"})
    n = Noise.from_extra(res.extra)
    assert res.status == TrialStatus.OK and n is not None
    assert (n.recompiled, n.measured_recompiled) == ((1, 3), (3,))
    assert "step 3 compiled a graph anew (torch.compile's recompile" in res.reason
    assert "step 3 compiled a graph anew" in noise_words(SimpleNamespace(simulated=False, backend="verl",
                                                                      extra=res.extra))
    plain, _, _ = _run(tmp_path / "b")
    n = Noise.from_extra(plain.extra)
    assert n is not None and (n.recompiled, n.measured_recompiled) == ((1,), ())
    assert "compiled a graph anew" not in plain.reason


def test_no_extra_step_no_noise(tmp_path: Path) -> None:
    res, ov, _ = _run(tmp_path, extra_steps=0)
    assert ov["trainer.total_training_steps"] == "3" and [s["step"] for s in res.steps] == [1, 2, 3]
    n = Noise.from_extra(res.extra)
    assert n is not None and n.spread is None and "--extra-steps 0" in n.words()


def test_a_failure_after_the_measured_step_keeps_the_measurement_and_says_why_no_noise(tmp_path: Path) -> None:
    res, ov, rec = _run(tmp_path, {"FAKE_VERL_MODE": "gpu_oom", "FAKE_VERL_FAIL_STEP": "4"})
    assert res.status == TrialStatus.OK and res.throughput == pytest.approx(FAKE.step_throughput(ov, 3, "ok"))
    n = Noise.from_extra(res.extra)
    assert n is not None and n.spread is None and "gpu_oom" in n.note and "noise not measured" in res.reason
    assert leftovers(rec) == []


def test_step_spans_end_at_the_line_and_never_overlap() -> None:
    took = verl.PHASE_TIMINGS["step"]
    spans = step_spans({1: 100.0, 2: 130.0, 3: 140.0}, {1: {took: 60.0}, 2: {took: 25.0}, 3: {took: 30.0}})
    assert spans == {"1": [40.0, 100.0], "2": [105.0, 130.0], "3": [130.0, 140.0]}


def _extra(wall: float = 450.0) -> dict[str, Any]:
    return {"timings": {"wall_s": wall, "ray_up_s": 24.4, "config_s": 56.3, "workers_s": 91.4,
                        "weights_loaded_s": 124.9, "vllm_ready_s": 265.5, "first_step_s": 360.0},
            "step_spans_s": {"1": [270.0, 360.0], "2": [360.0, 395.0], "3": [395.0, 430.0]}}


def test_a_timeline_from_launch_to_exit() -> None:
    tl = Timeline.from_extra(_extra())
    assert tl is not None
    assert tl.startup_s == 270.0 and tl.steps_s == 160.0 and tl.after_s == 20.0
    assert tl.busy_fraction == pytest.approx(160 / 450)
    rows = tl.rows()
    assert [r[0] for r in rows] == ["launch", "Ray up", "config resolved", "workers up", "weights loaded",
                                    "vLLM ready (ready to fit)", "step 1", "step 2", "step 3", "exit"]
    assert rows[-1][1] == 450.0 and rows[6][2] == 90.0
    assert "GPU busy 36% of this trial" in tl.summary()
    assert Timeline.from_extra({}) is None and Timeline.from_extra({"timings": {"first_step_s": 3.0}}) is None


def test_the_study_sums_real_runs_only() -> None:
    real = SimpleNamespace(launched=True, simulated=False, backend="verl",
                           extra={**_extra(), "confirm": {"timeline": _extra(600.0)}})
    sim = SimpleNamespace(launched=True, simulated=True, backend="simulate", extra=_extra())
    replayed = SimpleNamespace(launched=True, simulated=False, backend="replay", extra=_extra())
    pruned = SimpleNamespace(launched=False, simulated=False, backend="verl", extra=_extra())
    t = study_time([real, sim, replayed, pruned])
    assert t is not None and t.runs == 2  # the trial and its confirmation run
    assert t.startup_s == 540.0 and t.steps_s == 320.0 and t.wall_s == 1050.0
    assert "start-up 0.60 GPU-hours, steps 0.36" in t.words(gpus=4)
    assert study_time([sim, replayed]) is None


def _row(number: int, thr: float, spread: float | None = None, confirmed: bool = False, simulated: bool = False,
         backend: str = "verl") -> SimpleNamespace:
    extra: dict[str, Any] = {}
    if spread is not None:
        extra["noise"] = {"spread": spread, "steps": [3, 4], "per_step": {"3": thr}}
    if confirmed:
        extra["confirm"] = {"status": "ok"}
        extra["measured_step_throughput"] = thr
    return SimpleNamespace(number=number, status="ok", throughput=thr, extra=extra, simulated=simulated,
                           backend=backend)


def test_leaders_within_the_measured_noise_are_a_tie() -> None:
    tie = leaders_tie([_row(0, 1000.0, 0.01), _row(1, 980.0, 0.03), _row(2, 900.0, 0.03)])
    assert tie is not None and tie.trials == (0, 1) and not tie.decided
    assert tie.gap == pytest.approx(0.02) and tie.noise == pytest.approx(0.03)
    assert "tie within measured noise (3.0%)" in tie.words()
    assert leaders_tie([_row(0, 1000.0, 0.01), _row(1, 950.0, 0.03)]) is None  # 5% apart, 3% noise
    assert leaders_tie([_row(0, 1000.0), _row(1, 999.0)]) is None  # no noise measured: nothing to call a tie
    decided = leaders_tie([_row(0, 1000.0, 0.05, confirmed=True), _row(1, 990.0, 0.05, confirmed=True)])
    assert decided is not None and decided.decided and "confirmation runs decided" in decided.words()


def test_simulated_and_replayed_results_have_no_noise() -> None:
    assert noise_words(_row(0, 1.0, simulated=True)) == "noise not measured (simulated)"
    assert noise_words(_row(0, 1.0, backend="replay")) == "noise not measured (replayed)"
    assert leaders_tie([_row(0, 1000.0, 0.05, simulated=True), _row(1, 999.0, 0.05, simulated=True)]) is None


def test_noise_is_the_range_of_the_measured_and_extra_steps_over_the_objective() -> None:
    m = verl.M_THROUGHPUT
    steps = {1: {m: 500.0}, 2: {m: 1100.0}, 3: {m: 1000.0}, 4: {m: 1040.0}, 5: {m: 980.0}}
    doc = measure(steps, 3, 3, 2)
    assert doc["spread"] == pytest.approx(0.06) and doc["per_step"] == {"2": 1100.0, "3": 1000.0, "4": 1040.0,
                                                                         "5": 980.0}
    assert "spread" not in measure({3: {m: 1000.0}}, 3, 3, 1, "gpu_oom: ...")


def test_a_noisy_study_ties_its_leaders_every_view_says_so_and_the_confirmation_decides(
        tmp_path: Path, sqlite_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    from autotune.runners.confirm import confirm_top
    from autotune.study.study import Tuner
    from tests.conftest import cli_run

    # steps after the first alternate 0.8x, 1.2x: a 50% spread, wider than any two layouts of the double differ
    runner = fake_runner(env_for(tmp_path / "rec.jsonl", FAKE_VERL_STEP_JITTER="0.2"))
    tuner = Tuner(make_setup(), runner, sqlite_url, "noisy", workdir=tmp_path / "trials", seed=3, learn=False)
    tuner.run(2)
    ok = tuner.store.trials("noisy", "ok")
    tie = leaders_tie(ok)
    assert len(ok) == 2 and tie is not None and not tie.decided and set(tie.trials) == {r.number for r in ok}
    code, out, _ = cli_run(capsys, "best", "--storage", sqlite_url)
    assert code == 0 and "tie within measured noise (" in out and "spread 50.0% (measured noise)" in out
    number = tie.trials[0]
    code, out, _ = cli_run(capsys, "status", "--storage", sqlite_url, "--trial", str(number))
    assert code == 0 and "workers up" in out and "vLLM ready" in out and "step 4 (" in out
    assert "GPU busy " in out and "% of this trial" in out and "tokens/s/GPU by step: 2:" in out
    doc = __import__("json").loads(cli_run(capsys, "status", "--storage", sqlite_url, "--trial", str(number),
                                           "--json")[1])
    assert doc["noise"]["spread"] == pytest.approx(0.5, rel=1e-3) and doc["timeline"]["events"][-1]["what"] == "exit"

    pytest.importorskip("fastapi", reason="the dashboard's dependencies are not installed")
    from fastapi.testclient import TestClient

    from autotune.dashboard.app import create_app

    client = TestClient(create_app(sqlite_url))
    page = client.get(f"/study/noisy/trial/{number}").text
    assert 'id="timeline"' in page and "weights loaded" in page and "GPU busy" in page
    assert "spread 50.0% (measured noise)" in page
    summary = client.get("/study/noisy/fragment/summary").text
    assert 'id="best-tie"' in summary and "tie within measured noise" in summary and 'id="study-time"' in summary

    # --confirm 1 would confirm the best alone: the tie has both leaders confirmed, and their runs decide
    done = confirm_top(tuner, 1, 5)
    assert {r["trial"] for r in done["runs"]} == set(tie.trials) and done["tie_after"]["decided"]
    code, out, _ = cli_run(capsys, "best", "--storage", sqlite_url)
    assert "their confirmation runs decided" in out


def test_a_simulated_trial_says_its_timeline_and_noise_were_not_measured(
        db: str, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.conftest import cli_run

    assert cli_run(capsys, "run", "--model", "qwen2.5-7b", "--storage", db, "--n-trials", "1",
                   "--backend", "simulate")[0] == 0
    code, out, _ = cli_run(capsys, "status", "--storage", db, "--trial", "0")
    assert code == 0 and "noise: noise not measured (simulated)" in out
    assert "timeline: nothing ran now: the result is SIMULATED" in out


def test_noise_of_a_window_that_starts_at_step_1() -> None:
    """--measure-step 1: the window is step 1 alone (shown from step 2 on, as warm-up), the spread still taken."""
    from autotune.results import noise

    steps = {1: {verl.M_THROUGHPUT: 100.0}, 2: {verl.M_THROUGHPUT: 110.0}}
    doc = noise.measure(steps, 1, 1, 1)
    assert doc["spread"] == pytest.approx(0.1) and doc["per_step"] == {"2": 110.0}
    assert "spread" not in noise.measure({2: {verl.M_THROUGHPUT: 1.0}}, 1, 1, 1)  # the measured step never came


def test_a_trial_slowed_by_a_compile_at_its_measured_step_is_confirmed_where_its_other_steps_lead(
        tmp_path: Path, sqlite_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Lease 59's cold first trial (the study's first launch) ran step 2 at 7,379.6 tokens/s/GPU and step 3, which
    compiled a graph anew, at 5,592.9: third of five at step 3, first by its other step. --confirm 1 confirms the best
    and, with it, such a trial; one whose other steps stay behind, or whose measured step compiled nothing, is not."""
    from autotune.results.noise import hidden_by_a_recompile
    from autotune.runners.confirm import confirm_top
    from autotune.study.study import Tuner
    from tests.conftest import cli_run

    def row(number: int, thr: float, per_step: dict[str, float], recompiled: list[int]) -> SimpleNamespace:
        noise = {"steps": [3, 3], "measured": [3, 3], "per_step": per_step, "recompiled": recompiled}
        return SimpleNamespace(number=number, status="ok", throughput=thr, simulated=False, extra={"noise": noise})

    lease59 = [row(0, 5592.9, {"2": 7379.6, "3": 5592.9}, [1, 3]), row(2, 6404.0, {"2": 6285.0, "3": 6404.0}, [1]),
               row(4, 6159.0, {"2": 6010.0, "3": 6159.0}, [1]), row(3, 5411.2, {"2": 5300.0, "3": 5411.2}, [1])]
    assert [(r.number, steady) for r, steady in hidden_by_a_recompile(lease59, 1)] == [(0, 7379.6)]
    assert hidden_by_a_recompile(lease59, 4) == []  # every trial is among the four: nothing hidden
    slower = [*lease59[1:], row(0, 5592.9, {"2": 6300.0, "3": 5592.9}, [1, 3])]
    assert hidden_by_a_recompile(slower, 1) == []  # its other step stays behind the best
    lease59[0].extra["confirm"] = {"status": "ok"}
    assert hidden_by_a_recompile(lease59, 1) == []  # confirmed: measured past its compile

    # through the double: every trial's step 3 compiles anew (at 0.76 of its other steps), so with --confirm 1 each
    # trial whose step 2 beats the best's step 3 is confirmed beside the best (no extra step: with one, the compile's
    # 32% spread would tie the leaders, who are then confirmed as a tie)
    runner = fake_runner(env_for(tmp_path / "rec.jsonl", FAKE_VERL_RECOMPILE_STEPS="1,3"), extra_steps=0)
    tuner = Tuner(make_setup(), runner, sqlite_url, "compiled", workdir=tmp_path / "trials", seed=3, learn=False)
    tuner.run(3)
    ok = sorted(tuner.store.trials("compiled", "ok"), key=lambda r: -r.throughput)
    assert len(ok) >= 2 and all(Noise.from_extra(r.extra).measured_recompiled == (3,) for r in ok)
    expected = {r.number for r in ok[1:] if Noise.from_extra(r.extra).steady > ok[0].throughput}
    assert expected, "the double's layouts are within 24% of one another: some trial's other steps lead"
    code, out, _ = cli_run(capsys, "best", "--storage", sqlite_url)
    shown = {n for n in expected if f"trial {n}'s measured step compiled a graph anew; its other steps ran at" in out}
    assert code == 0 and shown == expected and "until a confirmation run (--confirm) measures it" in out
    pytest.importorskip("fastapi", reason="the dashboard's dependencies are not installed")
    from fastapi.testclient import TestClient

    from autotune.dashboard.app import create_app

    summary = TestClient(create_app(sqlite_url)).get("/study/compiled/fragment/summary").text
    assert summary.count('class="mem warn best-hidden"') == len(expected)
    doc = json.loads(cli_run(capsys, "best", "--storage", sqlite_url, "--json")[1])
    assert {h["trial"] for h in doc["hidden_by_a_recompile"]} == expected
    done = confirm_top(tuner, 1, 5)
    assert done["recompiled"] == sorted(expected)
    assert {r["trial"] for r in done["runs"]} == {ok[0].number} | expected
    assert all("its measured step compiled a graph anew" in r["why"] for r in done["runs"] if r["trial"] in expected)
    assert "compiled a graph anew; its other steps ran at" not in cli_run(capsys, "best", "--storage", sqlite_url)[1]
