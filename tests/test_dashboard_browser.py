"""The dashboard end to end in headless Chromium (Debian's `chromium`, driven by Playwright) against a real server.

The server is uvicorn in a thread on a free loopback port, over a study made by the simulate runner plus an OOM,
a failed and a timed-out trial written through the Store.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import quote

import pytest

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
PLOTS = ["plot-history", "plot-phases", "plot-memory", "plot-heat-tp-pp", "plot-heat-rollout", "plot-parallel",
         "plot-slice", "plot-timeline", "plot-failures"]

if not os.path.exists(CHROMIUM):
    pytest.skip(f"{CHROMIUM} is missing (scripts/install-browser.sh installs Debian's chromium)",
                allow_module_level=True)
try:
    from playwright.sync_api import sync_playwright
except ImportError:
    pytest.skip("the playwright Python package is missing (pip install playwright)", allow_module_level=True)
pytest.importorskip("fastapi", reason="the dashboard's dependencies are not installed: pip install -e '.[dashboard]'")

from autotune import units  # noqa: E402
from autotune.results.export import export_text  # noqa: E402
from autotune.store.schema import StudyRow, TrialRow, utcnow  # noqa: E402
from tests.conftest import dashboard_server  # noqa: E402
from tests.test_dashboard import EVIL, STUDY, add_failed, make_study  # noqa: E402

# Runs if it is ever parsed as HTML: sets a flag, and opens a dialog (recorded by the `page` fixture).
PAYLOAD = "<img src=x onerror=\"window.__pwned=1\"><script>window.__pwned=1;alert('xss')</script>"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dash-browser")
    url = f"sqlite:///{tmp / 'study.db'}"
    tuner = make_study(url, tmp)
    row = tuner.store.get_study(STUDY)
    tuner.store.add_study(StudyRow(**{**{c.name: getattr(row, c.name) for c in StudyRow.__table__.columns},
                                      "name": EVIL}))
    with dashboard_server(url) as base:
        yield base, tuner


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        yield b
        b.close()


@pytest.fixture
def page(browser):
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
    pg = ctx.new_page()
    pg.errors = []
    pg.on("pageerror", lambda e: pg.errors.append(str(e)))
    pg.on("console", lambda m: pg.errors.append(m.text) if m.type == "error" else None)
    pg.dialogs = []
    pg.on("dialog", lambda d: (pg.dialogs.append(d.message), d.dismiss()))
    yield pg
    ctx.close()


def open_study(page, base: str, name: str = STUDY) -> None:
    page.goto(f"{base}/study/{quote(name, safe='')}")
    page.wait_for_selector("body[data-ready='1']", timeout=20_000)


def settled(page) -> None:
    """Wait for the trials table to show the page last asked for (it is sorted and filtered on the server)."""
    page.wait_for_selector("#trials[aria-busy='false']", timeout=20_000)


def show(page, div: str) -> None:
    """Scroll a plot into view (plots are drawn when they come into view) and wait until it has traces."""
    page.locator(f"#{div}").scroll_into_view_if_needed()
    page.wait_for_function("id => document.getElementById(id).data?.length > 0", arg=div, timeout=60_000)


def traces(page, div: str) -> int:
    return page.evaluate("id => { const d = document.getElementById(id); return d && d.data ? d.data.length : 0 }",
                         div)


def points(page, div: str) -> int:
    """Data points over a plot's traces (x, values of parcoords dimensions, or z of a heatmap)."""
    return page.evaluate("""id => (document.getElementById(id).data || []).reduce((n, t) =>
        n + (t.x ? t.x.filter(v => v !== null).length : 0) + (t.dimensions ? t.dimensions[0].values.length : 0)
          + (t.z ? t.z.flat().filter(v => v !== null).length : 0), 0)""", div)


def test_study_page_renders_with_data_in_every_plot(page, server):
    base, tuner = server
    open_study(page, base)
    for div in PLOTS:
        show(page, div)
        assert traces(page, div) > 0, f"{div} has no trace"
        assert points(page, div) > 0, f"{div} has no data"
    show(page, "plot-importance")
    imp = page.evaluate("document.getElementById('plot-importance').data[0].y")
    assert "tp" in imp or "rollout_tp" in imp
    n_ok = sum(r.status == "ok" for r in tuner.store.trials(STUDY))
    hist = page.evaluate("document.getElementById('plot-history').data[0].y.length")
    assert hist == n_ok
    assert "SIMULATED" in page.inner_text("#sim-banner")
    best = tuner.store.best(STUDY)
    assert page.inner_text("#best-throughput") == units.throughput(best.throughput)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "dashboard_study.png"), full_page=True)
    page.evaluate("window.scrollTo(0, 0)")
    page.screenshot(path=str(ARTIFACTS / "dashboard_study_top.png"))
    assert page.errors == []


def test_trials_table_sorts_and_filters(page, server):
    base, tuner = server
    open_study(page, base)
    rows = tuner.store.trials(STUDY)
    best = tuner.store.fastest(STUDY)  # the table sorts by measured throughput, safe or not
    page.click("#trials thead th[data-key='throughput']")
    settled(page)
    first = page.get_attribute("#trials tbody tr:first-child", "data-number")
    assert int(first) == best.number  # numbers sort largest first
    page.click("#trials thead th[data-key='throughput']")
    settled(page)
    nums = page.eval_on_selector_all("#trials tbody tr", "trs => trs.map(t => Number(t.dataset.number))")
    ok_sorted = [r.number for r in sorted((r for r in rows if r.status == "ok"), key=lambda r: (r.throughput,
                                                                                                    r.number))]
    assert nums[: len(ok_sorted)] == ok_sorted  # ascending, empty cells last
    page.select_option("select[data-filter='status']", "=ok")
    settled(page)
    statuses = page.eval_on_selector_all("#trials tbody tr", "trs => trs.map(t => t.className)")
    assert statuses and set(statuses) == {"st-ok"}
    assert page.inner_text("#trial-count").startswith(f"{len(ok_sorted)} of {len(rows)}")
    tp_col = page.eval_on_selector_all("#trials thead tr:first-child th", "ths => ths.map(t => t.dataset.key)").index(
        "p:tp")
    page.select_option("select[data-filter='p:tp']", "=2")
    settled(page)
    tps = page.eval_on_selector_all(f"#trials tbody tr td:nth-child({tp_col + 1})",
                                    "tds => tds.map(t => t.textContent)")
    expected = [r for r in rows if r.status == "ok" and r.params["tp"] == 2]
    assert set(tps) == {"2"} and len(tps) == len(expected)
    page.click("#clear-filters")
    settled(page)
    cut = units.rounded(best.throughput) - 0.05  # the filter sees the numbers as shown (autotune.units)
    page.fill("input[data-filter='throughput']", f">{cut}")
    settled(page)
    top = sorted((r for r in rows if r.status == "ok" and units.rounded(r.throughput) > cut),
                 key=lambda r: (r.throughput, r.number))
    assert page.eval_on_selector_all("#trials tbody tr", "trs => trs.map(t => Number(t.dataset.number))") == [
        r.number for r in top]
    page.click("#clear-filters")
    settled(page)
    assert page.inner_text("#trial-count").startswith(f"{len(rows)} of {len(rows)}")


def test_note_is_saved_and_shown_after_reload(page, server):
    base, tuner = server
    open_study(page, base)
    page.fill("#study-note", "PP=2 looks best <so far>")
    page.click("#save-study-note")
    page.wait_for_function("document.getElementById('study-note-status').textContent === 'saved'")
    assert tuner.store.get_study(STUDY).note == "PP=2 looks best <so far>"
    open_study(page, base)
    assert page.input_value("#study-note") == "PP=2 looks best <so far>"
    page.goto(f"{base}/study/{STUDY}/trial/0")
    page.fill("#trial-note", "seeded by the model")
    page.click("#save-trial-note")
    page.wait_for_function("document.getElementById('trial-note-status').textContent === 'saved'")
    page.reload()
    assert page.input_value("#trial-note") == "seeded by the model"


@pytest.mark.parametrize("fmt", ["sh", "yaml", "json"])
def test_export_download_matches_export_text(page, server, fmt):
    base, tuner = server
    open_study(page, base)
    with page.expect_download() as info:
        page.click(f"#best-card a[data-fmt='{fmt}']")
    text = Path(info.value.path()).read_text()
    assert text == export_text(tuner.store, STUDY, tuner.store.best(STUDY), fmt)


def test_trial_page_plots_and_log(page, server):
    base, tuner = server
    best = tuner.store.best(STUDY)
    page.goto(f"{base}/study/{STUDY}/trial/{best.number}")
    page.wait_for_selector("body[data-ready='1']")
    for div in ("plot-trial-phases", "plot-trial-memory", "plot-steps"):
        assert traces(page, div) > 0, div
    moments = page.evaluate("document.getElementById('plot-trial-memory').data[0].x")
    assert set(moments) == set(best.predicted_memory["moments"])
    failed = next(r for r in tuner.store.trials(STUDY) if r.status == "oom")
    page.goto(f"{base}/study/{STUDY}/trial/{failed.number}")
    assert "CUDA out of memory" in page.inner_text("#log")
    assert page.errors == []


# The study page polls the server every 3 s (study.js POLL_MS); this test waits for six changes to show, and polls
# every 0.2 s instead: only the poll's own timer is shortened, the page's code runs as it is.
FAST_POLL = """(() => {
  const setTimeout_ = window.setTimeout;
  window.setTimeout = function (f, ms, ...args) {
    return setTimeout_.call(window, f, f && f.name === 'poll' ? 200 : ms, ...args);
  };
})();"""


def test_running_study_page_updates(page, server):
    base, tuner = server
    page.add_init_script(FAST_POLL)
    open_study(page, base)
    n0 = int(page.evaluate("document.body.dataset.trials"))
    before = len(tuner.store.trials(STUDY))
    assert n0 == before
    # A trial that is running right now, as a tuner on another machine would have written it.
    t = tuner.study.ask()
    best = tuner.store.best(STUDY)
    tuner.store.add_trial(TrialRow(
        study=STUDY, number=t.number, status="running", origin="sampler", launched=True, simulated=True,
        backend="simulate", candidate_key="live", params=dict(best.params), verl_overrides={}, started_at=utcnow()))
    page.wait_for_function("n => Number(document.body.dataset.trials) > n", arg=n0, timeout=20_000)
    page.wait_for_function("document.getElementById('live').textContent.includes('1 running')", timeout=20_000)
    # ... and a trial launched by the Tuner.
    tuner.run(n_trials=tuner.launched_count() + 1)
    after = len(tuner.store.trials(STUDY))
    page.wait_for_function("n => Number(document.body.dataset.trials) === n", arg=after, timeout=20_000)
    newest = max(r.number for r in tuner.store.trials(STUDY))
    page.click("#trials thead th[data-key='number']")  # sorted by number: a second click puts the latest first
    page.wait_for_selector(f"#trials tbody tr[data-number='{newest}']", timeout=5_000)
    page.wait_for_function(f"document.getElementById('counts').textContent.includes('{after}')", timeout=10_000)
    # nothing running at this instant: "tuning" while a tuner is registered and alive, "idle" once it ended
    tuner.store.update_trial(next(r.id for r in tuner.store.running(STUDY)), status="interrupted",
                             finished_at=utcnow())
    tuner.registry.register(STUDY)
    try:
        page.wait_for_function("document.getElementById('live').textContent.includes('tuning (last write')",
                               timeout=20_000)
    finally:
        tuner.registry.deregister()
    page.wait_for_function("document.getElementById('live').textContent.includes('idle')", timeout=20_000)
    assert page.errors == []


def test_escaped_names_and_404_pages(page, server):
    base, _ = server
    page.goto(f"{base}/")
    assert EVIL in page.inner_text("table.studies")
    page.goto(f"{base}/study/{quote(EVIL, safe='')}")
    page.wait_for_selector("body[data-ready='1']")
    assert page.inner_text("h1") == EVIL
    page.goto(f"{base}/study/{STUDY}/trial/99999")
    assert "no trial 99999" in page.inner_text("#error-message")
    assert page.dialogs == []


def test_script_bearing_reason_note_and_log_render_as_text(page, server):
    from autotune.dashboard import data

    base, tuner = server
    row = add_failed(tuner, "failed", "reason " + PAYLOAD, "excerpt " + PAYLOAD)
    tuner.store.set_trial_note(row.id, "note " + PAYLOAD)
    data.forget(tuner.store, STUDY)
    page.goto(f"{base}/study/{STUDY}/trial/{row.number}")
    page.wait_for_selector("body[data-ready='1']")
    assert page.inner_text("#trial-reason") == "reason " + PAYLOAD
    assert page.input_value("#trial-note") == "note " + PAYLOAD
    assert "excerpt " + PAYLOAD in page.inner_text("#log")
    # a note typed in the page, saved and shown again
    open_study(page, base)
    page.fill("#study-note", "study " + PAYLOAD)
    page.click("#save-study-note")
    page.wait_for_function("document.getElementById('study-note-status').textContent === 'saved'")
    open_study(page, base)
    assert page.input_value("#study-note") == "study " + PAYLOAD
    # the failures list (a server-rendered fragment put into the page) and the trials table
    page.locator("#failures-body").scroll_into_view_if_needed()
    page.wait_for_function("document.getElementById('failures-body').textContent.includes('reason <img')",
                           timeout=20_000)
    page.fill("#trial-search", "reason <img")
    settled(page)
    page.wait_for_function(f"document.querySelector(\"#trials tbody tr[data-number='{row.number}']\") !== null",
                           timeout=20_000)
    assert PAYLOAD in page.inner_text(f"#trials tbody tr[data-number='{row.number}']")
    show(page, "plot-history")  # reasons are in its hover text
    assert page.evaluate("window.__pwned") is None
    assert page.dialogs == [] and page.errors == []
    assert page.locator("img[src='x']").count() == 0
    # and were markup ever to slip through, the Content-Security-Policy runs no script but the dashboard's own
    page.evaluate("""() => { const s = document.createElement('script'); s.textContent = 'window.__pwned = 2';
                             document.body.appendChild(s); }""")
    assert page.evaluate("window.__pwned") is None


# ---------- layout: nothing covers anything ----------
# Each text element of an SVG as the quadrilateral it covers on the screen (rotated labels included): its box in
# its own coordinates mapped through its transform, shrunk by half a pixel (touching is not covering).
TEXT_QUADS = """(sel) => [...document.querySelectorAll(sel)].filter(t => t.textContent.trim() && t.getBBox().width > 0)
  .map(t => { const b = t.getBBox(), m = t.getScreenCTM(), e = 0.5;
    const pt = (x, y) => { const p = new DOMPoint(x, y).matrixTransform(m); return [p.x, p.y]; };
    return {text: t.textContent, q: [pt(b.x + e, b.y + e), pt(b.x + b.width - e, b.y + e),
                                     pt(b.x + b.width - e, b.y + b.height - e), pt(b.x + e, b.y + b.height - e)]}; })"""


def _overlap(p: list, q: list) -> bool:
    """Two convex quadrilaterals intersect (separating axis theorem)."""
    for poly in (p, q):
        for i in range(4):
            (x1, y1), (x2, y2) = poly[i], poly[(i + 1) % 4]
            nx, ny = y2 - y1, x1 - x2
            a = [nx * x + ny * y for x, y in p]
            b = [nx * x + ny * y for x, y in q]
            if max(a) < min(b) or max(b) < min(a):
                return False
    return True


def _rect(r: dict) -> list:
    return [(r["left"], r["top"]), (r["right"], r["top"]), (r["right"], r["bottom"]), (r["left"], r["bottom"])]


def test_every_section_heading_is_inside_its_card(page, server):
    base, _ = server
    open_study(page, base)
    page.locator("#failures-body").scroll_into_view_if_needed()
    page.wait_for_selector("#failure-counts, #failures-body .empty", timeout=20_000)
    heads = page.evaluate("""() => [...document.querySelectorAll('main h2, main h3')].map(h => {
        const c = h.closest('.card'), r = h.getBoundingClientRect(), k = c && c.getBoundingClientRect();
        return {text: h.textContent.trim(), inside: !!c && r.left >= k.left && r.right <= k.right &&
                r.top >= k.top && r.bottom <= k.bottom}; })""")
    assert any(h["text"] == "Failures" for h in heads)
    assert [h["text"] for h in heads if not h["inside"]] == []
    # the failures chart is in the card its heading names
    assert page.evaluate("document.getElementById('plot-failures').closest('.card').querySelector('h2')"
                         ".textContent") == "Failures"


def test_no_plot_text_lies_under_the_plotly_toolbar(page, server):
    base, _ = server
    open_study(page, base)
    covered = []
    for div in [*PLOTS, "plot-importance"]:
        show(page, div)
        box = page.locator(f"#{div}").bounding_box()
        page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)  # the toolbar shows on hover
        bar = page.evaluate("id => document.querySelector(`#${id} .modebar`).getBoundingClientRect().toJSON()", div)
        assert bar["width"] > 0, div
        for t in page.evaluate(TEXT_QUADS, f"#{div} svg text"):
            if _overlap(t["q"], _rect(bar)):
                covered.append((div, t["text"]))
    assert covered == [], f"text under Plotly's toolbar: {covered}"
    # the heatmaps' titles are captions above them, outside Plotly
    assert page.locator("#space .plot-title").count() == 2 and page.locator("#space .gtitle").count() == 0


def test_parallel_coordinate_labels_do_not_overlap(page, server):
    base, _ = server
    open_study(page, base)
    show(page, "plot-parallel")
    n_dims = page.evaluate("document.getElementById('plot-parallel').data[0].dimensions.length")
    assert n_dims >= 10  # the case that overlapped: many parameters varying
    quads = page.evaluate(TEXT_QUADS, "#plot-parallel .parcoords text")
    labels = [q["text"] for q in quads]
    assert "tokens/s/GPU" in labels and "ppo_max_token_len_per_gpu" in labels
    clash = [(a["text"], b["text"]) for i, a in enumerate(quads) for b in quads[i + 1:] if _overlap(a["q"], b["q"])]
    assert clash == [], f"overlapping labels: {clash[:10]}"
    # nothing is cut off at the top of the plot (labels are rotated into its top margin); the labels and the plot's
    # top are read in one frame: a poll that re-lays the page out between two reads moved them apart under load
    now = page.evaluate(f"""() => ({{top: document.querySelector('#plot-parallel svg').getBoundingClientRect().top,
                                    quads: ({TEXT_QUADS})('#plot-parallel .parcoords text')}})""")
    assert min(y for q in now["quads"] for _, y in q["q"]) >= now["top"]
    ARTIFACTS.mkdir(exist_ok=True)
    page.locator("#parallel").screenshot(path=str(ARTIFACTS / "dashboard_parallel.png"))


def _tick_texts(page, selector: str) -> list[str]:
    return page.evaluate("sel => [...document.querySelectorAll(sel)].map(t => t.textContent)", selector)


def test_integer_axes_have_integer_ticks(page, server):
    """Integer knobs (tp, pp, ...) and trial numbers are ticked at whole numbers, never 2.5."""
    base, tuner = server
    open_study(page, base)
    show(page, "plot-slice")
    varying = page.evaluate("[...document.querySelectorAll('#slice-param option')].map(o => o.value)")
    ints = [p for p in ("tp", "pp", "rollout_tp", "vpp", "cp") if p in varying]
    assert ints, varying
    seen = {}
    for p in ints:
        page.select_option("#slice-param", p)
        show(page, "plot-slice")
        page.wait_for_function("p => document.getElementById('plot-slice').layout.xaxis.title.text === p", arg=p)
        seen[f"slice {p}"] = _tick_texts(page, "#plot-slice .xtick text")
    for div, axis in (("plot-history", "xtick"), ("plot-memory", "xtick"), ("plot-timeline", "ytick")):
        show(page, div)
        seen[div] = _tick_texts(page, f"#{div} .{axis} text")
    show(page, "plot-parallel")
    dims = page.evaluate("document.getElementById('plot-parallel').data[0].dimensions.map(d => d.label)")
    for p in (p for p in ints if p in dims):
        seen[f"parallel {p}"] = page.evaluate("""p => {
            const ax = [...document.querySelectorAll('#plot-parallel .y-axis')].find(a => a.__data__?.label === p);
            return ax ? [...ax.querySelectorAll('.tick text')].map(t => t.textContent) : null }""", p)
    assert all(seen.values()), seen
    bad = {k: v for k, v in seen.items() if not all(t.isdigit() or t == "null" for t in v)}
    assert bad == {}, f"ticks that are not whole numbers: {bad}"
