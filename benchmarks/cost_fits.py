"""The engine's fixed costs fitted on the real verl 0.9.1 trials (benchmarks/real_cases.py): each pass's cost above
its FLOPs, the micro-batch, logit, checkpoint and CPU optimizer prices from pairs of trials on one host, the decode
step's host overhead, and every case predicted with costs refitted on the other model sizes (`held_out`).
benchmarks/calibration.py reports them; tests/test_calibration.py pins them to the model's constants.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from collections.abc import Callable

from autotune.estimate.reads import CPU_OPTIMIZER_KEYS, RECOMPUTE_KEYS
from autotune.estimate.throughput import (
    DEFAULT_EFFICIENCY,
    decode_step_seconds,
    small_micro_batch_seconds,
)
from benchmarks.real_cases import (
    CHECKPOINT_COST,
    CPU_ADAM_RATE,
    DATA,
    LOGIT_COST,
    LOGPROB_MICRO_BATCH_COST,
    MICRO_BATCH_COST,
    PASS_COSTS,
    RECOMPUTE_COST,
    SMALL_COSTS,
    Case,
    ok_cases,
    steady,
)


def fit_pass_costs(zeroed: list[Case]) -> dict[str, float]:
    """The PASS_COSTS constants from trials predicted with them zeroed: each the median over the trials of measured
    minus predicted, less what their unfused logits cost (`fit_logit_cost`; the update's over trials without the CPU
    optimizer, whose step is priced on its own, without full recompute, whose second forward is priced as a log-prob
    pass: `recompute_residual` checks it, without micro-batches of one sequence, priced per micro-batch:
    `fit_micro_batch_cost`, and without the small micro-batches, priced per micro-batch too:
    `fit_small_micro_batch_costs`; the log-prob pass's less what its micro-batches cost: `fit_logprob_micro_batch_cost`,
    returned with them)."""
    logit_ps = fit_logit_cost(zeroed) or 0.0
    checkpoint_s = fit_checkpoint_cost(zeroed) or 0.0
    per_micro_batch = fit_logprob_micro_batch_cost(zeroed)
    out = {}
    for phase, name in PASS_COSTS.items():
        res = [_left(c, phase, logit_ps, checkpoint_s, per_micro_batch) for c in ok_cases(zeroed)
               if c.measured_phases.get(phase)
               and not (phase == "update_actor" and _update_priced_apart(c))]
        out[name] = statistics.median(res)
    return out | {LOGPROB_MICRO_BATCH_COST: per_micro_batch}


def logprob_micro_batch_residuals(zeroed: list[Case]) -> list[tuple[Case, float]]:
    """Each ok trial with what its log-prob pass (old_log_prob) leaves above its FLOPs and unfused logits (seconds)."""
    logit_ps = fit_logit_cost(zeroed) or 0.0
    return [(c, _left(c, "old_log_prob", logit_ps)) for c in ok_cases(zeroed)
            if c.measured_phases.get("old_log_prob") and c.log_prob_micro_batches]


def by_count(pairs: list[tuple[Case, float]]) -> dict[float, list[float]]:
    out: dict[float, list[float]] = {}
    for c, r in pairs:
        out.setdefault(c.log_prob_micro_batches, []).append(r)
    return out


def fit_logprob_micro_batch_cost(zeroed: list[Case]) -> float:
    """LOGPROB_MICRO_BATCH_COST: the least-squares slope of what each trial's log-prob pass leaves
    (`logprob_micro_batch_residuals`) on its micro-batch count (0: fewer than two counts)."""
    pairs = logprob_micro_batch_residuals(zeroed)
    if len({c.log_prob_micro_batches for c, _ in pairs}) < 2:
        return 0.0
    return statistics.linear_regression([c.log_prob_micro_batches for c, _ in pairs], [r for _, r in pairs]).slope


def _left(c: Case, phase: str, logit_ps: float, checkpoint_s: float = 0.0, micro_batch_s: float = 0.0) -> float:
    """Measured minus predicted (zeroed) of a phase, less what its unfused logits cost at `logit_ps`, (the update)
    its selective recompute's checkpoints at `checkpoint_s` and (the log-prob pass) its micro-batches at
    `micro_batch_s`."""
    return (c.measured_phases[phase] - c.predicted_phases[phase]
            - c.unfused_logits.get(phase, 0.0) * logit_ps * 1e-12
            - (c.checkpointed_layers * checkpoint_s if phase == "update_actor" else 0.0)
            - (c.log_prob_micro_batches * micro_batch_s if phase == "old_log_prob" else 0.0))


def _twin_key(c: Case, keys: frozenset[str]) -> tuple:
    """What trials of one lease (one host) and model size whose parameters differ only in `keys` share."""
    return c.lease, c.size, tuple(sorted((k, str(v)) for k, v in c.params.items() if k not in keys))


def _twins(zeroed: list[Case], keys: frozenset[str], base: Callable[[Case], bool], other: Callable[[Case], bool]
           ) -> list[tuple[Case, list[Case]]]:
    """(other, bases): each ok trial `other` picks, with the ok trials `base` picks of its lease and model size whose
    parameters differ from its only in `keys` (none: left out)."""
    bases: dict[tuple, list[Case]] = {}
    for c in ok_cases(zeroed):
        if base(c):
            bases.setdefault(_twin_key(c, keys), []).append(c)
    return [(c, bases[k]) for c in ok_cases(zeroed) if other(c) and (k := _twin_key(c, keys)) in bases]


def _pairs(zeroed: list[Case], keys: frozenset[str], base: Callable[[Case], bool], other: Callable[[Case], bool]
           ) -> list[tuple[Case, Case]]:
    """(other, base): pairs of ok trials of one lease and model size whose parameters differ only in `keys` (of
    several such bases, the last)."""
    return [(c, bases[-1]) for c, bases in _twins(zeroed, keys, base, other)]


def checkpoint_pairs(zeroed: list[Case]) -> list[tuple[Case, Case, float]]:
    """Each pair of ok trials of one lease and model size whose parameters differ only in selective recompute (with
    it, without any recompute), with what the pair's update (the median of steps 2 on: a step's noise out) differs by
    beyond the model's difference, per checkpointed layer (seconds; CHECKPOINT_COST)."""
    pairs = []
    for c, other in _pairs(zeroed, RECOMPUTE_KEYS, lambda c: c.params.get("recompute") in (None, "none"),
                           lambda c: bool(c.checkpointed_layers)):
        measured = c.steady_phases["update_actor"] - other.steady_phases["update_actor"]
        predicted = c.predicted_phases["update_actor"] - other.predicted_phases["update_actor"]
        pairs.append((c, other, (measured - predicted) / c.checkpointed_layers))
    return pairs


def fit_checkpoint_cost(zeroed: list[Case]) -> float | None:
    """CHECKPOINT_COST: the median of `checkpoint_pairs` (None: no such pair)."""
    pairs = checkpoint_pairs(zeroed)
    return statistics.median(r for _, _, r in pairs) if pairs else None


def cpu_adam_pairs(zeroed: list[Case]) -> list[tuple[Case, Case, float]]:
    """Each pair of ok trials of one lease and model size whose parameters differ only in Megatron's CPU optimizer
    (with it, without it), with the rate its update's difference says (parameters a second): the parameters the CPU
    steps over what the pair's update (the median of steps 2 on) differs by beyond the model's difference without the
    CPU step."""
    pairs = []
    for c, other in _pairs(zeroed, CPU_OPTIMIZER_KEYS, lambda c: not c.cpu_adam_params,
                           lambda c: bool(c.cpu_adam_params)):
        measured = c.steady_phases["update_actor"] - other.steady_phases["update_actor"]
        predicted = c.predicted_phases["update_actor"] - other.predicted_phases["update_actor"]
        rest = predicted - c.cpu_adam_params / DEFAULT_EFFICIENCY.cpu_adam_params_per_s
        if measured > rest:
            pairs.append((c, other, c.cpu_adam_params / (measured - rest)))
    return pairs


def fit_cpu_adam_rate(zeroed: list[Case]) -> float | None:
    """CPU_ADAM_RATE: the median of `cpu_adam_pairs` (None: no such pair)."""
    pairs = cpu_adam_pairs(zeroed)
    return statistics.median(r for _, _, r in pairs) if pairs else None


def logit_costs(zeroed: list[Case]) -> list[tuple[Case, float]]:
    """Each ok trial without fused kernels, with what its old_log_prob left above the median of the trials with them
    of its size, GPU type and attention backend (the unfused attention is priced apart), per logit (ps); a trial
    without such trials beside it: none. Across hosts, so a host's speed is in it: reported, not fitted on."""
    ok = [c for c in ok_cases(zeroed) if c.measured_phases.get("old_log_prob")]
    fused: dict[tuple[str, str, str], list[float]] = {}
    for c in ok:
        if not c.unfused_logits:
            fused.setdefault((c.size, c.gpu, c.model), []).append(_left(c, "old_log_prob", 0.0))
    return [(c, (_left(c, "old_log_prob", 0.0) - statistics.median(fused[c.size, c.gpu, c.model]))
             / c.unfused_logits["old_log_prob"] * 1e12)
            for c in ok if c.unfused_logits and (c.size, c.gpu, c.model) in fused]


def logit_pairs(zeroed: list[Case]) -> list[tuple[Case, list[Case], float]]:
    """Each ok trial without fused kernels that has twins with them on its lease (one host: its model size and every
    other parameter the same), with what its old_log_prob (step 3) left above the median of theirs, per logit (ps)."""
    def measured(c: Case) -> bool:
        return bool(c.measured_phases.get("old_log_prob"))

    twins = _twins(zeroed, frozenset({"use_fused_kernels"}), lambda c: measured(c) and not c.unfused_logits,
                   lambda c: measured(c) and bool(c.unfused_logits))
    return [(c, fused, (_left(c, "old_log_prob", 0.0)
                        - statistics.median(_left(t, "old_log_prob", 0.0) for t in fused))
             / c.unfused_logits["old_log_prob"] * 1e12) for c, fused in twins]


def fit_logit_cost(zeroed: list[Case]) -> float | None:
    """LOGIT_COST: the median of `logit_pairs`, at least zero (the model has no price for the fused kernels' own
    work); None: no such pair. One host's pairs, not `logit_costs`: hosts ran one configuration up to 41% apart."""
    pairs = logit_pairs(zeroed)
    return max(0.0, statistics.median(r for _, _, r in pairs)) if pairs else None


def _update_priced_apart(c: Case) -> bool:
    return c.cpu_optimizer or c.full_recompute or bool(c.micro_batches_of_one) or bool(c.small_micro_batches)


def small_micro_batch_costs(zeroed: list[Case], update_pass_s: float) -> list[tuple[Case, float]]:
    """Each ok trial whose update micro-batches are small (under SMALL_MICRO_BATCH_TOKENS, not single sequences;
    without the CPU optimizer or full recompute), with what its update leaves above update_pass_s beyond its FLOPs and
    unfused logits, per such micro-batch (seconds: the host's work its GPU work did not hide)."""
    logit_ps = fit_logit_cost(zeroed) or 0.0
    return [(c, _update_left(c, update_pass_s, logit_ps) / c.small_micro_batches) for c in ok_cases(zeroed)
            if c.small_micro_batches and not (c.cpu_optimizer or c.full_recompute)
            and c.measured_phases.get("update_actor")]


def fit_small_micro_batch_costs(zeroed: list[Case], update_pass_s: float) -> dict[str, float]:
    """SMALL_COSTS: per kind (fixed micro-batches, a dynamic budget) the host's seconds a layer of a small micro-batch,
    the median over its trials of `small_micro_batch_costs` plus the micro-batch's GPU work (what hid the rest), per
    layer of a pipeline stage (a kind without trials: absent)."""
    return host_per_layer(small_micro_batch_costs(zeroed, update_pass_s))


def host_per_layer(costs: list[tuple[Case, float]]) -> dict[str, float]:
    """SMALL_COSTS from `small_micro_batch_costs`' (trial, left a micro-batch): per kind the median of what each left
    plus the micro-batch's GPU work, per layer of a pipeline stage."""
    per: dict[str, list[float]] = {}
    for c, r in costs:
        per.setdefault(SMALL_COSTS[c.small_kind], []).append((r + c.update_micro_batch_gpu_s) / c.stage_layers)
    return {name: statistics.median(v) for name, v in per.items()}


def _update_left(c: Case, update_pass_s: float, logit_ps: float) -> float:
    """What a trial's update leaves above update_pass_s beyond its FLOPs and its unfused logits at `logit_ps`
    (predicted with the costs zeroed)."""
    return _left(c, "update_actor", logit_ps) - update_pass_s


def _median(pairs: list[tuple[Case, float]]) -> float | None:
    return statistics.median(r for _, r in pairs) if pairs else None


def micro_batch_costs(zeroed: list[Case], update_pass_s: float) -> list[tuple[Case, float]]:
    """Each trial whose update micro-batches are single sequences (without the CPU optimizer or full recompute), with
    what its update leaves above update_pass_s beyond its FLOPs and unfused logits, per such micro-batch (seconds)."""
    logit_ps = fit_logit_cost(zeroed) or 0.0
    return [(c, _update_left(c, update_pass_s, logit_ps) / c.micro_batches_of_one) for c in ok_cases(zeroed)
            if c.micro_batches_of_one and not (c.cpu_optimizer or c.full_recompute)
            and c.measured_phases.get("update_actor")]


def fit_micro_batch_cost(zeroed: list[Case], update_pass_s: float) -> float | None:
    """MICRO_BATCH_COST: the median of `micro_batch_costs` (None: no such trial)."""
    return _median(micro_batch_costs(zeroed, update_pass_s))


def recompute_residuals(zeroed: list[Case], update_pass_s: float) -> list[tuple[Case, float]]:
    """Each full-recompute trial without the CPU optimizer, with what its update leaves above update_pass_s beyond
    its FLOPs and unfused logits. The model prices that as one more log-prob pass (RECOMPUTE_COST)."""
    logit_ps = fit_logit_cost(zeroed) or 0.0
    return [(c, _update_left(c, update_pass_s, logit_ps)) for c in ok_cases(zeroed)
            if c.full_recompute and not c.cpu_optimizer and c.measured_phases.get("update_actor")]


def recompute_residual(zeroed: list[Case], update_pass_s: float) -> float | None:
    """The median of `recompute_residuals` (None: no such trial)."""
    return _median(recompute_residuals(zeroed, update_pass_s))


def decode_step_times(zeroed: list[Case]) -> list[tuple[Case, float]]:
    """Each trial predicted with no decode-step overhead, with the seconds a decode step took by its measured gen (the
    rest of the predicted gen, prefill and half of verl's poll, taken out). The verl 0.9.1 trials all capture CUDA
    graphs: a step takes the longer of the GPU's replay and the host's scheduling of the next."""
    return [(c, c.decode_gpu_step_s + (c.measured_phases["gen"] - c.predicted_phases["gen"]) / c.decode_steps)
            for c in ok_cases(zeroed) if c.measured_phases.get("gen") and c.decode_steps]


def fit_decode_overhead(zeroed: list[Case]) -> dict[str, float]:
    """Per GPU type: the median decode step over its trials whose step took longer than the GPU's predicted work (the
    host's overhead is what they measure; the others' steps say only that it is shorter than their GPU's)."""
    per: dict[str, list[float]] = {}
    for c, step in decode_step_times(zeroed):
        if step > c.decode_gpu_step_s:
            per.setdefault(c.gpu, []).append(step)
    return {gpu: statistics.median(v) for gpu, v in sorted(per.items())}


def with_pass_costs(c: Case, costs: dict[str, float], overhead: dict[str, float] | None = None) -> Case:
    """A zeroed case predicted with these fixed costs (they add to their phase and to the step) and this decode-step
    overhead per GPU type (a GPU type it lacks: none)."""
    phases = dict(c.predicted_phases)
    added = {p: costs[name] for p, name in PASS_COSTS.items() if p in phases}
    if "old_log_prob" in added:
        added["old_log_prob"] += c.log_prob_micro_batches * costs.get(LOGPROB_MICRO_BATCH_COST, 0.0)
    if c.full_recompute and "update_actor" in added:
        added["update_actor"] += costs[RECOMPUTE_COST]
    if "update_actor" in added:
        added["update_actor"] += c.micro_batches_of_one * costs.get(MICRO_BATCH_COST, 0.0)
        added["update_actor"] += c.checkpointed_layers * costs.get(CHECKPOINT_COST, 0.0)
        if c.small_kind:
            added["update_actor"] += c.small_micro_batches * small_micro_batch_seconds(
                c.stage_layers, costs.get(SMALL_COSTS[c.small_kind], 0.0), c.update_micro_batch_gpu_s)
        if c.cpu_adam_params and CPU_ADAM_RATE in costs:  # the case's CPU step at this rate instead of the model's
            added["update_actor"] += c.cpu_adam_params * (
                1 / costs[CPU_ADAM_RATE] - 1 / DEFAULT_EFFICIENCY.cpu_adam_params_per_s)
    for p, logits in c.unfused_logits.items():
        if p in added:
            added[p] += logits * costs.get(LOGIT_COST, 0.0) * 1e-12
    if "gen" in phases:
        host, gpu = (overhead or {}).get(c.gpu, 0.0), c.decode_gpu_step_s  # zeroed: each step at its GPU's work
        added["gen"] = c.decode_steps * (decode_step_seconds(host, gpu, DEFAULT_EFFICIENCY.decode_overlap) - gpu)
    for phase, v in added.items():
        phases[phase] += v
    step = c.predicted_step_s + sum(added.values()) if c.predicted_step_s is not None else None
    return dataclasses.replace(c, predicted_phases=phases, predicted_step_s=step)


def held_out(zeroed: list[Case]) -> tuple[list[Case], dict[str, dict[str, float]]]:
    """Every case predicted with the PASS_COSTS, the micro-batch and logit costs and the decode-step overheads refitted
    on the other model sizes only (a GPU type only this size ran on: the others' H100 figure, as the model takes for a
    GPU type it has none of; no other size with micro-batches of one sequence, small micro-batches of a kind or trials
    without fused kernels: none), and each size's refit."""
    out, fits = [], {}
    for size in sorted({c.size for c in zeroed}):
        others = [c for c in zeroed if c.size != size]
        overhead = fit_decode_overhead(others)
        overhead = {g: overhead.get(g, overhead.get("h100", 0.0)) for g in {c.gpu for c in zeroed}}
        costs = fit_pass_costs(others)
        costs[MICRO_BATCH_COST] = fit_micro_batch_cost(others, costs["update_pass_s"]) or 0.0
        costs |= {name: 0.0 for name in SMALL_COSTS.values()} | fit_small_micro_batch_costs(others,
                                                                                          costs["update_pass_s"])
        costs[LOGIT_COST] = fit_logit_cost(others) or 0.0
        costs[CHECKPOINT_COST] = fit_checkpoint_cost(others) or 0.0
        costs[CPU_ADAM_RATE] = fit_cpu_adam_rate(others) or DEFAULT_EFFICIENCY.cpu_adam_params_per_s
        fits[size] = {**costs, **{f"overhead_{g}_ms": 1e3 * v for g, v in sorted(overhead.items())}}
        out += [with_pass_costs(c, fits[size], overhead) for c in zeroed if c.size == size]
    return out, fits


def host_cpu_adam_rate(c: Case, hybrid: bool = False) -> float | None:
    """The CPU AdamW rate its lease's host measured (benchmarks.cpu_adam_rate into the lease's cpu_adam_rate.json,
    the plans' cpu_adam_probe), parameters a second, or with `hybrid` Megatron's hybrid optimizer's step there; None
    where the lease did not measure it."""
    path = DATA / c.lease / "cpu_adam_rate.json"
    if not path.is_file():
        return None
    run = json.loads(path.read_text())
    run = run.get("hybrid", {}) if hybrid else run
    return float(run["params_per_s"]) if "params_per_s" in run else None


def recompute_pairs(zeroed: list[Case]) -> list[tuple[Case, Case, float]]:
    """Each pair of ok trials of one lease and model size whose parameters differ only in recompute, one with full
    recompute and the other without (none where the lease ran it, else selective), with what the full one's update
    (the median of steps 2 on) leaves above the other's beyond the model's difference with the fixed costs zeroed
    (seconds; unfused logits and selective checkpoints priced): what full recompute's second forward leaves, which the
    model prices as a log-prob pass (RECOMPUTE_COST). Everything else being alike, a CPU optimizer's step or offload
    cancels."""
    logit_ps, checkpoint_s = fit_logit_cost(zeroed) or 0.0, fit_checkpoint_cost(zeroed) or 0.0
    pairs = _pairs(zeroed, RECOMPUTE_KEYS, lambda c: c.params.get("recompute") in (None, "none"),
                   lambda c: c.full_recompute)
    paired = {c.source for c, _ in pairs}
    pairs += [(c, other) for c, other in _pairs(zeroed, RECOMPUTE_KEYS, lambda c: not c.full_recompute,
                                                lambda c: c.full_recompute) if c.source not in paired]
    return [(c, other, _left(steady(c), "update_actor", logit_ps, checkpoint_s)
             - _left(steady(other), "update_actor", logit_ps, checkpoint_s)) for c, other in pairs]


def pass_leftovers(zeroed: list[Case]) -> dict[tuple[str, str], dict[str, list[float]]]:
    """Per (size, GPU type), what its passes leave above their FLOPs (each trial predicted with the fixed costs
    zeroed, less its unfused logits and selective recompute's checkpoints; seconds): each log-prob pass, less its
    micro-batches at `fit_logprob_micro_batch_cost` ("old_log_prob"), each update without and with full recompute
    ("update", "update_full"; without micro-batches of one sequence or small ones, priced apart), and each pair on one
    host that differs only in full recompute (`recompute_pairs`, "full_less_others"): what full recompute's second
    forward leaves."""
    logit_ps, checkpoint_s = fit_logit_cost(zeroed) or 0.0, fit_checkpoint_cost(zeroed) or 0.0
    ok = ok_cases(zeroed)
    pairs = recompute_pairs(zeroed)
    per_micro_batch = fit_logprob_micro_batch_cost(zeroed)
    out = {}
    for size, gpu in sorted({(c.size, c.gpu) for c in ok}):
        cs = [c for c in ok if c.size == size and c.gpu == gpu]
        left = {c.source: _left(c, "update_actor", logit_ps, checkpoint_s) for c in cs
                if c.measured_phases.get("update_actor") and not (c.micro_batches_of_one or c.small_micro_batches)}

        def updates(full: bool, group: list[Case] = cs, left: dict[str, float] = left) -> list[float]:
            return [left[c.source] for c in group if c.full_recompute == full and c.source in left]

        out[size, gpu] = {"old_log_prob": [_left(c, "old_log_prob", logit_ps, micro_batch_s=per_micro_batch)
                                           for c in cs if c.measured_phases.get("old_log_prob")],
                          "update": updates(False), "update_full": updates(True),
                          "full_less_others": [d for c, _, d in pairs if (c.size, c.gpu) == (size, gpu)]}
    return out

