"""The measured rows of verl_megatron_practice as cases of the throughput model: measured and predicted phases.

Shared by the error report (benchmarks/step_time_error.py) and the fit of its constants (benchmarks/step_time_fit.py);
each row is rebuilt as a candidate exactly as benchmarks/throughput_rank.py does.
"""

from __future__ import annotations

import csv
import statistics
from dataclasses import dataclass, replace
from pathlib import Path

from autotune.estimate.constraints import check
from autotune.estimate.memory import MemoryEstimate, estimate_memory
from autotune.estimate.throughput import DEFAULT_WORKLOAD, VERL_04_EFFICIENCY, Efficiency, estimate_throughput
from autotune.model import get_model
from benchmarks.throughput_rank import TABLES, Row, cluster_for, num, read_rows

COLUMNS = {"gen": ("rollout", "rollout/gen"), "old_log_prob": ("old_logp",), "update_actor": ("update_actor",),
           "update_weights": ("reshard",), "step": ("step",)}
# Tables run with recipe.dapo.main_dapo (filter_groups on, gen_prompt_bsz = 3 x train_prompt_bsz; upstream scripts
# DAPO-14B/*.sh, DAPO-32B/*.sh): generation rounds depend on the data.
REGENERATING = {"dapo14b", "dapo32b"}


@dataclass(frozen=True)
class Case:
    row: Row
    measured: dict[str, float]
    predicted: dict[str, float]
    excluded: str  # why this row does not count in the headline ("" when it counts)
    memory: MemoryEstimate

    @property
    def moe(self) -> bool:
        return get_model(self.row.model).is_moe

    def error(self, phase: str) -> float | None:
        m = self.measured.get(phase)
        if not m or self.excluded or (phase in ("gen", "step") and self.row.table in REGENERATING):
            return None
        return self.predicted[phase] / m - 1


def measured_phases(path: Path) -> dict[str, dict[str, float]]:
    out = {}
    with path.open() as f:
        for r in csv.DictReader(f):
            got = {}
            for phase, cols in COLUMNS.items():
                for c in cols:
                    v = num(r.get(c))
                    if v:
                        got[phase] = v
                        break
            out[r["number"]] = got
    return out


def predict_case(case: Case, eff: Efficiency = VERL_04_EFFICIENCY) -> Case:
    """The case predicted again with other constants (the memory estimate does not depend on them)."""
    row = case.row
    wl = DEFAULT_WORKLOAD
    if row.response_length:
        wl = replace(wl, response_fraction=row.response_length / row.job.max_response_length)
    t = estimate_throughput(get_model(row.model), cluster_for(row), row.job, row.cand, case.memory, wl, eff)
    return replace(case, predicted=dict(t.phases) | {"step": t.step_time})


def cases(ref: Path, eff: Efficiency = VERL_04_EFFICIENCY) -> list[Case]:
    out = []
    for name in TABLES:
        path = ref / name
        if not path.exists():
            continue
        meas = measured_phases(path)
        for row in read_rows(path):
            m, cl = get_model(row.model), cluster_for(row)
            broken = [v.rule for v in check(m, cl, row.job, row.cand)]
            why = f"breaks {', '.join(broken)}" if broken else ""
            case = Case(row, meas[row.number], {}, why, estimate_memory(m, cl, row.job, row.cand))
            out.append(predict_case(case, eff))
    return out


def mape(errors: list[float]) -> float | None:
    return 100 * statistics.fmean(abs(e) for e in errors) if errors else None
