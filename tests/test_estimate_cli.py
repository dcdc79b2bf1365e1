"""`autotune estimate`: both memory verdicts, the per-moment peaks and the lengths assumed, in JSON and in words."""

import json

from autotune.cli import main

MBS = ["--set", "tp=2", "--set", "rollout_tp=1", "--set", "use_dynamic_bsz=false",
       "--set", "ppo_micro_batch_size_per_gpu=2", "--set", "log_prob_micro_batch_size_per_gpu=4",
       "--set", "param_offload=true", "--set", "optimizer_offload=true", "--set", "use_fused_kernels=true"]


def test_estimate_json_has_both_verdicts_and_lengths(capsys):
    code = main(["estimate", "--model", "qwen2.5-7b", *MBS, "--response-length", "1500", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0
    assert doc["fits"] is True and doc["worst_case_fits"] is False  # fits at step 3, not at 8k responses
    assert doc["verdict"].startswith("fits at step 3; OOM in update_actor once responses reach ")
    assert doc["memory"]["oom_response_length"] > 3000  # beyond the step's longest response (2 x 1500)
    assert set(doc["moment_peaks_gib"]) == set(doc["worst_case_moment_peaks_gib"]) == {
        "vllm_start", "reshard", "rollout", "old_log_prob", "update"}
    assert doc["worst_case_moment_peaks_gib"]["update"] > 79.6 > doc["moment_peaks_gib"]["update"]
    assert doc["lengths"]["at_step"]["response_mean"] == 1500 and doc["lengths"]["worst_case"]["worst_case"]
    assert "micro_batch_size_per_gpu=2 x sequence length" in doc["micro_batch_bound"]


def test_estimate_words_and_the_default_worst_case(capsys):
    code = main(["estimate", "--model", "qwen2.5-7b", *MBS, "--response-length", "1500"])
    out = capsys.readouterr().out
    assert code == 0 and "memory: fits at step 3; OOM in update_actor once responses reach" in out
    assert "lengths: --response-length 1500" in out and "grows with the responses" in out
    # Without any length: the step's verdict is the worst case's (nothing launches that could OOM unseen).
    code = main(["estimate", "--model", "qwen2.5-7b", *MBS, "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["fits"] is False and doc["verdict"].startswith("OOM at step 3")


def test_an_impossible_response_length_is_a_clear_error(capsys):
    code = main(["estimate", "--model", "qwen2.5-7b", "--response-length", "9000"])
    err = capsys.readouterr().err
    assert code == 2 and "--response-length 9000 must be between 1 and data.max_response_length (8192)" in err


def test_a_knob_the_user_does_not_set_takes_verls_default(capsys, tmp_path):
    """`--set tp=4` keeps sequence parallel on (verl 0.9.1's default for TP > 1), as verl would run it; a job that
    turns it off itself keeps it off."""
    code = main(["estimate", "--model", "qwen2.5-7b", "--set", "tp=4", "--set", "use_dynamic_bsz=true", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["params"]["tp"] == 4 and doc["params"]["sequence_parallel"] is True
    assert doc["moment_peaks_gib"]["update"] < 60  # sequence parallel shards the activations over TP (66 without)
    job = tmp_path / "job.yaml"
    job.write_text("actor_rollout_ref.actor.megatron.sequence_parallel: false\n")
    main(["estimate", "--model", "qwen2.5-7b", "--job", str(job), "--set", "tp=4", "--set", "use_dynamic_bsz=true",
          "--json"])
    assert json.loads(capsys.readouterr().out)["params"]["sequence_parallel"] is False


def test_an_enqueued_configuration_runs_as_verl_would(tmp_path):
    from autotune.cli.run import _requested
    from autotune.runners.simulate import SimulateRunner
    from tests.conftest import make_setup

    params, warning = _requested(make_setup(), SimulateRunner(), "tp=4,use_dynamic_bsz=true")
    assert params["tp"] == 4 and params["sequence_parallel"] is True and warning is None  # it fits: nothing to say


def test_a_configuration_that_breaks_a_rule_gets_no_memory_verdict(capsys):
    """verl's defaults leave the micro-batch sizes null with dynamic batching off: a rule, not a memory verdict;
    the line says what to set, and the exit code says the configuration is invalid."""
    code = main(["estimate", "--model", "qwen2.5-7b"])
    out = capsys.readouterr().out
    assert code == 2 and "breaks batch_divisibility" in out and "fits:" not in out and "memory:" not in out
    assert "set both (ppo's dividing the mini-batch per GPU, 512/8 = 64 samples), or use_dynamic_bsz=true" in out
    code = main(["estimate", "--model", "qwen2.5-7b", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 2 and doc["violations"][0]["rule"] == "batch_divisibility" and doc["verdict"].startswith("breaks")


def test_estimate_of_a_training_only_study_shows_what_it_assumes(capsys, tmp_path):
    """A replayed Megatron-core study measures the training phase alone: no vLLM (no 0.00 GiB KV cache line) and
    each micro-batch one sequence of the token budget (not 'responses 12288' above a 6144 cap)."""
    from autotune.runners.replay import ReplayRunner, ReplayTable
    from autotune.study.study import Tuner
    from tests.conftest import REPO

    table = ReplayTable.load(REPO / "benchmarks" / "landscapes" / "qwen2.5-7b-L8-g4.csv")
    db = f"sqlite:///{tmp_path / 'a.db'}"
    Tuner(table.setup(), ReplayRunner(table), db, "r", space_text=table.space_text()).run(n_trials=1)
    code = main(["estimate", "--storage", db, "--study", "r", "--set", "use_dynamic_bsz=true", "--set", "tp=2"])
    out = capsys.readouterr().out
    assert code == 0 and "vLLM KV cache" not in out and "no vLLM: this study measures the training phase alone" in out
    assert "responses 12288" not in out and "each micro-batch one sequence of 16384 tokens" in out
