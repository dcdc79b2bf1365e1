"""Host memory: Ray's memory monitor killed three real 7B trials with the optimizer on a 128 GiB host (H200 leases 9
and 12, tests/data/real_verl_gpu/h200_2026-11-26_l9, _l12). The failure reads as the host's, the correction learns
nothing about the GPU from it, and the memory model prunes what does not fit the node's memory."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from autotune import verl
from autotune.candidate import Candidate
from autotune.cluster import Cluster, detect_host_memory_gib, get_gpu_type, make_cluster
from autotune.estimate.host import DEFAULT_HOST_CALIBRATION
from autotune.estimate.memory import estimate_memory
from autotune.job import Job
from autotune.model import get_model
from autotune.verl.log import classify
from tests.conftest import REPO

DATA = REPO / "tests" / "data" / "real_verl_gpu"
HOST_OOMS = ("h200_2026-11-26_l9/c-7b_trial_0002", "h200_2026-11-26_l9/c-7b-fl_trial_0000",
             "h200_2026-11-26_l12/trial_0003")
LENT_HOST_GIB = 125.87  # the lent machines' cgroup limit, as Ray's message gives it (135148564480 B)
JOB = Job.from_file(REPO / "benchmarks" / "gpu_verl" / "job_smoke.yaml")


def smoke(**knobs: object) -> Candidate:
    base: dict[str, object] = dict(tp=1, pp=1, rollout_tp=1, use_dynamic_bsz=True, ppo_max_token_len_per_gpu=8192,
                                   log_prob_max_token_len_per_gpu=32768, gpu_memory_utilization=0.35,
                                   use_fused_kernels=True)
    return Candidate(**{**base, **knobs})


KILLED = {  # the three configurations Ray's memory monitor killed, as the trials ran them
    "cpu-adam 0.75": smoke(recompute="full", optimizer_cpu_offload=True, optimizer_offload_fraction=0.75),
    "optimizer offload": smoke(recompute="full", optimizer_offload=True, gpu_memory_utilization=0.4),
    "cpu-adam 0.5 + optimizer offload": smoke(recompute="selective", optimizer_offload=True,
                                              optimizer_cpu_offload=True, optimizer_offload_fraction=0.5,
                                              gpu_memory_utilization=0.4),
}


@pytest.mark.parametrize("folder", HOST_OOMS)
def test_rays_memory_monitor_reads_as_the_hosts_memory_not_the_gpus(folder):
    f = classify((DATA / folder / "verl.log").read_text(errors="replace"), 1)
    assert (f.kind, f.status) == (verl.HOST_OOM, "oom")
    assert f.message.startswith("host RAM exhausted") and "Memory on the node" in f.message


def test_a_gpu_oom_still_reads_as_the_gpus():
    f = classify((DATA / "h200_2026-11-25_l8" / "trial_0000" / "verl.log").read_text(errors="replace"), 1)
    assert f.kind == "gpu_oom" and "CUDA out of memory" in f.message


def test_the_committed_trials_carry_the_hosts_failure_and_teach_the_correction_nothing():
    from autotune.search.learning import observation
    from autotune.search.setup import setup_from_row
    from autotune.store.store import Store

    store = Store(f"sqlite:///{DATA / 'h200_2026-11-26_l12' / 'c-7b.db'}")
    study = store.list_studies()[0]
    setup = setup_from_row(study)
    rows = {r.number: r for r in store.trials(study.name)}
    store.engine.dispose()
    assert [rows[n].extra["failure"] for n in (0, 2, 3)] == ["gpu_oom", verl.HOST_OOM, verl.HOST_OOM]
    assert "reclassified from the committed log" in rows[3].note
    assert observation(rows[3], setup) is None and observation(rows[2], setup) is None
    gpu_oom = observation(rows[0], setup)
    assert gpu_oom is not None and gpu_oom.oom


@pytest.mark.parametrize("name", sorted(KILLED))
def test_the_killed_7b_configurations_do_not_fit_the_lent_host(name):
    from autotune.estimate import constraints, evaluate

    m, cl = get_model("qwen2.5-7b"), Cluster(get_gpu_type("h200"), 1, 1, host_memory_gib=LENT_HOST_GIB)
    mem = estimate_memory(m, cl, JOB, KILLED[name])
    assert mem.host is not None and not mem.host.fits
    # the node used 120.8-122.3 GiB when Ray killed it, and needed more
    assert mem.host.need / 2**30 > 120.8
    broken = {v.rule: v.message for v in constraints.check(m, cl, JOB, KILLED[name])}
    assert broken["host_memory"].startswith("predicted") and "Ray's memory monitor" in broken["host_memory"]
    ev = evaluate(m, cl, JOB, KILLED[name])
    assert not ev.feasible and "constraint host_memory: predicted" in ev.prune_reason()
    # without knowing the host, nothing is checked
    unknown = dataclasses.replace(cl, host_memory_gib=None)
    assert "host_memory" not in {v.rule for v in constraints.check(m, unknown, JOB, KILLED[name])}
    mem = estimate_memory(m, unknown, JOB, KILLED[name])
    assert mem.host is not None and mem.host.capacity is None and mem.host.fits
    assert mem.as_dict()["host"]["capacity_gib"] is None


def test_what_ran_on_the_lent_hosts_fits_them():
    """The 3B's cpu-adam trials with and without offloaded parameters ran (lease 7, lease 10); lease 8's 7B with
    cpu-adam 0.5 and the parameters offloaded got to its update (it ran out of GPU memory there)."""
    h100 = Cluster(get_gpu_type("h100"), 1, 1, host_memory_gib=LENT_HOST_GIB)
    for offload in (False, True):
        c = smoke(recompute="selective", optimizer_cpu_offload=True, optimizer_offload_fraction=0.5,
                  param_offload=offload, gpu_memory_utilization=0.4)
        assert estimate_memory(get_model("qwen2.5-3b"), h100, JOB, c).host.fits
    h200 = Cluster(get_gpu_type("h200"), 1, 1, host_memory_gib=LENT_HOST_GIB)
    c = smoke(param_offload=True, optimizer_cpu_offload=True, optimizer_offload_fraction=0.5)
    assert estimate_memory(get_model("qwen2.5-7b"), h200, JOB, c).host.fits


def test_host_memory_grows_with_what_is_offloaded_per_gpu():
    m = get_model("qwen2.5-7b")
    cl = Cluster(get_gpu_type("h100"), 8, 1, host_memory_gib=2048)
    need = {k: estimate_memory(m, cl, JOB, smoke(tp=2, **kw)).host.need for k, kw in {
        "none": {}, "params": {"param_offload": True}, "optimizer": {"optimizer_offload": True},
        "cpu": {"optimizer_cpu_offload": True, "optimizer_offload_fraction": 1.0}}.items()}
    assert need["none"] < need["params"] < need["optimizer"] <= need["cpu"]
    assert need["none"] == pytest.approx(
        8 * (DEFAULT_HOST_CALIBRATION.worker_base + 2 * estimate_memory(m, cl, JOB, smoke(tp=2)).moment(
            "update").terms[0][1] / 2) + DEFAULT_HOST_CALIBRATION.node_base)


def test_the_7b_first_launch_on_the_lent_h200_fits_its_host():
    """The user's example on one H200 of a 128 GiB host: the first launch is none of what Ray killed, and its
    predicted host memory fits."""
    from autotune.estimate.correction import NO_CORRECTION
    from autotune.search.plan import first_launch
    from autotune.search.ranking import make_ranking
    from autotune.search.setup import setup_from_row
    from autotune.store.store import Store

    store = Store(f"sqlite:///{DATA / 'h200_2026-11-25_l8' / 'c-7b.db'}")
    study = store.list_studies()[0]
    defaults = next(r for r in store.trials(study.name) if r.number == 0).extra["job_defaults"]
    store.engine.dispose()
    setup = setup_from_row(study)
    setup = dataclasses.replace(setup, job=setup.job.with_node_defaults(defaults),
                                cluster=dataclasses.replace(setup.cluster, host_memory_gib=LENT_HOST_GIB))
    first, _ = first_launch(make_ranking(setup), NO_CORRECTION, [])
    ev = setup.evaluate(first.candidate)
    assert ev.memory.host.fits and ev.feasible
    assert first.candidate.key() not in {c.key() for c in KILLED.values()}
    for c in KILLED.values():
        assert not setup.evaluate(c).feasible


def test_host_memory_is_read_on_a_gpu_node_and_given_elsewhere(monkeypatch):
    assert (detect_host_memory_gib() or 0) > 0  # Linux: /proc/meminfo
    monkeypatch.setattr("autotune.cluster.detect_local_gpus", lambda: None)
    assert make_cluster(8, 1, "h100").host_memory_gib is None  # no GPU here: not this cluster's node
    assert make_cluster(8, 1, "h100", 1024.0).host_memory_gib == 1024.0
    monkeypatch.setattr("autotune.cluster.detect_local_gpus", lambda: (1, "NVIDIA H200", 139.8))
    monkeypatch.setattr("autotune.cluster.detect_host_memory_gib", lambda: 125.87)
    assert make_cluster(1, 1, "h200").host_memory_gib == 125.87


@pytest.mark.parametrize("value", ["0", "-5", "lots", "inf"])
def test_a_bad_host_memory_is_refused_with_what_to_give(value, capsys):
    from autotune.cli import main

    with pytest.raises(SystemExit) as e:
        main(["run", "--model", "qwen2.5-7b", "--host-memory", value])
    assert e.value.code == 2
    assert "--host-memory" in capsys.readouterr().err


def test_the_cli_checks_the_host_it_is_told(tmp_path: Path, capsys):
    """`autotune run` with --host-memory: the simulated study launches nothing that the host cannot hold."""
    from autotune.cli import main
    from autotune.store.store import Store

    db = f"sqlite:///{tmp_path}/h.db"
    rc = main(["run", "--model", "qwen2.5-7b", "--gpus", "1", "--gpu-type", "h200", "--host-memory", "125.87",
               "--job", str(REPO / "benchmarks" / "gpu_verl" / "job_smoke.yaml"), "--storage", db, "--study", "h",
               "--n-trials", "3", "--workdir", str(tmp_path)])
    assert rc == 0
    store = Store(db)
    launched = [r for r in store.trials("h") if r.launched]
    assert launched and all(r.predicted_memory["host"]["fits"] for r in launched)
    assert all(r.predicted_memory["host"]["capacity_gib"] == pytest.approx(125.87 * 0.95, abs=0.01)
               for r in launched)


def test_estimate_shows_the_hosts_memory_and_the_rule(capsys):
    from autotune.cli import main

    base = ["estimate", "--model", "qwen2.5-7b", "--gpus", "1", "--gpu-type", "h200", "--job",
            str(REPO / "benchmarks" / "gpu_verl" / "job_smoke.yaml"), "--set", "rollout_tp=1", "--set",
            "use_dynamic_bsz=true", "--set", "recompute=full", "--set", "gpu_memory_utilization=0.3"]
    main([*base, "--host-memory", "125.87", "--set", "optimizer_cpu_offload=true", "--set",
          "optimizer_offload_fraction=0.6"])
    out = capsys.readouterr().out
    assert "host memory a node: 104.3 GiB of 119.6 GiB Ray allows" in out and "cpu_optimizer 68.1" in out
    assert main([*base, "--host-memory", "125.87", "--set", "optimizer_offload=true"]) != 0
    assert "breaks host_memory: predicted 121.3 GiB" in capsys.readouterr().out
    main([*base, "--set", "optimizer_offload=true"])
    assert "the node's memory unknown: --host-memory GIB checks it" in capsys.readouterr().out


def test_trials_at_once_on_one_node_share_its_host_memory(monkeypatch):
    """Ray's memory monitor kills for the node as a whole: lease 42's two one-GPU studies on a node of two, each
    counting all its 252 GiB, lost a 7B trial (121.3 GiB of host memory predicted) and a 3B one at once. With
    --parallel, the trials that can land on one node share it; the 7B's then breaks the host rule, which says why."""
    from autotune.cluster import trials_per_node
    from autotune.estimate import constraints

    assert [trials_per_node(p, g, 8) for p, g in ((1, 1), (2, 1), (8, 1), (16, 1), (4, 2), (4, 8), (2, 3))] == \
        [1, 2, 8, 8, 4, 1, 2]
    monkeypatch.setattr("autotune.cluster.detect_local_gpus", lambda: (2, "NVIDIA H200", 139.8))
    monkeypatch.setattr("autotune.cluster.detect_host_memory_gib", lambda: 251.77)
    alone, shared = make_cluster(1, 1, "h200"), make_cluster(1, 1, "h200", parallel=4)
    assert (alone.trials_per_node, shared.trials_per_node) == (1, 2)  # a node of two GPUs holds two one-GPU trials
    assert make_cluster(2, 1, "h200", parallel=4).trials_per_node == 1  # a two-GPU trial fills the node
    m = get_model("qwen2.5-7b")
    c = smoke(recompute="full", recompute_num_layers=1, ppo_max_token_len_per_gpu=12288, optimizer_offload=True)
    whole, half = estimate_memory(m, alone, JOB, c).host, estimate_memory(m, shared, JOB, c).host
    assert whole.fits and not half.fits and half.capacity == pytest.approx(whole.capacity / 2)
    assert half.as_dict()["trials_per_node"] == 2
    broken = {v.rule: v.message for v in constraints.check(m, shared, JOB, c)}
    assert "the 2 trials --parallel may run on it at once" in broken["host_memory"]
    assert broken["host_memory"].endswith("or fewer trials at once")
    assert "host_memory" not in {v.rule for v in constraints.check(m, alone, JOB, c)}
