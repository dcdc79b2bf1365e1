"""Confirming the winner: the study's fastest trials re-run for more steps before one is declared best.

A short trial measures one early step; a layout that is fast at step 3 can slow down or run out of memory later
(fragmentation, longer responses). Each confirmation re-runs a candidate to `steps` and averages the throughput of
the steps after the measured one; the trial's throughput becomes that average (the measured step's own value is
kept in `extra`), and a late OOM demotes the trial to status oom. A trial slowed at its measured step by a compile
(a study's first, on cold compile caches) is confirmed where its other steps say it may lead: the first launch is
not left behind for a cost a long run pays once. Simulated studies are never "confirmed".
"""

from __future__ import annotations

import time
from typing import Any

from autotune import verl
from autotune.candidate import Candidate
from autotune.results.noise import hidden_by_a_recompile, leaders_tie
from autotune.results.timeline import SPANS
from autotune.runners import stopping
from autotune.runners.base import TrialSpec, TrialStatus
from autotune.store.schema import TrialRow


def _confirmed(row: TrialRow, steps: int) -> bool:
    return ((row.extra or {}).get("confirm") or {}).get("steps") == steps


def confirm_top(tuner: Any, k: int = 2, steps: int = 6) -> dict[str, Any]:
    """Re-run the k best trials (then any new best that is not confirmed yet, at most 2k runs) for `steps` steps, and
    with them the leaders tied within the measured noise and the trials whose measured step compiled a graph anew
    where their other steps would put them among the k best (`noise.hidden_by_a_recompile`)."""
    s = tuner.setup
    if k <= 0:
        return {"skipped": "--confirm 0"}
    if tuner.runner.simulated or tuner.runner.name == "replay":
        return {"skipped": f"{tuner.runner.name} results are not measured now: nothing to confirm "
                           "(a confirmation would only repeat the same numbers)"}
    if steps <= s.measure_step:
        raise ValueError(f"--confirm-steps ({steps}) must be larger than the measured step ({s.measure_step})")
    runs: list[dict[str, Any]] = []
    ok = [r for r in tuner.store.trials(tuner.study_name, TrialStatus.OK.value) if r.throughput is not None]
    queue = sorted(ok, key=lambda r: -r.throughput)[:k]
    tie = leaders_tie(ok)  # leaders within the measured noise: each is confirmed, whatever k, and the runs decide
    tied = [r for r in ok if tie and not tie.decided and r.number in tie.trials and r not in queue]
    queue += tied
    # a trial whose measured step held a compile, where its other steps would put it among the k: confirmed too
    why = {r.number: (f"its measured step compiled a graph anew; its other steps ran at {steady:.1f} tokens/s/GPU, "
                      f"among the {k} fastest") for r, steady in hidden_by_a_recompile(ok, k) if r not in queue}
    queue += [r for r in ok if r.number in why]
    longest = tuner.longest_trial_s()
    stopped = None
    while queue and len(runs) < 2 * k + len(tied) + len(why):
        row = queue.pop(0)
        if _confirmed(row, steps):
            continue
        # a confirmation runs `steps` steps where a trial ran from the measured step on: its time at most in proportion
        need = longest and longest * steps / (s.measure_step + 1)
        if (stopped := stopping.past_deadline(tuner.ends_by, need, "a confirmation may take")) is not None:
            break
        runs.append({**confirm_one(tuner, row, steps), **({"why": why[row.number]} if row.number in why else {})})
        if not queue:
            best = tuner.store.best(tuner.study_name)
            if best is not None and not _confirmed(best, steps):
                queue.append(best)
    best = tuner.store.best(tuner.study_name)
    done: dict[str, Any] = {"runs": runs, "best": best.number if best else None}
    if stopped is not None:
        done["skipped"] = (f"after {len(runs)} of them, " if runs else "") + stopped
    if why:
        done["recompiled"] = sorted(why)
    if tie is not None:
        done["tie"] = tie.as_dict()
        after = leaders_tie(tuner.store.trials(tuner.study_name, TrialStatus.OK.value))
        done["tie_after"] = after.as_dict() if after else None
    return done


def confirm_one(tuner: Any, row: TrialRow, steps: int) -> dict[str, Any]:
    s = tuner.setup
    cand = Candidate(**row.params)
    ev = s.evaluate(cand)
    spec = TrialSpec(
        study=tuner.study_name, number=row.number, model=s.model, cluster=s.cluster, job=s.job, candidate=cand,
        memory=ev.memory, prediction=ev.throughput, measure_step=steps, measure_from=s.measure_step + 1,
        extra_steps=0,  # the window after the measured step is the confirmation; no noise steps beyond it
        workdir=tuner.workdir / tuner.study_name / f"trial_{row.number:04d}" / f"confirm_{steps}",
        progress=getattr(tuner, "on_progress", None),
    )
    t0 = time.monotonic()
    with stopping.interruptible():  # a signal stops a confirmation run at once (autotune/runners/stopping.py)
        result = tuner.runner.run(spec)
    wall_s = round(time.monotonic() - t0, 3)  # GPU time the study spent (autotune.results.report)
    conf: dict[str, Any] = {
        "steps": steps, "window": [s.measure_step + 1, steps], "status": result.status.value,
        "throughput": result.throughput, "reason": result.reason, "peak_memory_gib": result.peak_memory_gib,
        "log_path": result.log_path, "wall_s": wall_s,
        "per_step": {int(st["step"]): st.get("perf/throughput") for st in result.steps},
        **longest_responses(result.steps),
    }
    if (result.extra or {}).get("timings"):  # the run's timeline (autotune/results/timeline.py): the study's time sums
        conf["timeline"] = {k: result.extra[k] for k in ("timings", SPANS, "ray") if k in result.extra}
    conf.update(headroom(result.peak_memory_gib, s.cluster.gpu.memory_gib, row))
    extra = {**(row.extra or {}), "confirm": conf}
    values: dict[str, Any] = {"extra": extra}
    seen = _responses_words(conf, row) + conf.get("headroom_words", "")
    if result.status == TrialStatus.OK and result.throughput is not None:
        extra["measured_step_throughput"] = row.throughput
        values["throughput"] = result.throughput
        values["reason"] = (f"confirmed over {steps} steps: {result.throughput:.1f} tokens/s/GPU (mean of steps "
                            f"{s.measure_step + 1}-{steps}); step {s.measure_step} gave {row.throughput:.1f}{seen}")
    elif result.status == TrialStatus.OOM:
        values["status"] = TrialStatus.OOM.value
        values["reason"] = (f"late OOM in the {steps}-step confirmation run: {result.reason} (step "
                            f"{s.measure_step} had run at {row.throughput:.1f} tokens/s/GPU); demoted{seen}")
    tuner.store.update_trial(row.id, **values)
    return {"trial": row.number, **{k: conf.get(k) for k in ("status", "throughput", "reason", "longest_response",
                                                              "headroom_gib", "predicted_headroom_gib")}}


def headroom(peak_gib: float | None, capacity_gib: float, row: TrialRow) -> dict[str, Any]:
    """The memory the confirmation run left free (its measured peak against the GPU's capacity), next to what the
    model predicted: how close to the limit the winner really runs."""
    predicted = (row.predicted_memory or {}).get("headroom_gib")
    if peak_gib is None:
        return {"headroom_gib": None, "predicted_headroom_gib": predicted}
    free = capacity_gib - peak_gib
    words = (f"; measured peak {peak_gib:.1f} of {capacity_gib:.1f} GiB: headroom {free:.1f} GiB "
             f"({free / capacity_gib:.0%})" + (f", predicted {predicted:.1f} GiB" if predicted is not None else ""))
    return {"headroom_gib": round(free, 2), "predicted_headroom_gib": predicted, "headroom_words": words}


def longest_responses(steps: Any) -> dict[str, Any]:
    """The longest responses a run saw: the largest response_length/max and /mean over its steps (verl's metrics)."""
    maxes = [float(st[verl.M_RESPONSE_LENGTH_MAX]) for st in steps if st.get(verl.M_RESPONSE_LENGTH_MAX) is not None]
    means = [float(st[verl.M_RESPONSE_LENGTH_MEAN]) for st in steps
             if st.get(verl.M_RESPONSE_LENGTH_MEAN) is not None]
    return {"longest_response": max(maxes) if maxes else None,
            "largest_mean_response": max(means) if means else None}


def _responses_words(conf: dict[str, Any], row: TrialRow) -> str:
    """'; longest response 7900 tokens (the model predicted an OOM in update from 6592)' where known."""
    if conf.get("longest_response") is None:
        return ""
    text = f"; longest response {conf['longest_response']:.0f} tokens"
    if conf.get("largest_mean_response") is not None:
        text += f" (mean up to {conf['largest_mean_response']:.0f})"
    mem = row.predicted_memory or {}
    if mem.get("oom_response_length"):
        text += (f"; the memory model predicts an OOM in {mem.get('oom_moment')} once responses reach "
                 f"{mem['oom_response_length']} tokens")
    return text
