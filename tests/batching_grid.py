"""A grid of candidates and everything the estimates derive from their micro-batches, as exact floats.

`python -m tests.batching_grid > tests/data/batching_golden.json` wrote the golden file from the code before the
batching plan existed (memory.py and throughput/ each cut the batch themselves); test_batching.py checks that
the plan leaves every number bit-for-bit as it was. Regenerated once since, for a change of the time model, not of
the batching: gen's decode overhead with CUDA graphs and the 2.6 s fixed step cost, both from the real verl 0.9.1
run (benchmarks/results/real_verl_throughput.md); only the gen and adv phase values moved. Regenerated again on
2026-11-25 for changes of the models, not of the batching: offload priced by what moves when, the CPU optimizer
knob (new space dimensions, so 24 samples a combination keep every batching case covered), and gen's decode overhead
and the fixed step cost fitted on the real verl 0.9.1 campaign (benchmarks/results/calibration.md). Regenerated on
2026-11-25 once more for the memory model, not the batching: SwiGLU's 10f, the log-prob logits' 12 B and verl's
allocator slack, and for the time model's fixed cost per Megatron pass, the CPU optimizer's step per
mini-batch and the local weight sync, all from the real trials (issue 23); no batching value moved. Regenerated on
2026-11-26 for the time model only: the update's fixed pass cost 5.0 -> 4.9 s and no weight-sync reload under
param_offload for an actor whole on one GPU (lease 10); only update_actor and update_weights values moved. And on
2026-11-26 again (leases 11, 13 and 18): the log-prob pass cost 3.0 -> 2.75 s, the update's 4.9 -> 4.75 s, and a
forward-only pass's activations whatever selective recompute drops; only the old_log_prob, ref and update_actor
times and the log-prob passes' activations moved. And on 2026-11-26 (lease 19, the H200s): with CUDA graphs a decode
step's GPU work is the longer of its memory traffic and its FLOPs, and the H200's decode overhead is its own; only
the gen times moved. And on 2026-11-26 (lease 20): the log-prob pass cost 2.55 -> 2.40 s, the update's 4.55 -> 4.35 s,
the local weight sync's 0.47 -> 0.46 s, and full recompute's second forward priced as one more log-prob pass; only
the old_log_prob, ref, update_actor and update_weights times moved. And on 2026-11-26 (lease 24): the update's pass
cost 4.35 -> 4.73 s; then, with the update's micro-batches of one sequence priced on their own (0.15 s each), back to
4.36 s; only the update_actor times moved. And on 2026-12-01 (the forward pass timed by size): a pass's GPU work
priced by the layer form (GEMMs, attention, elementwise traffic growing with the widths) and the pass costs refitted
(2.50 s and 4.91 s); only the old_log_prob, ref, update_actor and the probe's training times moved. And on
2026-12-02 (lease 56): a small update micro-batch pays the host's work its GPU work leaves, per layer of a stage;
only update_actor times moved (32 values, of the grid's small micro-batches). And on 2026-12-06 (lease 61): a
logit materialised without fused kernels costs 48.8 ps, not 42.0; only the log-prob passes' and updates' times of
the candidates without fused kernels moved (195 values of 78 candidates). And on 2026-12-06 (lease 62): the update's
pass cost 4.89 -> 4.79 s and an unfused logit 48.8 -> 51.9 ps; only update_actor times and the unfused candidates'
log-prob passes moved (285 values). And on 2026-12-07 (lease 71): the host's work a small update micro-batch's GPU
work leaves, 6.7 -> 6.4 ms a layer for fixed micro-batches and 9.5 -> 9.2 ms under a dynamic budget; only the
update_actor times of the grid's small micro-batches moved (12 values of 12 candidates).
"""

from __future__ import annotations

import json
import random
import sys
from typing import Any

from autotune.candidate import Candidate
from autotune.cluster import Cluster, get_gpu_type
from autotune.estimate import constraints, evaluate
from autotune.estimate.lengths import Lengths, worst_case
from autotune.estimate.memory import DEFAULT_CALIBRATION, activation_bytes, estimate_memory
from autotune.estimate.throughput import estimate_throughput
from autotune.job import Job
from autotune.model import get_model
from autotune.runners.mcore.runner import probe_spec
from autotune.search.space import load_space, space_context

PER_COMBO = 24


def combos() -> list[tuple[str, Cluster, Job, Lengths | None]]:
    short = Job.from_mapping({
        "data.max_prompt_length": 1024, "data.max_response_length": 4096, "data.train_batch_size": 128,
        "actor_rollout_ref.actor.ppo_mini_batch_size": 16, "actor_rollout_ref.rollout.n": 8,
        "algorithm.use_kl_in_reward": True,
    })
    h100 = Cluster(get_gpu_type("h100"), 8, 1)
    h200x2 = Cluster(get_gpu_type("h200"), 8, 2)
    h20 = Cluster(get_gpu_type("h20"), 4, 1)
    default = Job.default()
    step = Lengths(1800.0, 2048.0, 1500.0, 3000.0, ("test",))
    return [
        ("qwen2.5-7b", h100, default, None),
        ("qwen2.5-7b", h100, default, step),
        ("qwen2.5-7b", h20, short, Lengths(700.0, 1024.0, 900.0, 2500.0, ("test",))),
        ("qwen2.5-32b", h200x2, default, step),
        ("qwen3-30b-a3b", h200x2, short, None),
        ("qwen3-30b-a3b", h100, default, step),
        ("qwen2.5-1.5b", h20, short, None),
    ]


def sample(i: int) -> list[Candidate]:
    """PER_COMBO candidates of combo i that pass the static rules (drawn from its space, seeded)."""
    name, cl, job, _ = combos()[i]
    m = get_model(name)
    space = load_space("moe" if m.is_moe else "dense")
    ctx = space_context(m.is_moe, cl.world_size, cl.gpus_per_node, job.has_ref_model)
    rng = random.Random(i)
    out: dict[str, Candidate] = {}
    for _ in range(4000):
        if len(out) >= PER_COMBO:
            break
        cand = Candidate.from_params(space.sample(rng, ctx))
        if cand.key() not in out and not list(constraints.check(m, cl, job, cand)):
            out[cand.key()] = cand
    return list(out.values())


def values(i: int, cand: Candidate) -> list[Any]:
    """Every number the estimates derive from the candidate's micro-batches (and the rest of the model with them)."""
    name, cl, job, lengths = combos()[i]
    m = get_model(name)
    ln = lengths or worst_case(job)
    mem = estimate_memory(m, cl, job, cand, lengths=ln)
    thr = estimate_throughput(m, cl, job, cand, mem)
    train = evaluate(m, cl, job, cand, "train", lengths).throughput
    spec = probe_spec(m, cl, job, cand, min(cl.world_size, 4), "p")
    return [
        *(v for mo in mem.moments for _, v in mo.terms), mem.kv_cache_bytes, mem.kv_needed_bytes,
        mem.kv_bytes_per_token, mem.bound, activation_bytes(m, cl, job, cand, DEFAULT_CALIBRATION, ln),
        *(v for _, v in thr.phases), thr.tokens_per_step, thr.concurrency, *(v for _, v in train.phases),
        spec["tokens_per_microbatch"], spec["num_microbatches"],
    ]


def golden() -> list[dict[str, Any]]:
    return [{"combo": i, "params": c.params(), "values": values(i, c)}
            for i in range(len(combos())) for c in sample(i)]


if __name__ == "__main__":
    json.dump(golden(), sys.stdout, separators=(",", ":"))
    sys.stdout.write("\n")
