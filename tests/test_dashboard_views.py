"""What the dashboard says about how a number was obtained, about trials that were interrupted or closed by a
recovery, and whether a tuner is at work: the same as the CLI, from the same rows.

The studies are made by the real paths: a Tuner with the replay runner over a measured table; `autotune run`
stopped by SIGINT at a fault point (the Ctrl-C path) and resumed; Optuna trials asked and abandoned, then closed by
the next tuner's recovery.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import update

pytest.importorskip("fastapi", reason="the dashboard's dependencies are not installed: pip install -e '.[dashboard]'")

from fastapi.testclient import TestClient  # noqa: E402

from autotune import units  # noqa: E402
from autotune.candidate import STOCK_NAME, Candidate  # noqa: E402
from autotune.dashboard import data  # noqa: E402
from autotune.dashboard.app import create_app  # noqa: E402
from autotune.runners.replay import ReplayRunner, ReplayTable  # noqa: E402
from autotune.runners.simulate import SimulateRunner  # noqa: E402
from autotune.store.schema import StudyRow  # noqa: E402
from autotune.store.store import Store  # noqa: E402
from autotune.store.tuners import Registry  # noqa: E402
from autotune.study.study import Tuner  # noqa: E402
from tests.conftest import REPO, make_setup  # noqa: E402
from tests.conftest import cli_run as run  # noqa: E402

SIM = "sim-recovered"


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("views")
    url = f"sqlite:///{tmp / 'views.db'}"
    # 1. A replayed study: every throughput measured earlier and looked up.
    table = ReplayTable.load(REPO / "tests" / "data" / "replay_small.csv")
    replay = Tuner(table.setup(), ReplayRunner(table), url, seed=3, space_text=table.space_text(), workdir=tmp)
    replay.run(4)
    # 2. A simulated study run by the CLI and stopped by SIGINT right after its first trial ran (the Ctrl-C path:
    # fault points of the first trial are asked 1, evaluated 2, claimed 3, ran 4), then resumed.
    env = {**os.environ, "PYTHONPATH": str(REPO), "AUTOTUNE_TEST_FAULTS": "SIGINT@4"}
    argv = [sys.executable, "-m", "autotune", "run", "--model", "qwen2.5-7b", "--storage", url, "--study", SIM,
            "--n-trials", "3"]
    stopped = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tmp, timeout=900)
    assert stopped.returncode == 130, stopped.stderr
    env.pop("AUTOTUNE_TEST_FAULTS")
    resumed = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tmp, timeout=900, check=True)
    # 3. Optuna trials whose tuner died before recording them: a queued configuration (its parameters fixed), a
    # sampled one after its parameters were suggested, and one asked with nothing chosen yet.
    setup = make_setup()
    tuner = Tuner(setup, SimulateRunner(), url, SIM)
    ok = next(r for r in tuner.store.trials(SIM) if r.status == "ok")
    queued = setup.space.project(
        {**ok.params, "use_dynamic_bsz": False, "ppo_micro_batch_size_per_gpu": 2,
         "log_prob_micro_batch_size_per_gpu": 4}, setup.context)
    tuner.study.enqueue_trial(queued, user_attrs={"origin": "model-seed"})
    orphan_queued = tuner.study.ask()
    orphan_sampled = tuner.study.ask()
    setup.space.suggest(orphan_sampled, setup.context)
    orphan_empty = tuner.study.ask()
    again = Tuner(setup, SimulateRunner(), url, SIM)
    again.recover()
    return {"url": url, "replay": replay.study_name, "queued": queued, "setup": setup, "resumed": resumed.stdout,
            "orphans": (orphan_queued.number, orphan_sampled.number, orphan_empty.number)}


@pytest.fixture
def client(db) -> TestClient:
    return TestClient(create_app(db["url"]), base_url="http://127.0.0.1:8080")


def test_a_replayed_study_is_badged_replayed_not_measured(client, db):
    name = db["replay"]
    html = client.get(f"/study/{name}").text
    assert re.search(r'id="best-provenance">REPLAYED<', html)
    assert "REPLAYED</strong>" in html and ">measured<" not in html
    best = Store(db["url"]).best(name)
    trial = client.get(f"/study/{name}/trial/{best.number}").text
    assert "REPLAYED</strong>" in trial and ">measured<" not in trial
    sh = client.get(f"/study/{name}/export/sh").text
    assert f"REPLAYED {units.throughput(best.throughput)} tokens/s/GPU" in sh.splitlines()[1]


def test_the_studies_list_badges_a_replayed_study_as_it_does_a_simulated_one(client, db):
    rows = {m.group(1): m.group(2) for m in re.finditer(r'<a href="/study/([^"]+)">.*?</a></td>(.*?)</tr>',
                                                        client.get("/").text, re.S)}
    assert '<span class="badge sim">REPLAYED</span>' in rows[db["replay"]]
    assert '<span class="badge sim">SIMULATED</span>' in rows[SIM] and "REPLAYED" not in rows[SIM]
    ov = {s["name"]: s for s in client.get("/api/studies").json()}
    assert ov[db["replay"]]["provenance"] == "replayed" and ov[SIM]["provenance"] == "simulated"


def test_best_json_of_a_replayed_study_is_not_measured(db, capsys):
    code, out, _ = run(capsys, "best", "--storage", db["url"], "--study", db["replay"], "--json")
    doc = json.loads(out)
    assert code == 0 and doc["replayed"] is True and doc["measured"] is False and doc["simulated"] is False


def test_the_run_report_counts_launched_trials_as_n_trials_does(db):
    """The resumed run's first line and its GPU-time line give the same launched count; the interrupted run is
    named apart."""
    out = db["resumed"]
    assert re.search(r"3 trials launched \(reached --n-trials \(\d+ runnable candidates of the space not launched\)\)",
                     out), out
    assert "GPU time: none spent (SIMULATED); 3 launched trials and 1 interrupted, re-queued run" in out


def test_interrupted_trials_are_not_failures(client, db):
    store = Store(db["url"])
    rows = store.trials(SIM)
    interrupted = [r for r in rows if r.status == "interrupted"]
    assert any(r.launched for r in interrupted) and any(not r.launched for r in interrupted)
    assert not any(r.status in data.LAUNCHED_FAILURES for r in rows)
    html = client.get(f"/study/{SIM}").text
    assert re.search(r"<b>0</b> failed", html)
    assert re.search(rf'id="count-interrupted"><b>{len(interrupted)}</b> interrupted', html)
    failures = client.get(f"/study/{SIM}/fragment/failures").text
    assert "Launched trials that failed (0)" in failures and "never launched" not in failures.split(
        "Launched trials that failed")[1]
    assert {s["name"]: s for s in client.get("/api/studies").json()}[SIM]["failed"] == 0


def test_a_trial_closed_by_recovery_reads_as_the_cli_says(client, db, capsys):
    store = Store(db["url"])
    queued, sampled, empty = db["orphans"]
    code, out, _ = run(capsys, "status", "--storage", db["url"], "--study", SIM, "--all", "--json")
    cli = {t["number"]: t for t in json.loads(out)["trials"]}
    for number in (queued, sampled):
        row = store.trial(SIM, number)
        assert row.status == "interrupted" and not row.launched and "never launched" in row.reason
        assert row.started_at <= row.finished_at
        page = client.get(f"/study/{SIM}/trial/{number}").text
        label = re.search(r'id="trial-label">([^<]*)<', page).group(1)
        assert label == cli[number]["label"] != "-"
        times = re.search(r'id="trial-times">([^/]*) / ([^<]*) UTC', page)
        assert times.group(1).strip() <= times.group(2).strip()
        # the export is of the configuration it was, one verl can run; one that breaks a static rule is refused
        broken = db["setup"].evaluate(Candidate(**row.params)).violations
        r = client.get(f"/study/{SIM}/export/json", params={"trial": number})
        if broken:
            assert r.status_code == 404 and f"trial {number} cannot run: it breaks {broken[0].rule}" in r.text
            continue
        doc = json.loads(r.text)
        p = doc["params"]
        cand = Candidate(**p)
        assert p == cand.normalized().applied_params()
        if p["use_dynamic_bsz"]:
            assert p["ppo_max_token_len_per_gpu"] and p["log_prob_max_token_len_per_gpu"]
        else:
            assert p["ppo_micro_batch_size_per_gpu"] and p["log_prob_micro_batch_size_per_gpu"]
    want = Candidate.from_params(db["queued"], db["setup"].base).applied_params()
    assert store.trial(SIM, queued).params == want
    assert json.loads(client.get(f"/study/{SIM}/export/json", params={"trial": queued}).text)["params"] == want
    # asked, nothing chosen: no configuration, no label, nothing to export
    assert cli[empty]["label"] == "-" and store.trial(SIM, empty).params == {}
    page = client.get(f"/study/{SIM}/trial/{empty}").text
    assert 'id="no-configuration"' in page and "/export/sh?trial" not in page
    r = client.get(f"/study/{SIM}/export/sh", params={"trial": empty})
    assert r.status_code == 404 and "no configuration" in r.text
    code, _, err = run(capsys, "export", "--storage", db["url"], "--study", SIM, "--trial", str(empty))
    assert code == 2 and "no configuration" in err


def test_live_says_tuning_while_a_tuner_is_alive_and_idle_once_it_ended(client, db):
    """"live · tuning" follows the tuners' registry: a study whose tuners all ended is idle at once, however recently
    they wrote; a registered tuner makes it tuning even before it writes a trial."""
    store = Store(db["url"])
    store.touch_study(SIM)  # written just now, by tuners that have all stopped since
    live = client.get(f"/api/study/{SIM}/version").json()
    assert live["running"] == 0 and live["last_write_s"] < data.ACTIVE_WITHIN_S and live["active"] is False
    assert live["version"] == data.version(store, SIM)
    registry = Registry(store)
    registry.register(SIM)
    try:
        assert client.get(f"/api/study/{SIM}/version").json()["active"] is True
    finally:
        registry.deregister()
    assert client.get(f"/api/study/{SIM}/version").json()["active"] is False


def test_live_without_a_registered_tuner_falls_back_to_recent_writes(tmp_path):
    """A database no registered tuner wrote (an older autotune, `autotune import`): recent writes say tuning."""
    store = Store(f"sqlite:///{tmp_path / 'old.db'}")
    Tuner(make_setup(), SimulateRunner(), store.url, "old")  # its study row; it never ran, so never registered
    store.touch_study("old")
    assert data.liveness(store, "old")["active"] is True
    old = dt.datetime(2020, 1, 1)
    with store.session() as s:
        s.execute(update(StudyRow).where(StudyRow.name == "old").values(updated_at=old))
    assert data.liveness(store, "old")["active"] is False


def test_reference_names_and_numbers_match_the_cli(client, db, capsys):
    html = client.get(f"/study/{SIM}").text
    assert STOCK_NAME in html and "stock configuration" not in html
    store = Store(db["url"])
    best = store.best(SIM)
    code, out, _ = run(capsys, "best", "--storage", db["url"], "--study", SIM)
    assert units.throughput(best.throughput) in out.splitlines()[0]
    assert f'id="best-throughput">{units.throughput(best.throughput)}<' in html
    j = client.get(f"/api/study/{SIM}/trials", params={"size": 500}).json()
    keys = [c["key"] for c in j["columns"]]
    shown = next(r for r in j["rows"] if r[keys.index("number")] == best.number)
    # the page prints it with exactly these digits (toFixed(1)): the CLI's
    assert shown[keys.index("throughput")] == units.rounded(best.throughput)
    # capacity: one number in the CLI's prune reasons, `estimate` and the trial page
    capacity = units.gib(db["setup"].cluster.gpu.memory_gib)
    page = client.get(f"/study/{SIM}/trial/{best.number}").text
    assert f"capacity {capacity} GiB" in page
    code, out, _ = run(capsys, "estimate", "--model", "qwen2.5-7b", "--set", "tp=1", "--set", "use_dynamic_bsz=true")
    assert re.search(rf"capacity\s.*\b{re.escape(capacity)}\b", out) and f"> {capacity} GiB" in out


def test_forget_reaches_every_view_cache(db):
    """data.py no longer imports the views: they register their caches with it, and forget() drops them all."""
    from autotune.dashboard import history, plots, table

    store = Store(db["url"])
    client = TestClient(create_app(db["url"]), base_url="http://127.0.0.1:8080")
    for path in ("history", "data", "trials?sort=throughput"):  # a sorted page reads every row, in the request
        client.get(f"/api/study/{SIM}/{path}").raise_for_status()
    key = (store.url, SIM)
    caches = (history._HISTORY_CACHE, plots._DATA_CACHE, table._TABLE_CACHE, table._META_CACHE)
    assert all(c is not None for c in caches) and all(key in c for c in caches)
    data.forget(store, SIM)
    assert not any(key in c for c in caches)
    assert Path(history.__file__).read_text().count("from autotune.dashboard import") == 0
