"""The model's ranking of a search space, exact: its best settings, the order of the rest, how many can run.

A space holds millions of settings, too many to evaluate one by one, but the model's estimates are sums and conjunctions
of pieces that each read a few knobs (autotune/estimate/reads.py): the step time is a sum of phases, "fits" is every
memory moment fitting and every static rule holding. So the space splits (Split, search/split.py) into an outer part,
the parallel layout and the knobs that every piece reads (recompute, offload, dynamic batching, fused kernels),
enumerated in full, and inner parts (the micro-batch token budgets; vLLM's rollout TP, memory share and batched tokens)
that no piece reads together. For one outer setting (a block) the best setting is the best option of each inner part,
independently; a piece's value is computed once per distinct setting of the knobs it reads (memoised in the blocks'
tables, search/pieces.py), and the estimate is called only where a piece has not been seen. Every block is examined,
so nothing the model prefers can be missed: tests/test_ranking.py checks the result against brute force on spaces
small enough to enumerate (dense and MoE, 1 to 8 GPUs). A runner that can run only a finite list of candidates (the
replay tables) is ranked by evaluating that list (DomainRanking, search/domain.py).

A correction (autotune/estimate/correction.py) multiplies phase times by factors of knobs each phase reads and
scales the memory the model is least sure of, so corrected rankings keep the same structure: re-ranking after a
measurement recombines the memoised pieces without calling the model again.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from autotune.candidate import Candidate
from autotune.estimate import MEMORY_MARGIN
from autotune.estimate.correction import NO_CORRECTION, Correction
from autotune.search.domain import DomainRanking
from autotune.search.pieces import _LAYOUT_KEY, KV, Pieces, _Block, _Table
from autotune.search.split import Pick, best_pick


class ModelRanking(Pieces):
    """The model's exact ranking of a space for one study (model, cluster, job, objective, lengths, constants)."""

    def __init__(self, setup: Any):
        super().__init__(setup)
        self._views: dict[int, Any] = {}
        self._index: dict[tuple, _Block] | None = None

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


_MEMO: dict[tuple, ModelRanking | DomainRanking] = {}
_MEMO_SIZE = 4


def make_ranking(setup: Any, domain: Sequence[Candidate] | None = None) -> ModelRanking | DomainRanking:
    """The ranking of a study's space (or of a runner's finite domain). The last few are kept in this process:
    tuners of the same setup (a resumed study, several workers in one process, tests) share one."""
    import json

    # the lengths' numbers, not their sources: a measured trial that leaves them as they were (its responses no
    # longer than an earlier trial's) changes only the words "of N earlier trials", and keeps the ranking
    lengths = setup.lengths if setup.lengths is None else replace(setup.lengths, sources=())
    # the fingerprint leaves out what a resumed study may change but the estimates see: the node's defaults (the
    # study is the user's job), the host's memory and the trials sharing it
    key = (json.dumps(setup.fingerprint(), sort_keys=True), repr(setup.job.node_defaults), repr(setup.cluster),
           repr(lengths), setup.objective, repr(setup.constants),
           None if domain is None else tuple(c.key() for c in domain))
    if key not in _MEMO:
        if len(_MEMO) >= _MEMO_SIZE:
            del _MEMO[next(iter(_MEMO))]
        _MEMO[key] = DomainRanking(setup, domain) if domain is not None else ModelRanking(setup)
    return _MEMO[key]


def infeasible_message(setup: Any, ranking: ModelRanking | DomainRanking) -> str:
    s = setup
    return (f"no setting of space {s.space.name!r} can run {s.model.name} on {s.cluster.describe()} with job "
            f"{s.job.source}: {ranking.explain()}. Change --gpus/--nodes, the job or the space")
