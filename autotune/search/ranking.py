"""The model's ranking of a search space, exact: its best settings, the order of the rest, how many can run.

A space holds millions of settings, too many to evaluate one by one, but the model's estimates are sums and conjunctions
of pieces that each read a few knobs (autotune/estimate/reads.py): the step time is a sum of phases, "fits" is every
memory moment fitting and every static rule holding. So the space splits (Split, search/split.py) into an outer part,
the parallel layout and the knobs that every piece reads (recompute, offload, dynamic batching, fused kernels),
enumerated in full, and inner parts (the micro-batch token budgets; vLLM's rollout TP, memory share and batched tokens)
that no piece reads together. For one outer setting (a block) the best setting is the best option of each inner part,
independently; a piece's value is computed once per distinct setting of the knobs it reads (memoised), and the estimate
is called only where a piece has not been seen. Every block is examined, so nothing the model prefers can be missed:
tests/test_ranking.py checks the result against brute force on spaces small enough to enumerate (dense and MoE, 1 to 8
GPUs). A runner that can run only a finite list of candidates (the replay tables) is ranked by evaluating that list
(DomainRanking, search/domain.py).

A correction (autotune/estimate/correction.py) multiplies phase times by factors of knobs each phase reads and
scales the memory the model is least sure of, so corrected rankings keep the same structure: re-ranking after a
measurement recombines the memoised pieces without calling the model again.
"""

from __future__ import annotations

import heapq
import itertools
import operator
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from autotune.candidate import Candidate
from autotune.estimate import MEMORY_MARGIN, constraints, estimate_memories, estimate_unchecked
from autotune.estimate.correction import FEATURES, NO_CORRECTION, UNCERTAIN_TERMS, Correction, features
from autotune.estimate.reads import OFFLOAD_REFERENCE, reads_for
from autotune.search.domain import DomainRanking
from autotune.search.split import (
    _FIELD_INDEX,
    FIELDS,
    Pick,
    Split,
    _Factor,
    _Part,
    best_pick,
)

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


class ModelRanking:
    """The model's exact ranking of a space for one study (model, cluster, job, objective, lengths, constants)."""

    def __init__(self, setup: Any, rule_filter: Callable[[str], bool] | None = None):
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
        self._views: dict[int, Any] = {}
        self._index: dict[tuple, _Block] | None = None
        self._version = 0

    # -- building
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
                if len(held) == len(names):
                    keys = [held] * len(groups)
                elif not held:
                    keys = groups if inner == names else [tuple(u[inner.index(r)] for r in names) for u in groups]
                else:
                    at = [(r in part.fields, inner.index(r) if r in part.fields else held_at)
                          for held_at, r in _held_positions(names, part.fields)]
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
                broken = np.array([w is not None for w in said], dtype=bool)[rows] if n else np.zeros(0, dtype=bool)
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

    # -- the corrected view
    def _view(self, t: _Table, corr: Correction) -> Any:
        if t.view is not None and t.view[0] == id(corr):
            return t.view[1]
        n = len(t.params)
        time = np.zeros(n)
        for name, raw in t.times.items():
            fit = corr.phase_fit(name) if corr.active else None
            time += raw * (np.exp(t.feats[name] @ np.array(fit.mean)) if fit is not None else 1.0)
        f = corr.memory_factor_used
        fits, wfits, limit = t.rule_ok.copy(), np.ones(n, dtype=bool), np.zeros(n, dtype=bool)
        if len(t.step):
            peak = t.step[:, :, 0] + (f - 1.0) * t.step[:, :, 1]
            cap = t.step[:, :, 2]
            fits &= np.all(peak <= cap, axis=0)
            wpeak = t.worst[:, :, 0] + (f - 1.0) * t.worst[:, :, 1]
            wfits = np.all(wpeak <= t.worst[:, :, 2], axis=0)
            real = ~t.kv
            if real.any():
                limit = np.any(peak[real] > cap[real] * (1 - MEMORY_MARGIN), axis=0)
        view = (time, fits, fits & wfits & ~limit)
        t.view = (id(corr), view)
        self._views[id(corr)] = corr  # keep the correction alive while its id keys a view
        return view

    def _block_best(self, b: _Block, corr: Correction, safe: bool) -> tuple[float, tuple[int, ...]] | None:
        """The block's best throughput and option of each part (among safe options when `safe`)."""
        mins, picks = [], []
        tok_part = None
        for i, t in enumerate(b.tables):
            time, fits, safe_ok = self._view(t, corr)
            ok = safe_ok if safe else fits
            if not ok.any():
                return None
            if t.tokens is not None:
                tok_part = i
            j = int(np.argmin(np.where(ok, time, np.inf)))
            mins.append(time[j])
            picks.append(j)
        t = b.tables[tok_part]  # the part whose options set the tokens of a step (the outer one: a constant)
        time, fits, safe_ok = self._view(t, corr)
        ok = safe_ok if safe else fits
        rest = sum(m for i, m in enumerate(mins) if i != tok_part)
        thr = np.where(ok, t.tokens / ((time + rest) * self.world), -np.inf)
        j = int(np.argmax(thr))
        picks[tok_part] = j
        return float(thr[j]), tuple(picks)

    def _combos(self, b: _Block, corr: Correction, safe: bool) -> list[tuple[float, tuple[int, ...]]]:
        """Every runnable (or safe) setting of a block, best first."""
        parts = []
        for t in b.tables:
            time, fits, safe_ok = self._view(t, corr)
            ok = np.nonzero(safe_ok if safe else fits)[0]
            parts.append((t, ok, time))
        if any(len(ok) == 0 for _, ok, _ in parts):
            return []
        out = []
        for combo in itertools.product(*(ok for _, ok, _ in parts)):
            total, tok = 0.0, 1.0
            for (t, _, time), j in zip(parts, combo, strict=True):
                total += time[j]
                if t.tokens is not None:
                    tok = t.tokens[j]
            out.append((tok / (total * self.world), combo))
        out.sort(key=lambda x: -x[0])
        return out

    # -- answers
    def _pick(self, b: _Block, combo: tuple[int, ...], thr: float, safe: bool) -> Pick:
        params = dict(b.outer)
        for t, j in zip(b.tables, combo, strict=True):
            params.update(t.params[j])
        cand = Candidate.from_params(params, self.base)
        return Pick(self.setup.space.project(params, self.context), cand, float(thr), safe)

    def _address(self, cand: Candidate) -> tuple:
        applied = cand.applied_params()
        return (tuple(applied[f] for f in self.split.outer_fields),
                tuple(tuple(applied[f] for f in p.fields) for p in self.split.parts))

    def ranked(self, corr: Correction = NO_CORRECTION, exclude: Sequence[Candidate] = (),
               safe: bool = False) -> Iterator[Pick]:
        """Every runnable setting (every safe one with `safe`), best first by predicted throughput, except
        `exclude` (candidates already launched)."""
        skip = {self._address(c) for c in exclude}
        skip_blocks = {a[0] for a in skip}
        heap: list[tuple[float, int, int]] = []
        blocks = self.blocks()
        for i, b in enumerate(blocks):
            best = self._block_best(b, corr, safe)
            if best is not None:
                heap.append((-best[0], i, -1))
        heapq.heapify(heap)
        expanded: dict[int, list] = {}
        while heap:
            neg, i, pos = heapq.heappop(heap)
            b = blocks[i]
            if pos == -1:
                if b.key not in skip_blocks:
                    thr, combo = self._block_best(b, corr, safe)
                    yield self._pick(b, combo, thr, safe or self._is_safe(b, combo, corr))
                    # the rest of this block, in order, after its best
                    expanded[i] = [c for c in self._combos(b, corr, safe) if c[1] != combo]
                else:
                    expanded[i] = self._combos(b, corr, safe)
                if expanded[i]:
                    heapq.heappush(heap, (-expanded[i][0][0], i, 0))
                continue
            thr, combo = expanded[i][pos]
            if (b.key, tuple(t.keys[j] for t, j in zip(b.tables, combo, strict=True))) not in skip:
                yield self._pick(b, combo, thr, safe or self._is_safe(b, combo, corr))
            if pos + 1 < len(expanded[i]):
                heapq.heappush(heap, (-expanded[i][pos + 1][0], i, pos + 1))

    def _is_safe(self, b: _Block, combo: tuple[int, ...], corr: Correction) -> bool:
        return all(bool(self._view(t, corr)[2][j]) for t, j in zip(b.tables, combo, strict=True))

    best = best_pick  # the best runnable setting; a safe near-equal instead (search/split.py)

    def seeds(self, k: int, corr: Correction = NO_CORRECTION, exclude: Sequence[Candidate] = ()) -> list[Pick]:
        """The best setting, then the best setting of each next-best parallel layout (near-copies of the best teach
        a study little), k in all; `exclude` (launched candidates) are not proposed."""
        first = self.best(corr, exclude)
        if first is None or k <= 0:
            return []
        groups: dict[tuple, list[_Block]] = {}
        for b in self.blocks():
            groups.setdefault(b.layout, []).append(b)
        first_layout = _LAYOUT_KEY(first.candidate)
        picks = [p for lay, bs in groups.items() if lay != first_layout
                 for p in [_Sub(self, bs).best(corr, exclude)] if p is not None]
        picks.sort(key=lambda p: -p.throughput)
        return [first, *picks[: k - 1]]

    def count(self, corr: Correction = NO_CORRECTION) -> int:
        """Distinct runnable settings of the space (by the corrected model), exactly."""
        total = 0
        for b in self.blocks():
            n = 1
            for t in b.tables:
                n *= int(self._view(t, corr)[1].sum())
                if not n:
                    break
            total += n
        return total

    def runnable(self, cand: Candidate, corr: Correction = NO_CORRECTION) -> bool:
        """Whether a candidate is one of the runnable settings of the space (in it, and predicted to run)."""
        outer, parts = self._address(cand)
        if self._index is None:
            self._index = {b.key: b for b in self.blocks()}
        b = self._index.get(outer)
        return b is not None and all(k in t.keys and bool(self._view(t, corr)[1][t.keys.index(k)])
                                     for t, k in zip(b.tables, parts, strict=True))

    def explain(self) -> str:
        """Why no setting can run: the rules that close the layouts (and the other outer knobs), then what closes
        every setting of a part in the layouts left (rules, memory moments), with counts and an example each. The
        same words for every --seed: it comes from the rules, not from samples."""
        inner: dict[str, list] = {}
        left = 0
        for b in self.blocks():
            left += 1
            for t in b.tables:
                if self._view(t, NO_CORRECTION)[1].any():
                    continue
                for j in range(len(t.params)):
                    why = t.why[j] or self._memory_why(t, j)
                    rule = why.split(":", 1)[0].removeprefix("constraint ").strip()
                    inner.setdefault(rule, [0, why.split(": ", 1)[-1]])[0] += 1
        parts = []
        if self._closed:
            parts.append("the layouts break " + _counted(self._closed))
        if inner:
            where = f"the {left} layout setting{'s' if left != 1 else ''} left" if self._closed else "every layout"
            parts.append(f"{where} ha{'ve' if left != 1 else 's'} no runnable "
                         f"{' or '.join(p.name for p in self.split.parts if p.dims)} setting: " + _counted(inner))
        return "; ".join(parts)

    def _memory_why(self, t: _Table, j: int) -> str:
        for m, name in enumerate(t.moment_names):  # type: ignore[attr-defined]
            peak, _, cap = t.step[m, j]
            if peak > cap:
                if name == KV:
                    return f"memory (vllm_kv_cache): {cap / 2**30:.2f} GiB of KV cache cannot hold one request"
                return f"memory ({name}): predicted {peak / 2**30:.1f} GiB > {cap / 2**30:.1f} GiB"
        return "memory: predicted OOM"


class _Sub(ModelRanking):
    """A ranking restricted to some blocks of another (one parallel layout), sharing its memoised pieces."""

    def __init__(self, parent: ModelRanking, blocks: list[_Block]):
        self.__dict__.update(parent.__dict__)
        self._blocks = blocks


def _counted(counts: dict[str, list]) -> str:
    """"rule xN (e.g. message), ..." most frequent first, an example for the first three."""
    top = sorted(counts.items(), key=lambda kv: -kv[1][0])
    return ", ".join(f"{rule} x{n} (e.g. {ex})" if i < 3 else f"{rule} x{n}" for i, (rule, (n, ex)) in enumerate(top))


def _held_positions(names: tuple[str, ...], own: tuple[str, ...]) -> list[tuple[int, str]]:
    """Each name with its position among the names not in `own` (-1 for those in it)."""
    out, k = [], 0
    for r in names:
        if r in own:
            out.append((-1, r))
        else:
            out.append((k, r))
            k += 1
    return out


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


_MEMO: dict[tuple, ModelRanking | DomainRanking] = {}
_MEMO_SIZE = 4


def make_ranking(setup: Any, domain: Sequence[Candidate] | None = None) -> ModelRanking | DomainRanking:
    """The ranking of a study's space (or of a runner's finite domain). The last few are kept in this process:
    tuners of the same setup (a resumed study, several workers in one process, tests) share one."""
    import json

    # the lengths' numbers, not their sources: a measured trial that leaves them as they were (its responses no
    # longer than an earlier trial's) changes only the words "of N earlier trials", and keeps the ranking
    lengths = setup.lengths if setup.lengths is None else replace(setup.lengths, sources=())
    key = (json.dumps(setup.fingerprint(), sort_keys=True), repr(lengths), setup.objective,
           repr(setup.constants), None if domain is None else tuple(c.key() for c in domain))
    if key not in _MEMO:
        if len(_MEMO) >= _MEMO_SIZE:
            del _MEMO[next(iter(_MEMO))]
        _MEMO[key] = DomainRanking(setup, domain) if domain is not None else ModelRanking(setup)
    return _MEMO[key]


def infeasible_message(setup: Any, ranking: ModelRanking | DomainRanking) -> str:
    s = setup
    return (f"no setting of space {s.space.name!r} can run {s.model.name} on {s.cluster.describe()} with job "
            f"{s.job.source}: {ranking.explain()}. Change --gpus/--nodes, the job or the space")
