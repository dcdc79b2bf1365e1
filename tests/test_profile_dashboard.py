"""The trial page's Profile card: served (TestClient) and drawn in headless Chromium, from a profile stored by
autotune.profile over traces laid out as verl writes them."""

from __future__ import annotations

import copy
import os
from pathlib import Path
from urllib.parse import quote

import pytest

from autotune.candidate import Candidate
from autotune.profile.runs import analyse_dir, profiler_overrides, store_profile
from autotune.results.export import launch_argv
from autotune.runners.simulate import SimulateRunner
from autotune.store.schema import ProfileRow
from autotune.store.store import Store
from autotune.study.study import Tuner
from tests.conftest import dashboard_server, make_setup

pytest.importorskip("verl")
pytest.importorskip("torch")
pytest.importorskip("fastapi", reason="the dashboard's dependencies are not installed: pip install -e '.[dashboard]'")

from fastapi.testclient import TestClient  # noqa: E402

from autotune.dashboard.app import create_app  # noqa: E402

STUDY = "prof"
PAYLOAD = "<img src=x onerror=\"window.__pwned=1\"><script>window.__pwned=1</script>"
LAYOUT = {"tp": 1, "pp": 2, "rollout_tp": 1, "use_dynamic_bsz": True}


@pytest.fixture(scope="module")
def profiled(tmp_path_factory) -> tuple[str, int]:
    """A simulated study; trial 0 profiled from a 4-rank tp1 pp2 step's traces (verl's profiler code wrote them)."""
    from tests.fake_verl.main_ppo import parse_overrides
    from tests.fake_verl.profiled import write_traces

    tmp = tmp_path_factory.mktemp("prof-dash")
    url = f"sqlite:///{tmp / 'study.db'}"
    setup = make_setup("qwen2.5-1.5b", gpus=4)
    Tuner(setup, SimulateRunner(), url, STUDY).run(n_trials=2)
    cand = Candidate(**LAYOUT).normalized()
    where = tmp / "traces"
    argv = launch_argv(setup.job, setup.cluster, cand, extra=profiler_overrides(where, 3, 20))
    write_traces(argv, parse_overrides(argv), 3)
    prof = analyse_dir(where, setup, cand)
    assert prof.ok, prof.error
    store = Store(url)
    pid = store_profile(store, prof, "traces", cand, STUDY, 0)
    analysis = copy.deepcopy(store.profile(pid).analysis)
    upd = next(p for p in analysis["phases"] if p["phase"] == "update_actor")
    upd["top"][0]["name"] = PAYLOAD  # a kernel name is data from a trace file: shown as text
    with store.session() as s:
        s.get(ProfileRow, pid).analysis = analysis
    return url, pid


def test_trial_page_serves_the_profile_and_the_api(profiled):
    url, pid = profiled
    client = TestClient(create_app(url), base_url="http://127.0.0.1:8080")
    html = client.get(f"/study/{STUDY}/trial/0").text
    assert 'id="profile"' in html and f"Profile {pid}" in html and "plot-profile-phases" in html
    assert PAYLOAD not in html and "&lt;img src=x" in html
    assert "update_weights: in no trace" in html
    doc = client.get(f"/api/study/{STUDY}/trial/0/profile").json()
    assert doc["id"] == pid and {p["phase"] for p in doc["phases"]} >= {"gen", "old_log_prob", "update_actor"}
    assert client.get(f"/api/study/{STUDY}/trial/1/profile").status_code == 404
    assert "No profile of this trial" in client.get(f"/study/{STUDY}/trial/1").text


CHROMIUM = "/usr/bin/chromium"


@pytest.mark.browser
def test_profile_card_draws_in_chromium(profiled):
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} is missing (scripts/install-browser.sh installs Debian's chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")

    url, _ = profiled
    with dashboard_server(url) as base, sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                              args=["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"])
        page = b.new_page(viewport={"width": 1400, "height": 1000})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.goto(f"{base}/study/{quote(STUDY)}/trial/0")
        page.wait_for_selector("#profile[data-ready='1']", timeout=30_000)
        stacked = page.evaluate("""() => document.getElementById('plot-profile-phases').data.map(
            t => [t.name, t.x.length, t.y.reduce((a, b) => a + b, 0)])""")
        assert [s[0] for s in stacked] == ["gemm", "attention", "other", "communication", "memory", "idle"]
        assert all(s[1] >= 3 for s in stacked) and sum(s[2] for s in stacked) > 0
        ranks = page.evaluate("() => document.getElementById('plot-profile-ranks').data[0].x")
        assert len(ranks) == 4 and "pp1" in " ".join(ranks)  # update_actor's four ranks, by stage
        page.select_option("#profile-phase", index=0)  # gen: the rollout's four replicas (rollout TP 1)
        page.wait_for_function("() => document.getElementById('plot-profile-ranks').data[0].x.length === 4 "
                               "&& document.getElementById('plot-profile-ranks').data[0].x[0].includes('replica')")
        assert page.locator("table.top-kernels tbody tr").count() >= 3
        assert page.locator("#profile-advice li, #profile-advice-none").count() >= 1
        assert page.evaluate("() => window.__pwned") is None
        assert PAYLOAD in page.locator("#profile").inner_text()  # the name, shown as text
        assert not errors, errors
        b.close()


def test_profile_js_is_served(profiled):
    url, _ = profiled
    client = TestClient(create_app(url), base_url="http://127.0.0.1:8080")
    assert client.get("/static/profile.js").status_code == 200
    assert Path(__file__).resolve().parents[1].joinpath("autotune/dashboard/static/profile.js").exists()
