"""The trace files of a profiled run: where verl (and the Megatron-core probe) writes them, and their events.

A folder is read as verl 0.9.1's profiler lays it out (the names and folders are written once, in
autotune/verl/keys.py): one chrome trace per training worker process, flat, named with the worker's global rank, world
size and Megatron ranks; one per GPU of each profiled vLLM replica in its own sub-folder (or moved up with a
`rollout-replica` prefix). The probe names its traces the verl way, with the worker role "mcore". Events are parsed by
HolisticTraceAnalysis (HTA's Trace: one parser for CPU and GPU traces, kernels linked to the CPU call that launched
them).
"""

from __future__ import annotations

import gzip
import logging
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from autotune import verl

_NAME_RE = re.compile(verl.TRACE_NAME_RE)
_RELOCATED_RE = re.compile(verl.ROLLOUT_RELOCATED_RE)
_ROLLOUT_RANK_RE = re.compile(verl.ROLLOUT_TRACE_RANK_RE, re.I)
_PARALLEL_RE = re.compile(r"(tp|pp|dp|cp)(\d+)")
PROBE_WORKER = "mcore"  # the probe's traces: mcore_train_step<N>_rank<R>-of-<W>_tp..-pp..-dp..-cp.._pid.._<stamp>
TRACE_SUFFIXES = (".json", ".json.gz")


class TraceError(ValueError):
    """No trace to analyse, or a trace that cannot be read; the message says which and what to do."""


@dataclass(frozen=True)
class TraceFile:
    """One trace file and what its name and folder say about it."""

    path: str
    source: str  # "train" (a verl training worker), "rollout" (a vLLM engine worker), "probe" (Megatron-core)
    rank: int | None = None  # the global rank (training) or GPU rank (rollout, when the name says)
    world: int | None = None
    step: int | None = None
    parallel: dict[str, int] = field(default_factory=dict)  # tp/pp/dp/cp ranks of a Megatron worker
    worker: str = ""  # verl's worker role and scope, e.g. "actor-rollout_train"
    replica: int | None = None  # rollout replica

    @property
    def label(self) -> str:
        if self.source == "rollout":
            where = f"replica {self.replica}" if self.replica is not None else "rollout"
            return where + (f" rank {self.rank}" if self.rank is not None else "")
        par = "".join(f" {k}{v}" for k, v in self.parallel.items() if k in ("tp", "pp") or (k == "cp" and v))
        return f"rank {self.rank}{par}" if self.rank is not None else Path(self.path).name

    def as_dict(self) -> dict:
        return {"path": self.path, "source": self.source, "rank": self.rank, "world": self.world, "step": self.step,
                "parallel": dict(self.parallel), "worker": self.worker, "replica": self.replica, "label": self.label}


def classify(path: Path) -> TraceFile | None:
    """What a file is, from its name and folder; None when it is no trace verl or the probe writes."""
    name = path.name
    if not name.endswith(TRACE_SUFFIXES):
        return None
    relocated = _RELOCATED_RE.match(name)
    parent = path.parent.name
    if relocated or parent.startswith(verl.ROLLOUT_TRACE_DIR_PREFIX):
        if relocated:
            replica = int(relocated["replica"])
            rank = int(relocated["global"]) if relocated["global"] is not None else None
            local = _ROLLOUT_RANK_RE.search(name[relocated.end():]) if rank is None else None
        else:
            replica = int(parent[len(verl.ROLLOUT_TRACE_DIR_PREFIX):]) if \
                parent[len(verl.ROLLOUT_TRACE_DIR_PREFIX):].isdigit() else None
            rank, local = None, _ROLLOUT_RANK_RE.search(name)
        if rank is None and local is not None:
            rank = int(local["rank"])
        return TraceFile(str(path), "rollout", rank=rank, replica=replica)
    m = _NAME_RE.match(name)
    if not m:
        return None
    head = m["head"] or ""
    parallel = {k: int(v) for k, v in _PARALLEL_RE.findall(m["parallel"] or "")}
    source = "probe" if head.split("_")[0] == PROBE_WORKER else "train"
    return TraceFile(str(path), source, rank=int(m["rank"]), world=int(m["world"]) if m["world"] else None,
                     step=int(m["step"]) if m["step"] else None, parallel=parallel, worker=head)


def discover(root: str | Path) -> tuple[list[TraceFile], list[str]]:
    """Every trace under `root` (verl's save_path or the probe's folder), and the files that are not traces."""
    root = Path(root)
    if not root.is_dir():
        raise TraceError(f"{root}: no such folder; give the folder verl's global_profiler.save_path pointed at "
                         "(or that autotune profile wrote)")
    found, other = [], []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        tf = classify(path)
        if tf is None:
            other.append(str(path))
        else:
            found.append(tf)
    return found, other


_TAIL = 1 << 16
_START_RE = re.compile(r'"name":\s*"Iteration Start: PyTorch Profiler"[^}]*?"ts":\s*([0-9.]+)')
_END_RE = re.compile(r'"name":\s*"Record Window End"[^}]*?"ts":\s*([0-9.]+)')


def scan(path: str | Path) -> tuple[str | None, tuple[float, float] | None]:
    """(why the file cannot be read, or None; the profiler's own window in µs, when it wrote one), reading the file
    once as a stream: a trace cut short by a stopped run has no closing brace or a broken gzip stream."""
    opener = gzip.open if str(path).endswith(".gz") else open
    head, tail = b"", b""
    try:
        with opener(path, "rb") as f:
            while chunk := f.read(1 << 22):
                if not head:
                    head = chunk[:64]
                tail = (tail + chunk)[-_TAIL:]
    except (OSError, EOFError) as e:
        return f"{Path(path).name}: {type(e).__name__}: {str(e)[:120]}", None
    if not head.lstrip().startswith(b"{") or not tail.rstrip().endswith(b"}"):
        return f"{Path(path).name}: not a whole chrome trace (cut short?)", None
    text = tail.decode("utf-8", "replace")
    a, b = _START_RE.findall(text), _END_RE.findall(text)
    return None, ((float(a[-1]), float(b[-1])) if a and b and float(b[-1]) > float(a[-1]) else None)


def readable(path: str | Path) -> str | None:
    """Why a trace file cannot be read (a run stopped while writing it), or None when it can."""
    return scan(path)[0]


@dataclass
class Events:
    """One trace's complete events, as columns (numpy arrays; times in microseconds)."""

    name: np.ndarray  # str objects
    cat: np.ndarray  # str objects
    ts: np.ndarray
    end: np.ndarray
    tid: np.ndarray
    pid: np.ndarray
    launch_ts: np.ndarray  # for GPU events: when the CPU launched them (HTA's correlation); else ts
    window: tuple[float, float] | None = None  # from the profiler's start to its stop, when the trace says

    @property
    def span(self) -> tuple[float, float]:
        """The time the trace covers: the profiler's window, else its first to last event."""
        if not len(self.ts):
            return self.window or (0.0, 0.0)
        lo, hi = float(self.ts.min()), float(self.end.max())
        return (min(lo, self.window[0]), max(hi, self.window[1])) if self.window else (lo, hi)

    def __len__(self) -> int:
        return len(self.ts)

    def where(self, mask: np.ndarray) -> Events:
        return Events(*(getattr(self, f)[mask] for f in ("name", "cat", "ts", "end", "tid", "pid", "launch_ts")),
                      self.window)


GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


@dataclass
class Loaded:
    events: list[Events]
    # HolisticTraceAnalysis' own whole-trace numbers per file index (GPU traces): its temporal breakdown (idle,
    # compute, non-compute between the first and last kernel) and communication/computation overlap.
    hta: dict[int, dict[str, float]] = field(default_factory=dict)


def load(files: list[TraceFile]) -> Loaded:
    """Parse the files with HolisticTraceAnalysis (in parallel processes when there are several)."""
    if not files:
        return Loaded([])
    scans = [scan(f.path) for f in files]
    bad = [why for why, _ in scans if why]
    if bad:
        raise TraceError(f"{len(bad)} trace file(s) cannot be read ({bad[0]}); the run may have been stopped "
                         "while writing them: profile again")
    from hta.common.trace import Trace
    from hta.configs.config import logger as hta_logger

    hta_logger.setLevel(logging.ERROR)
    trace = Trace(trace_files={i: f.path for i, f in enumerate(files)}, trace_dir="/")
    with warnings.catch_warnings():  # HTA 0.5 on pandas 3: deprecation warnings about its own calls
        warnings.simplefilter("ignore")
        # HTA forks a pool per rank; a fork of a process with threads (Ray, the dashboard, pytest-timeout) can hang.
        trace.parse_traces(use_multiprocessing=False, use_memory_profiling=False)
    symbols = np.asarray(trace.symbol_table.get_sym_table(), dtype=object)
    out = []
    for i in range(len(files)):
        df = trace.get_trace(i)
        name = symbols[df["name"].to_numpy()]
        cat = symbols[df["cat"].to_numpy()]
        ts = df["ts"].to_numpy(dtype=float)
        end = ts + df["dur"].to_numpy(dtype=float)
        launch = ts.copy()
        if "index_correlation" in df.columns:
            link = df["index_correlation"].to_numpy()
            gpu = np.isin(cat, GPU_CATS) & (link > 0)
            if gpu.any():
                pos = pd.Index(df["index"].to_numpy()).get_indexer(link[gpu])
                ok = pos >= 0
                idx = np.flatnonzero(gpu)[ok]
                launch[idx] = ts[pos[ok]]
        out.append(Events(name, cat, ts, end, df["tid"].to_numpy().copy(), df["pid"].to_numpy().copy(), launch,
                          scans[i][1]))
    with warnings.catch_warnings():
        return Loaded(out, hta_summary(trace, out))


def hta_summary(trace: object, events: list[Events]) -> dict[int, dict[str, float]]:
    """HolisticTraceAnalysis' temporal breakdown and comm/comp overlap of the traces that hold GPU kernels."""
    from hta.analyzers.breakdown_analysis import BreakdownAnalysis
    from hta.analyzers.communication_analysis import CommunicationAnalysis

    gpu = [i for i, ev in enumerate(events) if np.isin(ev.cat, GPU_CATS).any()]
    if not gpu:
        return {}
    everything = trace.traces  # type: ignore[attr-defined]
    trace.traces = {i: everything[i] for i in gpu}  # type: ignore[attr-defined]
    out: dict[int, dict[str, float]] = {i: {} for i in gpu}
    warnings.simplefilter("ignore")  # (restored by the catch_warnings around it)
    try:
        tb = BreakdownAnalysis.get_temporal_breakdown(trace, visualize=False)
        for _, row in tb.iterrows():
            out[int(row["rank"])].update(idle_pct=float(row["idle_time_pctg"]),
                                         compute_pct=float(row["compute_time_pctg"]),
                                         non_compute_pct=float(row["non_compute_time_pctg"]))
        ov = CommunicationAnalysis.get_comm_comp_overlap(trace, visualize=False)
        for _, row in ov.iterrows():
            out[int(row["rank"])]["comm_comp_overlap_pct"] = float(row["comp_comm_overlap_pctg"])
    except Exception as e:  # noqa: BLE001 - HTA's cross-check is extra: say why it is missing, keep ours
        return {i: {"error": f"{type(e).__name__}: {str(e)[:200]}"} for i in gpu}
    finally:
        trace.traces = everything  # type: ignore[attr-defined]
    return out
