"""The dashboard's routes through FastAPI's TestClient over a real SQLite study made by the simulate runner."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the dashboard's dependencies are not installed: pip install -e '.[dashboard]'")

import optuna  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402
from optuna.trial import TrialState  # noqa: E402

from autotune import units  # noqa: E402
from autotune.cli import main  # noqa: E402
from autotune.dashboard import data, history, table  # noqa: E402
from autotune.dashboard.app import create_app  # noqa: E402
from autotune.estimate.step_error import STEP_TIME_ERROR  # noqa: E402
from autotune.results.export import export_text  # noqa: E402
from autotune.runners.simulate import SimulateRunner  # noqa: E402
from autotune.store.schema import StudyRow, TrialRow, utcnow  # noqa: E402
from autotune.store.store import Store  # noqa: E402
from autotune.study.study import Tuner  # noqa: E402
from tests.conftest import make_setup  # noqa: E402

STUDY = "dash-study"
EVIL = "<script>alert('x')</script>&\"study\""


def add_failed(tuner: Tuner, status: str, reason: str, excerpt: str = "", log_path: str | None = None,
               **values) -> TrialRow:
    """A launched trial that failed, as a runner would record it (numbered by Optuna, so later asks do not clash)."""
    t = tuner.study.ask()
    tuner.study.tell(t, state=TrialState.PRUNED if status in ("oom", "config_error") else TrialState.FAIL)
    best = tuner.store.best(tuner.study_name)
    now = utcnow()
    row = TrialRow(
        study=tuner.study_name, number=t.number, status=status, reason=reason, origin="sampler", launched=True,
        simulated=True, backend="simulate", candidate_key=f"fail{t.number}", params=dict(best.params),
        verl_overrides=dict(best.verl_overrides), predicted_throughput=best.predicted_throughput,
        predicted_peak_gib=best.predicted_peak_gib, predicted_memory=best.predicted_memory,
        log_excerpt=excerpt, log_path=log_path, started_at=now, finished_at=now, duration_s=12.0, **values,
    )
    row.id = tuner.store.add_trial(row)
    return row


def make_study(url: str, tmp: Path, n_trials: int = 15) -> Tuner:
    """A simulated study of ~n_trials launched trials plus an OOM, a failed and a timed-out trial."""
    tuner = Tuner(make_setup(), SimulateRunner(), url, STUDY)
    tuner.run(n_trials=n_trials)
    add_failed(tuner, "oom", "CUDA out of memory in update_actor", "torch.OutOfMemoryError: CUDA out of memory. "
               "Tried to allocate 2.00 GiB", peak_memory_gib=79.9)
    log = tmp / "trial_fail.log"
    log.write_text("".join(f"line {i}\n" for i in range(50)) + "RuntimeError: NCCL watchdog <timeout>\n")
    add_failed(tuner, "failed", "verl exited with code 1", "RuntimeError: NCCL watchdog", log_path=str(log))
    add_failed(tuner, "timeout", "no step finished within 1800 s", "step 1 ... (stuck)")
    return tuner


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> tuple[str, Tuner]:
    tmp = tmp_path_factory.mktemp("dash")
    url = f"sqlite:///{tmp / 'study.db'}"
    tuner = make_study(url, tmp)
    # A second study whose name needs escaping everywhere it is shown.
    row = tuner.store.get_study(STUDY)
    cols = {c.name: getattr(row, c.name) for c in StudyRow.__table__.columns}
    tuner.store.add_study(StudyRow(**{**cols, "name": EVIL, "note": ""}))
    return url, tuner


@pytest.fixture
def client(study) -> TestClient:
    return TestClient(create_app(study[0]), base_url="http://127.0.0.1:8080")  # as a browser on this machine


def test_studies_list_shows_counts_best_and_simulated(client, study):
    _, tuner = study
    r = client.get("/")
    assert r.status_code == 200
    best = tuner.store.best(STUDY)
    assert f"/study/{STUDY}" in r.text and "SIMULATED" in r.text
    assert units.throughput(best.throughput) in r.text
    ov = {s["name"]: s for s in client.get("/api/studies").json()}
    rows = tuner.store.trials(STUDY)
    assert ov[STUDY]["ok"] == sum(r.status == "ok" for r in rows) >= 10
    assert ov[STUDY]["failed"] == 3 and ov[STUDY]["simulated"] is True
    assert ov[STUDY]["best"] == pytest.approx(best.throughput)


def test_study_page_best_card_speedups_and_exports(client, study):
    _, tuner = study
    best = tuner.store.best(STUDY)
    r = client.get(f"/study/{STUDY}")
    assert r.status_code == 200
    html = " ".join(r.text.split())
    assert "SIMULATED" in html and f"trial {best.number}" in html
    stock = next(t for t in tuner.store.trials(STUDY) if t.origin == "stock")
    if stock.status == "ok":
        assert f"×{best.throughput / stock.throughput:.2f}" in html
    else:  # verl's stock layout is predicted to OOM for this job: said in words, not as a number
        assert "was pruned before launch" in html and "predicted OOM" in html
    first = next(t for t in tuner.store.trials(STUDY) if t.launched)
    assert f"×{best.throughput / first.throughput:.2f}</span> over the first trial" in html
    for fmt in ("sh", "yaml", "json"):
        assert f'/study/{STUDY}/export/{fmt}"' in html


@pytest.mark.parametrize("fmt", ["sh", "yaml", "json", "ray"])
def test_export_download_equals_export_text(client, study, fmt):
    _, tuner = study
    store = tuner.store
    r = client.get(f"/study/{STUDY}/export/{fmt}")
    assert r.status_code == 200
    assert r.text == export_text(store, STUDY, store.best(STUDY), fmt)
    assert "attachment" in r.headers["content-disposition"]
    r = client.get(f"/study/{STUDY}/export/{fmt}", params={"trial": 0})
    assert r.text == export_text(store, STUDY, store.trial(STUDY, 0), fmt)


def test_data_endpoint_has_every_trial_and_aggregates(client, study):
    _, tuner = study
    rows = tuner.store.trials(STUDY)
    d = client.get(f"/api/study/{STUDY}/data").json()
    T = d["trials"]
    assert T["number"] == [r.number for r in rows]
    assert T["status"] == [r.status for r in rows]
    ok = [r for r in rows if r.status == "ok"]
    # at the precision the CLI prints (autotune.units), rounded once from the measurement
    assert max(x for x in T["throughput"] if x is not None) == units.rounded(max(r.throughput for r in ok))
    assert d["best_so_far"][-1] == units.rounded(max(r.throughput for r in ok))
    assert set(d["param_names"]) >= {"tp", "pp", "cp", "rollout_tp", "gpu_memory_utilization"}
    assert T["params"]["tp"] == [r.params["tp"] for r in rows]
    assert {"gen", "update_actor"} <= set(d["phase_names"])
    counts = dict(d["failure_counts"])
    assert counts["OOM"] == 1 and counts["failed"] == 1 and counts["timeout"] == 1
    assert sum(v for k, v in counts.items() if k.startswith(("predicted OOM", "constraint", "duplicate"))) == sum(
        r.status == "pruned" for r in rows)
    heat = d["heat_tp_pp"]
    best_cell = max(z for row in heat["z"] for z in row if z is not None)
    assert best_cell == pytest.approx(max(r.throughput for r in ok), abs=0.1)
    assert d["capacity_gib"] == 79.6  # 81559 MiB: 79.647 GiB, written as every view writes it
    assert d["simulated"] is True


def test_failures_fragment_lists_failed_trials_with_log_excerpts(client):
    r = client.get(f"/study/{STUDY}/fragment/failures")
    assert r.status_code == 200
    assert "torch.OutOfMemoryError: CUDA out of memory" in r.text
    assert "no step finished within 1800 s" in r.text
    assert "Launched trials that failed (3)" in r.text


def test_trial_page_params_memory_steps_and_log_tail(client, study):
    _, tuner = study
    best = tuner.store.best(STUDY)
    r = client.get(f"/study/{STUDY}/trial/{best.number}")
    assert r.status_code == 200
    assert "actor_rollout_ref.actor.megatron.tensor_model_parallel_size" in r.text
    assert "perf/throughput" in r.text and "SIMULATED" in r.text
    pct = round(STEP_TIME_ERROR["held_out_step_by_family"]["dense"])  # the study's model is dense
    assert f"±{pct}%, expected error vs measured tables" in r.text  # beside the predicted step time
    failed = next(t for t in tuner.store.trials(STUDY) if t.status == "failed")
    r = client.get(f"/study/{STUDY}/trial/{failed.number}")
    assert "line 0\n" in r.text and "NCCL watchdog &lt;timeout&gt;" in r.text  # the file's tail, escaped
    Path(failed.log_path).unlink()
    r = client.get(f"/study/{STUDY}/trial/{failed.number}")
    assert "line 0" not in r.text and "is gone" in r.text and "RuntimeError: NCCL watchdog" in r.text


@pytest.mark.parametrize("path", [
    "/study/nope", "/study/nope/trial/0", f"/study/{STUDY}/trial/9999", f"/study/{STUDY}/trial/abc",
    f"/study/{STUDY}/export/exe", "/study/nope/export/sh", "/no/such/page", f"/study/{STUDY}/export/sh?trial=9999",
])
def test_unknown_ids_give_404_pages(client, path):
    r = client.get(path)
    assert r.status_code == 404
    assert "<title>404" in r.text and "Traceback" not in r.text


def test_unknown_ids_on_the_api_give_404_json(client):
    for path in ("/api/study/nope/data", "/api/study/nope/version", f"/api/study/{STUDY}/trial/9999"):
        r = client.get(path)
        assert r.status_code == 404 and "detail" in r.json()
    r = client.post("/api/study/nope/note", json={"note": "x"})
    assert r.status_code == 404


def test_names_from_the_database_are_escaped(client, study):
    from urllib.parse import quote

    r = client.get("/")
    assert EVIL not in r.text and "&lt;script&gt;alert(" in r.text
    r = client.get(f"/study/{quote(EVIL, safe='')}")
    assert r.status_code == 200
    assert EVIL not in r.text and "&lt;script&gt;alert(" in r.text
    # The page's own JSON for its scripts escapes '<' too, so the name cannot close the script element.
    assert "<script>alert" not in r.text
    r = client.get("/study/" + quote("<b>nope</b>", safe=""))
    assert r.status_code == 404 and "<b>nope</b>" not in r.text and "&lt;b&gt;nope" in r.text


def test_notes_are_saved_and_shown(client, study):
    _, tuner = study
    r = client.post(f"/api/study/{STUDY}/note", json={"note": "try <PP=4> next"})
    assert r.status_code == 200
    assert tuner.store.get_study(STUDY).note == "try <PP=4> next"
    assert "try &lt;PP=4&gt; next" in client.get(f"/study/{STUDY}").text
    r = client.post(f"/api/study/{STUDY}/trial/0/note", json={"note": "the model's favourite"})
    assert r.status_code == 200 and tuner.store.trial(STUDY, 0).note == "the model's favourite"
    assert "the model&#39;s favourite" in client.get(f"/study/{STUDY}/trial/0").text
    assert client.get(f"/api/study/{STUDY}/data").json()["trials"]["note"][0] is True


def test_notes_only_as_json(client, study):
    _, tuner = study
    before = tuner.store.get_study(STUDY).note
    r = client.post(f"/api/study/{STUDY}/note", data={"note": "from a form"})
    assert r.status_code == 415
    r = client.post(f"/api/study/{STUDY}/note", json={"text": "wrong key"})
    assert r.status_code == 400
    r = client.post(f"/api/study/{STUDY}/note", json={"note": "x" * 20_001})
    assert r.status_code == 413
    assert tuner.store.get_study(STUDY).note == before


def test_version_changes_when_a_trial_is_added(client, study):
    _, tuner = study
    v0 = client.get(f"/api/study/{STUDY}/version").json()["version"]
    assert client.get(f"/api/study/{STUDY}/version").json()["version"] == v0
    tuner.run(n_trials=tuner.launched_count() + 1)
    v1 = client.get(f"/api/study/{STUDY}/version").json()["version"]
    assert v1 != v0
    assert client.get(f"/api/study/{STUDY}/data").json()["version"] == v1


def test_importance_uses_optuna_and_handles_too_few_trials(client, study, tmp_path):
    j = client.get(f"/api/study/{STUDY}/importance").json()
    assert j["ok"] and j["n_complete"] >= 10
    names = [k for k, _ in j["importances"]]
    storage = optuna.storages.RDBStorage(study[0])
    expected = optuna.importance.get_param_importances(optuna.load_study(study_name=STUDY, storage=storage))
    assert set(names) == set(expected)
    assert client.get(f"/api/study/{STUDY}/importance?evaluator=nope").json()["ok"] is False
    # A study with too few completed trials answers with a message, not an error.
    url = f"sqlite:///{tmp_path / 'few.db'}"
    Tuner(make_setup(), SimulateRunner(), url, "few").run(n_trials=1)
    j = TestClient(create_app(url)).get("/api/study/few/importance").json()
    assert j["ok"] is False and "at least" in j["message"]
    # The escaped study has no trial (and no Optuna study): a message again.
    from urllib.parse import quote

    j = client.get(f"/api/study/{quote(EVIL, safe='')}/importance").json()
    assert j["ok"] is False and j["message"]


def test_plotly_is_served_locally(client):
    r = client.get("/assets/plotly.min.js")
    assert r.status_code == 200 and len(r.content) > 1_000_000
    page = client.get(f"/study/{STUDY}").text
    assert 'src="/assets/plotly.min.js"' in page and "cdn" not in page.lower()


def test_failure_class():
    assert data.failure_class("pruned", "predicted OOM: update: predicted 1 GiB > 0 GiB") == "predicted OOM (update)"
    assert data.failure_class("pruned", "constraint world_size: 8 GPUs ...") == "constraint world_size"
    assert data.failure_class("pruned", "duplicate of trial 3: same configuration") == "duplicate"
    assert data.failure_class("oom", "anything") == "OOM"
    assert data.failure_class("config_error", "") == "config error"


def test_cli_dashboard_clear_errors(tmp_path, capsys):
    assert main(["dashboard", "--storage", f"sqlite:///{tmp_path / 'none.db'}"]) == 2
    assert "no study database" in capsys.readouterr().err


def test_empty_database_page(tmp_path):
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    Store(url)
    r = TestClient(create_app(url)).get("/")
    assert r.status_code == 200 and "No study in this database yet" in r.text


def test_study_page_with_no_trials(tmp_path, study):
    url = f"sqlite:///{tmp_path / 'one.db'}"
    store = Store(url)
    row = study[1].store.get_study(STUDY)
    store.add_study(StudyRow(**{c.name: getattr(row, c.name) for c in StudyRow.__table__.columns}))
    c = TestClient(create_app(url))
    assert "No trial has run to its measured step yet" in c.get(f"/study/{STUDY}").text
    d = c.get(f"/api/study/{STUDY}/data").json()
    assert d["trials"]["number"] == [] and json.dumps(d)
    assert c.get(f"/study/{STUDY}/export/sh").status_code == 404


def test_cli_dashboard_says_how_to_install_missing_dependencies(study, monkeypatch, capsys):
    import autotune.dashboard

    monkeypatch.setattr(autotune.dashboard, "missing_dependencies", lambda: ["fastapi", "uvicorn"])
    assert main(["dashboard", "--storage", study[0]]) == 2
    assert "pip install -e '.[dashboard]'" in capsys.readouterr().err


def test_trials_table_is_paged_sorted_and_filtered_on_the_server(client, study):
    _, tuner = study
    rows = tuner.store.trials(STUDY)
    j = client.get(f"/api/study/{STUDY}/trials", params={"size": 5}).json()
    keys = [c["key"] for c in j["columns"]]
    num = keys.index("number")
    assert j["total"] == j["matched"] == len(rows) and j["pages"] == -(-len(rows) // 5)
    assert [r[num] for r in j["rows"]] == [r.number for r in rows[:5]]
    last = client.get(f"/api/study/{STUDY}/trials", params={"size": 5, "page": 999}).json()
    assert last["page"] == last["pages"] - 1 and [r[num] for r in last["rows"]] == [
        r.number for r in rows[5 * last["page"]:]]
    status = next(c for c in j["columns"] if c["key"] == "status")
    assert set(status["options"]) == {r.status for r in rows}
    # Largest throughput first, trials without one last; ties in trial order.
    j = client.get(f"/api/study/{STUDY}/trials", params={"sort": "throughput", "desc": 1, "size": 500}).json()
    ok = sorted((r for r in rows if r.status == "ok"), key=lambda r: (-r.throughput, r.number))
    assert [r[num] for r in j["rows"]] == [r.number for r in ok] + [r.number for r in rows if r.status != "ok"]
    # The page's filter syntax: =value on a parameter, >x on a number, a search over layout/reason/origin/status.
    j = client.get(f"/api/study/{STUDY}/trials", params={"f.status": "=ok", "f.p:tp": "=2", "size": 500}).json()
    assert [r[num] for r in j["rows"]] == [r.number for r in rows if r.status == "ok" and r.params["tp"] == 2]
    cut = sorted(r.throughput for r in ok)[len(ok) // 2]  # the filter sees the values as shown (1 decimal)
    j = client.get(f"/api/study/{STUDY}/trials", params={"f.throughput": f">{cut}", "size": 500}).json()
    assert j["matched"] == sum(units.rounded(r.throughput) > cut for r in ok) > 0
    j = client.get(f"/api/study/{STUDY}/trials", params={"search": "out of memory", "size": 500}).json()
    assert [r[num] for r in j["rows"]] == [r.number for r in rows if "out of memory" in (r.reason or "")]
    j = client.get(f"/api/study/{STUDY}/trials", params={"launched": 1, "f.status": "!=ok", "size": 500}).json()
    assert j["matched"] == sum(r.launched and r.status != "ok" for r in rows)


def test_filter_matches_the_pages_syntax():
    m = table.matcher
    assert m(">3000")(3000.5) and not m(">3000")(None) and not m(">3000")(2999)
    assert m("<=4")(4) and m("!=ok")("oom") and not m("!=ok")("OK")
    assert m("=2")(2) and m("=2")(2.0) and not m("=2")(20) and m("=true")(True) and m("=null")(None)
    assert m("tp2")("tp2pp4") and m("2")(2) and not m("2")(12) and m("")("anything")
    assert table.js_str(2.0) == "2" and table.js_str(["a", "b"]) == "a,b" and table.js_str(False) == "false"


def test_long_history_is_sampled_with_the_best_line_and_failures_exact(study, monkeypatch):
    url, tuner = study
    rows = tuner.store.trials(STUDY)
    ok = [r for r in rows if r.status == "ok"]
    c = TestClient(create_app(url))
    h = c.get(f"/api/study/{STUDY}/history").json()
    assert not h["sampled"] and h["ok"]["x"] == [r.number for r in ok]
    monkeypatch.setattr(history, "HISTORY_POINTS", 3)
    monkeypatch.setattr(history, "HISTORY_BUCKETS", 2)
    data.forget(tuner.store, STUDY)
    h = c.get(f"/api/study/{STUDY}/history").json()
    assert h["sampled"] and len(h["ok"]["x"]) < len(ok)
    best, setters = -1.0, []
    for r in ok:
        if r.throughput > best:
            best = r.throughput
            setters.append(r.number)
    assert set(setters) <= set(h["ok"]["x"])  # every trial that set a new best is shown...
    assert h["best"]["x"][:len(setters)] == setters  # ... and the best-so-far line steps at each of them
    assert h["best"]["y"][-1] == units.rounded(best) and h["best"]["x"][-1] == rows[-1].number
    for st in ("oom", "failed", "timeout"):  # launched failures: every one
        assert h["bad"][st]["x"] == [r.number for r in rows if r.status == st]
    data.forget(tuner.store, STUDY)


# hardening: writes from this dashboard's own pages only, bounded notes, no file outside the static folder ----------
def test_cross_site_posts_are_refused_and_change_nothing(client, study):
    _, tuner = study
    before = tuner.store.get_study(STUDY).note
    url = f"/api/study/{STUDY}/note"
    for headers in ({"Origin": "http://evil.example"},                      # a page of another site
                    {"Origin": "http://127.0.0.1:9999"},                    # another port is another origin
                    {"Origin": "null"},                                     # a sandboxed frame, a file:// page
                    {"Sec-Fetch-Site": "cross-site"},                       # the browser says so, without Origin
                    {"Host": "evil.example:8080", "Origin": "http://evil.example:8080"}):  # DNS rebinding
        r = client.post(url, json={"note": "pwned"}, headers=headers)
        assert r.status_code == 403, headers
        assert "refused" in r.json()["detail"]
    r = client.post(f"/api/study/{STUDY}/trial/0/note", json={"note": "pwned"}, headers={"Origin": "http://evil.example"})
    assert r.status_code == 403
    assert tuner.store.get_study(STUDY).note == before and tuner.store.trial(STUDY, 0).note != "pwned"
    # the dashboard's own page (same origin), and a script on this machine (no Origin), may write
    for headers in ({"Origin": "http://127.0.0.1:8080", "Sec-Fetch-Site": "same-origin"}, {}):
        r = client.post(url, json={"note": before or ""}, headers=headers)
        assert r.status_code == 200, r.text
    assert client.post(url, json={"note": before or ""}, headers={"Host": "localhost:8080"}).status_code == 200
    assert client.post(url, json={"note": before or ""}, headers={"Host": "[::1]:8080"}).status_code == 200


def test_host_names_of_the_server_are_accepted():
    from autotune.dashboard.app import own_host_names, write_refusal

    names = own_host_names(["dash.internal"])
    assert write_refusal({"host": "dash.internal:8080", "origin": "http://dash.internal:8080"}, names) is None
    assert write_refusal({"host": "10.1.2.3:8080"}, names) is None  # an address cannot be rebound
    assert "Host 'other.example'" in write_refusal({"host": "other.example"}, names)


def test_note_size_is_capped_before_the_body_is_read(client, study):
    from autotune.dashboard.app import NOTE_MAX_BYTES, NOTE_MAX_CHARS

    _, tuner = study
    before = tuner.store.get_study(STUDY).note
    url = f"/api/study/{STUDY}/note"
    r = client.post(url, json={"note": "x" * (NOTE_MAX_CHARS + 1)})
    assert r.status_code == 413 and f"at most {NOTE_MAX_CHARS} characters" in r.json()["detail"]
    big = b'{"note": "' + b"y" * (NOTE_MAX_BYTES + 10) + b'"}'
    r = client.post(url, content=big, headers={"Content-Type": "application/json"})
    assert r.status_code == 413
    r = client.post(url, content=iter([big[:1000], big[1000:]]), headers={"Content-Type": "application/json"})
    assert r.status_code == 413  # chunked, no Content-Length: counted as it comes
    r = client.post(url, content=b'{"note": "x"}', headers={"Content-Type": "application/json",
                                                          "Content-Length": "999999999"})
    assert r.status_code in (400, 413)
    # a note at the limit, spelt with JSON escapes, is accepted
    r = client.post(url, content=('{"note": "' + "\\u00e9" * NOTE_MAX_CHARS + '"}').encode(),
                    headers={"Content-Type": "application/json"})
    assert r.status_code == 200 and tuner.store.get_study(STUDY).note == "\u00e9" * NOTE_MAX_CHARS
    client.post(url, json={"note": before or ""})


@pytest.mark.parametrize("path", [
    "/static/..%2fapp.py", "/static/..%2f..%2fdashboard%2fapp.py", "/static/%2e%2e/app.py", "/static/%2e%2e%2fapp.py",
    "/static/..%5capp.py", "/static/....//app.py", "/static//etc/passwd", "/static/%2fetc%2fpasswd",
    "/static/templates/base.html", "/static/", "/static/nope.js", "/assets/..%2fplotly.min.js",
])
def test_no_file_outside_the_static_folder(client, path):
    r = client.get(path)
    assert r.status_code == 404, (path, r.status_code)
    assert "def create_app" not in r.text and "root:" not in r.text and "{% block" not in r.text
    assert client.get("/static/study.js").status_code == 200


@pytest.mark.parametrize("path", ["/study/dash-study/trial/-1", "/study/dash-study/trial/1e3",
                                  "/api/study/dash-study/trial/%00", "/study/%00", "/api/study/..%2f..%2f/data"])
def test_odd_ids_give_404(client, path):
    r = client.get(path)
    assert r.status_code == 404 and "Traceback" not in r.text


def test_user_strings_are_escaped_in_reasons_notes_and_log_excerpts(client, study, tmp_path):
    _, tuner = study
    row = add_failed(tuner, "failed", EVIL + " reason", EVIL + " excerpt")
    tuner.store.set_trial_note(row.id, EVIL + " note")
    from autotune.dashboard import data

    data.forget(tuner.store, STUDY)
    for path in (f"/study/{STUDY}/trial/{row.number}", f"/study/{STUDY}/fragment/failures", f"/study/{STUDY}",
                 f"/study/{STUDY}/fragment/summary", "/"):
        r = client.get(path)
        assert r.status_code == 200
        assert "<script>alert(" not in r.text, path
    page = client.get(f"/study/{STUDY}/trial/{row.number}").text
    for what in ("reason", "excerpt", "note"):
        assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;&#34;study&#34; " + what in page, what


def test_pages_cannot_be_framed_by_another_site(client):
    for path in ("/", f"/study/{STUDY}", "/static/study.js", "/no/such/page"):
        h = client.get(path).headers
        assert h["x-frame-options"] == "DENY" and "frame-ancestors 'none'" in h["content-security-policy"]
        csp = h["content-security-policy"]
        assert "script-src 'self' 'unsafe-eval' 'sha256-" in csp and "unsafe-inline'" not in csp.split(";")[1]
        assert h["x-content-type-options"] == "nosniff"


@pytest.mark.parametrize("path", ["/", f"/study/{STUDY}", "/api/studies", "/assets/plotly.min.js"])
def test_head_answers_as_get_without_the_body(client, path):
    get, head = client.get(path), client.head(path)
    assert get.status_code == head.status_code == 200 and head.content == b""
    assert head.headers["content-type"] == get.headers["content-type"]
    assert head.headers["x-frame-options"] == "DENY"
    assert client.head("/no/such/page").status_code == 404


def test_trial_page_writes_parameter_values_as_every_other_view(client, study):
    """true/false/null as the space files, the CLI and the best card write them, never Python's True/False/None."""
    _, tuner = study
    row = next(t for t in tuner.store.trials(STUDY)
               if t.launched and any(isinstance(v, bool) for v in t.params.values()))
    cells = re.findall(r"<tr><td>(\w+)</td><td><code>([^<]*)</code>",
                       client.get(f"/study/{STUDY}/trial/{row.number}").text)
    shown = dict(cells)
    assert shown and set(shown) == set(row.params)
    for k, v in row.params.items():
        assert shown[k] == units.yaml_value(v)
    assert not {"True", "False", "None"} & set(shown.values())
    assert {"true", "false"} & set(shown.values())


# Issue 25 item 15: stopping the server ends its importance worker ----------------------------------------------
@pytest.mark.parametrize("how", ["SIGTERM", "Ctrl-C"])
def test_stopping_the_dashboard_ends_its_worker_processes(study, how):
    """SIGTERM (to the server) and Ctrl-C (SIGINT to the terminal's whole process group) leave no child running
    (the importance worker, Python's resource tracker: they held the database open) and print at most one line."""
    import os
    import signal
    import subprocess
    import sys
    import time
    import urllib.request

    import psutil

    from tests.conftest import REPO, free_port

    port = free_port()
    children: list[psutil.Process] = []
    proc = subprocess.Popen([sys.executable, "-m", "autotune", "dashboard", "--storage", study[0], "--port", str(port)],
                            cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().startswith("autotune dashboard: http://")
        url = f"http://127.0.0.1:{port}/api/study/{STUDY}/importance"
        with urllib.request.urlopen(url, timeout=120) as r:  # starts the worker process
            assert json.loads(r.read())["ok"] is True
        children = psutil.Process(proc.pid).children(recursive=True)
        assert any("spawn_main" in " ".join(c.cmdline()) for c in children), [c.cmdline() for c in children]
        if how == "SIGTERM":
            proc.send_signal(signal.SIGTERM)
        else:
            os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(c.is_running() and c.status() != psutil.STATUS_ZOMBIE
                                                  for c in children):
            time.sleep(0.2)
        left = [c.cmdline() for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
        assert left == [], left
        assert "Traceback" not in out + err and "KeyboardInterrupt" not in out + err, err
        assert len((out + err).strip().splitlines()) <= 1, out + err
    finally:  # whatever this test started and is still there
        for p in [proc, *children]:
            if p.poll() is None if p is proc else p.is_running():
                p.kill()


def test_a_trial_predicted_at_guessed_lengths_says_so_on_its_page(tmp_path):
    """The real 3B study (2026-11-25): its first pick was predicted before any length was measured (44k tokens a
    step against the 152k it measured); its page says so, as `status` does; one predicted at measured lengths not."""
    import shutil

    db = tmp_path / "c-3b.db"
    shutil.copy(Path(__file__).parent / "data" / "real_verl_gpu" / "h100_2026-11-25_l7" / "c-3b.db", db)
    c = TestClient(create_app(f"sqlite:///{db}"), base_url="http://127.0.0.1:8080")
    first, later = c.get("/study/c-3b/trial/0"), c.get("/study/c-3b/trial/3")
    assert first.status_code == later.status_code == 200
    assert 'id="trial-lengths-guessed"' in first.text and "the model now predicts #0" in first.text
    assert 'id="trial-lengths-guessed"' not in later.text


def test_a_trial_launched_on_request_although_predicted_to_fail_says_so(tmp_path, capsys):
    """Lease 64's plan enqueued the offload pair's off side, which the study predicted out of memory: its page and
    `status --trial` say it was forced and why; a trial of the model's own verdict says nothing of the kind."""
    import shutil

    from autotune.cli import main

    lease = Path(__file__).parent / "data" / "real_verl_gpu" / "h100_2026-12-06_l64"
    for name in ("c-1.5b-h64d", "c-1.5b-h64"):
        shutil.copy(lease / f"{name}.db", tmp_path / f"{name}.db")
    forced = TestClient(create_app(f"sqlite:///{tmp_path / 'c-1.5b-h64d.db'}"),
                        base_url="http://127.0.0.1:8080").get("/study/c-1.5b-h64d/trial/0")
    fits = TestClient(create_app(f"sqlite:///{tmp_path / 'c-1.5b-h64.db'}"),
                      base_url="http://127.0.0.1:8080").get("/study/c-1.5b-h64/trial/0")
    assert forced.status_code == fits.status_code == 200
    assert 'id="trial-forced"' in forced.text
    assert "launched on request (--enqueue) although predicted OOM" in forced.text
    assert 'id="trial-forced"' not in fits.text
    assert main(["status", "--storage", f"sqlite:///{tmp_path / 'c-1.5b-h64d.db'}", "--trial", "0"]) == 0
    assert "launched on request (--enqueue) although predicted OOM: old_log_prob: predicted 90.9 GiB" in \
        capsys.readouterr().out
