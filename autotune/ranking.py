"""Rank a search space's candidates by the models: random starts, then coordinate ascent on predicted throughput.

The spaces are too large to enumerate (millions of settings); the models are cheap, so a few thousand
evaluations find the model's best settings, which seed the study.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from typing import Any

from autotune.candidate import Candidate
from autotune.cluster import Cluster
from autotune.constraints import Violation
from autotune.estimate import Evaluation, evaluate
from autotune.estimate.lengths import Lengths
from autotune.job import Job
from autotune.model import ModelArch
from autotune.space import SearchSpace, space_context

# Predicted throughputs this close are equals: the model cannot tell them apart (its step-time error is larger).
SAFE_TOLERANCE = 0.02


def prefer_safe(ranked: list[tuple[Any, Evaluation]],
                tolerance: float = SAFE_TOLERANCE) -> list[tuple[Any, Evaluation]]:
    """Best first by predicted throughput, but a candidate that fits only at the step's lengths (a late OOM once
    responses grow) goes behind the safe ones predicted within `tolerance` of it."""
    out = list(ranked)
    for i in range(len(out)):
        if out[i][1].safe:
            continue
        top = out[i][1].predicted_throughput
        for j in range(i + 1, len(out)):
            if out[j][1].predicted_throughput < top * (1 - tolerance):
                break
            if out[j][1].safe:
                out.insert(i, out.pop(j))
                break
    return out


def rank_candidates(
    model: ModelArch,
    cluster: Cluster,
    job: Job,
    space: SearchSpace,
    base: Candidate,
    k: int = 5,
    samples: int = 1500,
    seed: int = 0,
    objective: str = "step",
    refuse: Callable[[Candidate], str | None] | None = None,
    lengths: Lengths | None = None,
) -> list[tuple[dict[str, Any], Evaluation]]:
    """The k best distinct feasible settings of the space by predicted throughput, best first.

    `refuse` (the runner's): why a candidate can never be launched (e.g. not a row of a replay table); such
    candidates are not ranked, so the seeds are all candidates the study can launch. `lengths`: the sequence
    lengths at the measured step; among candidates within SAFE_TOLERANCE of each other's predicted throughput,
    one that also fits at the worst case the job allows comes first (prefer_safe).
    """
    ctx = space_context(model.is_moe, cluster.world_size, cluster.gpus_per_node, job.has_ref_model)
    rng = random.Random(seed)
    cache: dict[str, tuple[dict[str, Any], Evaluation]] = {}

    def score(params: Mapping[str, Any]) -> tuple[dict[str, Any], Evaluation]:
        params = space.project(params, ctx)
        cand = Candidate.from_params(params, base)
        key = cand.key()
        if key not in cache:
            why = refuse(cand) if refuse else None
            ev = Evaluation(cand, (Violation("runner", why),), None, None) if why else evaluate(
                model, cluster, job, cand, objective, lengths)
            cache[key] = (params, ev)
        return cache[key]

    for _ in range(samples):
        score(space.sample(rng, ctx))
    starts = sorted(cache.values(), key=lambda pe: -pe[1].predicted_throughput)[: max(k, 3)]
    for params, ev in starts:
        if not ev.feasible:
            continue
        best_params, best = params, ev
        improved = True
        while improved:
            improved = False
            for dim in space.dimensions:
                if dim.name not in best_params:
                    continue
                for choice in dim.choices:
                    if choice == best_params[dim.name]:
                        continue
                    p, e = score({**best_params, dim.name: choice})
                    if e.predicted_throughput > best.predicted_throughput * 1.0001:
                        best_params, best, improved = p, e, True
    ranked = prefer_safe(sorted((pe for pe in cache.values() if pe[1].feasible),
                                key=lambda pe: -pe[1].predicted_throughput))
    # Distinct parallel layouts first: near-copies of the best teach the study little.
    picked: list[tuple[dict[str, Any], Evaluation]] = []
    seen: set[str] = set()
    for pe in ranked:
        if pe[1].candidate.layout() not in seen:
            seen.add(pe[1].candidate.layout())
            picked.append(pe)
        if len(picked) == k:
            return picked
    rest = [pe for pe in ranked if all(pe is not q for q in picked)]
    return (picked + rest)[:k]


class InfeasibleSpaceError(ValueError):
    """No setting of the space can run: every one breaks a static rule, the memory model or the runner."""


def explain_infeasible(
    model: ModelArch,
    cluster: Cluster,
    job: Job,
    space: SearchSpace,
    base: Candidate,
    samples: int = 1000,
    seed: int = 0,
    objective: str = "step",
    refuse: Callable[[Candidate], str | None] | None = None,
) -> str:
    """One line saying why nothing in the space can run: the rules broken most often, with counts and an example."""
    ctx = space_context(model.is_moe, cluster.world_size, cluster.gpus_per_node)
    rng = random.Random(seed)
    seen: set[str] = set()
    counts: dict[str, int] = {}
    example: dict[str, str] = {}
    for _ in range(samples):
        cand = Candidate.from_params(space.project(space.sample(rng, ctx), ctx), base)
        if cand.key() in seen:
            continue
        seen.add(cand.key())
        why = refuse(cand) if refuse else None
        if why:
            broken = [("runner", why)]
        else:
            ev = evaluate(model, cluster, job, cand, objective)
            broken = [(v.rule, v.message) for v in ev.violations]
            if ev.memory is not None and not ev.memory.fits:
                broken.append(("memory", "predicted OOM: " + ev.memory.reasons()[0]))
        for rule, message in broken:
            counts[rule] = counts.get(rule, 0) + 1
            example.setdefault(rule, message)
    top = sorted(counts.items(), key=lambda kv: -kv[1])
    shown = "; ".join(f"{rule} x{n} (e.g. {example[rule]})" if i < 3 else f"{rule} x{n}"
                      for i, (rule, n) in enumerate(top))
    return (f"no setting of space {space.name!r} can run {model.name} on {cluster.describe()} with job "
            f"{job.source}: all {len(seen)} distinct settings sampled break a rule; most often: {shown}. "
            "Change --gpus/--nodes, the job or the space")
