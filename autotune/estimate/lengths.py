"""Sequence lengths a memory verdict assumes: at the measured step, and the worst case the job allows.

Real GRPO runs start with responses far shorter than `max_response_length` and grow as training goes on, so a
configuration can run at step 3 and run out of memory later. Where the lengths come from, best first: the
measured `response_length/*` and `prompt_length/*` of earlier trials of the study (verl's metrics), a
`--response-length` estimate, the prompt lengths of the job's parquet data; what nothing tells is taken at the
job's maximum. The worst case is always every sequence at `max_prompt_length + max_response_length`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from autotune import verl
from autotune.job import Job

# An estimate N of the mean response: the longest response of the step is taken as this many times N (capped by
# the job's maximum). GRPO's response lengths are skewed: the longest of a batch is a few times the mean.
LONGEST_OVER_MEAN = 2.0
CHARS_PER_TOKEN = 4.0  # prompt text without a tokenizer: an approximation, said so in the source
RESPONSES_UNKNOWN = "no measurement or --response-length estimate"  # in the sources of such lengths
DATA_PROMPTS = "prompt lengths of"  # how the source of prompt lengths read from the job's data begins


class LengthsError(ValueError):
    """A length estimate that cannot be right (negative, longer than the job allows)."""


@dataclass(frozen=True)
class Lengths:
    """Prompt and response lengths (tokens) of one step's sequences: mean and longest."""

    prompt_mean: float
    prompt_max: float
    response_mean: float
    response_max: float
    sources: tuple[str, ...] = ()
    worst_case: bool = False
    # Which lengths come from something known (the job's data, a measurement, --response-length) rather than the
    # job's maximum taken for want of better: the time model uses the known ones and its typical shares otherwise.
    prompt_known: bool = False
    response_known: bool = False

    @property
    def seq_mean(self) -> float:
        return self.prompt_mean + self.response_mean

    @property
    def seq_max(self) -> float:
        return self.prompt_max + self.response_max

    def as_dict(self) -> dict[str, Any]:
        return {
            "prompt_mean": round(self.prompt_mean, 1), "prompt_max": round(self.prompt_max, 1),
            "response_mean": round(self.response_mean, 1), "response_max": round(self.response_max, 1),
            "worst_case": self.worst_case, "sources": list(self.sources),
        }


def worst_case(job: Job) -> Lengths:
    """Every sequence as long as the job allows: the late-training case a short trial cannot see."""
    p, r = float(job.max_prompt_length), float(job.max_response_length)
    return Lengths(p, p, r, r, (f"worst case the job allows: {verl.MAX_PROMPT_LENGTH}={job.max_prompt_length}, "
                                f"{verl.MAX_RESPONSE_LENGTH}={job.max_response_length}",), worst_case=True)


def at_step(
    job: Job,
    response_length: float | None = None,
    prompts: tuple[float, float, str] | None = None,
    measured: Iterable[Mapping[str, Any]] = (),
) -> Lengths:
    """Lengths at the measured step from what is known (see the module docstring); the rest at the job's maximum.

    `prompts`: (mean, max, source) of the job's data; `measured`: step metrics of earlier trials at the measured
    step (verl's metric names); `response_length`: the user's estimate of the mean response.
    """
    pmax_job, rmax_job = float(job.max_prompt_length), float(job.max_response_length)
    if response_length is not None and not 0 < response_length <= rmax_job:
        raise LengthsError(f"--response-length {response_length:g} must be between 1 and "
                           f"{verl.MAX_RESPONSE_LENGTH} ({job.max_response_length})")
    out = worst_case(job)
    sources: list[str] = []
    rows = [m for m in measured if m.get(verl.M_RESPONSE_LENGTH_MEAN) is not None]
    if prompts is not None:
        pm, px, src = prompts
        out = replace(out, prompt_mean=min(pm, pmax_job), prompt_max=min(px, pmax_job), prompt_known=True)
        sources.append(src)
    if rows:
        def top(key: str, fallback: float) -> float:
            vals = [float(r[key]) for r in rows if r.get(key) is not None]
            return max(vals) if vals else fallback

        out = replace(
            out,
            response_mean=min(top(verl.M_RESPONSE_LENGTH_MEAN, rmax_job), rmax_job),
            response_max=min(top(verl.M_RESPONSE_LENGTH_MAX, rmax_job), rmax_job),
            prompt_mean=min(top(verl.M_PROMPT_LENGTH_MEAN, out.prompt_mean), pmax_job),
            prompt_max=min(top(verl.M_PROMPT_LENGTH_MAX, out.prompt_max), pmax_job),
            response_known=True,
            prompt_known=out.prompt_known or any(r.get(verl.M_PROMPT_LENGTH_MEAN) is not None for r in rows),
        )
        sources.append(f"measured {verl.M_RESPONSE_LENGTH_MEAN} / max of {len(rows)} earlier trial(s) at the "
                       "measured step (the largest)")
    elif response_length is not None:
        out = replace(out, response_mean=float(response_length),
                      response_max=min(rmax_job, LONGEST_OVER_MEAN * response_length), response_known=True)
        sources.append(f"--response-length {response_length:g} (mean; longest taken as "
                       f"{LONGEST_OVER_MEAN:g}x, at most {verl.MAX_RESPONSE_LENGTH})")
    else:
        sources.append(f"responses at {verl.MAX_RESPONSE_LENGTH} ({job.max_response_length}): {RESPONSES_UNKNOWN}")
    if prompts is None and not rows:
        sources.append(f"prompts at {verl.MAX_PROMPT_LENGTH} ({job.max_prompt_length}): data not readable here")
    worst = out.seq_mean >= pmax_job + rmax_job and out.seq_max >= pmax_job + rmax_job
    return replace(out, sources=tuple(sources), worst_case=worst)


def responses_guessed(record: Mapping[str, Any] | None) -> bool:
    """Whether a trial row's memory record (`predicted_memory`) was estimated before anything told the responses'
    length: the time model then took them at its typical share of the cap (throughput.Workload), so the prediction
    counted other tokens per step than the measurement and than predictions made at measured lengths."""
    lengths = (record or {}).get("lengths") or {}
    return bool(lengths.get("worst_case")) or any(RESPONSES_UNKNOWN in str(s) for s in lengths.get("sources") or ())


def prompt_lengths_from_data(job: Job, max_rows: int = 2000) -> tuple[float, float, str] | None:
    """(mean, max, source) prompt tokens of the job's parquet train files, or None where they cannot be read.

    Tokens are counted with the model's own tokenizer and chat template when `actor_rollout_ref.model.path` is
    a local directory holding one, else approximated at CHARS_PER_TOKEN characters a token (said in the source).
    """
    files = job.get(verl.TRAIN_FILES)
    if isinstance(files, str):
        files = [files]
    paths = [Path(os.path.expandvars(os.path.expanduser(str(f)))) for f in files or []]
    paths = [p for p in paths if p.suffix == ".parquet" and p.is_file()]
    if not paths:
        return None
    try:
        import pyarrow.parquet as pq
    except ImportError:
        return None
    key = str(job.get(verl.PROMPT_KEY, "prompt") or "prompt")
    prompts: list[Any] = []
    for p in paths:
        try:
            table = pq.read_table(p, columns=[key])
        except Exception:  # a missing column or a file pyarrow cannot read: no data-based lengths
            return None
        prompts += table.column(key).to_pylist()[: max_rows - len(prompts)]
        if len(prompts) >= max_rows:
            break
    if not prompts:
        return None
    counter, how = _token_counter(job)
    lengths = [counter(x) for x in prompts]
    names = ", ".join(p.name for p in paths)
    return (sum(lengths) / len(lengths), float(max(lengths)),
            f"{DATA_PROMPTS} {len(lengths)} rows of {names} ({how})")


def _token_counter(job: Job) -> tuple[Any, str]:
    path = job.get(verl.MODEL_PATH)
    if path and Path(str(path)).is_dir():
        try:
            from transformers import AutoTokenizer

            tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)

            def count(x: Any) -> float:
                if isinstance(x, list) and getattr(tok, "chat_template", None):
                    ids = tok.apply_chat_template(x, add_generation_prompt=True, tokenize=True)
                    # transformers 5 returns a BatchEncoding (whose len() is its 2 keys), 4.x a list of ids
                    return float(len(ids["input_ids"] if isinstance(ids, Mapping) else ids))
                return float(len(tok(_text(x))["input_ids"]))

            return count, f"tokenized with {path}"
        except Exception:  # no tokenizer files there: fall back to the approximation below
            pass
    return (lambda x: len(_text(x)) / CHARS_PER_TOKEN + (8 * len(x) if isinstance(x, list) else 0),
            f"approximated at {CHARS_PER_TOKEN:g} characters a token, no tokenizer")


def _text(x: Any) -> str:
    """A prompt as text: chat messages ({role, content}) joined, anything else as str."""
    if isinstance(x, list):
        return "\n".join(str(m.get("content", "")) if isinstance(m, Mapping) else str(m) for m in x)
    return str(x)
