"""The README's paragraph on what the model charges states the fitted constants as the code has them.

A refit (`benchmarks.calibration`) moves a constant in `_constants.py`; the README's sentence about it is prose, so
it is checked here: every value the paragraph names, formatted as the README writes it, from the constant itself.
"""

from __future__ import annotations

import re

import pytest

from autotune.estimate.throughput import DEFAULT_EFFICIENCY as E
from tests.conftest import REPO

README = " ".join((REPO / "README.md").read_text().split())
START = "What the model charges beyond FLOPs and bytes"


def paragraph() -> str:
    i = README.index(START)
    return README[i:i + 6000]


STATED = {
    "logprob_pass_s": f"({E.logprob_pass_s:.2f} s a log-prob pass",
    "logprob_micro_batch_s": f"{E.logprob_micro_batch_s:.3f} s each of its micro-batches",
    "update_pass_s": f"{E.update_pass_s:.2f} s an update",
    "micro_batch_of_one_s": f"{E.micro_batch_of_one_s:.3f} s per update micro-batch of one sequence",
    "small_micro_batch_layer_s": f"({E.small_micro_batch_layer_s * 1e3:.1f} ms a layer of a pipeline stage",
    "small_budget_micro_batch_layer_s": f"{E.small_budget_micro_batch_layer_s * 1e3:.1f} ms under a dynamic budget",
    "unfused_logit_ps": f"{E.unfused_logit_ps:.1f} ps a logit in a log-prob pass without fused kernels",
    "selective_checkpoint_s": f"{E.selective_checkpoint_s * 1e3:.1f} ms a layer and micro-batch",
    "decode_step_overhead": (f"({E.decode_step_overhead('h100', False) * 1e3:.1f} ms on the H100s, "
                             f"{E.decode_step_overhead('h200', False) * 1e3:.1f} ms on the H200s"),
    "cpu_adam_params_per_s": f"({E.cpu_adam_params_per_s / 1e8:.1f}e8 parameters a second",
    "gemm efficiency": f"{E.forward_gemm:.2f} of the bf16 peak forward ({E.train_gemm:.2f} forward and backward)",
    "tokens_half": f"t_half {E.tokens_half:,.0f} tokens for a layer of {E.tokens_half_layer_params / 1e6:.1f}M",
}


@pytest.mark.parametrize("name", sorted(STATED))
def test_the_readme_states_the_constant_the_model_uses(name: str) -> None:
    text = paragraph()
    assert STATED[name] in text, (
        f"README's '{START}' paragraph does not say {STATED[name]!r} ({name} as the code has it): "
        f"it says {_nearest(text, STATED[name])!r}; write the constant's value there")


def _nearest(text: str, want: str) -> str:
    """The README's words around where the expected phrase's unit and words are, for the failure message."""
    tail = re.sub(r"^[(]?[\d.,e]+\s*", "", want)[:24]
    i = text.find(tail)
    return text[max(0, i - 20):i + len(tail)] if i >= 0 else "(not found)"
