"""A spec's result row: the per-rank readings gathered into one verdict (ok numbers, or oom/error and why).

Every rank measures its own step time and memory peaks; the row reports them per rank, takes the slowest step
and the highest peak, turns tokens per step into tokens/s/GPU, adds the cut-model scaling (``mcore_scaling``),
and for a failure names the failed ranks and the error line (an out-of-memory line first). Standard library only.
"""

from __future__ import annotations

from .scaling import scale_result


def classify_error(exc_text: str) -> str:
    low = exc_text.lower()
    if "out of memory" in low or "outofmemoryerror" in low or "cuda_error_out_of_memory" in low:
        return "oom"
    return "error"


def short_error(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    lines = [ln for ln in text.splitlines() if ln.strip()]
    for ln in lines:
        if "out of memory" in ln.lower():
            return ln.strip()[:400]
    return (lines[0] if lines else text)[:400]


def rank_results(res: dict, spec: dict, rows: list[list[float]], errs: list, agreed: int, world: int) -> dict:
    """`res` with the per-rank rows (step_s, peak_alloc, peak_reserved, nvml, fwd_s, fwd_alloc, fwd_reserved,
    status code) folded in; `agreed` is the worst status code over the ranks (0 ok, 1 error, 2 oom)."""
    out = dict(res)
    lay = spec["layout"]
    out["per_rank"] = {
        "step_time_s": [r[0] for r in rows],
        "peak_alloc_gib": [round(r[1], 3) for r in rows],
        "peak_reserved_gib": [round(r[2], 3) for r in rows],
        "nvml_used_gib": [round(r[3], 3) for r in rows],
        "fwd_peak_alloc_gib": [round(r[5], 3) for r in rows],
        "fwd_peak_reserved_gib": [round(r[6], 3) for r in rows],
        "status_code": [int(r[7]) for r in rows],
    }
    if agreed == 0:
        out["status"] = "ok"
        step = max(r[0] for r in rows)
        S = spec["tokens_per_microbatch"] * lay["cp"]
        dp = out.get("dp", world // (lay["tp"] * lay["pp"] * lay["cp"]))
        tokens_per_step = S * spec["num_microbatches"] * dp
        out["tokens_per_step"] = tokens_per_step
        out["step_time_s"] = step
        out["throughput_train"] = tokens_per_step / step / world
        if spec["measure_forward_only"]:
            fstep = max(r[4] for r in rows)
            out["fwd_step_time_s"] = fstep
            out["throughput_fwd"] = tokens_per_step / fstep / world
            out["fwd_peak_alloc_gib_max"] = max(r[5] for r in rows)
        out["peak_alloc_gib_max"] = max(r[1] for r in rows)
        out["peak_reserved_gib_max"] = max(r[2] for r in rows)
        out["nvml_used_gib_max"] = max(r[3] for r in rows)
        out.update(scale_result(out, spec))
    else:
        out["status"] = "oom" if agreed == 2 else "error"
        first = next((e for e in errs if e and ("out of memory" in e.lower()) == (agreed == 2)), None)
        out["error"] = first or next((e for e in errs if e), None)
        out["failed_ranks"] = [i for i, r in enumerate(rows) if int(r[7])]
        # peaks up to the failure are still informative
        out["peak_alloc_gib_max"] = max(r[1] for r in rows) or None
    return out
