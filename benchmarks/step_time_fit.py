"""Constants of the throughput model that are fitted on verl_megatron_practice, and how.

The dense constants were set earlier from the tables' MFU (see Efficiency). Fitted here: the gain of
apply_rope_fusion (`rope_fusion`, the measured ratio on pairs of rows that differ only in it); the fused MoE
decode kernel's efficiency and per-layer launch latency (`moe_decode`, `moe_decode_layer_s`, on gen); the MoE
training efficiency and all-to-all bandwidth share (`moe_train`, `a2a`, on update_actor and old_log_prob). A
coarse grid search minimises the MAPE of those phases over the rows given; with no MoE row among them the MoE
constants take their prior, MoE as efficient as dense (leave-one-table-out then shows the model without that
table's information).
"""

from __future__ import annotations

import itertools
import math
import statistics
from dataclasses import replace

from autotune.estimate.throughput import VERL_04_EFFICIENCY, Efficiency
from benchmarks.step_time_cases import mape, predict_case

FITTED: tuple[str, ...] = ("rope_fusion", "moe_decode", "moe_decode_layer_s", "moe_train", "a2a")
# Without MoE rows to fit on: MoE as efficient as dense.
PRIOR = {"moe_decode": 1.0, "moe_decode_layer_s": 0.0, "moe_train": 1.0, "a2a": 1.0}


def _grid(lo: float, hi: float, step: float) -> list[float]:
    n = round((hi - lo) / step)
    return [round(lo + i * step, 6) for i in range(n + 1)]


def rope_fusion_ratio(cases: list) -> float:
    """Measured update / log-prob time with apply_rope_fusion over without, on pairs of rows of one table that
    differ in nothing else (geometric mean); 1.0 (no gain) without such a pair."""
    ratios = [a.measured[ph] / b.measured[ph]
              for a in cases for b in cases
              if a.row.table == b.row.table and a.row.job.rope_fusion and not b.row.job.rope_fusion
              and a.row.cand == b.row.cand and (a.row.model, a.row.gpu, a.row.gpus, a.row.response_length)
              == (b.row.model, b.row.gpu, b.row.gpus, b.row.response_length)
              for ph in ("update_actor", "old_log_prob") if a.measured.get(ph) and b.measured.get(ph)]
    return round(math.exp(statistics.fmean(math.log(r) for r in ratios)), 3) if ratios else 1.0


def fit(cases: list) -> Efficiency:
    """The Efficiency whose fitted constants minimise the MAPE of their phases over `cases` (MoE rows only)."""
    base = replace(VERL_04_EFFICIENCY, rope_fusion=rope_fusion_ratio(cases))
    moe = [c for c in cases if c.moe and any(c.error(ph) is not None for ph in ("gen", "update_actor", "old_log_prob"))]
    if not moe:
        return replace(base, **PRIOR)

    def cost(eff: Efficiency, phases: tuple[str, ...]) -> float:
        errs = [e for c in moe for ph in phases if (e := predict_case(c, eff).error(ph)) is not None]
        return mape(errs) or 0.0

    best = min((replace(base, moe_decode=v, moe_decode_layer_s=lat)
                for v, lat in itertools.product(_grid(0.2, 1.0, 0.1), _grid(0.0, 1e-3, 1e-4))),
               key=lambda e: cost(e, ("gen",)))
    return min((replace(best, moe_train=t, a2a=a) for t, a in itertools.product(_grid(0.3, 1.0, 0.05),
                                                                                  _grid(0.2, 1.0, 0.1))),
               key=lambda e: cost(e, ("update_actor", "old_log_prob")))


if __name__ == "__main__":
    from benchmarks.step_time_cases import cases
    from benchmarks.throughput_rank import DEFAULT_REF

    eff = fit(cases(DEFAULT_REF))
    print({k: getattr(eff, k) for k in FITTED})
