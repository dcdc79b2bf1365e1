"""Where a profiled step's time goes: per phase and rank, GEMM, attention, other compute, communication, memory copies
and idle device time; how much communication hides under compute; the top kernels; pipeline bubbles.

The phases are verl's stages as verl marks them in its traces (old/ref log-prob, update; autotune/verl/keys.py
PROFILE_STAGES) and the rollout (each vLLM trace whole); what a training worker's trace holds outside its stages
(waiting for the rollout, reward, data) is the phase "outside". Every instant of a phase's windows is given to one
kind, compute first (kinds.KINDS): communication and copies count only where no compute runs (their exposed part),
and the rest is idle. The device is the GPU where the trace holds kernels; a trace of CPU ops alone is analysed the
same way with the ops' own time (nested ops: the innermost, inside attention or communication that kind).
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autotune import verl
from autotune.profile import kinds as K
from autotune.profile.traces import GPU_CATS, Events, TraceFile

OUTSIDE = "outside"  # a training worker's trace outside verl's stages
OUTSIDE_MIN = 0.01  # of the trace: shorter stretches outside the stages are the profiler's own start and stop
PHASE_ORDER = (verl.ROLLOUT_PHASE, "old_log_prob", "ref", "update_actor", OUTSIDE)
TOP_KERNELS = 10
_MINI_BATCH = re.compile(r"^mini_batch\d+$")


@dataclass(frozen=True)
class RankPhase:
    """One rank's share of a phase (seconds; `kinds` are exclusive and sum to `seconds`)."""

    label: str
    rank: int | None
    pp_rank: int | None
    seconds: float
    kinds: dict[str, float]  # gemm, attention, other, communication (exposed), memory (exposed), idle
    communication_s: float = 0.0  # all communication, hidden or not
    communication_hidden_s: float = 0.0  # of it, while compute ran
    memory_s: float = 0.0  # all copies
    host_copy_s: float = 0.0  # of them, between host and device (offload)
    p2p_s: float = 0.0  # point-to-point (pipeline) transfers and waits
    p2p_exposed_s: float = 0.0

    @property
    def bubble_s(self) -> float:
        """Time a pipeline stage spends idle or waiting on its neighbours (meaningful where PP > 1)."""
        return self.kinds.get(K.IDLE, 0.0) + self.p2p_exposed_s

    def as_dict(self) -> dict[str, Any]:
        return {"label": self.label, "rank": self.rank, "pp_rank": self.pp_rank, "seconds": _r(self.seconds),
                "kinds_s": {k: _r(v) for k, v in self.kinds.items()},
                "communication_s": _r(self.communication_s), "communication_hidden_s": _r(self.communication_hidden_s),
                "memory_s": _r(self.memory_s), "host_copy_s": _r(self.host_copy_s), "p2p_s": _r(self.p2p_s),
                "p2p_exposed_s": _r(self.p2p_exposed_s), "bubble_s": _r(self.bubble_s)}


@dataclass(frozen=True)
class KernelStat:
    name: str
    kind: str
    seconds: float  # summed over ranks
    count: int

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "seconds": _r(self.seconds), "count": self.count}


@dataclass(frozen=True)
class Phase:
    name: str
    source: str  # train | rollout | probe
    device: str  # gpu | cpu
    ranks: tuple[RankPhase, ...]
    top: tuple[KernelStat, ...] = ()
    note: str = ""

    @property
    def seconds(self) -> float:
        """The phase's wall time: its slowest rank (the others wait for it)."""
        return max((r.seconds for r in self.ranks), default=0.0)

    def shares(self) -> dict[str, float]:
        """Fraction of the phase's rank-seconds in each kind (sums to 1)."""
        total = sum(r.seconds for r in self.ranks)
        return {k: (sum(r.kinds.get(k, 0.0) for r in self.ranks) / total if total else 0.0)
                for k in (*K.KINDS, K.IDLE)}

    def share(self, kind: str) -> float:
        return self.shares()[kind]

    @property
    def communication_hidden_fraction(self) -> float | None:
        comm = sum(r.communication_s for r in self.ranks)
        return sum(r.communication_hidden_s for r in self.ranks) / comm if comm else None

    @property
    def host_copy_fraction(self) -> float:
        total = sum(r.seconds for r in self.ranks)
        return sum(r.host_copy_s for r in self.ranks) / total if total else 0.0

    @property
    def bubble_fraction(self) -> float | None:
        """Mean over the pipeline's ranks of (idle + exposed point-to-point) / phase time; None without PP."""
        ranks = [r for r in self.ranks if r.pp_rank is not None]
        if not ranks or not any(r.pp_rank for r in ranks) or self.name == OUTSIDE:
            return None
        return sum(r.bubble_s / r.seconds for r in ranks if r.seconds) / len(ranks)

    def as_dict(self) -> dict[str, Any]:
        hidden, bubble = self.communication_hidden_fraction, self.bubble_fraction
        return {"phase": self.name, "source": self.source, "device": self.device, "seconds": _r(self.seconds),
                "ranks": len(self.ranks), "shares": {k: _r(v, 4) for k, v in self.shares().items()},
                "communication_hidden_fraction": None if hidden is None else _r(hidden, 4),
                "host_copy_fraction": _r(self.host_copy_fraction, 4),
                "bubble_fraction": None if bubble is None else _r(bubble, 4),
                "per_rank": [r.as_dict() for r in self.ranks], "top": [k.as_dict() for k in self.top],
                "note": self.note}


@dataclass(frozen=True)
class ProfileAnalysis:
    phases: tuple[Phase, ...]
    files: tuple[TraceFile, ...]
    notes: tuple[str, ...] = ()
    unprofiled: dict[str, str] = field(default_factory=dict)  # phase -> why no trace holds it
    # HolisticTraceAnalysis' own whole-trace numbers per GPU trace (label -> idle/compute/non-compute %, overlap %):
    # a cross-check of the per-phase numbers, over the whole trace and between its first and last kernel.
    hta: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def device(self) -> str:
        return "gpu" if any(p.device == "gpu" for p in self.phases) else "cpu"

    def phase(self, name: str) -> Phase | None:
        return next((p for p in self.phases if p.name == name), None)

    def as_dict(self) -> dict[str, Any]:
        return {"device": self.device, "phases": [p.as_dict() for p in self.phases],
                "files": [f.as_dict() for f in self.files], "notes": list(self.notes),
                "unprofiled": dict(self.unprofiled), "kinds": [*K.KINDS, K.IDLE], "hta": dict(self.hta),
                "analysed_with": "HolisticTraceAnalysis (parsing, kernel types) + autotune.profile.analysis"}


def _r(x: float, nd: int = 6) -> float:
    return round(float(x), nd)


# -------------------------------------------------------------------------------------------- device events
@dataclass
class DeviceEvents:
    """The work a trace's device did: intervals (µs) with their kind, name and launch time."""

    start: np.ndarray
    end: np.ndarray
    kind: np.ndarray  # str objects
    name: np.ndarray
    launch: np.ndarray
    p2p: np.ndarray  # bool
    host: np.ndarray  # bool
    device: str
    first: np.ndarray  # bool: the event starts a piece of work (a CPU op's first stretch; every kernel)


def device_events(ev: Events) -> DeviceEvents:
    """GPU kernels, copies and memsets where the trace has them; else the CPU ops' own (exclusive) time."""
    gpu = np.isin(ev.cat, GPU_CATS)
    if gpu.any():
        from hta.utils.utils import get_kernel_type

        g = ev.where(gpu)
        cache: dict[str, str] = {}
        for n in g.name:
            if n not in cache:
                cache[n] = K.kernel_kind(n, get_kernel_type(n))
        kinds = np.array([cache[n] for n in g.name], dtype=object)
        return _finish(g.ts, g.end, kinds, g.name, g.launch_ts, "gpu", np.ones(len(g), bool))
    starts, ends, kinds, names, first = _cpu_segments(ev)
    comm = ev.cat == "user_annotation"
    idx = np.flatnonzero(comm)
    comm[idx] = [n not in verl.PROFILE_STAGES and K.op_kind(n) == K.COMMUNICATION for n in ev.name[idx]]
    if comm.any():  # gloo's / NCCL's own ranges on their threads (the transfer itself)
        c = ev.where(comm)
        starts, ends = np.concatenate([starts, c.ts]), np.concatenate([ends, c.end])
        kinds = np.concatenate([kinds, np.full(len(c), K.COMMUNICATION, dtype=object)])
        names = np.concatenate([names, c.name])
        first = np.concatenate([first, np.ones(len(c), bool)])
    return _finish(starts, ends, kinds, names, starts.copy(), "cpu", first)


def _finish(start, end, kinds, names, launch, device, first) -> DeviceEvents:
    cache_p: dict[str, bool] = {}
    cache_h: dict[str, bool] = {}
    p2p = np.array([cache_p.setdefault(n, K.is_p2p(n)) for n in names], dtype=bool) if len(names) else \
        np.zeros(0, bool)
    host = np.array([cache_h.setdefault(n, K.is_host_copy(n)) for n in names], dtype=bool) if len(names) else \
        np.zeros(0, bool)
    p2p &= kinds == K.COMMUNICATION
    host &= kinds == K.MEMORY
    return DeviceEvents(np.asarray(start, float), np.asarray(end, float), kinds, names, np.asarray(launch, float),
                        p2p, host, device, first)


def _inherit(parent: str | None, own: str) -> str:
    """An op inside attention, communication or a GEMM is that work (the bias copy of an addmm, the matmuls of an
    attention); inside anything else an op is what it is."""
    if parent in (K.ATTENTION, K.COMMUNICATION, K.GEMM):
        return parent
    return own


def _cpu_segments(ev: Events) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Each CPU op's exclusive time (its interval less its children's), per thread, with its (inherited) kind."""
    ops = ev.where(ev.cat == "cpu_op")
    starts: list[float] = []
    ends: list[float] = []
    kinds: list[str] = []
    names: list[str] = []
    firsts: list[bool] = []
    own_kind: dict[str, str] = {}

    def emit(entry: list[Any], s: float, e: float) -> None:
        if e > s:
            starts.append(s)
            ends.append(e)
            kinds.append(entry[1])
            names.append(entry[2])
            firsts.append(not entry[4])
            entry[4] = True

    threads = np.stack([ops.pid.astype(np.int64), ops.tid.astype(np.int64)], axis=1) if len(ops) else \
        np.zeros((0, 2), np.int64)
    for key in np.unique(threads, axis=0) if len(ops) else []:
        sel = np.flatnonzero((threads[:, 0] == key[0]) & (threads[:, 1] == key[1]))
        order = sel[np.lexsort((-ops.end[sel], ops.ts[sel]))]
        stack: list[list[Any]] = []  # [end, kind, name, cursor, emitted]
        for i in order:
            s, e, name = float(ops.ts[i]), float(ops.end[i]), str(ops.name[i])
            while stack and stack[-1][0] <= s:
                top = stack.pop()
                emit(top, top[3], top[0])
                if stack:
                    stack[-1][3] = max(stack[-1][3], top[0])
            parent = stack[-1] if stack else None
            if parent is not None:
                e = min(e, parent[0])
                emit(parent, parent[3], s)
                parent[3] = e
            own = own_kind.get(name)
            if own is None:
                own = own_kind[name] = K.op_kind(name)
            stack.append([e, _inherit(parent[1] if parent else None, own), name, s, False])
        while stack:
            top = stack.pop()
            emit(top, top[3], top[0])
            if stack:
                stack[-1][3] = max(stack[-1][3], top[0])
    return (np.asarray(starts, float), np.asarray(ends, float), np.asarray(kinds, dtype=object),
            np.asarray(names, dtype=object), np.asarray(firsts, bool))


# ---------------------------------------------------------------------------------------------- intervals
def _merge(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if not len(starts):
        return starts, ends
    o = np.argsort(starts, kind="stable")
    s, e = starts[o], ends[o]
    run = np.maximum.accumulate(e)
    new = np.ones(len(s), bool)
    new[1:] = s[1:] > run[:-1]
    idx = np.flatnonzero(new)
    return s[idx], np.maximum.reduceat(e, idx)


def _coverage(points: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """For each elementary segment [points[j], points[j+1]): covered by some interval."""
    n = len(points)
    if not len(starts):
        return np.zeros(max(n - 1, 0), bool)
    diff = np.bincount(np.searchsorted(points, starts), minlength=n + 1)[: n + 1] - \
        np.bincount(np.searchsorted(points, ends), minlength=n + 1)[: n + 1]
    return np.cumsum(diff)[: n - 1] > 0


def rank_phase(windows: list[tuple[float, float]], de: DeviceEvents, label: str, rank: int | None,
               pp_rank: int | None) -> RankPhase:
    """One rank's breakdown of the time in `windows` (µs in, seconds out)."""
    ws, we = _merge(np.array([w[0] for w in windows], float), np.array([w[1] for w in windows], float))
    lo, hi = (ws.min(), we.max()) if len(ws) else (0.0, 0.0)
    near = (de.end > lo) & (de.start < hi)
    s, e = np.clip(de.start[near], lo, hi), np.clip(de.end[near], lo, hi)
    points = np.unique(np.concatenate([ws, we, s, e]))
    seg = np.diff(points) / 1e6
    inside = _coverage(points, ws, we)
    kind = de.kind[near]
    cov = {k: _coverage(points, s[kind == k], e[kind == k]) for k in K.KINDS}
    compute = cov[K.GEMM] | cov[K.ATTENTION] | cov[K.OTHER]
    covered = np.zeros(len(seg), bool)
    out: dict[str, float] = {}
    for k in K.KINDS:
        out[k] = float(seg[inside & cov[k] & ~covered].sum())
        covered |= cov[k]
    out[K.IDLE] = float(seg[inside & ~covered].sum())
    p2p = _coverage(points, s[de.p2p[near]], e[de.p2p[near]])
    host = _coverage(points, s[de.host[near]], e[de.host[near]])
    comm = cov[K.COMMUNICATION]
    return RankPhase(label, rank, pp_rank, float(seg[inside].sum()), out,
                     communication_s=float(seg[inside & comm].sum()),
                     communication_hidden_s=float(seg[inside & comm & compute].sum()),
                     memory_s=float(seg[inside & cov[K.MEMORY]].sum()), host_copy_s=float(seg[inside & host].sum()),
                     p2p_s=float(seg[inside & p2p].sum()), p2p_exposed_s=float(seg[inside & p2p & ~compute].sum()))


def _top(de: DeviceEvents, windows: list[tuple[float, float]]) -> dict[tuple[str, str], list[float]]:
    """Seconds and count per (name, kind) of the work launched inside `windows`."""
    sel = np.zeros(len(de.start), bool)
    for a, b in windows:
        sel |= (de.launch >= a) & (de.launch <= b)
    out: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0])
    dur = (de.end - de.start)[sel] / 1e6
    for n, k, d, f in zip(de.name[sel], de.kind[sel], dur, de.first[sel], strict=True):
        acc = out[(n, k)]
        acc[0] += d
        acc[1] += int(f)
    return out


# ------------------------------------------------------------------------------------------------- phases
def phase_windows(ev: Events, de: DeviceEvents, source: str) -> tuple[dict[str, list[tuple[float, float]]], str]:
    """The time windows (µs) of each phase in one trace, and a note when a phase is only partly in it."""
    if not len(ev):
        return {}, ""
    span = ev.span
    if source == "rollout":
        return {verl.ROLLOUT_PHASE: [span]}, ""
    ann = ev.cat == "user_annotation"
    out: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for n, a, b in zip(ev.name[ann], ev.ts[ann], ev.end[ann], strict=True):
        phase = verl.PROFILE_STAGES.get(n)
        if phase:
            out[phase].append((float(a), float(b)))
    note = ""
    if "update_actor" not in out:  # verl's schedule kept only some update mini-batches
        mbs = [(float(a), float(b)) for n, a, b in zip(ev.name[ann], ev.ts[ann], ev.end[ann], strict=True)
               if _MINI_BATCH.match(str(n))]
        if mbs:
            out["update_actor"] = mbs
            note = (f"update_actor: {len(mbs)} mini-batch(es) in the trace (verl's profiler schedule), not the "
                    "whole phase")
    if de.device == "gpu":  # a phase lasts until the kernels it launched have run
        for phase, wins in out.items():
            grown = []
            for a, b in wins:
                launched = (de.launch >= a) & (de.launch <= b)
                grown.append((a, max(b, float(de.end[launched].max())) if launched.any() else b))
            out[phase] = grown
    if source == "train" and out:
        ws, we = _merge(np.array([w[0] for ws_ in out.values() for w in ws_]),
                        np.array([w[1] for ws_ in out.values() for w in ws_]))
        gaps = [(a, b) for a, b in zip([span[0], *we], [*ws, span[1]], strict=True) if b > a]
        if sum(b - a for a, b in gaps) >= OUTSIDE_MIN * (span[1] - span[0]):
            out[OUTSIDE] = gaps
    return dict(out), note


def pp_rank(f: TraceFile, pp: int | None) -> int | None:
    """A training rank's pipeline stage: from its trace's name (Megatron's ranks), else from the layout in Megatron's
    default rank order (tp-cp-ep-dp-pp: the pipeline stage is the outermost)."""
    if "pp" in f.parallel:
        return f.parallel["pp"]
    if pp and pp > 1 and f.rank is not None and f.world and f.world % pp == 0 and f.source != "rollout":
        return f.rank // (f.world // pp)
    return None


def analyse(files: list[TraceFile], events: list[Events] | None = None, top: int = TOP_KERNELS,
            pp: int | None = None) -> ProfileAnalysis:
    """The breakdown of every phase found in `files` (parsed with HolisticTraceAnalysis unless `events` are given);
    `pp`: the layout's pipeline size, for traces whose names do not carry Megatron's ranks."""
    from autotune.profile.traces import load

    hta: dict[str, dict[str, float]] = {}
    if events is None:
        loaded = load(files)
        events = loaded.events
        hta = {files[i].label: v for i, v in loaded.hta.items()}
    per_phase: dict[tuple[str, str], list[RankPhase]] = defaultdict(list)
    tops: dict[tuple[str, str], dict[tuple[str, str], list[float]]] = defaultdict(lambda: defaultdict(lambda: [0.0, 0]))
    devices: dict[tuple[str, str], str] = {}
    notes: list[str] = []
    for f, ev in zip(files, events, strict=True):
        de = device_events(ev)
        windows, note = phase_windows(ev, de, f.source)
        if note and note not in notes:
            notes.append(note)
        if not windows:
            notes.append(f"{f.label}: no verl stage in {f.path}")
        for phase, wins in windows.items():
            key = (phase, f.source)
            per_phase[key].append(rank_phase(wins, de, f.label, f.rank, pp_rank(f, pp)))
            devices[key] = de.device
            if phase != OUTSIDE:
                for nk, (sec, cnt) in _top(de, wins).items():
                    acc = tops[key][nk]
                    acc[0] += sec
                    acc[1] += cnt
    phases = []
    order = {p: i for i, p in enumerate(PHASE_ORDER)}
    for key in sorted(per_phase, key=lambda k: (order.get(k[0], 99), k[1])):
        ranks = tuple(sorted(per_phase[key], key=lambda r: (r.rank is None, r.rank or 0, r.label)))
        best = sorted(tops[key].items(), key=lambda kv: -kv[1][0])[:top]
        phases.append(Phase(key[0], key[1], devices[key], ranks,
                            tuple(KernelStat(n[:200], k, s, int(c)) for (n, k), (s, c) in best),
                            next((n for n in notes if n.startswith(key[0] + ":")), "")))
    unprofiled = {}
    if any(f.source == "train" for f in files):
        unprofiled = {p: "verl 0.9.1 syncs the weights after the step's profiler stopped (trainer_sync.on_step_end): "
                         f"its time is verl's {verl.PHASE_TIMINGS[p]}" for p in verl.UNPROFILED_PHASES}
    return ProfileAnalysis(tuple(phases), tuple(files), tuple(notes), unprofiled, hta)
