"""The profile analysis on real torch.profiler traces made here (CPU ops: a small model, and 2 ranks over gloo) and on a
small kernel trace in Kineto's format whose answer is known to the microsecond (the GPU path)."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

from autotune import verl
from autotune.profile import kinds as K
from autotune.profile.analysis import OUTSIDE, analyse
from autotune.profile.traces import classify, discover, load
from tests.conftest import free_port

torch = pytest.importorskip("torch")


def _profile(path: Path, work, stage: str = "actor_update") -> None:
    """Run `work` under torch.profiler (CPU), marked as the verl stage, and write the chrome trace."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        with torch.profiler.record_function(stage):
            work()
    prof.export_chrome_trace(str(path))


def _probe_name(rank: int = 0, world: int = 1, pp: int = 0) -> str:
    return f"mcore_train_step1_rank{rank}-of-{world}_tp0-pp{pp}-dp0-cp0_pid1_{rank}.json.gz"


def _cpu_trace(path: Path, ops: list[tuple[str, int, int]]) -> None:
    """A CPU-only trace as torch.profiler writes one (ops on one thread, named and nested as torch names them) with
    the times given (µs), inside the verl stage [0, 1000]: what the analysis must read is known exactly."""
    events = [{"ph": "X", "cat": "user_annotation", "name": "actor_update", "pid": 1, "tid": 1, "ts": 0, "dur": 1000}]
    events += [{"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": end - ts,
                "args": {"External id": i + 1}} for i, (name, ts, end) in enumerate(ops)]
    with gzip.open(path, "wt") as f:  # named as the probe names its traces (.json.gz)
        json.dump({"schemaVersion": 1, "traceEvents": events}, f)


# A forward and backward of a Linear stack, an elementwise loop and SDPA's math path, as torch names their ops.
CPU_WORK = {
    "gemm": [("aten::linear", 100, 500), ("aten::t", 100, 120), ("aten::matmul", 120, 500), ("aten::mm", 130, 490),
             ("aten::sum", 500, 600), ("aten::mm", 600, 900)],
    "elementwise": [("aten::randn", 0, 100), ("aten::sigmoid", 100, 400), ("aten::mul", 400, 600),
                    ("aten::add", 600, 950), ("aten::empty", 600, 610)],
    "attention": [("aten::scaled_dot_product_attention", 0, 900), ("aten::_scaled_dot_product_attention_math", 10, 890),
                  ("aten::matmul", 20, 400), ("aten::bmm", 30, 390), ("aten::_softmax", 400, 500),
                  ("aten::matmul", 500, 880), ("aten::bmm", 510, 870), ("aten::randn", 900, 1000)],
}


def test_gemm_heavy_and_elementwise_models_read_as_what_they_are(tmp_path):
    """Each instant of a CPU trace is the kind of its innermost op, or of the attention, GEMM or communication it
    runs inside (SDPA's matmuls are attention's); a gap is idle. Exact, on traces whose times are given."""
    shares = {}
    for name, ops in CPU_WORK.items():
        (tmp_path / name).mkdir()
        _cpu_trace(tmp_path / name / _probe_name(), ops)
        ph = analyse(discover(tmp_path / name)[0]).phase("update_actor")
        assert ph is not None and ph.device == "cpu" and ph.source == "probe"
        r = ph.ranks[0]
        assert r.seconds == pytest.approx(1000e-6) and sum(r.kinds.values()) == pytest.approx(r.seconds, rel=1e-6)
        shares[name] = {k: round(v, 6) for k, v in ph.shares().items() if v}
    assert shares == {
        "gemm": {K.GEMM: 0.7, K.OTHER: 0.1, K.IDLE: 0.2},
        "elementwise": {K.OTHER: 0.95, K.IDLE: 0.05},
        "attention": {K.ATTENTION: 0.9, K.OTHER: 0.1},
    }


def test_real_profiler_traces_of_those_models_hold_only_their_kinds(tmp_path):
    """The same three models under torch.profiler: which kinds show is the ops torch runs, whatever the machine's
    speed (how much of each is timing, asserted exactly on the traces above)."""
    torch.manual_seed(0)
    lin = torch.nn.Sequential(*[torch.nn.Linear(256, 256, bias=False) for _ in range(2)])
    x = torch.randn(64, 256)
    q = torch.randn(2, 4, 128, 32)
    work = {
        "gemm": lambda: lin(x).sum().backward(),
        "elementwise": lambda: torch.sigmoid(torch.randn(10_000)) * 1.0001 + 0.5,
        "attention": lambda: torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True),
    }
    kinds = {}
    for name, fn in work.items():
        (tmp_path / name).mkdir()
        _profile(tmp_path / name / _probe_name(), fn)
        ph = analyse(discover(tmp_path / name)[0]).phase("update_actor")
        assert ph is not None and ph.device == "cpu"
        r = ph.ranks[0]
        assert sum(r.kinds.values()) == pytest.approx(r.seconds, rel=1e-6)  # every instant is one kind
        kinds[name] = {k for k, v in r.kinds.items() if v > 0 and k in K.COMPUTE}
    assert K.GEMM in kinds["gemm"] and K.ATTENTION not in kinds["gemm"]
    assert kinds["elementwise"] == {K.OTHER}
    assert K.ATTENTION in kinds["attention"] and K.GEMM not in kinds["attention"]  # the matmuls inside SDPA


def test_top_ops_count_each_call_once(tmp_path):
    lin = torch.nn.Linear(256, 256)
    x = torch.randn(64, 256)
    path = tmp_path / _probe_name()
    _profile(path, lambda: [lin(x) for _ in range(7)])
    a = analyse(discover(tmp_path)[0])
    top = {t.name: t for t in a.phase("update_actor").top}
    assert top["aten::addmm"].count == 7 and top["aten::addmm"].kind == K.GEMM


def _kineto(path: Path, events: list[dict], rank: int = 0) -> None:
    path.write_text(json.dumps({"schemaVersion": 1, "distributedInfo": {"rank": rank, "world_size": 2},
                                "traceEvents": events}))


def _gpu_events(offset: int = 0, p2p: bool = False) -> list[dict]:
    """A phase [1000, 1100] µs on the CPU whose kernels run to 1105: a GEMM [1020, 1070], an NCCL kernel [1050, 1090]
    (20 µs of it under the GEMM), a host-to-device copy [1095, 1105]."""
    o = offset
    comm = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)" if p2p else \
        "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"

    def k(cat, name, ts, dur, corr, stream):
        return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream, "ts": ts + o, "dur": dur,
                "args": {"device": 0, "stream": stream, "correlation": corr + o}}

    def launch(name, ts, corr):
        return {"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 1, "tid": 1, "ts": ts + o, "dur": 5,
                "args": {"correlation": corr + o}}

    return [
        {"ph": "X", "cat": "user_annotation", "name": "actor_update", "pid": 1, "tid": 1, "ts": 1000 + o, "dur": 100},
        launch("cudaLaunchKernel", 1010, 1), k("kernel", "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64",
                                                1020, 50, 1, 7),
        launch("cudaLaunchKernel", 1015, 2), k("kernel", comm, 1050, 40, 2, 13),
        launch("cudaMemcpyAsync", 1080, 3), k("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 1095, 10, 3, 7),
    ]


def test_kernel_trace_breakdown_is_exact(tmp_path):
    path = tmp_path / "actor-rollout_train_step3_rank0-of-2_tp0-pp0-dp0-cp0_pid1_1.json"
    _kineto(path, _gpu_events())
    files, _ = discover(tmp_path)
    a = analyse(files)
    ph = a.phase("update_actor")
    assert ph.device == "gpu"
    r = ph.ranks[0]
    us = 1e-6
    # The phase runs until its last kernel ends (1105), not when the CPU left the stage (1100).
    assert r.seconds == pytest.approx(105 * us)
    assert r.kinds[K.GEMM] == pytest.approx(50 * us)
    assert r.kinds[K.COMMUNICATION] == pytest.approx(20 * us)  # exposed: 1070-1090
    assert r.communication_s == pytest.approx(40 * us) and r.communication_hidden_s == pytest.approx(20 * us)
    assert r.kinds[K.MEMORY] == pytest.approx(10 * us) and r.host_copy_s == pytest.approx(10 * us)
    assert r.kinds[K.IDLE] == pytest.approx(25 * us)  # 1000-1020 and 1090-1095
    assert ph.communication_hidden_fraction == pytest.approx(0.5)
    # HolisticTraceAnalysis' own whole-trace overlap agrees with ours
    assert a.hta[files[0].label]["comm_comp_overlap_pct"] == pytest.approx(50.0)
    assert [t.name[:12] for t in ph.top] == ["sm90_xmma_ge", "ncclDevKerne", "Memcpy HtoD "]


def test_pipeline_bubble_from_kernel_traces(tmp_path):
    # stage 1 (pp1) waits on a SendRecv while stage 0 computes: its wait is bubble, not communication work
    _kineto(tmp_path / "actor-rollout_train_step3_rank0-of-2_tp0-pp0-dp0-cp0_pid1_1.json", _gpu_events())
    _kineto(tmp_path / "actor-rollout_train_step3_rank1-of-2_tp0-pp1-dp0-cp0_pid1_1.json", _gpu_events(p2p=True),
            rank=1)
    ph = analyse(discover(tmp_path)[0]).phase("update_actor")
    r0, r1 = ph.ranks
    assert (r0.pp_rank, r1.pp_rank) == (0, 1)
    assert r1.p2p_s == pytest.approx(40e-6) and r1.p2p_exposed_s == pytest.approx(20e-6)
    assert r1.bubble_s == pytest.approx(45e-6)  # idle 25 + exposed send/recv 20
    assert ph.bubble_fraction == pytest.approx(((25 / 105) + (45 / 105)) / 2)


# ----------------------------------------------------------------------------------- two ranks over gloo (CPU)
def _pipeline_rank(rank: int, port: int, out: str) -> None:
    """A 2-stage pipeline: stage 0 computes, then sends; stage 1 waits for it (its fill bubble), then computes;
    then both all-reduce their gradients (data-parallel-like communication)."""
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)  # two ranks on a small CPU: no fight over cores that turns compute into waiting
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.manual_seed(0)
    lin = torch.nn.Linear(512, 512)
    x = torch.randn(256, 512)
    name = f"actor-rollout_train_step3_rank{rank}-of-2_pid{os.getpid()}_{rank}.json.gz"
    try:
        dist.barrier()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            dist.barrier()  # the profilers start at different times: the phase starts together on both ranks
            with torch.profiler.record_function("actor_update"):
                for _ in range(3):
                    if rank == 0:
                        y = x
                        for _ in range(12):
                            y = lin(y)
                        dist.send(y.detach().contiguous(), 1)
                    else:
                        buf = torch.empty(256, 512)
                        dist.recv(buf, 0)
                        lin(buf).sum().backward()
                for p in lin.parameters():
                    if p.grad is None:
                        p.grad = torch.zeros_like(p)
                    dist.all_reduce(p.grad)
        prof.export_chrome_trace(os.path.join(out, name))
    finally:
        dist.destroy_process_group()


def test_two_rank_pipeline_over_gloo(tmp_path):
    import torch.multiprocessing as mp

    mp.start_processes(_pipeline_rank, args=(free_port(), str(tmp_path)), nprocs=2, start_method="spawn", join=True)
    files, other = discover(tmp_path)
    assert len(files) == 2 and not other and {f.world for f in files} == {2}
    a = analyse(files, pp=2)  # the names carry no Megatron ranks: stages from the layout (pp outermost)
    ph = a.phase("update_actor")
    r0, r1 = ph.ranks
    assert (r0.pp_rank, r1.pp_rank) == (0, 1)
    assert r0.communication_s > 0 and r1.communication_s > 0  # the send/recv and the all-reduce
    assert r1.p2p_exposed_s > 0.25 * r1.seconds  # stage 1 waits for stage 0 (how long depends on the CPU's load)
    assert r1.bubble_s / r1.seconds > r0.bubble_s / r0.seconds + 0.15
    assert ph.bubble_fraction is not None and ph.bubble_fraction > 0.1
    assert analyse(files).phase("update_actor").bubble_fraction is None  # no layout, no stages: no bubble claimed


# ------------------------------------------------------------------------------------------------ file names
def test_names_verl_and_vllm_write_are_read():
    f = classify(Path("/t/actor-rollout-ref_train_step3_rank5-of-8_tp1-pp0-dp2-cp0_pid77_20261123224233439.json.gz"))
    assert (f.source, f.rank, f.world, f.step, f.parallel) == ("train", 5, 8, 3, {"tp": 1, "pp": 0, "dp": 2, "cp": 0})
    f = classify(Path(f"/t/{verl.ROLLOUT_TRACE_DIR_PREFIX}3/dp0_pp0_tp1_dcp0_ep0_rank1.1795474508.pt.trace.json.gz"))
    assert (f.source, f.replica, f.rank) == ("rollout", 3, 1)
    f = classify(Path("/t/rollout-replica2-globalrank5_dp0_pp0_tp1_dcp0_ep0_rank1.17954.pt.trace.json.gz"))
    assert (f.source, f.replica, f.rank) == ("rollout", 2, 5)
    f = classify(Path("/t/" + _probe_name(1, 2, 1)))
    assert (f.source, f.rank, f.parallel["pp"]) == ("probe", 1, 1)
    assert classify(Path("/t/notes.json")) is None and classify(Path("/t/actor.log")) is None


def test_outside_phase_is_the_wait_between_stages(tmp_path):
    import time

    path = tmp_path / "actor-rollout_train_step3_rank0-of-1_pid1_1.json.gz"
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        time.sleep(0.05)  # the rollout runs in vLLM's processes: this worker waits
        with torch.profiler.record_function("actor_compute_log_prob"):
            torch.randn(256, 256) @ torch.randn(256, 256)
        with torch.profiler.record_function("actor_update"):
            torch.randn(256, 256) @ torch.randn(256, 256)
    prof.export_chrome_trace(str(path))
    a = analyse(discover(tmp_path)[0])
    assert [p.name for p in a.phases] == ["old_log_prob", "update_actor", OUTSIDE]
    assert a.phase(OUTSIDE).share(K.IDLE) > 0.9
    assert "update_weights" in a.unprofiled


def test_unreadable_trace_is_a_clear_error(tmp_path):
    from autotune.profile.traces import TraceError

    (tmp_path / "actor-rollout_train_step3_rank0_pid1_1.json.gz").write_bytes(b"\x1f\x8b\x08truncated")
    with pytest.raises(TraceError, match="cannot be read"):
        load(discover(tmp_path)[0])
    with pytest.raises(TraceError, match="no such folder"):
        discover(tmp_path / "missing")


def test_kinds_by_name():
    assert K.op_kind("aten::mm") == K.GEMM and K.op_kind("c10d::allreduce_") == K.COMMUNICATION
    assert K.op_kind("aten::_scaled_dot_product_flash_attention_for_cpu") == K.ATTENTION
    assert K.kernel_kind("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, "
                         "false, cutlass::bfloat16_t> >(pytorch_flash::Flash_fwd_params)", "COMPUTATION") == K.ATTENTION
    assert K.kernel_kind("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT", "COMPUTATION") == K.GEMM
    assert K.kernel_kind("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 2>(vllm::RankData*)",
                         "COMPUTATION") == K.COMMUNICATION
    assert K.is_p2p("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)")
    assert not K.is_p2p("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)")
    assert K.is_host_copy("Memcpy DtoH (Device -> Pinned)") and not K.is_host_copy("Memcpy DtoD (Device -> Device)")


def test_trimmed_traces_keep_the_stages_and_the_device_work_up_to_the_cut(tmp_path):
    from autotune.profile.trim import trim_dir

    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    events = _gpu_events() + _gpu_events(offset=1000)  # two identical update windows, 1000 µs apart
    _kineto(src / "actor-rollout_train_step3_rank0-of-2_tp0-pp0-dp0-cp0_pid1_1.json", events)
    (report,) = trim_dir(src, dst, max_events=8)  # 2 annotations + 3 kernels and their launches: the first window
    assert report["events_in"] == 14 and report["events_out"] == 8 and report["device_cutoff_us"] == 1105
    full, cut = analyse(discover(src)[0]), analyse(discover(dst)[0])
    assert Path(cut.files[0].path).name.endswith(".json.gz")
    first = full.phase("update_actor").ranks[0]
    kept = cut.phase("update_actor").ranks[0]
    # the first window is intact; the second, past the cut, holds no device work any more (all idle)
    assert kept.kinds[K.GEMM] == pytest.approx(first.kinds[K.GEMM] / 2)
    assert kept.communication_hidden_s == pytest.approx(first.communication_hidden_s / 2)
