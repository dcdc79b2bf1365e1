"""The model's pieces of a search space, memoised: the blocks of a ranking and each part's table of options.

A block is one outer setting of the space (search/split.py); under it each inner part is a table of its options
holding every piece's raw value (phase times with their correction features, memory moments, the static rules),
read from a memo keyed by the knobs each piece reads (estimate/reads.py), so the model is called only for pieces not
seen yet. A piece reads a few knobs, so a table holds few distinct keys of it: each key is looked up once and spread
over the options by index. The ranking (search/ranking.py) combines the tables under a correction.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from autotune.candidate import Candidate
from autotune.estimate import constraints, estimate_memories, estimate_unchecked
from autotune.estimate.correction import FEATURES, UNCERTAIN_TERMS, features
from autotune.estimate.reads import OFFLOAD_REFERENCE, reads_for
from autotune.search.split import _FIELD_INDEX, FIELDS, Split, _Factor, _Part

KV = "vllm_kv_cache"
_LAYOUT_KEY = operator.attrgetter("tp", "pp", "vpp", "cp", "ep", "etp")


def _getter(names: Sequence[str]) -> Callable[[Candidate], tuple]:
    if not names:
        return lambda c: ()
    g = operator.attrgetter(*names)
    return (lambda c: (g(c),)) if len(names) == 1 else g


@dataclass
class _Table:
    """One inner part's options under one outer context: raw pieces, and their corrected view (cached)."""

    params: list[dict[str, Any]]  # raw space params of each option
    values: list[tuple]  # normalised part-field values of each option
    keys: list[tuple]  # applied part-field values (identity of the option)
    times: dict[str, np.ndarray]
    feats: dict[str, np.ndarray]
    step: np.ndarray  # (moments, options, 3): peak, uncertain, capacity
    worst: np.ndarray
    kv: np.ndarray  # moments that are the KV check (no margin)
    rule_ok: np.ndarray
    why: list[str | None]  # the first reason an option cannot run (rule or memory), filled when asked
    tokens: np.ndarray | None
    view: tuple[int, Any] | None = None


@dataclass
class _Block:
    outer: dict[str, Any]  # raw params of the outer dimensions
    cand: Candidate  # the outer setting as a candidate (inner knobs at the base's values)
    key: tuple  # applied outer-field values
    tables: list[_Table]
    layout: tuple


class Pieces:
    """The blocks of a study's space and their tables (model, cluster, job, objective, lengths, constants)."""

    def __init__(self, setup: Any):
        self.setup = setup
        self.job = setup.job
        self.world = setup.cluster.world_size
        self.context = setup.context
        self.base = setup.base
        self.reads = reads_for(setup.objective, setup.job)
        self.split = Split(setup.space, self.reads, self.context)
        self.calls = 0  # estimates computed (for the benchmark)
        self._cache: dict[tuple[str, str], dict[tuple, Any]] = {}
        self._options: dict[tuple, list] = {}
        self._tables: dict[tuple, _Table] = {}
        self._grouped: dict[tuple, tuple[list[tuple], np.ndarray, list[int]]] = {}
        self._columns: dict[tuple, tuple[list[tuple], np.ndarray, list[int]]] = {}
        self._every = [f for p in self.split.parts for f in p.factors]
        # Where an additive piece's offload share is measured: the base with the offload knobs off.
        self.reference = replace(self.base, **OFFLOAD_REFERENCE)
        self._blocks: list[_Block] | None = None
        self._closed: dict[str, list] = {}  # outer rule -> [count, example] (why settings were closed)

    def blocks(self) -> list[_Block]:
        if self._blocks is None:
            self._blocks = self._build()
        return self._blocks

    def _build(self) -> list[_Block]:
        sp, base = self.split, self.base
        blocks: list[_Block] = []
        seen: set[tuple] = set()
        layout_key = _LAYOUT_KEY
        dims = sp.outer_dims

        def walk(i: int, values: dict[str, Any], params: dict[str, Any]) -> None:
            if i == len(dims):
                cand = Candidate.from_params(params, base)
                applied = cand.applied_params()
                key = tuple(applied[f] for f in sp.outer_fields)
                if key in seen:
                    return
                seen.add(key)
                blocks.append(_Block(dict(params), cand, key, [self._table(p, params, cand) for p in sp.parts],
                                     layout_key(cand)))
                return
            dim = dims[i]
            if not dim.active(values):
                if i not in sp.rule_at or self._outer_rules_pass(sp.rule_at[i], params):
                    walk(i + 1, values, params)
                return
            for choice in dim.choices:
                p = {**params, dim.name: choice}
                if i in sp.rule_at and not self._outer_rules_pass(sp.rule_at[i], p):
                    continue
                walk(i + 1, {**values, dim.name: choice}, p)

        if -1 in sp.rule_at and not self._outer_rules_pass(sp.rule_at[-1], {}):
            return []
        walk(0, dict(self.context), {})
        return blocks

    def _outer_rules_pass(self, rules: list[_Factor], params: dict[str, Any]) -> bool:
        cand = Candidate.from_params(params, self.base)
        for f in rules:
            why = self._rule(f, cand)
            if why is not None:
                slot = self._closed.setdefault(f.name, [0, why])
                slot[0] += 1
                return False
        return True

    def _rule(self, f: _Factor, cand: Candidate) -> str | None:
        cache = self._cache.setdefault(("rule", f.name), {})
        k = _getter(f.reads)(cand)
        if k not in cache:
            cache[k] = constraints.RULES[f.name](self.setup.model, self.setup.cluster, self.job, cand)
        return cache[k]

    def _part_options(self, part: _Part, outer: dict[str, Any], cand: Candidate) -> list:
        key = (part.name, _getter(part.normalizing)(cand),
               tuple(outer.get(c.name, self.context.get(c.name)) for d in part.dims for c in d.when))
        if key not in self._options:
            out, seen = [], set()
            values = {**self.context, **outer}

            def walk(i: int, vals: dict[str, Any], params: dict[str, Any]) -> None:
                if i == len(part.dims):
                    full = Candidate.from_params({**outer, **params}, self.base)
                    applied = full.applied_params()
                    akey = tuple(applied[f] for f in part.fields)
                    if akey not in seen:
                        seen.add(akey)
                        out.append((dict(params), tuple(getattr(full, f) for f in part.fields), akey))
                    return
                d = part.dims[i]
                if d.active(vals):
                    for c in d.choices:
                        walk(i + 1, {**vals, d.name: c}, {**params, d.name: c})
                else:
                    walk(i + 1, vals, params)

            walk(0, values, {})
            self._options[key] = out
        return self._options[key]

    def _table(self, part: _Part, outer: dict[str, Any], cand: Candidate) -> _Table:
        """The part's options under this outer setting, every piece's value filled from the memo (the model is
        called only for pieces not seen yet). A piece reads a few knobs, so the options hold few distinct keys of it:
        each key is looked up once and spread over its options by index."""
        options = self._part_options(part, outer, cand)
        tkey = (part.name, _getter(part.context)(cand), id(options))
        if tkey in self._tables:
            return self._tables[tkey]
        n = len(options)
        ov = tuple(getattr(cand, f) for f in FIELDS)
        idx = [_FIELD_INDEX[f] for f in part.fields]
        full = lambda j: _with(cand, idx, options[j][1])  # noqa: E731

        def column(names: tuple[str, ...]) -> tuple[list[tuple], np.ndarray, list[int]]:
            """The distinct keys of `names` among the options (outer knobs from the block, the rest from each
            option), each option's index into them, and the first option of each key."""
            inner = tuple(r for r in names if r in part.fields)
            held = tuple(ov[_FIELD_INDEX[r]] for r in names if r not in part.fields)
            ck = (id(options), names, held)
            if ck not in self._columns:
                groups, rows, firsts = self._groups(options, part, inner)
                next_held = iter(range(len(held)))
                at = [(True, inner.index(r)) if r in part.fields else (False, next(next_held)) for r in names]
                keys = [tuple(u[i] if own else held[i] for own, i in at) for u in groups]
                self._columns[ck] = (keys, rows, firsts)
            return self._columns[ck]

        phases = [f for f in part.factors if f.kind == "phase"]
        moments = [f for f in part.factors if f.kind == "moment"]
        table = _Table([o[0] for o in options], [o[1] for o in options], [o[2] for o in options],
                       {f.name: np.zeros(n) for f in phases},
                       {f.name: np.zeros((n, len(FEATURES[f.name]))) for f in phases if f.name in FEATURES},
                       np.zeros((len(moments), n, 3)), np.zeros((len(moments), n, 3)),
                       np.array([f.name == KV for f in moments], dtype=bool), np.ones(n, dtype=bool), [None] * n,
                       None)
        table.moment_names = [f.name for f in moments]  # type: ignore[attr-defined]
        for f in part.factors:
            if f.kind == "rule":
                cache, rule = self._cache.setdefault(("rule", f.name), {}), constraints.RULES[f.name]
                keys, rows, firsts = column(f.reads)
                for k, j in zip(keys, firsts, strict=True):
                    if k not in cache:
                        cache[k] = rule(self.setup.model, self.setup.cluster, self.job, full(j))
                said = [cache[k] for k in keys]
                broken = np.array([w is not None for w in said], dtype=bool)[rows]
                for j in np.nonzero(broken)[0]:
                    table.why[j] = table.why[j] or f"constraint {f.name}: {said[rows[j]]}"
                table.rule_ok &= ~broken
                continue
            rest = self._cache.setdefault((f.kind, f.name), {})
            keys, rows, firsts = column(f.rest)
            for k, j in zip(keys, firsts, strict=True):
                if k not in rest:
                    self._estimate(self._offload_off(full(j), f) if f.offload else full(j), f.kind != "moment")
            values = [rest[k] for k in keys]
            if not n:
                continue
            shares = None
            if f.offload:
                share = self._cache.setdefault((f.kind, f.name, "offload"), {})
                skeys, srows, sfirsts = column(f.share)
                for k, j in zip(skeys, sfirsts, strict=True):
                    if k not in share:
                        share[k] = self._offload_share(f, full(j))
                shares = ([share[k] for k in skeys], srows)
            if f.kind == "phase":
                table.times[f.name][:] = np.array([v[0] for v in values])[rows]
                if shares is not None:
                    table.times[f.name] += np.array([v[0] for v in shares[0]])[shares[1]]
                if f.name in table.feats:
                    table.feats[f.name][:] = np.array([v[1] for v in values])[rows]
            elif f.kind == "moment":
                m = moments.index(f)
                both = np.array(values, dtype=float)[rows]  # (n, step|worst, peak|uncertain|capacity)
                if shares is not None:
                    both += np.array(shares[0], dtype=float)[shares[1]]  # the share's capacity column is 0
                table.step[m], table.worst[m] = both[:, 0], both[:, 1]
            else:
                table.tokens = np.array(values, dtype=float)[rows]
        self._tables[tkey] = table
        return table

    def _groups(self, options: list, part: _Part, inner: tuple[str, ...]) -> tuple[list[tuple], np.ndarray, list[int]]:
        """The distinct values of the part's knobs `inner` among `options` (first seen first), each option's index
        into them, and the first option of each (memoised: a part's option lists are shared by many blocks)."""
        key = (id(options), inner)
        if key not in self._grouped:
            at = [part.fields.index(r) for r in inner]
            seen: dict[tuple, int] = {}
            rows, firsts = np.zeros(len(options), dtype=np.intp), []
            for j, o in enumerate(options):
                u = tuple(o[1][a] for a in at)
                i = seen.setdefault(u, len(seen))
                if i == len(firsts):
                    firsts.append(j)
                rows[j] = i
            self._grouped[key] = (list(seen), rows, firsts)
        return self._grouped[key]

    def _offload_off(self, cand: Candidate, f: _Factor) -> Candidate:
        return replace(cand, **{k: OFFLOAD_REFERENCE[k] for k in f.offload})

    def _offload_share(self, f: _Factor, cand: Candidate) -> Any:
        """What the offload knobs add to an additive piece: its value minus its value with them off, both at a
        reference setting of everything the share does not read."""
        at = replace(self.reference, **{k: getattr(cand, k) for k in f.share})
        off = self._offload_off(at, f)
        return _sub(self._raw(at, f), self._raw(off, f))

    def _raw(self, cand: Candidate, f: _Factor) -> Any:
        s = self.setup
        self.calls += 1
        if f.kind == "moment":
            mem, worst = estimate_memories(s.model, s.cluster, s.job, cand, s.objective, s.lengths, s.constants)
            return (_moment(mem, f.name), _moment(worst, f.name))
        ev = estimate_unchecked(s.model, s.cluster, s.job, cand, s.objective, s.lengths, s.constants)
        return (dict(ev.throughput.phases).get(f.name, 0.0), None)

    def _estimate(self, cand: Candidate, time: bool = True) -> None:
        """One call of the model; every piece it answers is memoised under the knobs that piece reads (an additive
        piece's rest only when the candidate's offload knobs are off). Without `time` only the memory model runs
        (the pieces still unknown are all memory moments)."""
        s = self.setup
        self.calls += 1
        if time:
            ev = estimate_unchecked(s.model, s.cluster, s.job, cand, s.objective, s.lengths, s.constants)
            mem, worst, thr = ev.memory, ev.worst_memory, ev.throughput
            phases = dict(thr.phases)
        else:
            mem, worst = estimate_memories(s.model, s.cluster, s.job, cand, s.objective, s.lengths, s.constants)
            thr, phases = None, {}
        for f in self._every:
            if f.kind == "rule" or (thr is None and f.kind != "moment"):
                continue
            if f.offload and any(getattr(cand, k) != OFFLOAD_REFERENCE[k] for k in f.offload):
                continue
            cache = self._cache.setdefault((f.kind, f.name), {})
            k = _getter(f.rest)(cand)
            if k in cache:
                continue
            if f.kind == "phase":
                cache[k] = (phases.get(f.name, 0.0), features(f.name, cand, self.job) if f.name in FEATURES else None)
            elif f.kind == "moment":
                cache[k] = (_moment(mem, f.name), _moment(worst, f.name))
            else:
                cache[k] = thr.tokens_per_step


def _with(cand: Candidate, idx: list[int], vals: tuple) -> Candidate:
    if not idx:
        return cand
    values = [getattr(cand, f) for f in FIELDS]
    for i, v in zip(idx, vals, strict=True):
        values[i] = v
    return Candidate(*values)


def _sub(a: Any, b: Any) -> Any:
    if isinstance(a[0], tuple):
        return tuple((x[0] - y[0], x[1] - y[1], 0.0) for x, y in zip(a, b, strict=True))
    return (a[0] - b[0], None)


def _moment(mem: Any, name: str) -> tuple[float, float, float]:
    if name == KV:
        return (mem.kv_needed_bytes, 0.0, mem.kv_cache_bytes)
    try:
        m = mem.moment(name)
    except StopIteration:
        return (0.0, 0.0, 1.0)
    return (m.peak, sum(v for k, v in m.terms if k in UNCERTAIN_TERMS), m.capacity)
