"""How the ranking cuts a space, and what every ranking hands out.

The model's estimates are sums and conjunctions of pieces that each read a few knobs (autotune/estimate/reads.py), so
a space splits (Split) into outer dimensions, enumerated in full, and inner parts (INNER_PARTS) that no piece reads
together (search/ranking.py says why that makes the ranking exact). A ranking, the model's or a runner's finite
list's (search/domain.py), hands out Picks, the safer near-equals first (prefer_safe), or says that nothing of the
space can run (InfeasibleSpaceError).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autotune.candidate import Candidate
from autotune.estimate import Evaluation, safer
from autotune.estimate.correction import NO_CORRECTION, Correction
from autotune.estimate.reads import DERIVED, NORMALIZATION_READS, NORMALIZED_FIELDS
from autotune.estimate.safer import SAFE_TOLERANCE, near_equal
from autotune.search.space import Dimension

FIELDS = Candidate.param_names()
_FIELD_INDEX = {f: i for i, f in enumerate(FIELDS)}
# Inner parts: knobs that the pieces of an estimate read only together with outer knobs, never with each other.
INNER_PARTS: dict[str, frozenset[str]] = {
    "training": frozenset({"ppo_max_token_len_per_gpu", "log_prob_max_token_len_per_gpu",
                           "ppo_micro_batch_size_per_gpu", "log_prob_micro_batch_size_per_gpu", "recompute",
                           "recompute_method", "recompute_num_layers", "recompute_modules", "use_fused_kernels"}),
    "rollout": frozenset({"rollout_tp", "gpu_memory_utilization", "max_num_batched_tokens"}),
}


class InfeasibleSpaceError(ValueError):
    """No setting of the space can run: every one breaks a static rule, the memory model or the runner."""


def prefer_safe(ranked: list[tuple[Any, Evaluation]],
                tolerance: float = SAFE_TOLERANCE) -> list[tuple[Any, Evaluation]]:
    """(anything, its evaluation) best first, the safer near-equals first (safer.prefer_safe)."""
    return safer.prefer_safe(ranked, lambda r: r[1].predicted_throughput, lambda r: r[1].safe, tolerance)


@dataclass(frozen=True)
class Pick:
    """One setting of the space as the model ranks it."""

    params: dict[str, Any]  # the space's active dimensions (what an Optuna trial of the space holds)
    candidate: Candidate
    throughput: float  # predicted tokens/s/GPU (corrected when the ranking was asked with a correction)
    safe: bool  # fits at the worst case the job allows and is not at the limit of the memory model's error


@dataclass
class _Factor:
    """A piece of the estimate and the knobs it reads. An additive piece is the sum of a rest (read without the
    offload knobs, evaluated with them off) and an offload share (read from the offload knobs and the layout)."""

    kind: str  # phase | moment | tokens | rule
    name: str
    reads: tuple[str, ...]
    offload: tuple[str, ...] = ()  # additive: the offload knobs
    shared: tuple[str, ...] = ()  # additive: what else the offload share reads

    def __post_init__(self) -> None:
        rest = tuple(r for r in self.reads if r not in self.offload)
        self.rest = rest if self.offload else self.reads
        self.share = tuple(sorted(set(self.offload) | set(self.shared)))


@dataclass
class _Part:
    name: str
    dims: tuple[Dimension, ...]
    fields: tuple[str, ...]  # candidate fields of its dimensions
    factors: list[_Factor]
    context: tuple[str, ...]  # outer fields its factors read, or its dimensions' conditions name
    normalizing: tuple[str, ...] = ()  # outer fields that change how its own knobs are normalised


class Split:
    """A space cut into outer dimensions and independent inner parts, for one study's estimates."""

    def __init__(self, space: Any, reads: Any, context: Mapping[str, Any]):
        names = set(space.names)
        part_of = {d: p for p, ds in INNER_PARTS.items() for d in ds if d in names}
        def piece(kind: str, n: str, r: frozenset[str]) -> _Factor:
            a, sh = reads.additive.get((kind, n), ((), ()))
            return _Factor(kind, n, tuple(sorted(r)), tuple(sorted(a)), tuple(sorted(sh)))

        factors = ([piece("phase", n, r) for n, r in reads.phases.items()]
                   + [piece("moment", n, r) for n, r in reads.moments.items()]
                   + [_Factor("tokens", "tokens", tuple(sorted(reads.tokens)))]
                   + [_Factor("rule", n, tuple(sorted(r))) for n, r in reads.rules.items()])
        changed = True
        while changed:
            changed = False
            for f in factors:  # a piece reading two inner parts keeps the one it reads most; the others go outer
                touched: dict[str, int] = {}
                for d in f.reads:
                    if d in part_of:
                        touched[part_of[d]] = touched.get(part_of[d], 0) + 1
                if len(touched) > 1:
                    home = max(sorted(touched), key=lambda p: touched[p])
                    for d in f.reads:
                        if part_of.get(d) not in (None, home):
                            del part_of[d]
                            changed = True
            for dim in space.dimensions:  # conditions may name outer knobs and their own part's only
                for cond in dim.when:
                    if cond.name in part_of and part_of.get(dim.name) != part_of[cond.name]:
                        del part_of[cond.name]
                        changed = True
        # Knobs outside the space that normalisation derives from a part's knobs (recompute_method from recompute)
        # belong to that part: their value follows its option.
        for f, src in DERIVED.items():
            owners = {part_of[x] for x in src if x in part_of}
            if f not in names and len(owners) == 1:
                part_of[f] = owners.pop()
        self.outer_dims = tuple(d for d in space.dimensions if d.name not in part_of)
        self.parts: list[_Part] = []
        home_of: dict[int, str] = {}
        for i, f in enumerate(factors):
            ps = {part_of[d] for d in f.reads if d in part_of}
            home_of[i] = ps.pop() if ps else "outer"
        for pname in INNER_PARTS:
            dims = tuple(d for d in space.dimensions if part_of.get(d.name) == pname)
            if not dims:
                continue
            fs = [f for i, f in enumerate(factors) if home_of[i] == pname]
            flds = tuple(d.name for d in dims) + tuple(f for f in FIELDS if f not in names and part_of.get(f) == pname)
            ctx = {r for f in fs for r in f.reads if r not in flds}
            ctx |= {c.name for d in dims for c in d.when if c.name not in flds and c.name not in context}
            norm = tuple(sorted(NORMALIZATION_READS)) if set(flds) & NORMALIZED_FIELDS else ()
            self.parts.append(_Part(pname, dims, flds, fs, tuple(sorted(ctx | set(norm))), norm))
        self.outer_factors = [f for i, f in enumerate(factors) if home_of[i] == "outer"]
        # The pieces that read only outer knobs (the constant phases, the tokens of a whole step, moments when the
        # space tunes nothing they read): a part with one option, the block itself.
        fixed = [f for f in self.outer_factors if f.kind != "rule"]
        self.parts.append(_Part("outer", (), (), fixed, tuple(sorted({r for f in fixed for r in f.reads}))))
        inner = {f for p in self.parts for f in p.fields}
        self.outer_fields = tuple(f for f in FIELDS if f not in inner)
        self.rule_at: dict[int, list[_Factor]] = {}  # outer rules checked once their last outer dimension is set
        order = {d.name: i for i, d in enumerate(self.outer_dims)}
        for f in self.outer_factors:
            if f.kind == "rule":
                self.rule_at.setdefault(max((order[r] for r in f.reads if r in order), default=-1), []).append(f)


def best_pick(self: Any, corr: Correction = NO_CORRECTION, exclude: Sequence[Candidate] = (),
              tolerance: float = SAFE_TOLERANCE) -> Pick | None:
    """A ranking's `best` (the model's and a domain's alike): its best runnable setting not in `exclude`; a safe one
    instead when it is within `tolerance`."""
    top = next(self.ranked(corr, exclude), None)
    if top is None or top.safe:
        return top
    safe = next(self.ranked(corr, exclude, safe=True), None)
    return safe if safe is not None and near_equal(safe.throughput, top.throughput, tolerance) else top

