"""A candidate: one full setting of every knob the tuner may turn, as a frozen value."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, fields, replace
from typing import Any

from autotune import verl

RECOMPUTE_CHOICES = ("none", "selective", "full")


@dataclass(frozen=True)
class Candidate:
    """Defaults are verl 0.9.1's config defaults (the `stock` candidate below fills what verl leaves null)."""

    tp: int = 1
    pp: int = 1
    vpp: int | None = None
    cp: int = 1
    ep: int = 1
    etp: int | None = None
    sequence_parallel: bool = True
    recompute: str = "none"  # none | selective | full (verl's recompute_granularity, null for none)
    recompute_method: str | None = None  # uniform | block, with full
    recompute_num_layers: int | None = None
    recompute_modules: str | None = "core_attn"  # comma-separated, with selective
    use_dynamic_bsz: bool = False
    ppo_max_token_len_per_gpu: int | None = 16384  # with use_dynamic_bsz
    log_prob_max_token_len_per_gpu: int | None = 16384
    ppo_micro_batch_size_per_gpu: int | None = None
    log_prob_micro_batch_size_per_gpu: int | None = None
    rollout_tp: int = 2
    gpu_memory_utilization: float = 0.5
    max_num_batched_tokens: int = 8192
    param_offload: bool = False
    optimizer_offload: bool = False
    use_fused_kernels: bool = False
    # The reference model's offload (only with a KL loss or KL reward); None: verl's default, the actor's
    # param_offload (trainer/config/ref/megatron_ref.yaml).
    ref_param_offload: bool | None = None
    # Megatron's CPU optimizer (megatron-core OptimizerConfig.optimizer_cpu_offload, verl's default off): a share of
    # the optimizer's fp32 master and Adam moments lives on the CPU and steps there. The share defaults to all of it
    # when on (Megatron's own 0.0 would offload nothing; verl_megatron_practice's large runs use 1.0); null when off.
    optimizer_cpu_offload: bool = False
    optimizer_offload_fraction: float | None = None

    @classmethod
    def param_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    @classmethod
    def from_params(cls, params: dict[str, Any], base: Candidate | None = None) -> Candidate:
        unknown = set(params) - set(cls.param_names())
        if unknown:
            raise ValueError(f"unknown parameter(s) {sorted(unknown)}; known: {', '.join(cls.param_names())}")
        return replace(base or cls(), **params).normalized()

    def normalized(self) -> Candidate:
        """The form verl actually runs: settings that verl ignores or forces are made explicit."""
        c = self
        if c.tp == 1 and c.sequence_parallel:
            c = replace(c, sequence_parallel=False)  # verl forces it off with TP=1
        if c.pp == 1 and c.vpp is not None:
            c = replace(c, vpp=None)
        if c.recompute != "full":
            c = replace(c, recompute_method=None, recompute_num_layers=None)
        elif c.recompute_method is None:
            c = replace(c, recompute_method="uniform", recompute_num_layers=c.recompute_num_layers or 1)
        if c.recompute == "selective" and c.recompute_modules is None:
            c = replace(c, recompute_modules="core_attn")
        if not c.optimizer_cpu_offload and c.optimizer_offload_fraction is not None:
            c = replace(c, optimizer_offload_fraction=None)
        elif c.optimizer_cpu_offload and c.optimizer_offload_fraction is None:
            c = replace(c, optimizer_offload_fraction=1.0)
        if c.use_dynamic_bsz:
            c = replace(c, ppo_micro_batch_size_per_gpu=None, log_prob_micro_batch_size_per_gpu=None,
                        ppo_max_token_len_per_gpu=c.ppo_max_token_len_per_gpu or 16384,
                        log_prob_max_token_len_per_gpu=c.log_prob_max_token_len_per_gpu or 16384)
        return c

    def params(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _NAMES}  # every field is a plain value: asdict's copy is moot

    def applied_params(self) -> dict[str, Any]:
        """params() with the values verl ignores for this candidate made null (recompute modules without
        selective recompute, token budgets without dynamic batching): what trials store, show and compare."""
        p = self.params()
        if self.recompute != "selective":
            p["recompute_modules"] = None
        if not self.use_dynamic_bsz:
            p["ppo_max_token_len_per_gpu"] = p["log_prob_max_token_len_per_gpu"] = None
        return p

    def key(self) -> str:
        """A stable id of the configuration as verl runs it (for duplicates and joins across tables)."""
        params = self.applied_params()
        if params["ref_param_offload"] is None:  # ids from before the reference model's knob stay the same
            del params["ref_param_offload"]
        if not params["optimizer_cpu_offload"]:  # ... and from before the CPU optimizer's
            del params["optimizer_cpu_offload"], params["optimizer_offload_fraction"]
        return hashlib.sha1(json.dumps(params, sort_keys=True).encode()).hexdigest()[:12]

    @property
    def ref_offloaded(self) -> bool:
        """Whether verl keeps the reference model's weights on the CPU outside its log-prob pass."""
        return self.param_offload if self.ref_param_offload is None else self.ref_param_offload

    @property
    def vpp_or_1(self) -> int:
        return self.vpp or 1

    @property
    def etp_or_tp(self) -> int:
        return self.etp if self.etp is not None else self.tp

    def layout(self) -> str:
        """Short human label, in the measured tables' style: tp4pp2vpp2cp2 / rollout tp."""
        s = f"tp{self.tp}"
        if self.pp > 1:
            s += f"pp{self.pp}"
        if self.vpp:
            s += f"vpp{self.vpp}"
        if self.cp > 1:
            s += f"cp{self.cp}"
        if self.ep > 1:
            s += f"ep{self.ep}"
        return f"{s} | rollout tp{self.rollout_tp}"

    def verl_overrides(self) -> dict[str, Any]:
        """verl key -> value for every parameter, in verl's own value forms."""
        out: dict[str, Any] = {}
        for name, value in self.params().items():
            if name == "recompute":
                value = None if value == "none" else value
            elif name == "recompute_modules":
                if self.recompute != "selective":
                    continue
                value = [m.strip() for m in value.split(",") if m.strip()]
            elif name in ("ppo_max_token_len_per_gpu", "log_prob_max_token_len_per_gpu") and not self.use_dynamic_bsz:
                continue
            elif name == "ref_param_offload" and value is None:
                continue  # verl's own default (the actor's param_offload) applies
            elif name in ("optimizer_cpu_offload", "optimizer_offload_fraction") and not self.optimizer_cpu_offload:
                continue  # verl's default: its override_optimizer_config stays empty
            for key in verl.keys_for(name):
                out[key] = value
            if value is True:
                out.update(verl.IMPLIED_KEYS.get(name, {}))
        return out


_NAMES = Candidate.param_names()

# verl's own Megatron GRPO example (examples/grpo_trainer/run_qwen2-7b_math_megatron.sh in verl) on top of the
# config defaults: what a user gets by starting from verl's documentation.
# How every view (CLI, report, dashboard, README) names the two, which are not the same thing:
STOCK_NAME = "verl's example configuration"  # STOCK: the settings of verl's Megatron GRPO example script
DEFAULTS_NAME = "verl's config defaults"  # Candidate(): what verl runs for a key that the job does not set
STOCK = Candidate(
    tp=2,
    pp=2,
    rollout_tp=2,
    gpu_memory_utilization=0.6,
    ppo_micro_batch_size_per_gpu=4,
    log_prob_micro_batch_size_per_gpu=4,
    use_fused_kernels=True,
).normalized()
# verl's single-node MoE example (examples/grpo_trainer/run_qwen3moe-30b_megatron_96gb.sh, "tested in NNODES=1~4 *
# 96G H20"): experts spread over the node, everything offloaded, the optimizer on the CPU; its token budgets are the
# job's prompt + response (Setup.stock fills them in). The dense example's TP 2 / PP 2 / EP 1 does not fit a 30B MoE.
STOCK_MOE = Candidate(
    ep=8,
    etp=1,
    rollout_tp=4,
    use_dynamic_bsz=True,
    gpu_memory_utilization=0.7,
    param_offload=True,
    optimizer_offload=True,
    optimizer_cpu_offload=True,
    optimizer_offload_fraction=1.0,
    use_fused_kernels=False,
).normalized()
