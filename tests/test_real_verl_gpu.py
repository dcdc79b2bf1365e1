"""The runner's parsing and failure classes on real verl 0.9.1 GPU runs (one H100, 2026-11-24, logs as the runner
recorded them: tests/data/real_verl_gpu/; benchmarks/gpu_verl/ made them, benchmarks/results/real_verl_gpu.md says
what each trial was)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from autotune import verl
from autotune.candidate import Candidate
from autotune.cluster import GIB, Cluster, make_cluster
from autotune.estimate.memory import estimate_memory
from autotune.estimate.throughput import estimate_throughput
from autotune.job import Job
from autotune.model import ModelArch, get_model
from autotune.store.schema import TrialRow
from autotune.store.store import Store
from autotune.verl import log as verl_log
from autotune.verl.log import LineTail, RunLog, classify

LEASE1 = Path(__file__).parent / "data" / "real_verl_gpu" / "h100_2026-11-24"


def log_of(trial: str) -> str:
    return (LEASE1 / trial / "verl.log").read_text(errors="replace")


@pytest.mark.parametrize("trial,rc,killed,kind,words", [
    # mbridge 0.15.1 vs megatron-core 0.19 before the shim reached the class mbridge uses: deterministic, no retry
    ("trial_0000", 1, False, "software_error", "has no attribute 'encoder_and_decoder'"),
    # vLLM asked for 0.95 of the GPU beside the resident actor; verl's driver kept waiting (stopped by the runner)
    ("trial_0005", -15, True, "vllm_start_oom", "(0.95, 75.22 GiB)"),
    # 64 sequences a micro-batch without dynamic batching: the update's logits
    ("trial_0006", 1, False, "gpu_oom", "Tried to allocate 690.00 MiB"),
])
def test_real_failures_are_classified(trial: str, rc: int, killed: bool, kind: str, words: str) -> None:
    f = classify(log_of(trial), rc, killed_by_us=killed)
    assert f.kind == kind and words in f.message, (f.kind, f.message)


def test_the_real_vllm_start_failure_is_a_line_no_run_recovers_from(tmp_path: Path) -> None:
    """What makes the runner stop a run that keeps waiting after vLLM's worker died (FATAL_LINE_PATTERNS)."""
    log = tmp_path / "verl.log"
    log.write_text(log_of("trial_0005"))
    run = RunLog(LineTail(log), LineTail(tmp_path / "none.jsonl"), started=0.0)
    run.poll(final=True)
    assert run.fatal_at is not None and not run.steps


def test_real_startup_milestones_are_read_at_their_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The runner's own time-stamped copy of a real run (verl.ts.log) replayed line by line at its stamps: each
    milestone is noted when its line came (the OOM'd trial 6 ran up to its first step's update)."""
    stamped = [(float(m.group(1)), m.group(2)) for m in re.finditer(
        r"^\[\s*([\d.]+)\] (.*)$", (LEASE1 / "trial_0006" / "verl.ts.log").read_text(errors="replace"), re.M)]
    clock = [0.0]
    monkeypatch.setattr(verl_log, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    log = tmp_path / "verl.log"
    run = RunLog(LineTail(log), LineTail(tmp_path / "none.jsonl"), started=0.0)
    with log.open("a") as f:
        for at, line in stamped:
            if at > clock[0]:
                f.flush()
                run.poll()
                clock[0] = at
            f.write(line + "\n")
    run.poll(final=True)
    assert run.milestones == {"validated": 17.66, "ray_up": 24.36, "config": 56.31, "workers": 91.38,
                              "weights_loaded": 124.92, "vllm_ready": 265.48}
    assert list(run.milestones) == [k for k in verl.STARTUP_MILESTONES if k in run.milestones]  # in their order


def test_real_milestones_and_steps_of_a_run_that_measured(tmp_path: Path) -> None:
    """A real run that reached its measured step (Llama-3 lease, 2026-11-24): every milestone of verl's own start-up
    is found, in the order STARTUP_MILESTONES lists them, then its three steps."""
    log = tmp_path / "verl.log"
    log.write_text((LEASE1.parent / "h100_2026-11-24_l3" / "l3b_trial_0000" / "verl.log").read_text(errors="replace"))
    run = RunLog(LineTail(log), LineTail(tmp_path / "none.jsonl"), started=time.monotonic())
    run.poll(final=True)
    assert list(run.milestones) == ["validated", "ray_up", "config", "workers", "weights_loaded", "vllm_ready",
                                    "first_step"]
    assert sorted(run.step_at) == [1, 2, 3] and all(verl.PHASE_TIMINGS["step"] in run.steps[s] for s in (1, 2, 3))


def _vllm_failure_lines(text: str) -> list[str]:
    """The vLLM worker's failure block: the lines from 'WorkerProc failed to start.' to the ValueError, with values
    (pids, times, numbers, paths) blanked, so that what remains is the format."""
    lines = text.split("\n")
    start = next(i for i, ln in enumerate(lines) if "WorkerProc failed to start." in ln)
    end = next(i for i in range(start, len(lines)) if "ValueError: Free memory on device" in lines[i])
    return [re.sub(r"\d+(?:\.\d+)?", "N", ln) for ln in (lines[start], lines[start + 1], lines[end])]


@pytest.mark.parametrize("mode", ["vllm_start_oom", "vllm_start_hang"])
def test_the_doubles_vllm_start_failure_is_printed_as_the_real_one(tmp_path: Path, mode: str) -> None:
    """The double's vLLM lines against the real H100 log: coloured server prefix, the worker's own prefix, vLLM's
    log header, the message with the device name."""
    from tests.fake_verl import env_for, fake_runner, leftovers, make_spec
    from tests.test_real_verl import double_log

    if mode == "vllm_start_oom":
        lines, res = double_log(tmp_path, mode)
        text = "\n".join(lines)
        assert res.extra["failure"] == "vllm_start_oom"
    else:  # the driver keeps waiting: stopped by the runner once the fatal line has had its grace
        rec = tmp_path / "rec.jsonl"
        from tests.conftest import make_setup

        res = fake_runner(env_for(rec, FAKE_VERL_MODE=mode), fatal_grace_s=1.0, preflight=False).run(
            make_spec(make_setup(), tmp_path))
        assert leftovers(rec) == [] and res.extra["failure"] == "vllm_start_oom"
        text = Path(res.log_path).read_text()
    assert _vllm_failure_lines(text) == _vllm_failure_lines(log_of("trial_0005"))


# Lease 3 (2026-11-24, a fresh study on the same stack): `autotune doctor` found TE's fused attention failing and
# chose `unfused`; the model's best (dyn32k, no recompute) then ran out of memory in the update, because the memory
# model did not count unfused attention's score matrices. Lease 3b ran the fixed model's best and two others.
LEASE3 = Path(__file__).parent / "data" / "real_verl_gpu" / "h100_2026-11-24_l3"
SMOKE_JOB = Path(__file__).parents[1] / "benchmarks" / "gpu_verl" / "job_smoke.yaml"


def _lease3_rows() -> list[tuple[str, TrialRow]]:
    out = []
    for db, study in (("smoke_l3.db", "smoke-h100"), ("smoke_l3b.db", "smoke-h100-b")):
        out += [(study, r) for r in Store(f"sqlite:///{LEASE3 / db}").trials(study)
                if r.params and r.status in ("ok", "oom")]
    return out


def _smoke_setup() -> tuple[ModelArch, Cluster, Job]:
    return get_model("qwen2.5-0.5b"), make_cluster(1, 1, "h100"), Job.from_file(SMOKE_JOB)


def test_the_real_oom_under_unfused_attention_is_classified_in_the_update() -> None:
    f = classify((LEASE3 / "l3_trial_0000" / "verl.log").read_text(errors="replace"), 1, killed_by_us=False)
    assert f.kind == "gpu_oom" and "Tried to allocate 888.00 MiB" in f.message, (f.kind, f.message)


def test_unfused_attention_scores_decide_the_real_verdicts() -> None:
    """Every verdict of the five trials that ran and the one that ran out of memory is right once the node's
    attention backend (the doctor's `unfused`) is counted, and the OOM was missed without it."""
    m, cl, job = _smoke_setup()
    unfused = job.with_node_defaults({verl.ATTENTION_BACKEND: "unfused"})
    rows = _lease3_rows()
    assert sorted(r.status for _, r in rows) == ["ok"] * 5 + ["oom"]
    for study, r in rows:
        cand = Candidate(**r.params)
        est = estimate_memory(m, cl, unfused, cand)
        assert est.fits == (r.status == "ok"), (study, r.number, est.reasons())
        if r.status == "oom":
            assert est.binding.name == "update" and estimate_memory(m, cl, job, cand).fits  # the miss of lease 3
        else:  # the peak (NVML, every process) within the model's error
            assert abs(est.peak / GIB / r.peak_memory_gib - 1) < 0.2, (study, r.number, est.peak / GIB,
                                                                      r.peak_memory_gib)


def test_the_fixed_models_best_ran_and_was_the_fastest_measured() -> None:
    """Lease 3b's first trial is the model's best once unfused attention is counted: it ran, and measured faster
    than every configuration lease 3 and 3b chose by hand."""
    rows = [r for _, r in _lease3_rows() if r.status == "ok"]
    best = max(rows, key=lambda r: r.throughput or 0.0)
    assert best.origin == "model-seed" and best.params["recompute"] == "selective"
    assert best.throughput == pytest.approx(4977.8, abs=0.1)


# Leases 4 and 5 (2026-11-25): the doctor's cuDNN fix (CUDNN_PATH/CUDNN_HOME to torch's wheel) made TE's fused
# attention run; vLLM's compile cache kept under the work dir; one extra step per trial for the noise.
LEASE4 = Path(__file__).parent / "data" / "real_verl_gpu" / "h100_2026-11-25_l4"
LEASE5 = Path(__file__).parent / "data" / "real_verl_gpu" / "h100_2026-11-25_l5"


def _rows(db: Path, study: str) -> list[TrialRow]:
    return [r for r in Store(f"sqlite:///{db}").trials(study) if r.launched]


def test_the_campaign_ran_fused_attention_chosen_by_the_doctor() -> None:
    for text in ((LEASE4 / "doctor.txt").read_text(), (LEASE5 / "doctor.txt").read_text()):
        assert "cuDNN 91900" in text and "attention_backend=fused" in text and "doctor exit 0" in text
    rows = [r for r in _rows(LEASE4 / "c-0.5b.db", "c-0.5b") + _rows(LEASE5 / "c-1.5b.db", "c-1.5b")
            if r.status in ("ok", "oom")]  # the interrupted one was stopped by the lease, before a result
    assert len(rows) == 5
    assert all(r.extra["job_defaults"][verl.ATTENTION_BACKEND] == "fused" for r in rows)
    assert not any("cudnnFinalize" in (r.reason or "") for r in rows)


def test_every_fused_attention_memory_verdict_of_the_campaign_is_right() -> None:
    """Five verdicts with the attention the trials ran: four fitted and ran, the 1.5B micro-batches of 64 ran out of
    memory in the update as predicted. The interrupted trial measured nothing."""
    cases = [(get_model("qwen2.5-0.5b"), r) for r in _rows(LEASE4 / "c-0.5b.db", "c-0.5b")]
    cases += [(get_model("qwen2.5-1.5b"), r) for r in _rows(LEASE5 / "c-1.5b.db", "c-1.5b")]
    cases = [(m, r) for m, r in cases if r.status in ("ok", "oom")]
    assert sorted(r.status for _, r in cases) == ["ok"] * 4 + ["oom"]
    for m, r in cases:
        job = Job.from_file(SMOKE_JOB).with_node_defaults(r.extra["job_defaults"])
        est = estimate_memory(m, make_cluster(1, 1, "h100"), job, Candidate(**r.params))
        assert est.fits == (r.status == "ok"), (m.name, r.number, est.reasons())
        if r.status == "oom":
            assert est.binding.name == "update" and "Tried to allocate 43.07 GiB" in r.reason + r.log_excerpt


def test_the_second_trial_of_a_node_started_on_warm_compile_caches() -> None:
    rows = {r.number: r for r in _rows(LEASE4 / "c-0.5b.db", "c-0.5b")}
    assert [rows[n].extra["caches"] for n in (0, 1, 2)] == ["cold", "warm", "warm"]
    ready = [rows[n].extra["timings"]["vllm_ready_s"] for n in (0, 1, 2)]
    assert ready[1] < ready[0] - 30 and ready[2] < ready[0] - 30  # vLLM's compile cache: a minute saved


def test_the_extra_step_measured_the_noise_and_the_offload_pair_is_within_it() -> None:
    rows = {r.number: r for r in _rows(LEASE4 / "c-0.5b.db", "c-0.5b")}
    for n in (0, 1):
        noise = rows[n].extra["noise"]
        assert noise["steps"] == [3, 4] and 0.1 < noise["spread"] < 0.25
    off, on = rows[1], rows[2]  # the same configuration but parameter and optimizer offload
    assert {k: v for k, v in off.params.items() if "offload" not in k} == \
        {k: v for k, v in on.params.items() if "offload" not in k}
    assert on.params["param_offload"] and on.params["optimizer_offload"] and not off.params["param_offload"]
    assert abs(on.throughput / off.throughput - 1) < 0.01 < off.extra["noise"]["spread"]


# Gens whose batch's hand-over after verl's 2 s poll took longer than 0.3 s at a later step (trial, step): both on lease
# 33's node, four lanes of one host, while other lanes were starting or stepping.
SLOW_HAND_OVERS = {("h200_2026-11-27_l33/c-0.5b-t2_trial_0003", 4), ("h200_2026-11-27_l33/c-3b-mb2_trial_0002", 3),
                   ("h200_2026-11-28_l43/c-3b-h27_trial_0002", 4)}


def test_every_real_gen_is_the_rollout_at_verl_s_next_2_s_poll() -> None:
    """verl 0.9.1's V1 trainer times `gen` around ReplayBuffer.sample(), which checks for the finished rollout every
    2 s (autotune.verl.SAMPLE_POLL_S): each gen of every committed real trial, at every step, is a multiple of 2 s
    plus the batch's hand-over (0.04-0.3 s: lease 62's H100, the fastest host yet, handed over in 0.047-0.05 s, the
    others in 0.05 s or more; a trial's first step under 0.7 s: lease 32's cold 0.5B, one lane of four
    starting together on an H200 node, handed its first batch over in 0.68 s; on lease 33's, the same plan on a
    second four-lane node, two later steps handed theirs over in 0.47 and 1.02 s, and on lease 43's two-lane node one
    extra step in 0.96 s, SLOW_HAND_OVERS). The model prices
    the wait (half an interval on average) only where verl polls."""
    steps = [(f.parent.parent.name + "/" + f.parent.name, json.loads(line))
             for f in sorted(LEASE1.parent.glob("*/*/metrics.jsonl")) for line in f.read_text().splitlines()
             if line.strip()]
    gens = [(t, s["step"], float(s["data"]["timing_s/gen"])) for t, s in steps if "timing_s/gen" in s.get("data", {})]
    assert len(gens) >= 60
    late = {(t, n): g % verl.SAMPLE_POLL_S for t, n, g in gens
            if not 0.04 < g % verl.SAMPLE_POLL_S < (0.7 if n == 1 else 0.3)}
    assert set(late) == SLOW_HAND_OVERS and all(r < 1.1 for r in late.values()), late
    gens = [g for _, _, g in gens]
    assert len({round(g // verl.SAMPLE_POLL_S) for g in gens}) >= 5  # from 6 to 18 s: not one value by chance
    m, cl, c = get_model("qwen2.5-0.5b"), make_cluster(1, 1, "h100"), Candidate.from_params({"rollout_tp": 1})
    polled, awaited = (Job.from_mapping({verl.USE_V1: v}) for v in (True, False))
    assert Job.from_mapping({}).sample_poll_s == verl.SAMPLE_POLL_S and awaited.sample_poll_s == 0.0
    gen = [dict(estimate_throughput(m, cl, j, c).phases)["gen"] for j in (polled, awaited)]
    assert gen[0] - gen[1] == pytest.approx(verl.SAMPLE_POLL_S / 2)
