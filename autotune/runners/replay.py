"""The replay runner: answers a trial from a table of configurations that were measured earlier.

Nothing is launched and nothing is simulated: every result is a real measurement, replayed, and says so
(`TrialResult.extra["replayed_from"]`, the reason text, the CLI's first line). It exists to compare search
strategies on measured landscapes without spending GPU time on each comparison (benchmarks/search_efficiency.py).

A replay table is a CSV (format: benchmarks/README.md):
- columns named like search-space parameters (tp, pp, vpp, cp, ep, recompute, ppo_max_token_len_per_gpu, ...)
  give each row's configuration; an empty cell means "not applicable" (null for vpp/etp, else the job's value);
- `status` (ok | oom | failed), `throughput` (tokens/s/GPU, ok rows), optional `peak_mem_gib`, and timing
  columns ending in `_s` (`step_time_s`, `gen_s`, `update_actor_s`, ...); any other column is kept as extra.
- the metadata (model, GPU type and count, job, objective, source) in a `FILE.meta.yaml` beside it, or as YAML
  in a block of `#` comment lines at the top of the CSV.

The table also defines the search space: its parameter columns are the dimensions, their distinct values the
choices. A candidate that is not a row is refused before launch ("not in the table").
"""

from __future__ import annotations

import csv
import dataclasses
import io
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from autotune.candidate import RECOMPUTE_CHOICES, Candidate
from autotune.cluster import Cluster, ClusterError, get_gpu_type, gpu_type_from_device_name
from autotune.job import Job
from autotune.runners.base import Runner, TrialResult, TrialSpec, TrialStatus
from autotune.search.space import PARAM_TYPES, SearchSpace, parse_space

if TYPE_CHECKING:
    from autotune.search.setup import Setup

STATUSES = {"ok": TrialStatus.OK, "oom": TrialStatus.OOM, "failed": TrialStatus.FAILED}
META_KEYS = ("model", "num_layers", "gpu_type", "gpus", "nodes", "job", "objective", "measure_step", "source",
             "notes")
_NULLABLE = {p for p, (_, nullable) in PARAM_TYPES.items() if nullable}


class ReplayError(ValueError):
    """A replay table that cannot be used; the message names the file, the line or column, and the fix."""


@dataclass(frozen=True)
class ReplayRow:
    line: int  # line of the CSV file (1-based), for messages and the trial's record
    params: dict[str, Any]  # parameter columns of this row (empty cells left out, or None where nullable)
    status: TrialStatus
    throughput: float | None
    peak_mem_gib: float | None = None
    phases: dict[str, float] = field(default_factory=dict)  # `<phase>_s` columns; `step_time_s` is "step"
    extra: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ReplayTable:
    path: str
    meta: dict[str, Any]
    param_columns: tuple[str, ...]  # in search-space order
    rows: tuple[ReplayRow, ...]

    @classmethod
    def load(cls, path: str | Path) -> ReplayTable:
        p = Path(path)
        if not p.is_file():
            raise ReplayError(f"replay table {p} does not exist")
        text = p.read_text()
        header = [ln[2:] if ln.startswith("# ") else ln[1:] for ln in _leading_comments(text)]
        side = p.with_name(p.name + ".meta.yaml") if not p.name.endswith(".csv") else p.with_suffix(".meta.yaml")
        if side.is_file() and any(ln.strip() for ln in header):
            raise ReplayError(f"{p}: metadata is both in {side.name} and in the CSV's # header; keep one")
        meta_text, meta_src = (side.read_text(), str(side)) if side.is_file() else ("\n".join(header), str(p))
        meta = _parse_meta(meta_text, meta_src)
        body = "\n".join(ln for ln in text.splitlines() if not ln.startswith("#"))
        n_comments = len(_leading_comments(text))
        reader = csv.DictReader(io.StringIO(body))
        cols = [c.strip() for c in (reader.fieldnames or [])]
        for need in ("status", "throughput"):
            if need not in cols:
                raise ReplayError(f"{p}: no `{need}` column; a replay table needs status and throughput columns "
                                  f"(found: {', '.join(cols) or 'none'})")
        params = tuple(n for n in Candidate.param_names() if n in cols)
        if not params:
            raise ReplayError(f"{p}: no parameter columns; name them like the search space ({', '.join(PARAM_TYPES)})")
        rows = []
        for i, raw in enumerate(reader):
            line = n_comments + 2 + i
            rows.append(_parse_row({(k or "").strip(): (v or "").strip() for k, v in raw.items()}, params,
                                   f"{p}:{line}", line))
        if not rows:
            raise ReplayError(f"{p}: the table has no rows")
        if not any(r.status == TrialStatus.OK for r in rows):
            raise ReplayError(f"{p}: no row has status ok; nothing to replay")
        table = cls(str(p), meta, params, tuple(rows))
        table.keys(table.job().candidate(Candidate()))  # duplicate configurations fail here, at load
        return table

    # What the table stands for
    @property
    def objective(self) -> str:
        return str(self.meta.get("objective", "step"))

    @property
    def best(self) -> ReplayRow:
        return max((r for r in self.rows if r.status == TrialStatus.OK), key=lambda r: r.throughput or 0.0)

    def describe(self) -> str:
        src = self.meta.get("source") or "source not given"
        return f"{self.path} ({len(self.rows)} configurations; {src})"

    def job(self) -> Job:
        job = self.meta.get("job") or {}
        if not isinstance(job, Mapping):
            raise ReplayError(f"{self.path}: meta `job` must be a mapping of verl keys to values")
        return Job.from_mapping(job, f"{self.path} (meta job)")

    def setup(self, measure_step: int | None = None) -> Setup:
        """The study a table answers: its model, GPUs and job; the space of its rows; its objective."""
        from autotune.model import get_model
        from autotune.search.setup import Setup

        m = self.meta
        model = get_model(str(m["model"]))
        if m.get("num_layers") and int(m["num_layers"]) != model.num_layers:
            model = dataclasses.replace(model.with_layers(int(m["num_layers"])),
                                        name=f"{model.name}-L{int(m['num_layers'])}")
        gpu = _gpu_type(str(m["gpu_type"]), self.path)
        try:
            cluster = Cluster(gpu, gpus_per_node=int(m["gpus"]), nodes=int(m.get("nodes", 1)))
        except ClusterError as e:
            raise ReplayError(f"{self.path}: meta: {e}") from None
        return Setup(model, cluster, self.job(), self.space(), measure_step or int(m.get("measure_step", 3)),
                     objective=self.objective)

    # The space
    def space_text(self) -> str:
        """The search space of the table's rows as a search-space YAML file (what the study stores)."""
        dims: dict[str, Any] = {}
        for i, col in enumerate(self.param_columns):
            values = [r.params.get(col) for r in self.rows]
            present = _ordered(col, {v for v in values if v is not None})
            spec: dict[str, Any] = {"choices": present}
            if any(v is None for v in values):
                when = self._when(col, self.param_columns[:i])
                if when is not None:
                    spec["when"] = when
                    # Rows with the condition true but the cell empty (nullable only) keep null as a choice.
                    if col in _NULLABLE and any(r.params.get(col) is None and _holds(r, when) for r in self.rows):
                        spec["choices"] = [None, *present]
                elif col in _NULLABLE:
                    spec["choices"] = [None, *present]
                else:
                    raise ReplayError(
                        f"{self.path}: column {col} is empty in some rows and no earlier column tells when it "
                        f"applies; fill it in every row (or order the columns so that one does)")
            if not spec["choices"]:
                raise ReplayError(f"{self.path}: column {col} is empty in every row; drop it")
            dims[col] = spec
        stem = Path(self.path).name.removesuffix(".csv")
        doc = {"name": f"replay-{stem}",
               "description": f"configurations of the measured table {Path(self.path).name}",
               "dimensions": dims}
        return yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=200)

    def space(self) -> SearchSpace:
        return parse_space(self.space_text(), self.path)

    def _when(self, col: str, earlier: tuple[str, ...]) -> dict[str, Any] | None:
        """An earlier column whose values tell exactly when `col` is set: {name: {in: [values]}}."""
        for e in earlier:
            on = {r.params.get(e) for r in self.rows if r.params.get(col) is not None}
            off = {r.params.get(e) for r in self.rows if r.params.get(col) is None}
            if on and not on & off and None not in on:
                return {e: {"in": _ordered(e, on)}}
        return None

    # Rows by configuration
    def keys(self, base: Candidate) -> dict[str, ReplayRow]:
        """Candidate key -> row, each row completed with `base` (the job's settings) and normalised."""
        out: dict[str, ReplayRow] = {}
        for r in self.rows:
            try:
                key = Candidate.from_params(r.params, base).key()
            except (TypeError, ValueError) as e:
                raise ReplayError(f"{self.path}:{r.line}: {e}") from None
            if key in out:
                raise ReplayError(
                    f"{self.path}: lines {out[key].line} and {r.line} are the same configuration (after verl's "
                    "normalisation, e.g. sequence_parallel is off with tp=1); keep one row per configuration")
            out[key] = r
        return out


class ReplayRunner(Runner):
    """Looks a candidate up in a measured table. Results are real measurements, replayed (not simulated)."""

    name = "replay"
    simulated = False

    def __init__(self, table: ReplayTable | str | Path):
        self.table = table if isinstance(table, ReplayTable) else ReplayTable.load(table)
        self._index: dict[str, dict[str, ReplayRow]] = {}

    def describe(self) -> str:
        return f"replay of {self.table.describe()}"

    def _rows(self, job: Job) -> dict[str, ReplayRow]:
        fp = job.fingerprint()
        if fp not in self._index:
            self._index[fp] = self.table.keys(job.candidate(Candidate()))
        return self._index[fp]

    def lookup(self, candidate: Candidate, job: Job) -> ReplayRow | None:
        return self._rows(job).get(candidate.key())

    def domain(self, job: Job) -> list[Candidate]:
        base = job.candidate(Candidate())
        return [Candidate.from_params(r.params, base) for r in self._rows(job).values()]

    def refuse(self, candidate: Candidate, job: Job) -> str | None:
        if self.lookup(candidate, job) is None:
            return f"not in the table {self.table.path}: this configuration was never measured"
        return None

    def run(self, spec: TrialSpec) -> TrialResult:
        row = self.lookup(spec.candidate, spec.job)
        if row is None:  # the tuner asks refuse() first; a direct caller gets a clear answer
            return TrialResult(TrialStatus.CONFIG_ERROR, self.refuse(spec.candidate, spec.job) or "")
        where = f"{self.table.path} line {row.line}"
        extra = {"replayed_from": self.table.path, "table_line": row.line, **row.extra}
        common = {"phase_timings": dict(row.phases), "peak_memory_gib": row.peak_mem_gib, "extra": extra}
        if row.status == TrialStatus.OK:
            return TrialResult(TrialStatus.OK, f"replayed: measured earlier ({where}), not run now",
                               throughput=row.throughput, **common)
        detail = row.extra.get("error", "")
        what = "ran out of GPU memory" if row.status == TrialStatus.OOM else "failed"
        return TrialResult(row.status, f"replayed: {what} when measured ({where}){': ' + detail if detail else ''}",
                           **common)


# Parsing helpers
def _leading_comments(text: str) -> list[str]:
    out = []
    for ln in text.splitlines():
        if not ln.startswith("#"):
            break
        out.append(ln)
    return out


def _parse_meta(text: str, source: str) -> dict[str, Any]:
    try:
        meta = yaml.safe_load(text) if text.strip() else None
    except yaml.YAMLError as e:
        raise ReplayError(f"{source}: metadata is not valid YAML: {e}") from None
    if not isinstance(meta, Mapping):
        raise ReplayError(f"{source}: no metadata; give model, gpu_type, gpus (and job, objective, source) in a "
                          "FILE.meta.yaml beside the CSV or as YAML in # comment lines at its top")
    missing = [k for k in ("model", "gpu_type", "gpus") if k not in meta]
    if missing:
        raise ReplayError(f"{source}: metadata lacks {', '.join(missing)}")
    unknown = set(meta) - set(META_KEYS)
    if unknown:
        raise ReplayError(f"{source}: unknown metadata key(s) {sorted(unknown)}; allowed: {', '.join(META_KEYS)}")
    if str(meta.get("objective", "step")) not in ("step", "train"):
        raise ReplayError(f"{source}: objective must be `step` (whole GRPO steps) or `train` (training phase only)")
    return dict(meta)


def _gpu_type(name: str, where: str):
    try:
        return get_gpu_type(name)
    except ClusterError:
        found = gpu_type_from_device_name(name)
        if found is None:
            raise ReplayError(f"{where}: meta gpu_type {name!r} is not a known GPU type") from None
        return found


def _value(param: str, raw: str, where: str) -> Any:
    kind, _ = PARAM_TYPES[param]
    try:
        if kind == "int":
            f = float(raw)
            if f != int(f):
                raise ValueError
            return int(f)
        if kind == "float":
            return float(raw)
        if kind == "bool":
            low = raw.lower()
            if low not in ("true", "false", "1", "0"):
                raise ValueError
            return low in ("true", "1")
        return raw
    except ValueError:
        raise ReplayError(f"{where}: column {param}: {raw!r} is not a {kind}") from None


def _float(raw: str, col: str, where: str) -> float | None:
    if raw == "":
        return None
    try:
        return float(raw)
    except ValueError:
        raise ReplayError(f"{where}: column {col}: {raw!r} is not a number") from None


def _parse_row(raw: dict[str, str], params: tuple[str, ...], where: str, line: int) -> ReplayRow:
    values: dict[str, Any] = {}
    for p in params:
        cell = raw.get(p, "")
        if cell == "":
            if p in _NULLABLE:
                values[p] = None
            continue
        values[p] = _value(p, cell, where)
    status_raw = raw.get("status", "").lower()
    if status_raw not in STATUSES:
        raise ReplayError(f"{where}: status {raw.get('status')!r}; use one of {', '.join(STATUSES)}")
    status = STATUSES[status_raw]
    thr = _float(raw.get("throughput", ""), "throughput", where)
    if status == TrialStatus.OK and not (thr and thr > 0):
        raise ReplayError(f"{where}: an ok row needs a positive throughput (tokens/s/GPU)")
    phases = {}
    extra = {}
    for col, cell in raw.items():
        if col in params or col in ("status", "throughput", "peak_mem_gib"):
            continue
        if col.endswith("_s"):
            v = _float(cell, col, where)
            if v is not None:
                phases["step" if col == "step_time_s" else col[:-2]] = v
        elif cell != "":
            extra[col] = cell
    return ReplayRow(line, values, status, thr if status == TrialStatus.OK else None,
                     _float(raw.get("peak_mem_gib", ""), "peak_mem_gib", where), phases, extra)


def _ordered(col: str, values: set[Any]) -> list[Any]:
    if col == "recompute":
        return [v for v in RECOMPUTE_CHOICES if v in values] + sorted(values - set(RECOMPUTE_CHOICES))
    return sorted(values, key=lambda v: (str(type(v)), v))


def _holds(row: ReplayRow, when: dict[str, Any]) -> bool:
    return all(row.params.get(k) in spec["in"] for k, spec in when.items())
