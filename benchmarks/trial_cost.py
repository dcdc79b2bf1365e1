"""What a real verl trial costs, and how much of it is the steps: from the real trials' own records.

Reads every study database under tests/data/real_verl_gpu/*/ (real verl 0.9.1 GRPO trials on one lent GPU; each
once, from the newest copy of a resumed study: benchmarks/real_studies.py) and, per trial: its wall time as the tuner
recorded it (launch to recorded, the doctor's pre-flight of a study's first trial included), verl's own step times
(`timing_s/step` of each step run), the start-up (launch to the first step's start, from the time-stamped console
where the trial kept one) and whether the shared compile caches were cold or warm. A trial cut after its measured step
(real_studies.CUT: stopped, not ended) is left out: its wall is not a whole trial's.
Compares the trials before the start-up work (leases 3 and 3b: a fresh vLLM compile in every trial, three steps)
with the trials after it (lease 4 on, the same 0.5B job: vLLM's compile cache kept under the work dir, one extra
step for the noise), and says where a warm trial's time goes, stage by stage, against issue 24's target (steps 1-3 at
60% of the wall). The trials that ran through the runner's kept Ray head (extra["ray"] "fresh" or "kept":
autotune/runners/node/ray_head.py) are a group of their own: the head's start before the first launch
(`ray_head_start_s`, in the tuner's record of the trial that started it, not in its launch-to-step-1) is shown as its
own figure, and how long each trial's Ray workers took to go after its driver (`cleanup.ray_workers_s`).

    python -m benchmarks.trial_cost      # writes benchmarks/results/trial_cost.md
"""

from __future__ import annotations

import datetime as dt
import re
import statistics
from dataclasses import dataclass
from pathlib import Path

from autotune import verl
from autotune.results.timeline import KEPT_RAY, Timeline
from autotune.verl.caches import BYTECODE_EXTRA
from benchmarks import real_studies

HERE = Path(__file__).resolve().parent
DATA = real_studies.DATA
STEP = verl.PHASE_TIMINGS["step"]
UPDATE = verl.PHASE_TIMINGS["update_actor"]
SPIKE = 1.5  # an update this many times the trial's fastest of steps 2 on


@dataclass(frozen=True)
class Cost:
    source: str
    model_layers: int
    caches: str  # "cold", "warm", or "" (before the shared caches: every trial compiled anew)
    bytecode: bool  # its processes kept their bytecode under the shared caches (autotune/verl/caches.py)
    wall_s: float  # the tuner's record of the trial, launch to result
    steps_s: dict[int, float]  # verl's timing_s/step per step run
    timeline: Timeline | None  # its start-up milestones and step spans (time-stamped console), where recorded
    config: str = ""  # its candidate's key: the same configuration in another study has the same
    ray: str = ""  # how it got its Ray (extra["ray"]; "" where not recorded: a private Ray per trial)
    ray_head_start_s: float = 0.0  # it started the kept head before its launch (in wall_s, not in its timeline)
    ray_workers_s: float | None = None  # its Ray workers gone this long after its driver (kept head only)
    gpu: str = ""  # the GPU type it ran on
    updates_s: dict[int, float] | None = None  # verl's timing_s/update_actor per step run

    @property
    def smoke_job(self) -> bool:
        """The 0.5B smoke job on a one-H100 machine, the job issue 24's before and after are measured on (lease 32's
        0.5B trials ran on an H200 node, in one lane of four whose start-ups shared its host)."""
        return self.model_layers == 24 and self.gpu == "h100"

    @property
    def kept_ray(self) -> bool:
        """It ran through the runner's kept Ray head (started it, or joined it)."""
        return self.ray in KEPT_RAY

    @property
    def startup_s(self) -> float | None:
        """Launch to the first step's start, where known."""
        return self.timeline.startup_s if self.timeline else None

    def share(self, upto: int = 3) -> float:
        """Steps 1..upto's time over the trial's wall time."""
        return sum(v for k, v in self.steps_s.items() if k <= upto) / self.wall_s


def costs(dbs: list[Path]) -> list[Cost]:
    out = []
    for db, store, study in real_studies.studies(dbs):
        gpu = real_studies.setup(study).cluster.gpu.name
        for row in store.trials(study.name):
            if row.status != "ok" or not row.launched or not row.duration_s or real_studies.CUT in (row.extra or {}):
                continue  # a trial cut after its measured step ran no whole trial: its wall is not a trial's cost
            logged = store.steps(row.id)
            steps = {s.step: float(s.metrics[STEP]) for s in logged if STEP in s.metrics}
            updates = {s.step: float(s.metrics[UPDATE]) for s in logged if UPDATE in s.metrics}
            tl = Timeline.from_extra(row.extra)
            extra = row.extra or {}
            settle = (extra.get("cleanup") or {}).get("ray_workers_s")
            out.append(Cost(f"{db.parent.name}/{study.name}#{row.number}", int(study.model["num_layers"]),
                            extra.get("caches", ""), bool(extra.get(BYTECODE_EXTRA)),
                            float(row.duration_s), steps,
                            tl if tl and tl.steps else None, row.candidate_key or "", str(extra.get("ray") or ""),
                            tl.ray_head_start_s if tl else 0.0,
                            float(settle) if isinstance(settle, (int, float)) else None, gpu, updates))
    return out


def recompiled(c: Cost, data: Path = DATA) -> tuple[int, ...] | None:
    """The steps a worker of the trial compiled a graph anew in, from its committed time-stamped console (None: no
    console kept)."""
    lease, rest = c.source.split("/", 1)
    study, n = rest.rsplit("#", 1)
    return real_studies.recompiled(lease, study, int(n), data=data)


def recompile_report(cs: list[Cost], data: Path = DATA) -> list[str]:
    """How often a measured step holds a recompile, a study's first trial (cold compile caches) against later ones,
    and whether the steps whose update ran long are those (issue 24.3: noise known)."""
    lines = ["## Steps that recompiled (issue 24.3)", "",
             "A step in which a verl worker compiled a graph anew (torch.compile's recompile: the worker's backward "
             "warning printed again, `autotune/verl/keys.py` RECOMPILE_MARKERS) holds the compile, which a long run "
             f"pays once. Long update: {SPIKE}x or more the trial's fastest update of steps 2 on. Trials with a "
             "time-stamped console and two steps from step 2 on.", "",
             "| trials | n | a step from 2 on recompiled | step 3 recompiled | a long update | of them at a recompiled "
             "step | median update at a recompiled step / the trial's fastest |", "|---|---|---|---|---|---|---|"]
    for name, kind in (("a study's first (caches cold)", "cold"), ("later (caches warm)", "warm")):
        n = late = third = long_ = explained = 0
        ratios = []
        for c in cs:
            ups = {k: v for k, v in (c.updates_s or {}).items() if k >= 2}
            steps = recompiled(c, data) if c.caches == kind and len(ups) >= 2 else None
            if steps is None:
                continue
            fastest = min(ups.values())
            spikes = {k for k, v in ups.items() if v >= SPIKE * fastest}
            n += 1
            late += any(k >= 2 for k in steps)
            third += 3 in steps
            long_ += bool(spikes)
            explained += bool(spikes) and spikes <= set(steps)
            ratios += [ups[k] / fastest for k in steps if k in ups]
        med = f"{statistics.median(ratios):.2f}" if ratios else "-"
        lines.append(f"| {name} | {n} | {late} ({100 * late / max(n, 1):.0f}%) | {third} | {long_} | {explained} | "
                     f"{med} |")
    return [*lines, ""]


HEAD_START = "Ray head started (before launch)"


def stages(c: Cost) -> list[tuple[str, float]]:
    """Where a trial's wall time went, stage by stage: the kept Ray head's start where this trial paid it (before its
    launch), launch to each start-up milestone from the one before, step 1, the later steps, and the last step's end
    to the tuner's record (stopping verl and Ray, the GPUs given back)."""
    tl = c.timeline
    if tl is None:
        return []
    out: list[tuple[str, float]] = [(HEAD_START, c.ray_head_start_s)] if c.ray_head_start_s else []
    last = 0.0
    for e in tl.milestones:
        out.append((e.label, e.at_s - last))
        last = e.at_s
    first, later = tl.steps[0], tl.steps[1:]
    out.append(("to step 1's start", first.start_s - last))
    out.append(("step 1", first.seconds))
    if later:
        out.append((f"steps {later[0].step}-{later[-1].step}", later[-1].end_s - first.end_s))
    out.append(("after the last step", c.wall_s - c.ray_head_start_s - tl.steps[-1].end_s))
    return out


def startup_report(warm: list[Cost], steps_share: float = 0.6) -> list[str]:
    """The warm trials' stages side by side, and the start-up that steps 1-3 at `steps_share` of the wall would
    leave."""
    rows = [(c, dict(stages(c))) for c in warm if c.timeline is not None]
    if not rows:
        return []
    names = list(dict.fromkeys(n for _, st in rows for n in st))
    lines = ["## Where a warm trial's time goes (the 0.5B smoke job)", "",
             "Seconds per stage, from the time-stamped console (each milestone from the one before it).", "",
             "| stage | " + " | ".join(c.source.rsplit("/", 1)[-1] for c, _ in rows) + " |",
             "|---|" + "---|" * len(rows)]
    for n in names:
        lines.append(f"| {n} | " + " | ".join(f"{st[n]:.1f}" if n in st else "-" for _, st in rows) + " |")
    lines.append("| **wall** | " + " | ".join(f"**{c.wall_s:.0f}**" for c, _ in rows) + " |")
    need = []
    for c, _ in rows:
        steps13 = sum(v for k, v in c.steps_s.items() if k <= 3)
        rest = c.wall_s - c.timeline.startup_s - steps13  # the steps past 3 and the stop
        need.append(steps13 / steps_share - steps13 - rest)
    lines += ["", f"For steps 1-3 to be {100 * steps_share:.0f}% of the wall time with these steps and this stop, "
              "launch to step 1 would have to take at most " + ", ".join(f"{n:.0f} s" for n in need)
              + " (today " + ", ".join(f"{c.timeline.startup_s:.0f} s" for c, _ in rows) + ").", ""]
    return lines


PROBE_LINE = re.compile(r"^(?P<what>[^:\[]+): (?P<wall>[\d.]+) s wall")


def import_probes(data: Path) -> dict[str, dict[str, float]]:
    """Each lease's timed imports (`import_probe*.txt`, written by plans/lease22.sh and lease23.sh): what -> wall s."""
    out: dict[str, dict[str, float]] = {}
    for f in sorted(data.glob("*/import_probe*.txt")):
        got = {m["what"].strip(): float(m["wall"]) for ln in f.read_text().splitlines() if (m := PROBE_LINE.match(ln))}
        if got:
            out[f"{f.parent.name}/{f.name}"] = got
    return out


def probe_report(probes: dict[str, dict[str, float]], measured: bool = False) -> list[str]:
    """Why each process of a trial starts slowly on the lent machines, and what the runner's bytecode cache saves."""
    if not probes:
        return []
    lines = ["## Each process's imports (issue 24)", "",
             "The lent machines' image sets PYTHONDONTWRITEBYTECODE=1 and its torch carries no bytecode (lease 22: "
             "2,141 .py files, 0 .pyc), so every process of a trial compiled every module of the image's packages it "
             "imported. The verl runner now keeps that bytecode under the study's shared caches "
             "(`autotune/verl/caches.py`). Timed imports, one machine each:", "",
             "| lease probe | import | wall s |", "|---|---|---|"]
    for src, got in probes.items():
        lines += [f"| {src} | {what} | {wall:.1f} |" for what, wall in got.items()]
    lines.append("")
    for got in probes.values():
        base, warm = got.get("as the image has it"), got.get("bytecode cache, warm")
        if base and warm:
            lines += [f"A worker's stack imports in {warm:.1f} s with the bytecode kept against {base:.1f} s: "
                      f"{base - warm:.1f} s less in each process a trial starts (five to six one after another "
                      "before step 1, eight more in step 1), the study's first process paying "
                      f"{got.get('bytecode cache, cold', base) - base:.1f} s more once. "
                      + ("Whole trials with the cache: the 0.5B job's section above." if measured else
                         "A trial's start-up with the cache is not measured yet: the session's device time ended "
                         "with this probe."), ""]
    return lines


def study_of_eight(before: list[Cost], cold: list[Cost], warm: list[Cost]) -> tuple[float, float] | None:
    """GPU-hours of a study of eight trials of the 0.5B job before the start-up work and with it (one cold trial, seven
    warm: each trial's median)."""
    if not before or not warm:
        return None
    w = statistics.median(c.wall_s for c in warm)
    first = statistics.median(c.wall_s for c in cold) if cold else w
    return 8 * statistics.median(c.wall_s for c in before) / 3600, (first + 7 * w) / 3600


def _group(name: str, cold: list[Cost], warm: list[Cost]) -> list[str]:
    def starts(cs: list[Cost]) -> str:
        return ", ".join(f"{c.startup_s:.0f} s" for c in cs if c.startup_s is not None) or "-"

    def ray(cs: list[Cost]) -> str:
        """The kept Ray head: its start where a trial paid it, its Ray workers' settle after its driver."""
        head = [f"{c.ray_head_start_s:.1f} s" for c in cs if c.ray_head_start_s]
        settle = [f"{c.ray_workers_s:.1f} s" for c in cs if c.ray_workers_s is not None]
        return ((f"; the kept Ray head's start {', '.join(head)} before launch (in the wall, not in the start-up)"
                 if head else "")
                + (f"; its Ray workers gone {', '.join(settle)} after its driver" if settle else ""))
    out = []
    if cold:
        out.append(f"- {name}, cold (a study's first trial, {len(cold)}): wall "
                   + ", ".join(f"{c.wall_s:.0f} s" + (" (steps 1-3 only: no extra step)" if max(c.steps_s) <= 3
                                                      else "") for c in cold) + "; steps 1-3 "
                   + ", ".join(f"{100 * c.share():.0f}%" for c in cold) + f"; start-up {starts(cold)}" + ray(cold))
    if warm:
        out.append(f"- {name}, warm ({len(warm)} trials): median wall {statistics.median(c.wall_s for c in warm):.0f}"
                   f" s, steps 1-3 {100 * statistics.median(c.share() for c in warm):.0f}% of it "
                   f"(best {100 * max(c.share() for c in warm):.0f}%), start-up {starts(warm)}" + ray(warm)
                   + (f"; {n} of them steps 1-3 only (no extra step)" if (n := sum(max(c.steps_s) <= 3 for c in warm))
                      else ""))
    return out


def _targets(name: str, ratio: float, warm: list[Cost], steps_share: float = 0.6, hours: float = 0.6) -> list[str]:
    """Issue 24's two targets, read plainly off the latest start-up work's study of eight and its warm trials."""
    share = [c.share() for c in warm]
    start = [c.startup_s for c in warm if c.startup_s is not None]
    need = [sum(v for k, v in c.steps_s.items() if k <= 3) / steps_share - c.wall_s + c.timeline.startup_s
            for c in warm if c.timeline is not None]
    return [f"- **Issue 24's targets with the {name}**: a study of eight at {ratio:.2f}x the GPU-hours of before the "
            f"start-up work (target {hours:.1f}x: {'met' if ratio <= hours else 'not met'}); its warm trials "
            f"{min(c.wall_s for c in warm):.0f}-{max(c.wall_s for c in warm):.0f} s wall, launch to step 1 "
            f"{min(start):.0f}-{max(start):.0f} s, steps 1-3 {100 * min(share):.0f}-{100 * max(share):.0f}% of the "
            f"wall (target {100 * steps_share:.0f}%: {'met' if min(share) >= steps_share else 'not met'}: launch to "
            f"step 1 would have to take {min(need):.0f}-{max(need):.0f} s)"]


def _milestones(c: Cost) -> dict[str, tuple[str, float]]:
    """Launch to each start-up milestone, each from the one before it: key -> (label, seconds)."""
    out, last = {}, 0.0
    for e in c.timeline.milestones if c.timeline else ():
        out[e.key] = (e.label, e.at_s - last)
        last = e.at_s
    return out


RAY_LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\s")
RAY_STARTED = "Ray runtime started."


def head_log_s(c: Cost, data: Path = DATA) -> float | None:
    """Seconds from the first line of the kept head's `ray start` log (`<study>_ray_head/ray_start.log`, committed with
    the lease) to its "Ray runtime started." line: Ray's own start; the rest of ray_head_start_s is before it (the
    `ray start` process's imports). None where the log is not committed."""
    lease, trial = c.source.split("/", 1)
    log = data / lease / f"{trial.rsplit('#', 1)[0]}_ray_head" / "ray_start.log"
    if not log.is_file():
        return None
    stamps = [(dt.datetime.strptime(m[1], "%Y-%m-%d %H:%M:%S,%f"), ln) for ln in log.read_text().splitlines()
              if (m := RAY_LOG_TIME.match(ln))]
    started = next((t for t, ln in stamps if RAY_STARTED in ln), None)
    return (started - stamps[0][0]).total_seconds() if stamps and started else None


def kept_head_report(cs: list[Cost], data: Path = DATA) -> list[str]:
    """The first trial that started the kept Ray head against a trial of the same configuration, on caches as cold,
    that started a private Ray: stage by stage, the head's start apart, and what its Ray workers took to go. One pair
    per private-Ray trial, the earliest: a later lease's host can start 80 s faster (lease 62's H100 against lease
    24's), which no head explains."""
    pairs, seen = [], set()
    for c in cs:
        if not c.ray_head_start_s or c.timeline is None:
            continue
        ref = [r for r in cs if not r.kept_ray and r.timeline is not None and r.config == c.config
               and r.caches == c.caches and r.bytecode == c.bytecode]
        if ref and ref[-1].source not in seen:
            seen.add(ref[-1].source)
            pairs.append((ref[-1], c))
    if not pairs:
        return []
    lines = ["## The kept Ray head (issue 24)", "",
             "One `ray start --head` per `autotune run`; its trials join it (`--keep-ray`, "
             "`autotune/runners/node/ray_head.py`). The trial that starts it pays the head's start before its launch "
             "(`ray_head_start_s`: in the tuner's record of the trial, not in its launch-to-step-1); the later trials "
             "of a study join it without that start. Seconds per stage, each milestone from the one before it, "
             "against a trial of the same configuration on caches as cold that started a private Ray:", ""]
    for ref, c in pairs:
        a, b = _milestones(ref), _milestones(c)
        name = {k: v[0] for k, v in {**a, **b}.items()}
        name["ray_up"] = f"{a['ray_up'][0]} / {b['ray_up'][0]}" if "ray_up" in a and "ray_up" in b else name.get(
            "ray_up", "ray_up")
        ra, rb = ref.timeline, c.timeline
        lines += [f"| stage | {ref.source} (private Ray) | {c.source} (kept head) |", "|---|---|---|",
                  f"| {HEAD_START} | - | {c.ray_head_start_s:.1f} |"]
        for k in dict.fromkeys([*a, *b]):
            lines.append(f"| {name[k]} | " + " | ".join(f"{m[k][1]:.1f}" if k in m else "-" for m in (a, b)) + " |")
        lines += [f"| to step 1's start | {ra.startup_s - ra.milestones[-1].at_s:.1f} | "
                  f"{rb.startup_s - rb.milestones[-1].at_s:.1f} |",
                  f"| **launch to step 1** | **{ra.startup_s:.1f}** | **{rb.startup_s:.1f}** |",
                  f"| **with the head's start** | **{ra.startup_s:.1f}** | "
                  f"**{rb.startup_s + c.ray_head_start_s:.1f}** |",
                  f"| last step's end to exit (stop; Ray's stop, or its Ray workers' settle) | {ra.after_s:.1f} | "
                  f"{rb.after_s:.1f} |", ""]
        inside = ra.startup_s - rb.startup_s
        ray_a = a.get("ray_up", ("", 0.0))[1]
        ray_b = b.get("ray_up", ("", 0.0))[1]
        moved = [(name[k], b[k][1] - a[k][1]) for k in a if k in b and k != "ray_up" and abs(b[k][1] - a[k][1]) >= 1]
        gained = ra.startup_s - rb.startup_s - c.ray_head_start_s
        ray_s = head_log_s(c, data)
        if ray_s is not None:
            lines.append(f"- The head's start, {c.ray_head_start_s:.1f} s: its `ray start` log says Ray's runtime "
                         f"started {ray_s:.1f} s after its first line; the other {c.ray_head_start_s - ray_s:.1f} s "
                         "are the `ray start` process's own start (its imports, on a fresh machine).")
        lines += [f"- {c.source}, the study's first trial (it started the head), reached step 1 {inside:.1f} s sooner "
                  f"after launch than {ref.source}: its Ray stage {ray_b:.1f} s against {ray_a:.1f} s (it joined "
                  f"the head: Ray joined at the instant its config was validated); the other "
                  f"{inside - (ray_a - ray_b):.1f} s net are stages the head does not run ("
                  + ", ".join(f"{n} {d:+.1f} s" for n, d in moved)
                  + "): work the head's start may have done ahead of the launch (`ray start`'s own imports on a "
                  "fresh machine, in the trials' environment and bytecode cache) or the other machine: one trial on "
                  "each of two.",
                  f"- Paid once before the study's first launch, the head's start ({c.ray_head_start_s:.1f} s) "
                  f"makes launch to step 1 {rb.startup_s + c.ray_head_start_s:.1f} s against "
                  f"{ra.startup_s:.1f} s: **{gained:.1f} s {'gained' if gained >= 0 else 'lost'} by the first "
                  "trial**, within what one machine's start-up differs from another's."]
        if c.ray_workers_s is not None:
            lines.append(f"- Its Ray workers (vLLM's engine among them) were gone {c.ray_workers_s:.1f} s after its "
                         "driver stopped (`cleanup.ray_workers_s`: the runner waits for them before the next trial; "
                         f"last step's end to exit {rb.after_s:.1f} s against {ra.after_s:.1f} s with a private Ray).")
    joined = [c for c in cs if c.ray == "kept"]
    lines.append("- " + (f"Trials that joined a head an earlier trial started: {len(joined)}, launch to step 1 "
                         + ", ".join(f"{c.startup_s:.0f} s" for c in joined if c.startup_s is not None) + "."
                         if joined else
                         "No trial has joined a head an earlier trial started yet: what the kept head saves each "
                         "later trial of a study (no Ray start in its launch, no Ray stop after its steps) is not "
                         "measured, nor is a study of eight with it."))
    lines += _joined_against_private(joined, cs)
    return [*lines, ""]


def _joined_against_private(joined: list[Cost], cs: list[Cost]) -> list[str]:
    """Each trial that joined a kept head against the last trial of the same configuration on caches as warm that
    started a private Ray (another lease, another machine): launch to step 1, its Ray stage, the rest by stage."""
    out = []
    for c in joined:
        ref = [r for r in cs if not r.kept_ray and r.timeline is not None and r.config == c.config
               and r.caches == c.caches and r.bytecode == c.bytecode]
        if c.timeline is None or not ref:
            continue
        r = ref[-1]
        a, b = _milestones(r), _milestones(c)
        ray_a, ray_b = a.get("ray_up", ("", 0.0))[1], b.get("ray_up", ("", 0.0))[1]
        less = r.timeline.startup_s - c.timeline.startup_s
        moved = [(b[k][0], b[k][1] - a[k][1]) for k in a if k in b and k != "ray_up" and abs(b[k][1] - a[k][1]) >= 1]
        out.append(f"- {c.source} joined the head its study's first trial started: launch to step 1 "
                   f"{c.timeline.startup_s:.1f} s against {r.timeline.startup_s:.1f} s for {r.source} (the same "
                   f"configuration, caches as warm, a private Ray): {less:.1f} s less, its Ray stage {ray_b:.1f} s "
                   f"against {ray_a:.1f} s; the other {less - (ray_a - ray_b):.1f} s net are stages the head does not "
                   "run (" + ", ".join(f"{n} {d:+.1f} s" for n, d in moved) + "): the other machine and lease. Last "
                   f"step's end to exit {c.timeline.after_s:.1f} s against {r.timeline.after_s:.1f} s (no Ray stop; "
                   f"its Ray workers gone {c.ray_workers_s or 0.0:.1f} s after its driver).")
    return out


def report(cs: list[Cost], probes: dict[str, dict[str, float]] | None = None, data: Path = DATA) -> str:
    small = [c for c in cs if c.smoke_job]  # before and after
    before = [c for c in small if not c.caches]
    groups = {  # the start-up work, in the order it landed
        "compile caches": [c for c in small if c.caches and not c.bytecode and not c.kept_ray],
        "compile caches and bytecode cache": [c for c in small if c.caches and c.bytecode and not c.kept_ray],
        "compile caches, bytecode cache and the kept Ray head": [c for c in small if c.caches and c.kept_ray],
    }
    lines = ["# What a real trial costs (real verl 0.9.1 on the lent H100s and H200s)", "",
             "Written by `python -m benchmarks.trial_cost` from the study databases under `tests/data/real_verl_gpu/`."
             " Wall: the tuner's record of a trial (launch to result, the doctor's pre-flight of a study's first trial"
             " included). Steps: verl's `timing_s/step`. Start-up: launch to the first step's start. Caches: the "
             "shared compile caches (cold: the study's first trial), + bytecode: the bytecode cache too, + Ray head: "
             "it started (or joined) the runner's kept Ray head, whose start is in its wall, not in its start-up.",
             "",
             "| trial | caches | wall s | start-up s | steps (s) | steps 1-3 / wall |", "|---|---|---|---|---|---|"]
    for c in cs:
        steps = ", ".join(f"{k}: {v:.1f}" for k, v in sorted(c.steps_s.items()))
        start = f"{c.startup_s:.0f}" if c.startup_s is not None else "-"
        caches = (c.caches + (" + bytecode" if c.bytecode else "")
                  + ({"fresh": " + Ray head (started)", "kept": " + Ray head (joined)"}.get(c.ray, ""))) \
            or "compiled anew"
        lines.append(f"| {c.source} ({c.model_layers} layers) | {caches} | {c.wall_s:.0f} | "
                     f"{start} | {steps} | {100 * c.share():.0f}% |")
    lines.append("")
    if before:
        lines += ["## The 0.5B smoke job, before and after the start-up work", "",
                  f"- before (leases 3/3b, {len(before)} trials): median wall "
                  f"{statistics.median(c.wall_s for c in before):.0f} s, steps 1-3 "
                  f"{100 * statistics.median(c.share() for c in before):.0f}% of it"]
        last: tuple[str, float, list[Cost]] | None = None
        for name, g in groups.items():
            # warm: a study's later trials (through a kept head: those that joined it); a later study's first trial
            # on caches an earlier study warmed, which started its own head, is neither
            cold = [c for c in g if c.caches == "cold"]
            warm = [c for c in g if c.caches == "warm" and c.ray != "fresh"]
            lines += _group(f"with the {name}", cold, warm)
            first = [c for c in g if c.caches == "warm" and c.ray == "fresh"]
            if first:
                lines.append(f"- with the {name}, a later study's first trial on the caches an earlier study warmed "
                             f"(it started its own head; not in the study of eight, {len(first)}): wall "
                             + ", ".join(f"{c.wall_s:.0f} s" for c in first) + "; start-up "
                             + ", ".join(f"{c.startup_s:.0f} s" for c in first if c.startup_s is not None)
                             + "; the head's start " + ", ".join(f"{c.ray_head_start_s:.1f} s" for c in first))
            hours = study_of_eight(before, cold, warm)
            if hours:
                lines.append(f"- a study of eight trials with the {name}: {hours[0]:.2f} GPU-hours before, "
                             f"{hours[1]:.2f} after (one cold, seven warm; each now runs one extra step for the noise):"
                             f" **{hours[1] / hours[0]:.2f}x**")
                last = (name, hours[1] / hours[0], warm)
            elif cold:
                lines.append(f"- a study of eight trials with the {name}: not computed: it needs a warm trial of it "
                             "(none has run)")
        if last:  # the latest start-up work with a study of eight
            lines += _targets(*last)
        lines.append("")
    lines += kept_head_report(small, data)
    lines += startup_report([c for g in groups.values() for c in g if c.caches == "warm"])
    lines += probe_report(probes or {}, measured=bool(groups["compile caches and bytecode cache"]))
    lines += recompile_report(cs, data)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    real_studies.write_report(__doc__, HERE / "results" / "trial_cost.md",
                              lambda data: report(costs(list(data.glob("*/*.db"))), import_probes(data), data) + "\n",
                              argv)


if __name__ == "__main__":
    main()
