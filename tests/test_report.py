"""Trial labels and the end-of-run report, through the CLI as a user runs it (simulated studies on SQLite)."""

from __future__ import annotations

import inspect
import json

import pytest
import yaml

from autotune import verl
from autotune.candidate import DEFAULTS_NAME, STOCK, STOCK_NAME, Candidate
from autotune.results.labels import label
from autotune.results.report import PRUNE_KINDS, prune_kind, report_lines, study_report
from autotune.runners.probed import ProbedRunner
from autotune.runners.replay import ReplayRunner
from autotune.store.schema import TrialRow
from tests.conftest import cli_run as run
from tests.conftest import make_setup


@pytest.fixture
def job_file(tmp_path):
    """A job that sets tuned keys: the user's own configuration, launched as the baseline trial."""
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({
        verl.keys_for("tp")[0]: 4, verl.keys_for("gpu_memory_utilization")[0]: 0.5,
        verl.keys_for("use_dynamic_bsz")[0]: True,
    }))
    return str(path)


def test_label_shows_what_differs_from_the_reference():
    ref = STOCK
    assert label(ref, ref) == "tp2pp2 rtp2"  # the reference itself: its layout alone
    c = Candidate.from_params({"tp": 2, "pp": 1, "use_dynamic_bsz": True, "ppo_max_token_len_per_gpu": 16384,
                               "log_prob_max_token_len_per_gpu": 98304, "gpu_memory_utilization": 0.7,
                               "param_offload": True, "use_fused_kernels": True}, ref)
    assert label(c, ref) == "tp2 rtp2 dyn16k/96k util0.7 offload:params"
    full = Candidate.from_params({"recompute": "full", "recompute_method": "block", "recompute_num_layers": 2,
                                  "use_fused_kernels": False}, ref)
    assert label(full, ref) == "tp2pp2 rtp2 rc:full:b2 no-fused"
    # Two trials with the same layout that differ in one knob never share a label
    assert label(Candidate.from_params({"gpu_memory_utilization": 0.7}, ref), ref) != label(ref, ref)


def test_labels_tell_every_configuration_apart_in_status_best_and_export(capsys, db, job_file, tmp_path):
    code, out, _ = run(capsys, "run", "--model", "qwen2.5-7b", "--job", job_file, "--storage", db,
                       "--n-trials", "10", "--json")
    assert code == 0
    summary = json.loads(out)
    code, out, _ = run(capsys, "status", "--storage", db, "--all", "--json")
    trials = json.loads(out)["trials"]
    by_label: dict[str, set[str]] = {}
    by_config: dict[str, set[str]] = {}
    for t in trials:  # what verl runs: the verl keys of the candidate
        config = json.dumps(Candidate(**t["params"]).verl_overrides(), sort_keys=True)
        by_label.setdefault(t["label"], set()).add(config)
        by_config.setdefault(config, set()).add(t["label"])
    assert all(len(v) == 1 for v in by_label.values()), "two configurations share a label"
    assert all(len(v) == 1 for v in by_config.values()), "one configuration has two labels"
    same_layout = {}
    for t in trials:
        same_layout.setdefault(t["layout"], set()).add(t["label"])
    assert any(len(v) > 1 for v in same_layout.values())  # what the old `tp2 | rollout tp1` hid
    # The same label in the run's JSON, the status table, `best` and the export's header
    best_label = summary["best"]["label"]
    assert best_label == next(t["label"] for t in trials if t["number"] == summary["best"]["trial"])
    code, out, _ = run(capsys, "status", "--storage", db)
    assert code == 0 and best_label in out and "configuration" in out
    code, out, _ = run(capsys, "best", "--storage", db)
    assert code == 0 and out.splitlines()[0].endswith(f"({best_label})")
    assert out.count(best_label) == 1 and "layout:" not in out  # the label once, not the layout beside it
    code, out, _ = run(capsys, "best", "--storage", db, "--json")
    assert code == 0 and json.loads(out)["label"] == best_label
    for fmt in ("sh", "yaml", "ray"):
        code, out, _ = run(capsys, "export", "--storage", db, "--format", fmt)
        assert code == 0 and f"({best_label})" in out.splitlines()[1 if fmt != "yaml" else 0]


def test_run_summary_speedups_gpu_time_and_prunes(capsys, db, job_file):
    code, out, _ = run(capsys, "run", "--model", "qwen2.5-7b", "--job", job_file, "--storage", db,
                       "--n-trials", "8", "--json")
    assert code == 0
    rep = json.loads(out)["report"]
    code, out, _ = run(capsys, "status", "--storage", db, "--all", "--json")
    trials = {t["number"]: t for t in json.loads(out)["trials"]}
    refs = {r["what"]: r for r in rep["references"]}
    assert set(refs) == {"your configuration (baseline)", STOCK_NAME} and not rep["no_baseline"]
    base = refs["your configuration (baseline)"]
    assert trials[base["trial"]]["origin"] == "baseline"
    assert trials[base["trial"]]["params"]["tp"] == 4 and trials[base["trial"]]["params"]["use_dynamic_bsz"]
    best = trials[rep["best_trial"]]
    for r in refs.values():
        if r["status"] == "ok":
            ran = trials[r["ran_as"] if r["ran_as"] is not None else r["trial"]]
            assert r["throughput"] == ran["throughput"] and r["how"] == "SIMULATED"
            assert r["speedup"] == pytest.approx(best["throughput"] / ran["throughput"])
        else:
            assert r["speedup"] is None and r["note"]
    pruned = [t for t in trials.values() if t["status"] == "pruned"]
    assert sum(rep["pruned"].values()) == len(pruned) > 0
    assert set(rep["pruned"]) <= {kind for _, kind in PRUNE_KINDS} | {"other"}
    assert "other" not in rep["pruned"]
    assert rep["simulated"] and rep["gpus"] == 8
    # The same in words at the end of a run (a second run of the same study: nothing new to launch)
    code, out, _ = run(capsys, "run", "--model", "qwen2.5-7b", "--job", job_file, "--storage", db, "--n-trials", "8")
    assert code == 0
    for r in refs.values():
        if r["status"] == "ok":
            assert f"{r['speedup']:.2f}x over {r['what']}" in out
        else:
            assert f"no speed-up over {r['what']}" in out
    assert "GPU time: none spent (SIMULATED)" in out
    assert rep["gpu_hours"] == 0.0  # the text says none: the JSON does not carry the simulator's wall time
    assert "pruned in this study, by kind: " + next(iter(rep["pruned"])) in out


def _row(number: int, key: str, status: str, thr: float | None, origin: str = "sampler", duration: float = 1800.0,
         reason: str = "", launched: bool = True, **extra) -> TrialRow:
    return TrialRow(number=number, candidate_key=key, status=status, throughput=thr, origin=origin,
                    duration_s=duration if launched else 0.0, reason=reason, launched=launched, simulated=False,
                    backend="verl", params=Candidate().params(), extra=extra or None)


def test_report_follows_a_duplicate_and_counts_gpu_hours():
    rows = [
        _row(0, "a", "ok", 3000.0, "model-seed"),
        _row(1, "a", "pruned", None, "stock", reason="duplicate of trial 0: same configuration, not launched again",
             launched=False),
        _row(2, "b", "ok", 2000.0, "baseline", confirm={"wall_s": 900.0}),
        _row(3, "c", "oom", None, reason="GPU out of memory in training: ..."),
        _row(4, "d", "pruned", None, reason="constraint heads_per_tp: 28 heads ...; world_size: ...", launched=False),
        _row(5, "e", "pruned", None, reason="predicted OOM: update: predicted 90 GiB > 80 GiB", launched=False),
    ]
    rep = study_report(rows, rows[0], 8, lambda p: "L")
    refs = {r.what: r for r in rep.references}
    stock, base = refs[STOCK_NAME], refs["your configuration (baseline)"]
    assert stock.ran_as == 0 and stock.speedup == pytest.approx(1.0) and stock.how == "measured"
    assert base.speedup == pytest.approx(1.5) and base.ran_as is None
    # 3 launched trials x 1800 s + one 900 s confirmation, on 8 GPUs
    assert rep.gpu_hours == pytest.approx((3 * 1800 + 900) * 8 / 3600)
    assert rep.pruned == {"duplicate": 1, "static constraint": 1, "memory model": 1}
    assert rep.pruned_detail == {"static constraint": {"heads_per_tp": 1}, "memory model": {"update": 1}}
    lines = "\n".join(report_lines(rep))
    assert "1.50x over your configuration (baseline)" in lines and "ran as trial 0" in lines
    assert "GPU time: 14.00 GPU-hours (3 launched trials, 8 GPUs each;" in lines
    # A confirmed best is compared at the measured step, like the references
    confirmed = _row(0, "a", "ok", 2700.0, "model-seed", measured_step_throughput=3000.0)
    assert study_report([confirmed, *rows[1:]], confirmed, 8, lambda p: "L").best_throughput == 3000.0
    # The stock trial that never ran: said in words, no number
    rows[1] = _row(1, "s", "oom", None, "stock", reason="GPU out of memory in training: CUDA out of memory")
    stock = {r.what: r for r in study_report(rows, rows[0], 8, lambda p: "L").references}[STOCK_NAME]
    assert stock.speedup is None and stock.note.startswith("oom: GPU out of memory")


def test_prune_kinds_match_the_words_of_their_producers():
    setup = make_setup()
    heads = setup.evaluate(Candidate.from_params({"tp": 3}, setup.base))
    assert prune_kind(heads.prune_reason())[0] == "static constraint"
    assert prune_kind(heads.prune_reason())[1] == heads.violations[0].rule
    oom = setup.evaluate(setup.stock)  # verl's stock layout is predicted to OOM on the default job
    assert not oom.feasible and not oom.violations
    assert prune_kind(oom.prune_reason()) == ("memory model", oom.memory.reasons()[0].split(":")[0])
    assert "probe OOM, full trial not launched" in inspect.getsource(ProbedRunner)
    assert 'f"not in the table {' in inspect.getsource(ReplayRunner.refuse)
    from autotune.store.store import Store
    assert 'f"duplicate of trial {dup}' in inspect.getsource(Store.claim_launch)


def test_interrupted_runs_are_not_launched_trials_but_their_gpu_time_counts():
    """`--n-trials` counts a re-queued trial once (its re-run): the report's launched count is the run's first line's,
    and the interrupted runs are named apart, their GPU time included."""
    rows = [
        _row(0, "a", "ok", 3000.0, "model-seed"),
        _row(1, "b", "interrupted", None, reason="interrupted by the user (Ctrl-C); re-queued on resume",
             duration=600.0),
        _row(2, "b", "ok", 2000.0, "requeue"),
    ]
    rep = study_report(rows, rows[0], 8, lambda p: "L")
    assert rep.launched == 2 and rep.interrupted == 1
    assert rep.gpu_hours == pytest.approx((2 * 1800 + 600) * 8 / 3600)
    assert "(2 launched trials and 1 interrupted, re-queued run, 8 GPUs each;" in "\n".join(report_lines(rep))


def test_replayed_and_simulated_studies_spend_no_gpu_hours_in_json_either():
    for backend, simulated, words in (("replay", False, "none spent now (REPLAYED"), ("simulate", True,
                                                                                       "none spent (SIMULATED)")):
        rows = [TrialRow(number=0, candidate_key="a", status="ok", throughput=100.0, origin="sampler",
                         duration_s=0.002, reason="", launched=True, simulated=simulated, backend=backend,
                         params=Candidate().params())]
        rep = study_report(rows, rows[0], 8, lambda p: "L")
        assert rep.gpu_hours == 0.0 and rep.as_dict()["gpu_hours"] == 0.0
        assert f"GPU time: {words}" in "\n".join(report_lines(rep))


def test_verl_example_and_verl_defaults_are_named_apart():
    assert STOCK_NAME != DEFAULTS_NAME and "stock" not in STOCK_NAME + DEFAULTS_NAME
    rows = [_row(0, "a", "ok", 3000.0, "model-seed"), _row(1, "s", "ok", 2000.0, "stock")]
    lines = "\n".join(report_lines(study_report(rows, rows[0], 8, lambda p: "L")))
    assert f"1.50x over {STOCK_NAME} (trial 1" in lines
    assert f"so your configuration is {DEFAULTS_NAME} (not the example's)" in lines


def test_the_report_says_start_up_vs_step_hours_the_best_trials_noise_and_a_tie():
    def timed(number: int, key: str, thr: float, spread: float) -> TrialRow:
        return _row(number, key, "ok", thr, timings={"wall_s": 450.0, "ray_up_s": 24.0},
                    step_spans_s={"1": [270.0, 360.0], "2": [360.0, 395.0], "3": [395.0, 430.0]},
                    noise={"spread": spread, "steps": [3, 4], "per_step": {"3": thr}})

    rows = [timed(0, "a", 3000.0, 0.02), timed(1, "b", 2960.0, 0.03), timed(2, "c", 2000.0, 0.01)]
    rep = study_report(rows, rows[0], 8, lambda p: "L")
    lines = "\n".join(report_lines(rep))
    # 3 runs x (270 s start-up, 160 s steps, 20 s after) on 8 GPUs
    assert "of which start-up 1.80 GPU-hours, steps 1.07, the rest (stop, clean-up) 0.13: GPU busy 36%" in lines
    assert "best trial 0: steps 3-4 spread 2.0% (measured noise); GPU busy 36% of this trial" in lines
    assert rep.tie is not None and rep.tie["trials"] == [0, 1]
    assert "tie within measured noise (3.0%): trial 0 and trial 1 are 1.3% apart" in lines
    # without noise steps (an older study, or --extra-steps 0) nothing is called a tie
    quiet = [_row(0, "a", "ok", 3000.0), _row(1, "b", "ok", 2999.0)]
    rep = study_report(quiet, quiet[0], 8, lambda p: "L")
    assert rep.tie is None and "best trial 0: noise not measured" in "\n".join(report_lines(rep))
    assert "start-up" not in "\n".join(report_lines(rep))


def test_verls_example_configuration_for_a_moe_model_is_verls_moe_example_and_runs():
    """A MoE study's reference is verl's single-node MoE example (experts over the node, all offloaded, the CPU
    optimizer, budgets of one longest sequence), not the dense example (TP 2 / PP 2 / EP 1 cannot hold a 30B MoE:
    predicted out of memory, so no MoE study could say what it gains over the example)."""
    setup = make_setup("qwen3-30b-a3b", gpu="h200")
    stock = setup.stock
    assert setup.space.name == "moe" and (stock.tp, stock.pp, stock.ep, stock.etp, stock.rollout_tp) == (1, 1, 8, 1, 4)
    assert stock.use_dynamic_bsz and stock.optimizer_cpu_offload and stock.param_offload
    assert stock.ppo_max_token_len_per_gpu >= setup.job.max_seq_len  # the space's nearest budget above
    ev = setup.evaluate(stock)
    assert ev.violations == () and ev.memory.fits
    assert make_setup().stock == STOCK  # the dense space tunes them: the example as it is


def test_a_moe_study_reports_its_speedup_over_verls_example(tmp_path, capsys):
    code, out, err = run(capsys, "run", "--model", "qwen3-30b-a3b", "--gpu-type", "h200", "--gpus", "8",
                         "--backend", "simulate", "--n-trials", "4", "--storage", f"sqlite:///{tmp_path / 'm.db'}",
                         "--study", "m", "--workdir", str(tmp_path / "w"), "--json")
    assert code == 0, err
    ex = {r["what"]: r for r in json.loads(out)["report"]["references"]}[STOCK_NAME]
    assert ex["status"] == "ok" and ex["label"] == "tp1ep8 rtp4" and ex["speedup"] >= 1.0, ex
