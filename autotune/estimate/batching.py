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
    with dynamic batching verl's balanced partition of a pass at the step's lengths (the token budget at the
    worst case), without it micro_batch_size sequences, unpadded, the longest of the step among them. "Typical"
    is what the time model sees: the budget, or micro_batch_size sequences of mean length.
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
        return ("dynamic batching: verl cuts each pass into ceil(tokens / budget) balanced micro-batches, none over "
                f"the token budget (ppo_max_token_len_per_gpu={c.ppo_max_token_len_per_gpu}, "
                f"log_prob_max_token_len_per_gpu={c.log_prob_max_token_len_per_gpu}) whatever the lengths")
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


def partition_tokens(samples: float, mean_len: float, budget: float, c: Candidate, padded_len: float = 0.0) -> float:
    """The largest micro-batch verl 0.9.1 forms from a pass of `samples` sequences under a token `budget` (per CP
    group).

    utils/seqlen_balancing.py `rearrange_micro_batches`: ceil(tokens / budget) micro-batches (with VPP a multiple of
    PP: workers/engine/megatron/transformer_impl.py), balanced by Karmarkar-Karp, so each about tokens / count;
    `padded_len`: each sequence padded to it. The budget itself is the bound only where a pass's tokens sit just
    under a multiple of it: the worst case keeps it (`plan_batching`).
    """
    tokens = samples * mean_len
    if tokens <= 0:
        return float(budget)
    n = math.ceil(tokens / budget)
    if c.vpp_or_1 > 1:  # Megatron's microbatch_group_size_per_vp_stage, the PP size unless set
        n = math.ceil(n / c.pp) * c.pp
    return min(float(budget), samples * (padded_len or mean_len) / n)


def plan_batching(job: Job, cl: Cluster, c: Candidate, lengths: Lengths | None = None) -> BatchingPlan:
    """The plan at `lengths` (default: the worst case the job allows).

    With dynamic batching the largest micro-batch at a step's lengths is verl's balanced partition of the pass
    (`partition_tokens`); at the worst case it is the token budget, which a pass whose tokens sit just under a
    multiple of it reaches (lease 40: the 1.5B's 76k-token mini-batches held three of ~25k at dyn36k, 108.9 GiB,
    and ran out of memory at dyn40k, two of ~38k)."""
    ln = lengths or worst_case(job)
    dp = data_parallel(cl, c)
    mean, longest = ln.seq_mean, ln.seq_max
    if c.use_dynamic_bsz:
        upd_seq = c.ppo_max_token_len_per_gpu * c.cp  # a micro-batch's tokens over its CP group
        lp_seq = c.log_prob_max_token_len_per_gpu * c.cp
        upd, lp = float(c.ppo_max_token_len_per_gpu), float(c.log_prob_max_token_len_per_gpu)
        if not ln.worst_case:
            # Unfused attention takes no packed sequences: a micro-batch holds its sequences padded to the job's
            # longest (lease 3's unfused trials held the budget's memory, not the partition's).
            pad = float(job.max_seq_len) if job.attention_backend == "unfused" else 0.0
            upd = partition_tokens(job.ppo_mini_batch_size * job.rollout_n / dp, mean, upd_seq, c, pad) / c.cp
            lp = partition_tokens(job.train_batch_size * job.rollout_n / dp, mean, lp_seq, c, pad) / c.cp
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
