"""How fast the dashboard is on a 10,000-trial study: server-side render times and a browser load.

    python -m benchmarks.dashboard_speed            # 10,000 trials; prints a table, writes results/dashboard_speed.json
    python -m benchmarks.dashboard_speed --trials 2000 --no-browser

The study: a real simulate-runner study of 10 launched trials, then rows written straight through the Store (and
Optuna's add_trials for up to 2,000 completed ones, for parameter importance), their parameters drawn
from the search space's Optuna distributions, their statuses mixed as in a real run (most pruned before launch).
Each number is the median of --repeat requests (and of that over --runs whole runs); the same requests on the
10-launched-trial study run alongside as the baseline, so the ratio says what 10,000 trials cost.

The target: the study page ready in under a second in the browser. Ready is what a person sees on opening it: the
best-configuration card, the optimisation history drawn and the first page of the trials table shown (the page sets
body[data-ready] once they are painted). The plots further down are drawn from every trial's data, loaded after
that, as they come into view: "scroll through every plot" times them. Reported, never asserted.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from autotune.cluster import Cluster, get_gpu_type
from autotune.job import Job
from autotune.model import get_model
from autotune.runners.simulate import SimulateRunner
from autotune.search.setup import Setup
from autotune.search.space import load_space
from autotune.store.schema import TrialRow, utcnow
from autotune.study.study import Tuner

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
STATUSES = {"ok": 0.35, "pruned": 0.55, "oom": 0.05, "failed": 0.03, "timeout": 0.02}
RESULTS = Path(__file__).resolve().parent / "results" / "dashboard_speed.json"


def make_study(url: str, name: str, n_total: int, seed: int = 0, optuna_max: int = 2000) -> None:
    """A simulate study of 10 launched trials, grown to n_total trials by writing rows directly.

    Optuna gets the first `optuna_max` completed ones too (Optuna's add_trials costs ~20 ms a trial), which is
    what parameter importance is computed over.
    """
    model = get_model("qwen2.5-7b")
    setup = Setup(model, Cluster(get_gpu_type("h100"), 8, 1), Job.default(), load_space("dense"))
    tuner = Tuner(setup, SimulateRunner(), url, name)
    tuner.run(n_trials=10)
    rows = tuner.store.trials(name)
    if n_total <= len(rows):
        return
    templates = [r for r in rows if r.status == "ok"]
    frozen = {t.number: t for t in tuner.study.get_trials(deepcopy=False)}
    dists = next(frozen[r.number].distributions for r in templates if frozen[r.number].distributions)
    rng = random.Random(seed)
    start = utcnow()
    new_rows, optuna_trials = [], []
    n0 = max(frozen) + 1
    for k in range(n_total - len(rows)):
        number = n0 + k
        tpl = rng.choice(templates)
        params = dict(tpl.params)
        sampled = {p: rng.choice(d.choices) for p, d in dists.items() if hasattr(d, "choices")}
        params.update(sampled)
        status = rng.choices(list(STATUSES), weights=list(STATUSES.values()))[0]
        thr = tpl.throughput * rng.uniform(0.5, 1.1) if status == "ok" else None
        t0 = start.replace(microsecond=0) + dt.timedelta(seconds=30 * k)
        dur = rng.uniform(200, 900) if status != "pruned" else 0.0
        reason = {"ok": "simulated: model estimate, not a measurement",
                  "pruned": rng.choice(["predicted OOM: update: predicted 91.8 GiB > 79.6 GiB (largest: activations)",
                                        "constraint world_size: 8 GPUs are not divisible by TP*PP*CP = 8*2*1 = 16",
                                        f"duplicate of trial {rng.randrange(number)}: same configuration"]),
                  "oom": "CUDA out of memory in update_actor", "failed": "verl exited with code 1",
                  "timeout": "no step finished within 1800 s"}[status]
        new_rows.append(TrialRow(
            study=name, number=number, status=status, reason=reason, origin="sampler",
            launched=status != "pruned", simulated=True, backend="simulate", candidate_key=f"bench{number}",
            params=params, verl_overrides=tpl.verl_overrides, predicted_throughput=tpl.predicted_throughput,
            predicted_step_s=tpl.predicted_step_s, predicted_phases=tpl.predicted_phases,
            predicted_peak_gib=(tpl.predicted_peak_gib or 60) * rng.uniform(0.8, 1.4),
            predicted_memory=tpl.predicted_memory, throughput=thr,
            phase_timings={k: v * rng.uniform(0.8, 1.2) for k, v in (tpl.phase_timings or {}).items()}
            if status == "ok" else None,
            log_excerpt="Traceback ...\nRuntimeError: something went wrong" if status in ("failed", "oom") else "",
            worker="bench:0", started_at=t0, heartbeat_at=t0,
            finished_at=t0 + dt.timedelta(seconds=dur), duration_s=dur,
        ))
        if status != "ok" or len(optuna_trials) >= optuna_max:
            continue
        optuna_trials.append(optuna.trial.create_trial(
            params={p: sampled[p] for p in dists if p in sampled}, distributions=dict(dists), value=thr,
            state=TrialState.COMPLETE, user_attrs={"status": status, "simulated": True}))
    t = time.perf_counter()
    with tuner.store.session() as s:
        s.add_all(new_rows)
    t1 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tuner.study.add_trials(optuna_trials)
    print(f"  {len(new_rows)} autotune rows in {t1 - t:.1f} s, Optuna trials in {time.perf_counter() - t1:.1f} s")


def median_ms(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def server_side(url: str, study: str, repeat: int) -> dict[str, float]:
    from fastapi.testclient import TestClient

    from autotune.dashboard import data, importance, table
    from autotune.dashboard.app import create_app
    from autotune.store.store import Store

    store = Store(url)
    c = TestClient(create_app(url, store))

    def get(path: str):
        return lambda: c.get(path).raise_for_status()

    def cold(path: str) -> float:
        """The first request after the server started: nothing of the study cached."""
        data.forget(store, study)
        table._SEEN.clear()  # what the table's columns are read from, kept between versions
        t = time.perf_counter()
        c.get(path).raise_for_status()
        return (time.perf_counter() - t) * 1000

    out = {
        "studies list (/)": median_ms(get("/"), repeat),
        "study page HTML": median_ms(get(f"/study/{study}"), repeat),
        "history JSON (first view)": median_ms(get(f"/api/study/{study}/history"), repeat),
        "trials first page JSON (first view)": median_ms(get(f"/api/study/{study}/trials"), repeat),
        "history JSON, uncached": statistics.median(cold(f"/api/study/{study}/history") for _ in range(repeat)),
        "trials first page, uncached": statistics.median(cold(f"/api/study/{study}/trials") for _ in range(repeat)),
        "trials sorted by throughput": median_ms(get(f"/api/study/{study}/trials?sort=throughput&desc=1"), repeat),
        "trials filtered (status=ok, tp>=2)": median_ms(
            get(f"/api/study/{study}/trials?f.status=%3Dok&f.p:tp=%3E%3D2"), repeat),
        "study data JSON (after ready)": median_ms(get(f"/api/study/{study}/data"), repeat),
        "study data JSON, uncached": statistics.median(cold(f"/api/study/{study}/data") for _ in range(repeat)),
        "version poll": median_ms(get(f"/api/study/{study}/version"), repeat),
        "summary fragment": median_ms(get(f"/study/{study}/fragment/summary"), repeat),
        "failures fragment": median_ms(get(f"/study/{study}/fragment/failures"), repeat),
        "trial page": median_ms(get(f"/study/{study}/trial/5"), repeat),
    }
    importance._IMPORTANCE_CACHE.clear()  # as after a restart: each run measures a computation
    t = time.perf_counter()
    c.get(f"/api/study/{study}/importance").raise_for_status()
    out["importance (first, uncached)"] = (time.perf_counter() - t) * 1000
    out["importance (cached)"] = median_ms(get(f"/api/study/{study}/importance"), repeat)
    out["first view JSON KiB (history + trials page)"] = (len(c.get(f"/api/study/{study}/history").content) + len(
        c.get(f"/api/study/{study}/trials").content)) / 1024
    out["data JSON KiB (after ready)"] = len(c.get(f"/api/study/{study}/data").content) / 1024
    return out


def browser_load(url: str, studies: list[str], repeat: int) -> dict[str, dict[str, float]]:
    """Time from navigation to the page's ready mark (data loaded, table and plots in view drawn), warm cache."""
    from playwright.sync_api import sync_playwright

    from tests.conftest import dashboard_server

    out: dict[str, dict[str, float]] = {}
    with dashboard_server(url) as base, sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = b.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(f"{base}/study/{studies[0]}")  # first load fills the cache (plotly.min.js)
        page.wait_for_selector("body[data-ready='1']", timeout=120_000)
        for study in studies:
            ready, dcl, all_plots = [], [], []
            for _ in range(repeat):
                t = time.perf_counter()
                page.goto(f"{base}/study/{study}")
                dcl.append((time.perf_counter() - t) * 1000)
                page.wait_for_selector("body[data-ready='1']", timeout=120_000)
                ready.append((time.perf_counter() - t) * 1000)
                t = time.perf_counter()
                for div in ("plot-memory", "plot-heat-tp-pp", "plot-parallel", "plot-slice", "plot-timeline",
                            "plot-failures"):
                    page.locator(f"#{div}").scroll_into_view_if_needed()
                    page.wait_for_function("id => document.getElementById(id).data?.length > 0", arg=div,
                                           timeout=120_000)
                all_plots.append((time.perf_counter() - t) * 1000)
            timings = page.evaluate("window.dashboardTimings")
            t = time.perf_counter()
            page.click("#trials thead th[data-key='throughput']")  # sorted on the server
            page.wait_for_selector("#trials[aria-busy='false']", timeout=120_000)
            sort_ms = (time.perf_counter() - t) * 1000
            out[study] = {"HTML loaded (ms)": statistics.median(dcl), "page ready (ms)": statistics.median(ready),
                          "scroll through every plot (ms)": statistics.median(all_plots),
                          "sort 10k-row table by click (ms)": sort_ms,
                          **{f"js {k} (ms)": v for k, v in timings.items()}}
        b.close()
    return out


def median_of(docs: Any) -> dict[str, Any]:
    """Per key, the median over runs of {study: {measure: value}} (a measure missing from a run is left out)."""
    docs = [d for d in docs if d]
    out: dict[str, Any] = {}
    for study in (docs[0] if docs else {}):
        keys = dict.fromkeys(k for d in docs for k in d.get(study, {}))
        out[study] = {k: statistics.median(d[study][k] for d in docs if k in d.get(study, {})) for k in keys}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--runs", type=int, default=3, help="whole measurements; the report is the median over them "
                                                          "(the machine is shared: one run can be unlucky)")
    ap.add_argument("--no-browser", action="store_true")
    ap.add_argument("--db", help="SQLite file to use (default: a temporary one); one that exists already is reused "
                                 "as it is (the studies of an earlier run)")
    args = ap.parse_args(argv)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    shm = "/dev/shm" if Path("/dev/shm").is_dir() else None  # tmpfs: Optuna's one commit per trial costs no fsync
    db = Path(args.db) if args.db else Path(tempfile.mkdtemp(prefix="dash-bench-", dir=shm)) / "bench.db"
    url = f"sqlite:///{db}"
    t = time.perf_counter()
    if args.db and db.exists():
        print(f"reusing the studies in {db}")
    else:
        make_study(url, "small", 0)
        make_study(url, "big", args.trials)
        print(f"made the studies in {time.perf_counter() - t:.1f} s ({db})")
    runs: list[dict[str, object]] = []
    for _ in range(args.runs):
        run: dict[str, object] = {"server_ms": {}, "browser_ms": {}}
        for study in ("small", "big"):
            run["server_ms"][study] = server_side(url, study, args.repeat)  # type: ignore[index]
        if not args.no_browser:
            try:
                run["browser_ms"] = browser_load(url, ["small", "big"], args.repeat)
            except Exception as e:  # no chromium / playwright here: server numbers only
                print(f"browser load skipped: {type(e).__name__}: {e}", file=sys.stderr)
        runs.append(run)
    result: dict[str, object] = {"trials": args.trials, "runs": args.runs, "repeat": args.repeat,
                                 "server_ms": median_of(r["server_ms"] for r in runs),
                                 "browser_ms": median_of(r["browser_ms"] for r in runs)}
    srv = result["server_ms"]
    print(f"\nserver side, median over {args.runs} runs of medians of {args.repeat} (ms)"
          f"      small study   {args.trials}-trial study   ratio")
    for k in srv["big"]:  # type: ignore[index]
        a, b = srv["small"][k], srv["big"][k]  # type: ignore[index]
        print(f"  {k:36} {a:10.1f} {b:18.1f} {b / a if a else float('nan'):10.1f}x")
    if result["browser_ms"]:
        br = result["browser_ms"]
        print(f"\nbrowser (headless Chromium, warm cache), median of {args.runs} runs (ms)")
        for k in br["big"]:  # type: ignore[index]
            print(f"  {k:36} {br['small'].get(k, float('nan')):10.0f} {br['big'][k]:18.0f}")  # type: ignore[index]
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
