"""How one step's sequences are cut into micro-batches for a candidate: the batching plan.

The memory model needs the largest micro-batch (it bounds the peak); the time model needs the typical one (it
sets GEMM efficiency), the number of micro-batches (pipeline bubble) and the sequences each rollout replica
decodes. Both read one `BatchingPlan`, computed once per candidate at the lengths an estimate assumes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from autotune.candidate import Candidate
from autotune.cluster import Cluster
from autotune.estimate.lengths import Lengths, worst_case
from autotune.job import Job


@dataclass(frozen=True)
class BatchingPlan:
    """Micro-batches of one GRPO step on one GPU, for one candidate at one set of lengths.

    Tokens are per GPU, after context parallelism splits a micro-batch. "Largest" is what memory must hold:
    with dynamic batching the token budget (verl packs sequences up to it), without it micro_batch_size
    sequences, unpadded, the longest of the step among them. "Typical" is what the time model sees: the budget,
    or micro_batch_size sequences of mean length.
    """

    data_parallel: int  # actor data-parallel ranks: world / (TP x PP x CP)
    update_tokens: float  # largest update micro-batch
    log_prob_tokens: float  # largest log-prob micro-batch
    update_tokens_typical: float
    log_prob_tokens_typical: float
    update_micro_batches: int  # per mini-batch on one data-parallel rank (what the pipeline schedule sees)
    log_prob_micro_batches: int  # per step on one data-parallel rank
    rollout_replicas: float  # vLLM replicas of rollout_tp GPUs
    sequences_per_replica: float  # sequences one replica generates per step
    bound: str  # what bounds a micro-batch, in words


def micro_batch_bound(c: Candidate) -> str:
    """What bounds a training micro-batch, in words (dynamic batching's budget, or micro-batch size x length)."""
    if c.use_dynamic_bsz:
        return (f"dynamic batching: the token budget (ppo_max_token_len_per_gpu={c.ppo_max_token_len_per_gpu}, "
                f"log_prob_max_token_len_per_gpu={c.log_prob_max_token_len_per_gpu}) bounds a micro-batch "
                "whatever the lengths")
    return (f"no dynamic batching: ppo_micro_batch_size_per_gpu={c.ppo_micro_batch_size_per_gpu or 1} x sequence "
            "length bounds a micro-batch, so it grows with the responses")


def data_parallel(cl: Cluster, c: Candidate) -> int:
    return max(1, cl.world_size // (c.tp * c.pp * c.cp))


def update_micro_batches(job: Job, cl: Cluster, c: Candidate, mean_seq_len: float) -> int:
    """Micro-batches per mini-batch on one data-parallel rank, sequences of `mean_seq_len` tokens on average."""
    samples = job.ppo_mini_batch_size * job.rollout_n / data_parallel(cl, c)
    if c.use_dynamic_bsz:
        return max(1, math.ceil(samples * mean_seq_len / (c.ppo_max_token_len_per_gpu * c.cp)))
    return max(1, math.ceil(samples / (c.ppo_micro_batch_size_per_gpu or 1)))


def plan_batching(job: Job, cl: Cluster, c: Candidate, lengths: Lengths | None = None) -> BatchingPlan:
    """The plan at `lengths` (default: the worst case the job allows)."""
    ln = lengths or worst_case(job)
    dp = data_parallel(cl, c)
    mean, longest = ln.seq_mean, ln.seq_max
    if c.use_dynamic_bsz:
        upd, lp = float(c.ppo_max_token_len_per_gpu), float(c.log_prob_max_token_len_per_gpu)
        upd_seq = c.ppo_max_token_len_per_gpu * c.cp  # a micro-batch's tokens over its CP group
        lp_seq = c.log_prob_max_token_len_per_gpu * c.cp
    else:
        mbs, lp_mbs = c.ppo_micro_batch_size_per_gpu or 1, c.log_prob_micro_batch_size_per_gpu or 1
        upd, lp = ((mbs - 1) * mean + longest) / c.cp, ((lp_mbs - 1) * mean + longest) / c.cp
        upd_seq, lp_seq = mbs * mean, lp_mbs * mean
    seqs = job.train_batch_size * job.rollout_n
    replicas = cl.world_size / c.rollout_tp
    return BatchingPlan(
        data_parallel=dp,
        update_tokens=upd,
        log_prob_tokens=lp,
        update_tokens_typical=upd_seq / c.cp,
        log_prob_tokens_typical=lp_seq / c.cp,
        update_micro_batches=update_micro_batches(job, cl, c, mean),
        log_prob_micro_batches=max(1, math.ceil(seqs / dp * mean / lp_seq)),
        rollout_replicas=replicas,
        sequences_per_replica=seqs / replicas,
        bound=micro_batch_bound(c),
    )
