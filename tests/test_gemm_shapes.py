"""benchmarks/gemm_shapes.py: the GEMMs a token passes through, per catalog model (the timing needs a CUDA GPU)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import gemm_shapes


def test_a_layers_gemms_are_the_models_projections() -> None:
    g = gemm_shapes.layer_gemms("qwen2.5-7b")  # hidden 3584, 28 query heads and 4 KV heads of 128, MLP 18944
    assert g == {"qkv": (3584, 3584 + 2 * 512), "proj": (3584, 3584), "fc1": (3584, 2 * 18944), "fc2": (18944, 3584),
                 "lm_head": (3584, 152064)}
    assert gemm_shapes.layer_gemms("qwen2.5-0.5b")["fc1"] == (896, 2 * 4864)


def test_the_timing_needs_a_gpu() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    r = gemm_shapes.measure("qwen2.5-0.5b", 1024, repeats=3)
    assert r["layer_fwd_tflops"] > 0 and r["lm_head"]["fwd_tflops"] > 0


def test_on_the_h200_every_sizes_layer_gemms_run_at_one_rate() -> None:
    """The lent H200's run (benchmarks/results/gemm_shapes_h200.json, 2026-11-29): at a 16k-token micro-batch each
    size's layer GEMMs, forward and backward, ran at 677-692 TFLOP/s, within 3 % of one another (4k tokens:
    582-671). So the 7B's passes leaving less above their FLOPs than the 0.5B-3B's (calibration.md) is not its GEMMs
    running nearer the peak: the time model's one efficiency per pass kind holds for the GEMMs."""
    rows = json.loads((Path(gemm_shapes.__file__).parent / "results" / "gemm_shapes_h200.json").read_text())
    at16k = {r["model"]: r["layer_fwd_bwd_tflops"] for r in rows if r["tokens"] == 16384}
    assert set(at16k) == {"qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-3b", "qwen2.5-7b"}
    assert max(at16k.values()) / min(at16k.values()) < 1.03
    assert all(r["gpu"] == "NVIDIA H200" for r in rows)


def fine_rows() -> list[dict]:
    return json.loads((Path(gemm_shapes.__file__).parent / "results" / "gemm_shapes_h200_fine.json").read_text())


def test_a_larger_layers_gemms_reach_their_rate_at_fewer_tokens() -> None:
    """The lent H200's run at 512-24k tokens (gemm_shapes_h200_fine.json, lease 53): each size's layer GEMMs halve
    their rate at fewer tokens the more weights its layer holds (0.5B 1,977, 1.5B 485, 3B 314, 7B 85 tokens), and
    tokens x weights stays within 30 % of one constant, a GEMM's fixed latency: what the time model's
    tokens_half_layer_params is, at tokens_half."""
    from autotune.estimate.throughput import DEFAULT_EFFICIENCY

    th = {m: v for (m, tp), v in gemm_shapes.tokens_half(fine_rows()).items() if tp == 1}
    order = ["qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-3b", "qwen2.5-7b"]
    assert sorted(th) == sorted(order) and [th[m] for m in order] == sorted(th.values(), reverse=True)
    assert th["qwen2.5-0.5b"] > 10 * th["qwen2.5-7b"]
    products = [th[m] * gemm_shapes.layer_weights(m, 1) for m in order]
    assert max(products) / min(products) < 1.6
    fitted = gemm_shapes.tokens_half_layer_params(fine_rows(), DEFAULT_EFFICIENCY.tokens_half)
    assert DEFAULT_EFFICIENCY.tokens_half_layer_params == pytest.approx(fitted, rel=0.02)


def test_a_tensor_parallel_shard_halves_its_rate_where_its_weights_say() -> None:
    """The lent H200's run of each GPU's shard of the 7B's, 14B's, 32B's and 72B's layers at TP 1-8
    (gemm_shapes_h200_tp.json, lease 53; not in the constant's fit): for every model the shard of a larger TP halves
    its rate at more tokens, and where that is 100 tokens or more (below it a micro-batch's GEMMs run within a few % of
    their rate) the time model's tokens_half x tokens_half_layer_params / the shard's weights is within a factor of 2
    of it (7B at TP 8: 1,474 measured, 816 priced; 32B at TP 2: 139, 97)."""
    from autotune.estimate.throughput import DEFAULT_EFFICIENCY as eff

    rows = json.loads((Path(gemm_shapes.__file__).parent / "results" / "gemm_shapes_h200_tp.json").read_text())
    assert gemm_shapes.layer_gemms("qwen2.5-7b", 4)["fc1"] == (3584, 2 * 18944 // 4)
    th = gemm_shapes.tokens_half(rows)
    models = sorted({m for m, _ in th})
    assert models == ["qwen2.5-14b", "qwen2.5-32b", "qwen2.5-72b", "qwen2.5-7b"]
    for m in models:
        by_tp = [th[m, tp] for tp in (1, 2, 4, 8)]
        assert by_tp == sorted(by_tp), (m, by_tp)
    priced = {k: eff.tokens_half * eff.tokens_half_layer_params / gemm_shapes.layer_weights(*k) for k in th}
    judged = [k for k, v in th.items() if v >= 100]
    assert len(judged) >= 9
    assert all(0.5 < th[k] / priced[k] < 2 for k in judged), {k: round(th[k] / priced[k], 2) for k in judged}
