"""Trial labels: what tells one trial apart from another, in a few words.

A label is the parallel layout and the rollout's TP (always), then every other knob whose setting differs from the
study's reference, verl's example configuration as the study seeds it (`Setup.stock`): `tp2 rtp2 dyn16k/96k util0.7
offload:params`. The reference is fixed for a study, so a trial's label never changes while the study runs, and two
trials with different settings (of what verl actually runs) never share a label.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from autotune.candidate import Candidate
from autotune.estimate.safer import SAFE_TOLERANCE
from autotune.search.setup import Setup, setup_from_row
from autotune.search.split import Pick
from autotune.store.schema import StudyRow


def _k(n: int | None) -> str:
    """Token counts as the measured tables write them: 16384 -> 16k."""
    if n is None:
        return "-"
    return f"{n // 1024}k" if n % 1024 == 0 else str(n)


def parallel(c: Candidate) -> str:
    s = f"tp{c.tp}"
    for name, value in (("pp", c.pp), ("vpp", c.vpp or 1), ("cp", c.cp), ("ep", c.ep)):
        if value > 1:
            s += f"{name}{value}"
    return s


def _recompute(c: Candidate) -> str:
    if c.recompute == "selective":
        modules = c.recompute_modules or "core_attn"  # verl's default modules
        return "rc:sel" if modules == "core_attn" else f"rc:sel:{modules.replace(' ', '')}"
    if c.recompute == "full":
        return f"rc:full:{(c.recompute_method or 'uniform')[0]}{c.recompute_num_layers or 1}"
    return "rc:none"


def _batching(c: Candidate) -> str:
    if c.use_dynamic_bsz:
        return f"dyn{_k(c.ppo_max_token_len_per_gpu)}/{_k(c.log_prob_max_token_len_per_gpu)}"
    return f"mbs{c.ppo_micro_batch_size_per_gpu or '-'}/{c.log_prob_micro_batch_size_per_gpu or '-'}"


def _offload(c: Candidate) -> str:
    what = [n for n, on in (("params", c.param_offload), ("optim", c.optimizer_offload)) if on]
    return "offload:" + "+".join(what) if what else "no-offload"


# Knob -> its token; a token is shown when it differs from the reference's. In Candidate's field order.
_TOKENS: tuple[Callable[[Candidate], str], ...] = (
    lambda c: ("sp" if c.sequence_parallel else "no-sp") if c.tp > 1 else "",
    lambda c: f"etp{c.etp_or_tp}" if c.ep > 1 else "",
    _recompute,
    _batching,
    lambda c: f"util{c.gpu_memory_utilization:g}",
    lambda c: f"mnbt{_k(c.max_num_batched_tokens)}",
    _offload,
    lambda c: "" if c.ref_param_offload is None else ("ref:offload" if c.ref_param_offload else "ref:on-gpu"),
    lambda c: "fused" if c.use_fused_kernels else "no-fused",
    lambda c: f"cpu-adam{c.optimizer_offload_fraction or 0:g}" if c.optimizer_cpu_offload else "gpu-adam",
)


def label(params: Mapping[str, Any] | Candidate, reference: Candidate | None) -> str:
    """`tp2pp2 rtp4 rc:full:u1 util0.7`: layout, rollout TP, then the knobs that differ from `reference`."""
    return _label(params, _ref_tokens(reference))


def _ref_tokens(reference: Candidate | None) -> tuple[str | None, ...]:
    return tuple(token(reference) if reference is not None else None for token in _TOKENS)


def _label(params: Mapping[str, Any] | Candidate, ref: tuple[str | None, ...]) -> str:
    if not params:  # a trial whose tuner stopped before it chose a configuration
        return "-"
    try:
        c = params if isinstance(params, Candidate) else Candidate(**params)
    except TypeError:  # a row written by another version of autotune
        return "?"
    parts = [parallel(c), f"rtp{c.rollout_tp}"]
    for token, theirs in zip(_TOKENS, ref, strict=True):
        mine = token(c)
        if mine and mine != theirs:
            parts.append(mine)
    return " ".join(parts)


def provenance(simulated: bool, backend: str) -> str:
    """How a trial's number was obtained: "simulated" (the models), "replayed" (looked up in a table of earlier
    measurements: nothing ran now) or "measured" (run now). Every view words its throughput with it."""
    if simulated:
        return "simulated"
    return "replayed" if backend == "replay" else "measured"


def study_reference(study: StudyRow | Setup | None) -> Candidate | None:
    """The reference of a study's labels (verl's example configuration for its job and space); None if unreadable."""
    if study is None:
        return None
    try:
        setup = study if isinstance(study, Setup) else setup_from_row(study)
        return setup.stock
    except (TypeError, ValueError, KeyError):
        return None


class Labeller:
    """Labels of one study, cached by configuration (a 10,000-trial study holds far fewer distinct ones)."""

    def __init__(self, reference: Candidate | None):
        self.reference = reference
        self._ref = _ref_tokens(reference)
        self._cache: dict[str, str] = {}

    def __call__(self, params: Mapping[str, Any], key: str | None = None) -> str:
        if key is None:
            return _label(params, self._ref)
        got = self._cache.get(key)
        if got is None:
            got = self._cache[key] = _label(params, self._ref)
        return got


def first_launch_words(setup: Setup, first: Pick, top: Pick) -> str:
    """Why the first launch is not the model's fastest setting, in the words `autotune best` uses for a passed-over
    trial."""
    label = Labeller(setup.stock)
    verdict = (setup.memory_record(setup.evaluate(top.candidate)) or {}).get("verdict") or "not safe"
    return (f"first launch: {label(first.candidate.applied_params())}, not the model's fastest "
            f"{label(top.candidate.applied_params())}, predicted {(top.throughput / first.throughput - 1) * 100:.1f}% "
            f"faster: its memory is not safe ({verdict}), and until this study has measured a trial it launches a "
            f"safe setting first (after that, a faster one that is not safe goes behind a safe one only within the "
            f"model's error of it, {SAFE_TOLERANCE:.0%})")
