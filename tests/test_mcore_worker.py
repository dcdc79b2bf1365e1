"""CPU-side tests of the Megatron-core probe worker and grid (no GPU, no megatron-core needed).

The context-parallel attention test needs torch (CPU, gloo); the end-to-end test needs a GPU and
megatron-core and is skipped otherwise.
"""

from __future__ import annotations

import copy
import dataclasses
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.model import get_model
from autotune.runners.mcore.results import classify_error, rank_results
from autotune.runners.mcore.scaling import flops_per_token, scale_result
from autotune.runners.mcore.spec import SpecError, validate_spec
from benchmarks import mcore_grid
from tests.conftest import free_port

REPO = Path(__file__).resolve().parents[1]


def _spec(**over):
    m = dataclasses.asdict(get_model("qwen2.5-1.5b"))
    s = {"id": "x", "model": m, "layout": {"tp": 1, "pp": 1}, "tokens_per_microbatch": 4096,
         "num_microbatches": 2, "steps": 2, "warmup_steps": 1, "measure_forward_only": False,
         "full_num_layers": 28}
    layout = over.pop("layout", None)
    s.update(over)
    if layout:
        s["layout"] = {**s["layout"], **layout}
    return s


def test_validate_fills_defaults():
    s = validate_spec(_spec())
    lay = s["layout"]
    assert lay["cp"] == 1 and lay["ep"] == 1 and lay["vpp"] is None
    assert lay["etp"] == 1  # null etp means etp = tp
    assert lay["recompute_granularity"] is None and lay["recompute_num_layers"] is None
    assert s["full_num_layers"] == 28


def test_validate_sp_dropped_at_tp1_and_recompute_defaults():
    s = validate_spec(_spec(layout={"sequence_parallel": True, "recompute_granularity": "full",
                                    "recompute_method": "uniform"}))
    assert s["layout"]["sequence_parallel"] is False
    assert s["layout"]["recompute_num_layers"] == 1
    s = validate_spec(_spec(layout={"recompute_granularity": "selective"}))
    assert s["layout"]["recompute_modules"] == ["core_attn"]


@pytest.mark.parametrize("layout,world,msg", [
    ({"tp": 4}, 4, "tp=4"),  # qwen2.5-1.5b: 2 kv heads
    ({"pp": 3}, 3, "not divisible by pp"),
    ({"pp": 2, "vpp": 3}, 2, "pp\\*vpp"),
    ({"pp": 1, "vpp": 2}, 1, "vpp needs"),
    ({"tp": 2}, 3, "world size 3"),
    ({"ep": 2}, 2, "ep > 1 on a dense"),
    ({"recompute_granularity": "full"}, 1, "recompute_method"),
    ({"recompute_granularity": "bogus"}, 1, "recompute_granularity"),
    ({"foo": 1}, 1, "unknown layout"),
])
def test_validate_rejects(layout, world, msg):
    with pytest.raises(SpecError, match=msg):
        validate_spec(_spec(layout=layout), world)


def test_validate_vpp_needs_microbatch_multiple():
    with pytest.raises(SpecError, match="num_microbatches"):
        validate_spec(_spec(layout={"pp": 2, "vpp": 2}, num_microbatches=3), 2)
    validate_spec(_spec(layout={"pp": 2, "vpp": 2}, num_microbatches=4), 2)


def test_validate_missing_keys_and_world_mismatch():
    s = _spec()
    del s["layout"]
    with pytest.raises(SpecError, match="layout"):
        validate_spec(s)
    with pytest.raises(SpecError, match="world_size=2"):
        validate_spec(_spec(world_size=2), 4)


def test_validate_moe():
    m = dataclasses.asdict(get_model("qwen3-30b-a3b").with_layers(4))
    s = validate_spec(_spec(model=m, layout={"ep": 4}, full_num_layers=48), 4)
    assert s["layout"]["ep"] == 4
    with pytest.raises(SpecError, match="num_experts"):
        validate_spec(_spec(model=m, layout={"ep": 3}), 3)


def test_classify_error():
    assert classify_error("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB") == "oom"
    assert classify_error("RuntimeError: shape mismatch") == "error"


def test_rank_results_slowest_rank_and_failures():
    spec = validate_spec(_spec(layout={"tp": 2}, measure_forward_only=True), 4)  # dp = 2
    # per rank: step_s, peak_alloc, peak_reserved, nvml, fwd_s, fwd_alloc, fwd_reserved, status code
    rows = [[2.0, 10.0, 12.0, 14.0, 0.5, 5.0, 6.0, 0.0], [4.0, 11.0, 13.0, 15.0, 1.0, 7.0, 8.0, 0.0]]
    rows += [list(r) for r in rows]
    res = {"id": "x", "status": "error", "error": None, "world_size": 4, "dp": 2}
    ok = rank_results(res, spec, rows, [None] * 4, 0, 4)
    assert res["status"] == "error" and "per_rank" not in res  # the row is a new dict
    assert ok["status"] == "ok" and ok["step_time_s"] == 4.0 and ok["tokens_per_step"] == 4096 * 2 * 2
    assert ok["throughput_train"] == pytest.approx(4096 * 2 * 2 / 4.0 / 4)
    assert ok["throughput_fwd"] == pytest.approx(4096 * 2 * 2 / 1.0 / 4)
    assert ok["peak_alloc_gib_max"] == 11.0 and ok["nvml_used_gib_max"] == 15.0 and ok["fwd_peak_alloc_gib_max"] == 7.0
    assert ok["per_rank"]["step_time_s"] == [2.0, 4.0, 2.0, 4.0]
    rows[1][7] = 2.0
    errs = [None, "OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB", None, None]
    oom = rank_results(res, spec, rows, errs, 2, 4)
    assert oom["status"] == "oom" and "out of memory" in oom["error"] and oom["failed_ranks"] == [1]
    assert "throughput_train" not in oom and oom["peak_alloc_gib_max"] == 11.0


def test_scale_result_only_when_cut():
    m = dataclasses.asdict(get_model("qwen2.5-7b").with_layers(8))
    spec = validate_spec(_spec(model=m, full_num_layers=28, layout={"tp": 2}), 2)
    res = {"throughput_train": 1000.0, "peak_alloc_gib_max": 40.0, "world_size": 2, "step_time_s": 2.0}
    out = scale_result(res, spec)
    assert out["throughput_train_scaled"] < 1000.0
    assert out["step_time_s_scaled"] > 2.0
    assert 40.0 < out["peak_alloc_gib_max_scaled"] < 40.0 * 28 / 8
    assert "memory_scaling_rule" in out
    full = validate_spec(_spec(), 1)
    assert scale_result(res, full) == {}


def test_scaling_keeps_depth_independent_memory_fixed():
    # 72B cut to 1 of 80 layers (as a lone H100 measures it): embedding state, logits and the CUDA context do not
    # grow with depth, so scaling only the rest must stay far below 80x the whole reading.
    m = dataclasses.asdict(get_model("qwen2.5-72b").with_layers(1))
    spec = validate_spec(_spec(model=m, full_num_layers=80, tokens_per_microbatch=12288), 1)
    res = {"throughput_train": 30000.0, "nvml_used_gib_max": 78.2, "nvml_baseline_gib": 2.5, "world_size": 1,
           "step_time_s": 1.0}
    scaled = scale_result(res, spec)["nvml_used_gib_max_scaled"]
    emb = 2 * 152064 * 8192 * 18 / 2**30
    logits = 6 * 12288 * 152064 / 2**30
    assert scaled == pytest.approx(emb + logits + 2.5 + (78.2 - emb - logits - 2.5) * 80)
    assert scaled < 2000


def test_flops_per_token_grows_with_layers_and_seq():
    m = dataclasses.asdict(get_model("qwen2.5-7b"))
    assert flops_per_token(m, 28, 4096) > flops_per_token(m, 8, 4096)
    assert flops_per_token(m, 28, 32768) > flops_per_token(m, 28, 4096)
    # ~6 * params for short sequences
    assert 5.5 * 7.6e9 < flops_per_token(m, 28, 1) < 6.5 * 7.7e9


# ---------------------------------------------------------------------------------------------- grid


def test_grid_size_and_valid():
    g = mcore_grid.build_grid()
    assert len(g) >= 40
    assert mcore_grid.validate_grid(g) == []
    assert len({s["id"] for s in g}) == len(g)


def test_grid_coverage():
    g = mcore_grid.build_grid()
    lays = [s["layout"] for s in g]
    assert {lay["tp"] for lay in lays} >= {1, 2, 4}
    assert {lay["pp"] for lay in lays} >= {1, 2, 4}
    assert {lay["vpp"] for lay in lays} >= {None, 2}
    assert {lay["cp"] for lay in lays} >= {1, 2, 4}
    assert {lay["recompute_granularity"] for lay in lays} == {None, "selective", "full"}
    assert {s["world_size"] for s in g} == {1, 2, 4}
    assert {s["tokens_per_microbatch"] for s in g} >= {4096, 8192, 16384, 24576, 32768}
    assert {s["num_microbatches"] for s in g} >= {2, 4, 8}
    assert any(s["model"]["num_experts"] and s["layout"]["ep"] > 1 for s in g)
    names = {s["model"]["name"] for s in g}
    assert {"qwen2.5-1.5b", "qwen2.5-7b"} <= names
    for s in g:  # qwen2.5-7b is cut and says so; 1.5b runs at full depth
        if s["model"]["name"] == "qwen2.5-7b":
            assert s["model"]["num_layers"] < s["full_num_layers"] == 28
        if s["model"]["name"] == "qwen2.5-1.5b":
            assert s["model"]["num_layers"] == 28
        tp, pp, cp = (s["layout"][k] for k in ("tp", "pp", "cp"))
        assert s["world_size"] % (tp * pp * cp) == 0


def test_smoke_grid_valid():
    sm = mcore_grid.smoke_grid()
    assert mcore_grid.validate_grid(sm) == []
    lays = [s["layout"] for s in sm]
    assert any(lay["tp"] == 2 for lay in lays) and any(lay["vpp"] for lay in lays)
    assert any(lay["cp"] == 2 for lay in lays)


def test_lanes():
    assert mcore_grid.lanes_for(1, 4) == ["0", "1", "2", "3"]
    assert mcore_grid.lanes_for(2, 4) == ["0,1", "2,3"]
    assert mcore_grid.lanes_for(4, 4) == ["0,1,2,3"]
    parts = mcore_grid.split_round_robin(list(range(7)), 3)
    assert sorted(x for p in parts for x in p) == list(range(7))


def test_csv_from_fake_results(tmp_path):
    g = mcore_grid.build_grid()
    spec = next(s for s in g if s["layout"]["cp"] == 2)
    ok = {"id": spec["id"], "status": "ok", "world_size": spec["world_size"], "gpu_name": "NVIDIA H200",
          "layout": validate_spec(spec)["layout"], "model": spec["model"]["name"],
          "num_layers": spec["model"]["num_layers"], "full_num_layers": spec["full_num_layers"],
          "scaled": spec["model"]["num_layers"] != spec["full_num_layers"],
          "tokens_per_microbatch": spec["tokens_per_microbatch"], "num_microbatches": spec["num_microbatches"],
          "throughput_train": 12345.678, "step_time_s": 1.23456, "peak_alloc_gib_max": 50.12345,
          "peak_reserved_gib_max": 55.0, "nvml_used_gib_max": 58.0, "torch_version": "2.11.0",
          "mcore_version": "0.19.2", "timestamp": "2026-11-22T10:00:00+00:00"}
    oom = {"id": "y", "status": "oom", "error": "torch.OutOfMemoryError: CUDA out of memory."}
    sink = mcore_grid.CsvSink(tmp_path / "r.csv")
    sink.add(ok, spec)
    sink.add(oom, spec)
    rows = mcore_grid.read_csv(tmp_path / "r.csv")
    assert list(rows[0]) == mcore_grid.CSV_COLUMNS
    r = rows[0]
    assert r["status"] == "ok" and r["cp"] == "2" and r["recompute"] == "none"
    assert r["ppo_max_token_len_per_gpu"] == str(spec["tokens_per_microbatch"])
    assert r["gpus"] == str(spec["world_size"]) and r["date"] == "2026-11-22"
    assert float(r["throughput_train"]) == pytest.approx(12345.7)
    assert rows[1]["status"] == "oom" and "out of memory" in rows[1]["error"]
    assert rows[1]["tp"] == str(spec["layout"]["tp"])  # layout taken from the spec when the result lacks it
    raw = (tmp_path / "r.jsonl").read_text().splitlines()
    assert json.loads(raw[0])["id"] == spec["id"]


def test_worker_imports_nothing_from_autotune():
    # the worker and the parts it imports: runners/mcore/ but its runner (and the package's face, which shows it)
    parts = sorted(p for p in (REPO / "autotune" / "runners" / "mcore").glob("*.py")
                   if p.name not in ("__init__.py", "runner.py"))
    assert len(parts) >= 2
    for part in parts:
        src = part.read_text()
        assert "from autotune" not in src and "import autotune" not in src, part.name
    # importing the module must not need torch or megatron
    code = "import sys; import autotune.runners.mcore.worker as w; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ------------------------------------------------------------------------- CP attention (torch, CPU)


def _cp_rank(rank, world, port, q, k, v, gout, result_q):
    import torch
    import torch.distributed as dist

    from autotune.runners.mcore.layers import attention_functions

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        cp = world
        S = q.shape[0]
        c = S // (2 * cp)
        idx = torch.cat([torch.arange(rank * c, (rank + 1) * c),
                         torch.arange((2 * cp - 1 - rank) * c, (2 * cp - rank) * c)])
        ql = q[idx].clone().requires_grad_(True)
        kl = k[idx].clone().requires_grad_(True)
        vl = v[idx].clone().requires_grad_(True)
        out = attention_functions()["cp_attention"](ql, kl, vl, dist.group.WORLD, None)
        (out * gout[idx]).sum().backward()
        buf = io.BytesIO()  # plain bytes: shared-memory tensors would die with this process
        torch.save((rank, idx, out.detach(), ql.grad, kl.grad, vl.grad), buf)
        result_q.put(buf.getvalue())
        # every rank past its last collective before any tears gloo down: a rank that destroyed its group while a
        # peer's gloo thread still talked to it aborted at exit once in CI ("terminate called without an active
        # exception", exit -6)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    # gloo's threads can still abort the interpreter's teardown (SIGABRT, exit -6, seen twice in full runs on two busy
    # cores, after the results were in): flush this rank's result, then leave without the teardown
    result_q.close()
    result_q.join_thread()
    os._exit(0)


@pytest.mark.parametrize("cp", [2, 4])
def test_cp_attention_matches_full_causal(cp):
    torch = pytest.importorskip("torch")
    import torch.multiprocessing as mp
    import torch.nn.functional as F

    torch.manual_seed(0)
    S, b, nh, ng, hd = 16 * cp, 2, 4, 2, 8
    q = torch.randn(S, b, nh, hd, dtype=torch.float64)
    k = torch.randn(S, b, ng, hd, dtype=torch.float64)
    v = torch.randn(S, b, ng, hd, dtype=torch.float64)
    gout = torch.randn(S, b, nh, hd, dtype=torch.float64)
    qr, kr, vr = (t.clone().requires_grad_(True) for t in (q, k, v))
    ref = F.scaled_dot_product_attention(
        qr.permute(1, 2, 0, 3), kr.repeat_interleave(nh // ng, 2).permute(1, 2, 0, 3),
        vr.repeat_interleave(nh // ng, 2).permute(1, 2, 0, 3), is_causal=True).permute(2, 0, 1, 3)
    (ref * gout).sum().backward()

    ctx = mp.get_context("spawn")
    result_q = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_cp_rank, args=(r, cp, port, q, k, v, gout, result_q)) for r in range(cp)]
    for p in procs:
        p.start()
    results = [torch.load(io.BytesIO(result_q.get(timeout=120))) for _ in range(cp)]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    out = torch.zeros_like(q)
    gq, gk, gv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for _, idx, o, a, bgrad, cgrad in results:
        out[idx], gq[idx], gk[idx], gv[idx] = o, a, bgrad, cgrad
    assert torch.allclose(out, ref.detach(), atol=1e-10)
    assert torch.allclose(gq, qr.grad, atol=1e-10)
    assert torch.allclose(gk, kr.grad, atol=1e-10)
    assert torch.allclose(gv, vr.grad, atol=1e-10)


# ------------------------------------------------------------------------------------- GPU end-to-end


def test_gpu_worker_end_to_end(tmp_path):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    pytest.importorskip("megatron.core")
    spec = copy.deepcopy(mcore_grid.make_spec("qwen2.5-1.5b", 1, 1024, 2, layers=2, steps=1, warmup=1, fwd=True))
    specs = tmp_path / "specs.json"
    specs.write_text(json.dumps([spec]))
    out = tmp_path / "out.jsonl"
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0],
               NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1")
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "1",
                    "--master_port", str(free_port()), "-m", "autotune.runners.mcore.worker",
                    "--specs", str(specs), "--out", str(out)], cwd=REPO, env=env, check=True, timeout=600)
    res = json.loads(out.read_text().splitlines()[0])
    assert res["status"] == "ok", res
    assert res["throughput_train"] > 0 and res["peak_alloc_gib_max"] > 0 and res["scaled"] is True
