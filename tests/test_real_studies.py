"""Each real study once (benchmarks/real_studies.py): a lease that resumed a study committed its database again
(lease 10's c-3b.db holds lease 7's trials 0-3 and its trial 4; lease 12's c-7b.db holds lease 9's, which held lease
8's), so the benchmarks that read every database count each real trial once, from the newest copy, and still find
the trial's logs in the lease that ran it."""

from __future__ import annotations

import shutil
import sqlite3
from collections import Counter
from pathlib import Path

from autotune.store.store import Store
from benchmarks import (
    correction_proof,
    memory_moments,
    offload_pairs,
    real_cases,
    real_studies,
    trial_cost,
    verl_landscapes,
)
from tests.conftest import REPO

DATA = REPO / "tests" / "data" / "real_verl_gpu"
L7, L8, L9, L10, L12 = (DATA / n for n in ("h100_2026-11-25_l7", "h200_2026-11-25_l8", "h200_2026-11-26_l9",
                                          "h100_2026-11-26_l10", "h200_2026-11-26_l12"))


def _every_copy(status: tuple[str, ...] | None = ("ok", "oom")) -> list[tuple[str, int, str]]:
    """(study, number, start) of every launched real trial (of these statuses; None: any) of every database, a trial
    once per copy holding it."""
    out = []
    for db in sorted(DATA.glob("*/*.db")):
        store = Store(f"sqlite:///{db}")
        for study in store.list_studies():
            out += [(r.study, r.number, r.started_at.isoformat()) for r in store.trials(study.name)
                    if r.launched and not r.simulated and (status is None or r.status in status) and r.params]
        store.engine.dispose()
    return out


def test_one_copy_of_each_study_the_newest() -> None:
    got = [(db, study.name) for db, _, study in real_studies.studies(DATA.glob("*/*.db"))]
    names = Counter(name for _, name in got)
    assert names and set(names.values()) == {1}, names
    assert (L10 / "c-3b.db", "c-3b") in got and (L12 / "c-7b.db", "c-7b") in got
    assert not {L7 / "c-3b.db", L8 / "c-7b.db", L9 / "c-7b.db"} & {db for db, _ in got}
    assert (L9 / "c-7b-fl.db", "c-7b-fl") in got and (L10 / "c-3b-fl.db", "c-3b-fl") in got


def test_each_real_trial_counts_once_in_every_reader() -> None:
    every = _every_copy()
    # the trials the lease's deadline cut after their measured step are read in as measured (read_in_cut)
    cut = {k for k in _every_copy(None) if k[:2] in {("c-3b-h3", 2), ("c-1.5b-h44", 5)}}
    assert len(cut) == 2
    # Ray's memory monitor killed a 7B and a 3B trial of lease 42's two lanes at once, for the node's memory: no
    # reader judges them (real_studies.killed_for_the_node)
    kills = {k for k in every if k[:2] in {("c-7b-h23", 2), ("c-3b-h24", 2)}}
    assert len(kills) == 2 and sorted(real_cases.node_kills(DATA.glob("*/*.db"))) == [
        "h200_2026-11-28_l42/c-3b-h24.db/c-3b-h24#2", "h200_2026-11-28_l42/c-7b-h23.db/c-7b-h23#2"]
    distinct = (set(every) | cut) - kills
    assert len(every) > len(set(every))  # the committed data hold copies: without the dedupe a trial counts twice
    seen = [(row.study, row.number, row.started_at.isoformat())
            for _, _, _, row in real_cases.measured_trials(DATA.glob("*/*.db"))]
    assert len(seen) == len(distinct) and set(seen) == distinct
    c3b = sorted(n for s, n, _ in seen if s == "c-3b")
    c7b = sorted(n for s, n, _ in seen if s == "c-7b")
    assert c3b == [0, 1, 3, 4] and c7b == [0, 2, 3]

    def trials(sources: list[str]) -> list[str]:  # ".../c-3b.db/c-3b#3" or ".../c-3b#3" -> "c-3b#3"
        return [s.rsplit("/", 1)[-1] for s in sources]

    cal = trials([c.source for c in real_cases.cases(list(DATA.glob("*/*.db")))])
    assert len(cal) == len(set(cal)) == len(distinct)
    cost = trials([c.source for c in trial_cost.costs(list(DATA.glob("*/*.db")))])
    assert len(cost) == len(set(cost)) == len(set(_every_copy(("ok",))))
    rows = trials([m.source for _, ms in verl_landscapes.collect(sorted(DATA.glob("*/*.db"))).values() for m in ms])
    assert len(rows) == len(set(rows)) == len(distinct)
    firsts = [f.source for fs in verl_landscapes.real_first_launches(sorted(DATA.glob("*/*.db"))).values()
              for f in fs]
    assert len(firsts) == len({s for s, _, _ in _every_copy(None)})  # one first launch per study that launched
    points = [p.label.rsplit("/", 1)[-1] for g in correction_proof.real_groups(DATA) for p in g.points]
    assert len(points) == len(set(points)) and "c-3b#3" in points and "c-3b#4" in points
    pairs = [(off.source.rsplit("/", 1)[-1], on.source.rsplit("/", 1)[-1], round(t_off, 1), round(t_on, 1))
             for off, on, t_off, t_on in offload_pairs.real_pairs(DATA.glob("*/*.db"))]
    # lease 24 re-ran lease 4's pair of one job with params and optimizer offloaded and not: a pair of its own; lease
    # 28 re-ran lease 24's with the same job: a pair of its own, not crossed with lease 24's (each pairs in its study)
    assert pairs == [("c-0.5b#1", "c-0.5b#2", 7047.2, 7004.5), ("c-0.5b-bc#1", "c-0.5b-bc#2", 7718.4, 6562.2),
                     ("c-0.5b-kw#0", "c-0.5b-kw#1", 9494.1, 8493.8),
                     # lease 68's, without and with fused kernels on one fast H100 host; its warm repeat of the
                     # offloaded one (c-0.5b-h68b #0) is paired with none: its host measured the pair
                     ("c-0.5b-h68#2", "c-0.5b-h68#1", 10755.7, 11287.2),
                     ("c-0.5b-h68#3", "c-0.5b-h68#0", 11007.2, 11135.1),
                     # lease 46's, its lane's cold first trial (#0) beside the other lane's: its update 2x at step 3
                     ("c-0.5b-h35#0", "c-0.5b-h35#1", 6098.3, 9757.9),
                     ("c-1.5b-h11#3", "c-1.5b-h11#2", 6109.1, 5664.6),
                     # lease 61's, its table's best beside it with params and optimizer offloaded, one H100 host
                     ("c-1.5b-h61#2", "c-1.5b-h61#4", 8728.3, 6181.0), ("c-1.5b-h#2", "c-1.5b-h#1", 8510.8, 6462.5),
                     ("c-1.5b-rc#0", "c-1.5b-g1#1", 7586.9, 6113.6), ("c-1.5b-h36#0", "c-1.5b-h36#1", 7300.1, 6727.6),
                     ("c-3b#3", "c-3b#4", 3618.6, 3598.3),
                     ("c-3b-h10#0", "c-3b-h10#3", 3935.4, 4500.1), ("c-3b-h6#0", "c-3b-h6#1", 3426.7, 4612.4),
                     ("c-3b-h12#1", "c-3b-h12#0", 6946.0, 6545.2), ("c-3b-h12#3", "c-3b-h12#2", 6004.6, 5308.9),
                     # lease 42's selective recompute dyn16k/96k, its study holding no partner: lease 22's offloaded
                     ("c-3b-h24#3", "c-3b-h2#2", 5183.6, 5152.5),
                     # lease 45's re-run of it, no partner in its study either: lease 19's offloaded, the nearest lease
                     # not taken
                     ("c-3b-h34#3", "c-3b-g0#0", 6092.6, 5959.9),
                     # lease 52's 7B pick at util 0.3 without and with its parameters offloaded
                     ("c-7b-h50#1", "c-7b-h50#0", 3114.2, 3197.6)]


def test_a_trial_read_from_a_later_copy_finds_its_logs_where_it_ran() -> None:
    found = {f"{row.study}#{row.number}": memory_moments.trial_dir(db, row)
             for db, _, _, row in real_cases.measured_trials(DATA.glob("*/*.db"))}
    assert found["c-3b#3"] == L7 / "trial_0003" and found["c-3b#0"] == L7 / "trial_0000"
    assert found["c-3b#4"] == L10 / "c-3b_trial_0004" and found["c-3b-fl#0"] == L10 / "c-3b-fl_trial_0000"
    assert found["c-7b#0"] == L8 / "trial_0000" and found["c-7b#2"] == L9 / "c-7b_trial_0002"
    assert found["c-7b#3"] == L12 / "trial_0003" and found["c-7b-fl#0"] == L9 / "c-7b-fl_trial_0000"
    assert found["smoke-h100-b#1"] == DATA / "h100_2026-11-24_l3" / "l3b_trial_0001"
    # every ok trial of these leases kept its trace: a trial whose logs go missing would drop out of memory_moments
    assert all(found[k] is not None for k in ("c-3b#0", "c-3b#3", "c-3b#4", "c-3b-fl#0"))


def test_equal_copies_keep_the_last_and_diverged_copies_both_count(tmp_path: Path) -> None:
    for lease in ("a", "b", "c"):
        (tmp_path / lease).mkdir()
    shutil.copy(L7 / "c-3b.db", tmp_path / "a" / "c-3b.db")
    shutil.copy(L10 / "c-3b.db", tmp_path / "b" / "c-3b.db")
    shutil.copy(L10 / "c-3b.db", tmp_path / "c" / "c-3b.db")
    kept = [db for db, _, _ in real_studies.studies(tmp_path.glob("*/*.db"))]
    assert kept == [tmp_path / "c" / "c-3b.db"]
    # a copy holding a trial the other lacks (started elsewhere) is another run of the study: both count
    con = sqlite3.connect(tmp_path / "a" / "c-3b.db")
    con.execute("UPDATE autotune_trials SET started_at = '2026-01-01 00:00:00.000000' WHERE number = 3")
    con.commit()
    con.close()
    kept = [db for db, _, _ in real_studies.studies(tmp_path.glob("*/*.db"))]
    assert kept == [tmp_path / "a" / "c-3b.db", tmp_path / "c" / "c-3b.db"]


def test_the_reclassifier_rereads_a_wrong_reading_from_the_trials_committed_log(tmp_path: Path) -> None:
    """A copy of lease 12's database with trial 2 read back as a GPU OOM (as the classifier once read Ray's memory
    monitor) is set right from the log committed in lease 9, where the trial ran; its note keeps the old reading."""
    from benchmarks.gpu_verl import reclassify

    (tmp_path / "l12").mkdir()
    db = tmp_path / "l12" / "c-7b.db"
    shutil.copy(L12 / "c-7b.db", db)
    shutil.copytree(L9, tmp_path / L9.name)
    store = Store(f"sqlite:///{db}")
    row = store.trial("c-7b", 2)
    store.update_trial(row.id, status="oom", reason="GPU out of memory in training", note="",
                       extra={**row.extra, "failure": "gpu_oom"})
    assert reclassify.reclassify(db) == ["l12/c-7b.db c-7b#2: gpu_oom -> host_oom"]
    row = store.trial("c-7b", 2)
    assert row.extra["failure"] == "host_oom" and row.reason.startswith("host RAM exhausted")
    assert "was gpu_oom (GPU out of memory in training)" in row.note
    assert reclassify.reclassify(db) == []  # read right now: left alone


def test_a_trial_cut_after_its_measured_step_reads_as_measured_from_its_files() -> None:
    """Lease 25's c-3b-h3 #2: the lease's deadline SIGTERMed it in step 4, the extra step that measures the noise; the
    database says interrupted, with nothing of its steps (left as committed). Read from its metrics, console and NVML
    trace, it measured what an ok trial does; a trial interrupted before its measured step stays out."""
    l25 = DATA / "h100_2026-11-27_l25"
    raw = Store(f"sqlite:///{l25 / 'c-3b-h3.db'}")
    assert raw.trial("c-3b-h3", 2).status == "interrupted" and not raw.steps(raw.trial("c-3b-h3", 2).id)
    (db, store, study), = [s for s in real_studies.studies([l25 / "c-3b-h3.db"])]
    rows = {r.number: r for r in store.trials(study.name)}
    two, zero = rows[2], rows[0]
    assert two.status == "ok" and round(two.throughput, 2) == 3830.96 and two.peak_memory_gib == 53.157
    assert "in step 4, after its measured step 3 (the extra step that measures the noise)" in two.extra[
        real_studies.CUT]
    assert round(two.phase_timings["step"], 2) == 39.67 and round(two.phase_timings["update_actor"], 2) == 26.29
    assert [s.step for s in store.steps(two.id)] == [1, 2, 3]
    assert two.extra["job_defaults"] == zero.extra["job_defaults"]  # the node's defaults, from its own command
    assert real_studies.CUT not in zero.extra
    assert [(s.step, s.metrics) for s in store.steps(zero.id)] == [(s.step, s.metrics) for s in raw.steps(zero.id)]
    # its timings read off its time-stamped console as the runner reads them: an ok trial's console gives its record
    milestones, step_at, _ = real_studies.console_times(l25 / "c-3b-h3_trial_0000" / "verl.ts.log")
    recorded = {k: v for k, v in zero.extra["timings"].items() if k not in ("measured_s", "wall_s")}
    assert {f"{k}_s" for k in milestones} == set(recorded)
    assert all(abs(milestones[k[:-2]] - v) < 0.01 for k, v in recorded.items())
    assert abs(step_at[3] - zero.extra["timings"]["measured_s"]) < 0.01
    assert two.extra["timings"]["vllm_ready_s"] == 163.23 and two.extra["step_spans_s"]["3"] == [294.47, 334.08]
    for lease, name, number in (("h100_2026-11-25_l4", "c-0.5b", 3), ("h100_2026-11-25_l6", "c-0.5b-l6", 0)):
        db = DATA / lease / f"{name}.db"
        row = Store(f"sqlite:///{db}").trial(name, number)
        assert row.status == "interrupted" and real_studies.trial_dir(db, row, "metrics.jsonl") is not None
        assert real_studies.read_in_cut(db, row, Store(f"sqlite:///{db}").get_study(name)) is None  # step 1 only


def test_a_trial_stopped_before_it_recorded_its_log_path_is_found_by_its_number() -> None:
    db = DATA / "h100_2026-11-25_l4" / "c-0.5b.db"
    row = Store(f"sqlite:///{db}").trial("c-0.5b", 3)
    assert row.log_path is None
    assert real_studies.trial_dir(db, row, holding="verl.log") == db.parent / "trial_0003"
