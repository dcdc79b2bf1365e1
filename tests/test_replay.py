"""The replay runner, its table format, the landscape conversion and the search-efficiency harness.

tests/data/replay_small.csv is hand-made (typed-in numbers, not measurements); tests/data/mcore_small.csv is a
hand-made excerpt in the probe CSV's format.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from autotune import cli
from autotune.candidate import Candidate
from autotune.cluster import Cluster, get_gpu_type
from autotune.estimate import evaluate
from autotune.job import Job
from autotune.model import get_model
from autotune.runners import RunnerUnavailable, make_runner
from autotune.runners.base import TrialStatus
from autotune.runners.replay import ReplayError, ReplayRunner, ReplayTable
from autotune.search.setup import setup_from_row
from autotune.store.store import Store
from autotune.study.study import Tuner

DATA = Path(__file__).resolve().parent / "data"
SMALL = DATA / "replay_small.csv"


@pytest.fixture
def table() -> ReplayTable:
    return ReplayTable.load(SMALL)


def _copy(tmp_path: Path, text: str, meta: bool = True, name: str = "t.csv") -> Path:
    p = tmp_path / name
    p.write_text(text)
    if meta:
        shutil.copy(SMALL.with_suffix(".meta.yaml"), p.with_suffix(".meta.yaml"))
    return p


HEADER = "tp,pp,vpp,cp,sequence_parallel,recompute,ppo_max_token_len_per_gpu,status,throughput\n"


# The table
def test_table_columns_rows_and_meta(table: ReplayTable) -> None:
    assert table.param_columns == ("tp", "pp", "vpp", "cp", "sequence_parallel", "recompute",
                                   "ppo_max_token_len_per_gpu")
    assert len(table.rows) == 13
    assert table.best.throughput == 9800 and table.best.line == 3
    assert table.objective == "train"
    oom = next(r for r in table.rows if r.status == TrialStatus.OOM)
    assert oom.throughput is None and oom.extra["error"] == "CUDA out of memory"
    assert table.rows[0].phases == {"step": 3.6} and table.rows[0].peak_mem_gib == 31.2


def test_space_is_the_tables_distinct_values(table: ReplayTable) -> None:
    space = table.space()
    assert space.name == "replay-replay_small"
    assert space["tp"].choices == (1, 2, 4)
    assert space["pp"].choices == (1, 2, 4)
    assert space["recompute"].choices == ("none", "selective", "full")
    assert space["ppo_max_token_len_per_gpu"].choices == (8192, 16384, 32768)
    assert space["vpp"].choices == (None, 2)  # pp=2 rows both with and without vpp: null stays a choice


def test_empty_cells_get_a_condition_from_an_earlier_column(tmp_path: Path) -> None:
    p = _copy(tmp_path, "tp,recompute,recompute_method,status,throughput\n"
                        "1,none,,ok,10\n1,full,uniform,ok,9\n1,full,block,oom,\n2,selective,,ok,8\n")
    space = ReplayTable.load(p).space()
    assert space["recompute_method"].choices == ("block", "uniform")
    assert [c.describe() for c in space["recompute_method"].when] == ["recompute in ('full',)"]


def test_meta_in_the_csv_header_block(tmp_path: Path) -> None:
    meta = SMALL.with_suffix(".meta.yaml").read_text()
    body = "".join(f"# {ln}\n" for ln in meta.splitlines()) + SMALL.read_text()
    p = _copy(tmp_path, body, meta=False)
    t = ReplayTable.load(p)
    assert t.meta["model"] == "qwen2.5-1.5b" and len(t.rows) == 13
    assert t.rows[1].line == 3 + len(meta.splitlines())  # lines count from the top of the file
    shutil.copy(SMALL.with_suffix(".meta.yaml"), p.with_suffix(".meta.yaml"))
    with pytest.raises(ReplayError, match="both in t.meta.yaml and in the CSV"):
        ReplayTable.load(p)


@pytest.mark.parametrize("text, meta, message", [
    ("tp,throughput\n1,5\n", True, "no `status` column"),
    ("tp,status,throughput\n1,crashed,\n", True, r"t.csv:2: status 'crashed'; use one of ok, oom, failed"),
    ("tp,status,throughput\ntwo,ok,5\n", True, r"t.csv:2: column tp: 'two' is not a int"),
    ("tp,status,throughput\n1,ok,\n", True, "an ok row needs a positive throughput"),
    ("tp,status,throughput\n1,oom,\n", True, "no row has status ok"),
    ("tp,sequence_parallel,status,throughput\n1,true,ok,5\n1,false,ok,6\n", True,
     "lines 2 and 3 are the same configuration"),
    ("tp,status,throughput\n1,ok,5\n", False, "no metadata; give model, gpu_type, gpus"),
    ("foo,status,throughput\n1,ok,5\n", True, "no parameter columns"),
    ("tp,ppo_max_token_len_per_gpu,status,throughput\n1,,ok,5\n1,8192,ok,6\n", True,
     "column ppo_max_token_len_per_gpu is empty in some rows"),
])
def test_bad_tables_say_what_is_wrong(tmp_path: Path, text: str, meta: bool, message: str) -> None:
    p = _copy(tmp_path, text, meta)
    with pytest.raises(ReplayError, match=message):
        ReplayTable.load(p).space()


def test_missing_table() -> None:
    with pytest.raises(ReplayError, match="does not exist"):
        ReplayTable.load("/nonexistent/t.csv")
    with pytest.raises(RunnerUnavailable, match="--table"):
        make_runner("replay")


# The runner
def test_runner_replays_rows_and_refuses_the_rest(table: ReplayTable) -> None:
    setup = table.setup()
    runner = ReplayRunner(table)
    assert runner.simulated is False and runner.name == "replay"
    best = Candidate.from_params({"tp": 1, "pp": 1, "cp": 1, "recompute": "none", "ppo_max_token_len_per_gpu": 16384},
                                 setup.base)
    assert runner.refuse(best, setup.job) is None
    row = runner.lookup(best, setup.job)
    assert row is not None and row.throughput == 9800
    absent = Candidate.from_params({"tp": 4, "pp": 4}, setup.base)
    assert "not in the table" in runner.refuse(absent, setup.job)
    # the job's fixed settings are part of a configuration: without dynamic batching it is another configuration
    assert runner.refuse(Candidate.from_params({"use_dynamic_bsz": False}, best), setup.job)


def test_tuner_with_replay_launches_only_rows_and_labels_results(table: ReplayTable, sqlite_url: str,
                                                                 tmp_path: Path) -> None:
    setup = table.setup()
    tuner = Tuner(setup, ReplayRunner(table), sqlite_url, seed=3, space_text=table.space_text(), workdir=tmp_path)
    summary = tuner.run(6)
    rows = tuner.store.trials(tuner.study_name)
    launched = [r for r in rows if r.launched]
    keys = set(ReplayRunner(table)._rows(setup.job))
    assert launched and all(r.candidate_key in keys for r in launched)
    assert len({r.candidate_key for r in launched}) == len(launched)  # nothing launched twice
    refused = [r for r in rows if r.status == "pruned" and r.reason.startswith("not in the table")]
    assert refused and all(r.candidate_key not in keys for r in refused)
    for r in launched:
        assert r.simulated is False and r.backend == "replay"
        assert r.extra["replayed_from"] == str(SMALL)
        assert r.reason.startswith("replayed:")
        line = r.extra["table_line"]
        src = next(x for x in table.rows if x.line == line)
        assert r.status == src.status.value and r.throughput == src.throughput
    assert tuner.store.best(tuner.study_name).throughput == 9800
    # the model seeds are ranked among the rows only: each one is launched (or is a row launched already)
    seeds = [r for r in rows if r.origin == "model-seed"]
    assert seeds and all(r.launched or r.reason.startswith("duplicate of trial") for r in seeds)
    assert summary["launched"] == len(launched)
    # the study remembers its objective: export and the dashboard rebuild the same setup
    assert setup_from_row(Store(sqlite_url).get_study(tuner.study_name)).objective == "train"


def test_cli_run_says_replayed_first(capsys: pytest.CaptureFixture, sqlite_url: str, tmp_path: Path) -> None:
    rc = cli.main(["run", "--backend", "replay", "--table", str(SMALL), "--storage", sqlite_url,
                   "--n-trials", "3", "--workdir", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0
    assert out.splitlines()[0].startswith("autotune: backend replay: every result is REPLAYED from replay of")
    assert "tokens/s/GPU replayed" in out and "tokens/s/GPU measured" not in out
    rc = cli.main(["status", "--storage", sqlite_url])
    assert rc == 0 and "replay" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["--backend", "replay"], "--backend replay needs --table"),
    (["--table", str(SMALL)], "--table is for --backend replay"),
    (["--backend", "replay", "--table", str(SMALL), "--model", "qwen2.5-7b"], "--model: with --backend replay"),
    (["--backend", "simulate"], "--model is required"),
])
def test_cli_replay_option_errors(capsys: pytest.CaptureFixture, sqlite_url: str, argv: list[str],
                                  message: str) -> None:
    assert cli.main(["run", "--storage", sqlite_url, *argv]) == 2
    assert message in capsys.readouterr().err


# The training-only objective
def test_train_objective_checks_the_update_alone() -> None:
    m = get_model("qwen2.5-7b")
    cl = Cluster(get_gpu_type("h100"), 1)
    job = Job.from_mapping({"actor_rollout_ref.actor.use_dynamic_bsz": True})
    cand = Candidate.from_params({"use_dynamic_bsz": True, "ppo_max_token_len_per_gpu": 16384})
    step = evaluate(m.with_layers(4), cl, job, cand)
    train = evaluate(m.with_layers(4), cl, job, cand, "train")
    assert any(v.rule == "rollout_tp" for v in step.violations)  # rollout TP 2 on a 1-GPU node
    assert not train.violations
    assert [mo.name for mo in train.memory.moments] == ["update"]
    upd = dict(train.memory.moments[0].terms)
    assert "vllm_cudagraphs" not in upd
    assert [k for k, _ in train.throughput.phases] == ["update_actor"]
    # each micro-batch is one sequence of the budget: longer ones pay more attention FLOPs per token
    m15 = get_model("qwen2.5-1.5b")
    speed = {t: evaluate(m15, cl, job, Candidate.from_params({"ppo_max_token_len_per_gpu": t}, cand), "train")
             for t in (16384, 65536)}
    assert speed[65536].throughput.throughput < speed[16384].throughput.throughput
    cl4 = Cluster(get_gpu_type("h100"), 4)
    attn_free = {t: evaluate(m15, cl4, job, Candidate.from_params({"ppo_max_token_len_per_gpu": t}, cand))
                 for t in (16384, 65536)}  # a whole step: samples keep the job's length whatever the budget
    assert dict(attn_free[65536].throughput.phases)["update_actor"] < dict(
        attn_free[16384].throughput.phases)["update_actor"]
    with pytest.raises(ValueError, match="unknown objective"):
        evaluate(m, cl, job, cand, "rollout")


# Landscapes and the benchmark harness
def test_make_landscapes_groups_and_converts(tmp_path: Path) -> None:
    from benchmarks import make_landscapes

    lands = make_landscapes.convert(make_landscapes.read_rows([DATA / "mcore_small.csv"]))
    assert list(lands) == ["qwen2.5-1.5b-g2"]  # the 7b group has 2 ok rows: too small, skipped
    rows, meta = lands["qwen2.5-1.5b-g2"]
    assert meta["objective"] == "train" and meta["gpus"] == 2 and meta["gpu_type"] == "h100"
    assert len(rows) == 7  # a2/a3 are one configuration: a2 (4 micro-batches) kept
    assert {r["probe_id"] for r in rows} == {"a1", "a2", "a4", "a5", "a6", "a7", "a8"}
    assert next(r for r in rows if r["probe_id"] == "a8")["status"] == "failed"
    assert any("a3" in n for n in meta["notes"])
    make_landscapes.write(lands, tmp_path)
    t = ReplayTable.load(tmp_path / "qwen2.5-1.5b-g2.csv")
    assert t.best.throughput == 20000 and t.setup().cluster.world_size == 2


def test_search_efficiency_harness(tmp_path: Path) -> None:
    from benchmarks import search_efficiency as se

    land = se.Landscape(SMALL)
    order = se.nemo_order(land)
    assert [(r.params["tp"], r.params["pp"]) for r in order[:3]] == [(1, 1), (1, 1), (1, 1)]
    assert [r.params["tp"] for r in order] == sorted(r.params["tp"] for r in order)
    traces = [se.run_one((str(SMALL), s, seed)) for s in se.STRATEGIES for seed in range(2)]
    for t in traces:
        assert t.launches and len({x.line for x in t.launches}) == len(t.launches)
        assert land.done(t)  # every strategy reaches 99% on a 13-row table
    grid = next(t for t in traces if t.strategy == "grid")
    assert [x.line for x in grid.launches] == [r.line for r in order[: len(grid.launches)]]
    summary = se.summarize(traces, {land.name: land})
    assert {r["strategy"] for r in summary} == set(se.STRATEGIES)
    rnd = next(r for r in summary if r["strategy"] == "random")
    assert rnd["trials97_median"] >= 1 and rnd["gpuh97_median"] > 0
    assert se.is_held_out("qwen2.5-7b-L8-g4") and not se.is_held_out("qwen2.5-1.5b-g2")
