"""The user's training job: verl override keys and values, as in their launch script.

autotune reads the shape of the workload from these keys and keeps every key it does not tune exactly as given.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from autotune import verl
from autotune.candidate import Candidate
from autotune.verl import launch_script
from autotune.verl.keys import flatten


class JobError(ValueError):
    """A job file that cannot be read or describes an impossible job."""


# A typical GRPO job, like the measured tables in verl_megatron_practice (2k prompt, 8k response, n 16).
DEFAULT_JOB: dict[str, Any] = {
    verl.MAX_PROMPT_LENGTH: 2048,
    verl.MAX_RESPONSE_LENGTH: 8192,
    verl.TRAIN_BATCH_SIZE: 512,
    verl.PPO_MINI_BATCH_SIZE: 32,
    verl.ROLLOUT_N: 16,
    verl.USE_KL_LOSS: False,
}


def yaml_error(e: yaml.YAMLError) -> str:
    """PyYAML's error on one line: where, and what."""
    mark = getattr(e, "problem_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    what = " ".join(str(getattr(e, "problem", None) or e).split())
    context = getattr(e, "context", None)
    return f"{where}{what}" + (f" ({context})" if context else "")


@dataclass(frozen=True)
class Job:
    """verl overrides (key -> value) that fix the training; `source` says where they came from."""

    overrides: tuple[tuple[str, Any], ...]
    source: str = "default"
    # What the node's software needs where the job sets nothing (`autotune doctor`'s findings, e.g. unfused
    # attention where cuDNN fails): read by `get` after the job's own keys, so the estimates see what the trials
    # will run with; not the user's job, so neither launched as theirs nor part of the fingerprint.
    node_defaults: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any], source: str = "<mapping>") -> Job:
        # Keys the user leaves out take the typical job's values, so a job may set only what differs.
        merged = {**DEFAULT_JOB, **flatten(mapping)}
        job = cls(tuple(sorted(merged.items(), key=lambda kv: kv[0])), source)
        job.validate()
        return job

    @classmethod
    def default(cls) -> Job:
        return cls.from_mapping({}, "default")

    @classmethod
    def from_file(cls, path: str | Path) -> Job:
        p = Path(path)
        if p.is_dir():
            raise JobError(f"--job {p} is a directory; pass a YAML file of verl overrides or your verl launch "
                           "script")
        if not p.is_file():
            raise JobError(f"job file {p} does not exist")
        if launch_script.is_launch_script(p):  # a verl launch script (bash) instead of YAML
            return cls.from_launch_script(launch_script.read_script(p))
        try:
            text = p.read_text()
        except (OSError, UnicodeDecodeError) as e:
            raise JobError(f"{p}: cannot read the job file ({e}); pass a readable YAML file or verl launch "
                           "script") from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as e:  # PyYAML names the stream `<unicode string>` over several lines: one, the file's
            raise JobError(f"{p}: not valid YAML: {yaml_error(e)}; a job file maps verl override keys to "
                           "values") from None
        if data is None:
            data = {}
        if not isinstance(data, Mapping):
            raise JobError(f"{p}: a job file is a mapping of verl override keys to values, got {type(data).__name__}")
        return cls.from_mapping(data, str(p))

    @classmethod
    def from_launch_script(cls, script: launch_script.LaunchScript) -> Job:
        try:
            return cls.from_mapping(script.job_mapping(), script.path)
        except JobError:
            raise
        except (TypeError, ValueError) as e:
            raise JobError(f"{script.path}: {e}") from None

    @property
    def mapping(self) -> dict[str, Any]:
        return dict(self._lookup)

    @functools.cached_property
    def _lookup(self) -> dict[str, Any]:
        # Built once: estimates read the job's keys thousands of times while a space is ranked.
        return dict(self.overrides)

    def get(self, key: str, default: Any = None) -> Any:
        lookup = self._lookup
        if key in lookup:
            return lookup[key]
        if "+" + key in lookup:
            return lookup["+" + key]
        return self._node.get(key, default)

    @functools.cached_property
    def _node(self) -> dict[str, Any]:
        return dict(self.node_defaults)

    def with_node_defaults(self, defaults: Mapping[str, Any]) -> Job:
        """This job with the node's defaults for keys it does not set (`node_defaults`)."""
        mine = self._lookup
        kept = {k: v for k, v in defaults.items() if not any(k2 in mine for k2 in (k, "+" + k, "++" + k))}
        return Job(self.overrides, self.source, tuple(sorted(kept.items())))

    def _int(self, key: str) -> int:
        value = self.get(key, DEFAULT_JOB.get(key))
        try:
            return int(value)
        except (TypeError, ValueError):
            raise JobError(f"{self.source}: {key} must be an integer, got {value!r}") from None

    @functools.cached_property
    def max_prompt_length(self) -> int:
        return self._int(verl.MAX_PROMPT_LENGTH)

    @functools.cached_property
    def max_response_length(self) -> int:
        return self._int(verl.MAX_RESPONSE_LENGTH)

    @functools.cached_property
    def max_seq_len(self) -> int:
        return self.max_prompt_length + self.max_response_length

    @functools.cached_property
    def max_model_len(self) -> int:
        value = self.get(verl.MAX_MODEL_LEN)
        return int(value) if value else self.max_seq_len

    @functools.cached_property
    def train_batch_size(self) -> int:
        return self._int(verl.TRAIN_BATCH_SIZE)

    @functools.cached_property
    def ppo_mini_batch_size(self) -> int:
        return self._int(verl.PPO_MINI_BATCH_SIZE)

    @functools.cached_property
    def rollout_n(self) -> int:
        return self._int(verl.ROLLOUT_N)

    @functools.cached_property
    def ppo_epochs(self) -> int:
        return int(self.get(verl.PPO_EPOCHS, 1) or 1)

    @property
    def optimizer_steps(self) -> float:
        """Optimizer steps a training step: one per PPO mini-batch and epoch."""
        return self.train_batch_size / self.ppo_mini_batch_size * self.ppo_epochs

    @functools.cached_property
    def has_ref_model(self) -> bool:
        """The reference model exists only for a KL loss or a KL penalty in the reward."""
        return _truthy(self.get(verl.USE_KL_LOSS)) or _truthy(self.get(verl.USE_KL_IN_REWARD))

    @functools.cached_property
    def max_num_seqs(self) -> int:
        return int(self.get(verl.MAX_NUM_SEQS, 256) or 256)

    @functools.cached_property
    def enforce_eager(self) -> bool:
        """vLLM runs decode eagerly (no CUDA graphs); verl's default when the job does not say."""
        value = self.get(verl.ENFORCE_EAGER)
        return verl.ENFORCE_EAGER_DEFAULT if value is None else _truthy(value)

    @functools.cached_property
    def sample_poll_s(self) -> float:
        """How often verl's trainer checks for the finished rollout (0.0: it waits on the rollout itself)."""
        value = self.get(verl.USE_V1)
        return verl.SAMPLE_POLL_S if (verl.USE_V1_DEFAULT if value is None else _truthy(value)) else 0.0

    @functools.cached_property
    def rope_fusion(self) -> bool:
        """Whether the job turns on Megatron's fused RoPE kernel; the throughput model counts it only when set."""
        return _truthy(self.get(verl.ROPE_FUSION))

    @functools.cached_property
    def attention_backend(self) -> str:
        """Megatron's attention backend; `unfused` keeps a [sequences, heads, s, s] score matrix per layer."""
        return str(self.get(verl.ATTENTION_BACKEND) or verl.ATTENTION_BACKEND_DEFAULT)

    @functools.cached_property
    def free_cache_engine(self) -> bool:
        """verl's default True: vLLM sleeps (frees its weights and KV cache) outside the rollout."""
        value = self.get(verl.FREE_CACHE_ENGINE)
        return True if value is None else _truthy(value)

    def validate(self) -> None:
        for key in (verl.MAX_PROMPT_LENGTH, verl.MAX_RESPONSE_LENGTH, verl.TRAIN_BATCH_SIZE,
                    verl.PPO_MINI_BATCH_SIZE, verl.ROLLOUT_N):
            if self._int(key) < 1:
                raise JobError(f"{self.source}: {key} must be at least 1")
        if self.train_batch_size < self.ppo_mini_batch_size:
            raise JobError(
                f"{self.source}: {verl.TRAIN_BATCH_SIZE} ({self.train_batch_size}) is smaller than "
                f"{verl.PPO_MINI_BATCH_SIZE} ({self.ppo_mini_batch_size}); verl needs at least one mini-batch"
            )
        if self.train_batch_size % self.ppo_mini_batch_size:
            raise JobError(
                f"{self.source}: {verl.TRAIN_BATCH_SIZE} ({self.train_batch_size}) must be a multiple of "
                f"{verl.PPO_MINI_BATCH_SIZE} ({self.ppo_mini_batch_size})"
            )

    def baseline_params(self) -> dict[str, Any]:
        """Search-space parameters the job sets itself: the user's current configuration."""
        out: dict[str, Any] = {}
        for key, value in self.overrides:
            param = verl.param_for_key(key)
            if param is None:
                continue
            if param == "recompute":
                value = value or "none"
            elif param == "recompute_modules" and isinstance(value, (list, tuple)):
                value = ",".join(value)
            out[param] = value
        return out

    def candidate(self, base: Candidate) -> Candidate:
        """`base` with the job's own settings applied (these are fixed where the space does not tune them)."""
        try:
            return Candidate.from_params(self.baseline_params(), base)
        except (TypeError, ValueError) as e:
            raise JobError(f"{self.source}: {e}") from None

    def with_settings(self, params: Mapping[str, Any]) -> Candidate:
        """A user's own settings (`--set`, `--enqueue`) over the job's, on verl's config defaults: both are applied
        before verl's forced values, so a knob neither sets takes verl's default for the result (sequence parallel
        on once TP > 1), not the value verl forced for the job's own layout (off at TP = 1)."""
        self.candidate(Candidate())  # the job's own settings, checked alone: their errors name the job
        return Candidate.from_params({**self.baseline_params(), **params})

    def fingerprint(self) -> str:
        return hashlib.sha1(json.dumps(self.overrides, sort_keys=True, default=str).encode()).hexdigest()[:8]


def _truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    return bool(value)
