"""How long a step's rollout left the GPU idle before vLLM slept (autotune/results/rollout_wait.py): read from the
trial's NVML trace, stored per step by the verl runner, shown by `status --trial`.

Lease 61's trials (one H100) are the first committed with the utilization column: their stored tails are re-read
from their committed traces. The synthetic cases are lease 60's real memory samples (c-1.5b-h60w #0) with a
utilization column written in."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from autotune import verl
from autotune.results import memory_trace, rollout_wait
from tests.conftest import cli_run

L60 = Path(__file__).resolve().parent / "data" / "real_verl_gpu" / "h100_2026-12-06_l60"
L61 = L60.parent / "h100_2026-12-06_l61"
TRIAL = L60 / "c-1.5b-h60w_trial_0000"
SPANS = {3: 165.8, 2: 148.24}  # when each step's line showed (its span's end: the trial's extra step_spans_s)


def with_utilization(tmp_path: Path, busy: list[tuple[float, float]]) -> Path:
    """The real trace with a utilization column: 100 % inside the `busy` spans (seconds after launch), 0 elsewhere."""
    rows = (TRIAL / "gpu.csv").read_text().splitlines()
    out = [rows[0] + ",gpu0_util_pct"]
    for row in rows[1:]:
        t = float(row.split(",")[0])
        out.append(f"{row},{100 if any(a <= t <= b for a, b in busy) else 0}")
    path = tmp_path / "gpu.csv"
    path.write_text("\n".join(out) + "\n")
    return path


def steps(trial: Path = TRIAL) -> dict[int, dict]:
    return {int(r["step"]): r["data"] for r in map(json.loads, (trial / "metrics.jsonl").read_text().splitlines())}


def test_the_idle_tail_runs_from_the_last_busy_sample_to_vllms_sleep(tmp_path: Path) -> None:
    """Step 3's gen (6.1 s from 148.3 s): vLLM awake at 61.5 GiB from 148.1 s, asleep (38.8 GiB) at 154.6 s; a GPU
    busy until 152.6 s sat idle 2.0 s before it, one busy until 154.1 s 0.5 s; one never busy tells nothing."""
    window = memory_trace.step_windows(SPANS[3] - 17.5, SPANS[3], {"gen": 6.105})["gen"]
    assert window == pytest.approx((148.3, 154.405))
    for busy_until, idle in ((152.6, 2.0), (154.1, 0.5)):
        samples = memory_trace.read_samples(with_utilization(tmp_path, [(148.1, busy_until)]))
        assert rollout_wait.idle_before_sleep(samples, window) == idle
    assert rollout_wait.idle_before_sleep(memory_trace.read_samples(with_utilization(tmp_path, [])), window) is None
    # a runner older than the utilization column: no wait can be read, and the memory reads as before
    old = memory_trace.read_samples(TRIAL / "gpu.csv")
    assert old[0][2] is None and rollout_wait.idle_before_sleep(old, window) is None
    assert memory_trace.read_trace(with_utilization(tmp_path, [(0.0, 999.0)])) == memory_trace.read_trace(
        TRIAL / "gpu.csv")
    # no sleep inside the window and past it: vLLM kept awake (free_cache_engine off) shows no end of the rollout
    assert rollout_wait.idle_before_sleep(samples, (149.2, 151.0)) is None


def test_the_runner_stores_each_steps_wait_and_status_shows_the_measured_ones(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = with_utilization(tmp_path, [(130.5, 134.6), (148.1, 152.6)])
    idle = rollout_wait.from_trial(memory_trace.read_samples(trace), {s: m for s, m in steps().items() if s in SPANS},
                                   SPANS)
    assert idle == {"2": 2.5, "3": 2.0}  # step 2: busy to 134.6 s, asleep at 137.1 s (gen 6.1 s from 130.8 s)
    assert rollout_wait.from_trial(memory_trace.read_samples(TRIAL / "gpu.csv"), steps(), SPANS) == {}  # no column
    assert rollout_wait.from_trial(memory_trace.read_samples(tmp_path / "none.csv"), steps(), SPANS) == {}
    # a reading NVML could not give (blank) leaves the other samples' waits readable
    rows = trace.read_text().splitlines()
    trace.write_text("\n".join([rows[0], rows[1].rsplit(",", 1)[0] + ",", *rows[2:]]) + "\n")
    assert memory_trace.read_samples(trace)[0][2] is None
    assert rollout_wait.from_trial(memory_trace.read_samples(trace),
                                   {s: m for s, m in steps().items() if s in SPANS}, SPANS) == idle

    words = rollout_wait.words({rollout_wait.EXTRA: idle}, 3, 2.0)
    assert words.startswith("rollout: the GPU sat idle 2.0 s at the end of step 3's gen, by NVML's utilization: "
                            "verl's host work after the last token")
    assert "every 2 s" in words and "at least" not in words and rollout_wait.words({}, 3, 2.0) == ""
    assert "poll" not in rollout_wait.words({rollout_wait.EXTRA: idle}, 3, 0.0)  # trainer.use_v1=false: no poll
    long = rollout_wait.words({rollout_wait.EXTRA: {"3": 4.01}}, 3, 2.0)
    assert long.endswith("; at least 1.2 s of it the host's work, more than a poll can wait")

    db = tmp_path / "study.db"
    shutil.copy(L60 / "c-1.5b-h60w.db", db)
    with sqlite3.connect(db) as con:
        con.execute("update autotune_trials set extra = json_set(extra, '$.rollout_idle_s', json(?))",
                    (json.dumps(idle),))
    url = f"sqlite:///{db}"
    code, out, _ = cli_run(capsys, "status", "--storage", url, "--trial", "0")
    assert code == 0 and "rollout: the GPU sat idle 2.0 s at the end of step 3's gen" in out
    doc = json.loads(cli_run(capsys, "status", "--storage", url, "--trial", "0", "--json")[1])
    assert doc["rollout_idle_s"] == idle

    pytest.importorskip("fastapi", reason="the dashboard's dependencies are not installed")
    from fastapi.testclient import TestClient

    from autotune.dashboard.app import create_app

    page = TestClient(create_app(url)).get("/study/c-1.5b-h60w/trial/0").text
    assert 'id="rollout-wait"' in page and "sat idle 2.0 s at the end of step 3" in page
    assert 'id="rollout-wait"' not in TestClient(create_app(f"sqlite:///{L60 / 'c-1.5b-h60x.db'}")).get(
        "/study/c-1.5b-h60x/trial/0").text  # a trace without utilization: nothing to say


def test_the_utilization_lag_is_timed_from_each_bursts_first_and_last_kernel() -> None:
    """benchmarks/nvml_utilization_lag.py: NVML's reading rises after a burst's first kernel and falls to 0 after its
    last, each a sample period or so later; a burst NVML never saw leaves both unknown."""
    from benchmarks.nvml_utilization_lag import lags

    samples = [(0.1 * i, u) for i, u in enumerate([0, 0, 0, 40, 100, 100, 100, 60, 0, 0, 0, 0])]
    assert lags(samples, [(0.25, 0.65)]) == [{"busy_s": 0.4, "rise_s": 0.05, "fall_s": 0.15}]
    assert lags(samples, [(1.05, 1.1)]) == [{"busy_s": 0.05, "rise_s": None, "fall_s": 0.0}]


def test_lease_61s_stored_tails_are_what_their_committed_traces_say() -> None:
    """The runner stored each step's tail at the trial's end; re-read from the committed trace, console metrics and
    step spans they are the same: 2.0-4.0 s at steps 2-3 over five configurations, more than verl's 2 s poll can wait
    in eight of ten steps (the rest verl's host work after the last token, 0.9-1.9 s by the poll grid), 1.0 s at the
    offloaded trial's step 3, whose rollout kept the GPU busy 9 s where its step 2's did 4.7 s."""
    from autotune.results import timeline
    from benchmarks import real_studies

    tails: dict[str, dict[str, float]] = {}
    for _, store, study in real_studies.studies(L61.glob("*.db")):
        for row in store.trials(study.name):
            trial = L61 / f"{row.study}_trial_{row.number:04d}"
            spans = {int(k): v[1] for k, v in row.extra[timeline.SPANS].items()}
            samples = memory_trace.read_samples(trial / "gpu.csv")
            assert rollout_wait.from_trial(samples, steps(trial), spans) == row.extra[rollout_wait.EXTRA]
            tails[f"{row.study}#{row.number}"] = row.extra[rollout_wait.EXTRA]
    assert len(tails) == 6 and all(set(t) == {"2", "3"} for t in tails.values())  # step 1's wake-up holds no sleep
    idles = [v for t in tails.values() for v in t.values()]
    assert min(idles) == tails["c-1.5b-h61#4"]["3"] == 1.0 and max(idles) == 4.01
    assert sum(v > verl.SAMPLE_POLL_S for v in idles) == 8
    assert [rollout_wait.host_work_at_least(v, verl.SAMPLE_POLL_S) for v in (4.01, 3.0, 2.0)] == [1.21, 0.2, 0.0]
