"""The study's setup: what a study is for (model, cluster, job, space, measured step, objective, known lengths).

Its fingerprint decides whether two runs share a study (a different one is refused with StudyMismatchError); it is
rebuilt from the database alone (setup_from_row) for export, labels and the dashboard.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from autotune.candidate import STOCK, STOCK_MOE, Candidate
from autotune.cluster import Cluster, GPUType
from autotune.estimate import DEFAULT_CONSTANTS, Evaluation, ModelConstants, evaluate, memory_record
from autotune.estimate.correction import NO_CORRECTION, Correction
from autotune.estimate.lengths import Lengths, at_step
from autotune.job import Job
from autotune.model import ModelArch
from autotune.search.space import SearchSpace, parse_space, space_context
from autotune.store.schema import StudyRow

# What verl requires beside use_dynamic_bsz=false (estimate/constraints.py batch_divisibility).
STOCK_MICRO_BATCHES = ("ppo_micro_batch_size_per_gpu", "log_prob_micro_batch_size_per_gpu")
STOCK_BUDGETS = ("ppo_max_token_len_per_gpu", "log_prob_max_token_len_per_gpu")


class StudyMismatchError(ValueError):
    """A study name reused for a different model, cluster, job or space."""


@dataclass(frozen=True)
class Setup:
    """What a study is for. Two runs with equal setups share a study; unequal ones are refused."""

    model: ModelArch
    cluster: Cluster
    job: Job
    space: SearchSpace
    measure_step: int = 3
    objective: str = "step"  # "step": a whole GRPO step; "train": the training phase only (estimate.OBJECTIVES)
    # What is known of the sequence lengths at the measured step (none: the worst case the job allows).
    response_length: float | None = None  # --response-length: the user's estimate of the mean response
    prompt_lengths: tuple[float, float, str] | None = None  # (mean, max, source) from the job's data
    measured_lengths: tuple[tuple[tuple[str, float], ...], ...] = ()  # earlier trials' length metrics
    # What the study has learned of the model's errors (autotune/search/learning.py); identity until a trial is
    # measured.
    correction: Correction = NO_CORRECTION
    constants: ModelConstants = DEFAULT_CONSTANTS  # the models' constants (benchmarks perturb them)

    @property
    def lengths(self) -> Lengths | None:
        """The lengths a verdict at the measured step assumes; None: the worst case the job allows."""
        if self.response_length is None and self.prompt_lengths is None and not self.measured_lengths:
            return None
        return at_step(self.job, self.response_length, self.prompt_lengths, [dict(m) for m in self.measured_lengths])

    def length_inputs(self) -> dict[str, Any]:
        """What the study knows of the lengths before measuring, as its row keeps it (StudyRow.lengths)."""
        return {"response_length": self.response_length,
                "prompt_lengths": list(self.prompt_lengths) if self.prompt_lengths else None}

    @property
    def context(self) -> dict[str, Any]:
        return space_context(self.model.is_moe, self.cluster.world_size, self.cluster.gpus_per_node,
                             self.job.has_ref_model)

    @property
    def base(self) -> Candidate:
        """What an untuned dimension is: the job's own setting, else verl's default."""
        return self.job.candidate(Candidate())

    @property
    def stock(self) -> Candidate:
        """verl's stock values for what the space tunes (its MoE example for a MoE model); the job's fixed keys
        stay as the job sets them."""
        example = STOCK_MOE if self.model.is_moe else STOCK
        stock = {k: v for k, v in example.params().items() if k in self.space.names}
        if example is STOCK_MOE:  # its budgets hold one sequence of the job's longest: the space's nearest above
            for k in STOCK_BUDGETS:
                stock[k] = self._at_least(k, self.job.max_seq_len)
        if stock.get("use_dynamic_bsz") is False:
            # Without dynamic batching verl needs micro-batch sizes: the example's come with its batching mode where
            # neither the space (the MoE space tunes none) nor the job gives them, or the example breaks a rule.
            stock |= {k: getattr(STOCK, k) for k in STOCK_MICRO_BATCHES if getattr(self.base, k) is None}
        return Candidate.from_params({**self.base.params(), **stock})

    def _at_least(self, name: str, tokens: int) -> int:
        """The smallest of the space's choices for `name` that holds `tokens` (its largest if none does; the
        value itself where the space does not tune it)."""
        dim = next((d for d in self.space.dimensions if d.name == name), None)
        if dim is None:
            return tokens
        return min((c for c in dim.choices if c >= tokens), default=max(dim.choices))

    def fingerprint(self) -> dict[str, str]:
        def h(obj: Any) -> str:
            return hashlib.sha1(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:10]

        fp = {
            "model": f"{self.model.name}:{h(dataclasses.asdict(self.model))}",
            "cluster": f"{self.cluster.describe()}:{h(dataclasses.asdict(self.cluster.gpu))}",
            "job": self.job.fingerprint(),
            "space": f"{self.space.name}:{self.space.text_hash}",
            "measure_step": str(self.measure_step),
        }
        if self.objective != "step":  # studies of whole steps keep the fingerprint they always had
            fp["objective"] = self.objective
        return fp

    def study_row(self, name: str, backend: str, simulated: bool, space_text: str) -> StudyRow:
        """The study's row in autotune's table (what export and the dashboard rebuild the setup from)."""
        return StudyRow(
            name=name, model_name=self.model.name, model=dataclasses.asdict(self.model),
            cluster=dataclasses.asdict(self.cluster), job=[list(kv) for kv in self.job.overrides],
            job_source=self.job.source, space_name=self.space.name, space_text=space_text, backend=backend,
            simulated=simulated, fingerprint=self.fingerprint(), measure_step=self.measure_step,
            lengths=self.length_inputs(),
        )

    def default_study_name(self) -> str:
        return f"{self.model.name}-{self.cluster.describe()}-{self.job.fingerprint()}"

    def evaluate(self, cand: Candidate) -> Evaluation:
        """The model's verdict on a candidate, with the study's learned correction."""
        return self.correction.apply(self.evaluate_uncorrected(cand), self.job)

    def evaluate_uncorrected(self, cand: Candidate) -> Evaluation:
        return evaluate(self.model, self.cluster, self.job, cand, self.objective, self.lengths, self.constants)

    def memory_record(self, ev: Evaluation) -> dict[str, Any] | None:
        """What a trial row keeps of the memory estimate: per-moment breakdown, both verdicts, lengths, in words."""
        return memory_record(self.model, self.cluster, self.job, ev, self.measure_step, self.lengths)


def setup_from_row(row: StudyRow) -> Setup:
    """Rebuild a study's setup from the database alone (export and dashboard need nothing else)."""
    cl = dict(row.cluster)
    cluster = Cluster(GPUType(**cl.pop("gpu")), **cl)
    job = Job(tuple((k, v) for k, v in row.job), row.job_source)
    known = row.lengths or {}
    prompts = known.get("prompt_lengths")
    return Setup(ModelArch(**row.model), cluster, job, parse_space(row.space_text, row.space_name), row.measure_step,
                 objective=(row.fingerprint or {}).get("objective", "step"),
                 response_length=known.get("response_length"),
                 prompt_lengths=(float(prompts[0]), float(prompts[1]), str(prompts[2])) if prompts else None)

