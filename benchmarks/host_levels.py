"""The hosts' speed: how much of the model's disorder over single runs is which host a trial ran on. A section of
benchmarks/results/calibration.md (benchmarks/calibration.py).

The lent machines of one GPU type differ: a lease's trials run 0.70-0.75 of their predicted step on some hosts and
1.1-1.3 on others, every phase at once. The same configuration measured on two hosts is then two points the model
predicts alike and the hosts order. Two levels are set against the model's order here: its host's own (the median
measured / predicted step of the lease's other trials: an oracle, what a measurement of the host's speed could at
best give) and one read before any trial (the lease's `autotune doctor` time, its heavy imports: a CPU's speed,
fitted as a line on the other sizes' trials). The leases that ran `benchmarks.host_speed` before their first trial
(plans from lease 69 on) set its readings beside their levels (`probe_levels`): which one could stand in for the
host's level once enough leases carry it."""

from __future__ import annotations

import json
import re
import statistics
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from autotune.cli import doctor
from benchmarks.real_cases import DATA, Case, ok_cases, spearman
from benchmarks.step_order import rho_text

READY = re.compile(re.escape(doctor.READY) + r" \((\d+(?:\.\d+)?) s\)")


def doctor_seconds(lease: str, data: Path = DATA) -> float | None:
    """How long the lease's `autotune doctor` took (its doctor.txt; None where it kept none or the node was not
    ready)."""
    f = data / lease / "doctor.txt"
    m = READY.search(f.read_text()) if f.is_file() else None
    return float(m.group(1)) if m else None


def probes(lease: str, data: Path = DATA) -> list[dict]:
    """The lease's host probes (`benchmarks.host_speed`, plans from lease 69 on), the one before its first trial
    first; [] where it kept none."""
    files = sorted((data / lease).glob("host_speed_*.json"), key=lambda f: (f.stem != "host_speed_before", f.stem))
    return [json.loads(f.read_text()) for f in files]


def _ratio(c: Case) -> float:
    return c.measured_step_s / c.predicted_step_s


def by_lease(cs: list[Case]) -> dict[str, list[Case]]:
    """The trials of each lease, the leases in order."""
    by: dict[str, list[Case]] = defaultdict(list)
    for c in cs:
        by[c.lease].append(c)
    return dict(sorted(by.items()))


def lease_level(g: list[Case]) -> float:
    """A lease's level: the median measured / predicted step of its trials."""
    return statistics.median(_ratio(c) for c in g)


def host_level(c: Case, cs: list[Case]) -> float:
    """Its host's level: the median measured / predicted step of its lease's other ok trials (1 where it ran alone);
    the trial itself is left out of it."""
    others = [o for o in cs if o.lease == c.lease and o is not c]
    return lease_level(others) if others else 1.0


def doctor_line(cs: list[Case], seconds: Callable[[str], float | None]) -> tuple[float, float] | None:
    """(intercept, slope): the least-squares line of the trials' measured / predicted step on their lease's doctor
    time (None below 3 trials with one, or where every doctor took the same time)."""
    pts = [(s, _ratio(c)) for c in cs if (s := seconds(c.lease)) is not None]
    if len(pts) < 3:
        return None
    try:
        slope, intercept = statistics.linear_regression([x for x, _ in pts], [y for _, y in pts])
    except statistics.StatisticsError:
        return None
    return intercept, slope


def pearson(xs: list[float], ys: list[float]) -> float | None:
    """Pearson's r (None below 3 points or where either side is constant)."""
    try:
        return statistics.correlation(xs, ys) if len(xs) >= 3 else None
    except statistics.StatisticsError:
        return None


def levels(held: list[Case], seconds: Callable[[str], float | None] = doctor_seconds) -> list[str]:
    """Per size and GPU type: the model's Spearman over single runs beside the model times its host's level (the
    lease's other trials) and times the doctor's line (fitted on the other sizes of the GPU type); per GPU type, how
    the leases' levels follow their doctor's time."""
    ok = ok_cases(held)
    times = {lease: seconds(lease) for lease in {c.lease for c in ok}}  # each lease's doctor.txt read once
    lines = ["## The hosts' speed", "",
             "Spearman of the step (held out, as above) over single runs per size and GPU type: the model's; the "
             "model's times its host's level (the median measured / predicted step of the lease's other trials, the "
             "trial left out: an oracle of the host's speed, `host_levels.host_level`); the model's times a level "
             "read before any trial, the line of measured / predicted step on the lease's `autotune doctor` time "
             "(its heavy imports; fitted on the other sizes of the GPU type, `doctor_line`; trials of a lease "
             "without a doctor's time keep the model's). Where the host's level orders a size's runs and the model "
             "alone does not, what is missing is the host's speed, which one study (one host) never sees: its "
             "trials share it.", "",
             "| size | GPU | ok trials | model | model x its host's level | model x the doctor's line (slope a "
             "second) |", "|---|---|---|---|---|---|"]
    for size, gpu in sorted({(c.size, c.gpu) for c in ok}):
        cs = [c for c in ok if c.size == size and c.gpu == gpu]
        if len(cs) < 3:
            continue
        meas = [c.measured_step_s for c in cs]
        model = spearman([c.predicted_step_s for c in cs], meas)
        host = spearman([c.predicted_step_s * host_level(c, ok) for c in cs], meas)
        line = doctor_line([c for c in ok if c.gpu == gpu and c.size != size], times.get)
        doc = None
        if line:
            a, b = line
            doc = spearman([c.predicted_step_s * (a + b * s if (s := times[c.lease]) is not None else 1.0)
                            for c in cs], meas)
        lines.append(f"| {size} | {gpu} | {len(cs)} | {rho_text(model)} | {rho_text(host)} | {rho_text(doc)}"
                     f"{f' ({line[1]:+.3f})' if line else ''} |")
    lines += ["", "Per GPU type, the leases of 2 or more ok trials: Pearson's r of each lease's level (the median "
              "measured / predicted step of its trials) on its doctor's time.", ""]
    for gpu in sorted({c.gpu for c in ok}):
        pts = [(s, lease_level(g)) for lease, g in by_lease([c for c in ok if c.gpu == gpu]).items()
               if len(g) >= 2 and (s := times[lease]) is not None]
        if pts:
            lo, hi = min(pts), max(pts)
            r = pearson([s for s, _ in pts], [v for _, v in pts])
            lines.append(f"- {gpu}: {len(pts)} leases, r = {rho_text(r)}; "
                         f"the quickest doctor {lo[0]:.0f} s (level {lo[1]:.2f}), the slowest {hi[0]:.0f} s (level "
                         f"{hi[1]:.2f})")
    lines.append("")
    return lines


PROBED = ("cuda_launch_us", "python_loop_s")  # the probe's readings set against the levels, in that order


def probe_levels(held: list[Case], read: Callable[[str], list[dict]] = probes,
                 seconds: Callable[[str], float | None] = doctor_seconds) -> list[str]:
    """Per lease that probed its host before its first trial: the lease's level beside the probe's kernel launch and
    Python loop (before; the lease's range over its probes) and its doctor's time, and Pearson's r of the level on
    each, over the same leases: which reading, taken before any trial, could stand in for the host's level."""
    rows = [(lease, g, ps) for lease, g in by_lease(ok_cases(held)).items()
            if (ps := read(lease)) and all(k in ps[0] for k in PROBED)]
    if not rows:
        return []
    lines = ["The leases that probed their host before the first trial (`benchmarks.host_speed`: a kernel's launch, a "
             "fixed Python loop; each the median of 5 repeats): the lease's level (the median measured / predicted "
             "step of its ok trials) beside each reading before the first trial, the range over the lease's probes "
             "in brackets, and its doctor's time.", "",
             "| lease | GPU | ok trials | level | kernel launch us | Python loop s | doctor s |",
             "|---|---|---|---|---|---|---|"]
    pts = []
    for lease, g, ps in rows:
        level = lease_level(g)
        launch, loop = ([p[k] for p in ps if k in p] for k in PROBED)
        doc = seconds(lease)
        pts.append((level, launch[0], loop[0], doc))
        lines.append(f"| {lease} | {g[0].gpu} | {len(g)} | {level:.2f} | {launch[0]:.1f} ({min(launch):.1f}-"
                     f"{max(launch):.1f}) | {loop[0]:.3f} ({min(loop):.3f}-{max(loop):.3f}) | "
                     f"{'-' if doc is None else f'{doc:.0f}'} |")
    lv = [p[0] for p in pts]
    docs = [p for p in pts if p[3] is not None]
    rs = [f"kernel launch {rho_text(pearson([p[1] for p in pts], lv))}",
          f"Python loop {rho_text(pearson([p[2] for p in pts], lv))}",
          f"doctor's time {rho_text(pearson([p[3] for p in docs], [p[0] for p in docs]))}"]
    lines += ["", f"Pearson's r of the level on each, over these {len(pts)} leases: {', '.join(rs)}.", ""]
    return lines
