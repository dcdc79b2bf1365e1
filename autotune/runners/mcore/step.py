"""The measured step: the spec's micro-batches and the timed training (or forward-only) steps.

Micro-batches are random packed sequences of ``tokens_per_microbatch * cp`` tokens, each rank holding its CP
chunks in Megatron's load-balanced order (chunks r and 2cp-1-r); a step runs them through Megatron's
forward-backward schedule (interleaved when vpp is set) and the optimizer. torch and megatron-core are imported
inside the functions.
"""

from __future__ import annotations

import time


def make_batches(spec: dict, vocab: int, n: int) -> list:
    """n micro-batches of this rank's CP chunks of random packed sequences."""
    import torch
    from megatron.core import parallel_state as ps

    lay = spec["layout"]
    cp = lay["cp"]
    S = spec["tokens_per_microbatch"] * cp
    g = torch.Generator(device="cuda")
    g.manual_seed(spec["seed"] + 7919 * ps.get_data_parallel_rank())
    out = []
    r = ps.get_context_parallel_rank()
    for _ in range(n):
        tok = torch.randint(0, vocab, (1, S + 1), device="cuda", generator=g)
        ids, labels = tok[:, :-1], tok[:, 1:]
        if cp > 1:
            c = S // (2 * cp)
            sel = torch.cat([torch.arange(r * c, (r + 1) * c),
                             torch.arange((2 * cp - 1 - r) * c, (2 * cp - r) * c)]).cuda()
            ids, labels = ids.index_select(1, sel), labels.index_select(1, sel)
        out.append((ids.contiguous(), labels.contiguous()))
    return out


def train_step(spec: dict, model: list, optimizer, batches: list, forward_only: bool) -> None:
    """One optimizer step (or forward-only pass) over the spec's micro-batches through Megatron's schedule."""
    import torch
    from megatron.core.pipeline_parallel import get_forward_backward_func

    lay = spec["layout"]
    S = spec["tokens_per_microbatch"] * lay["cp"]
    nmb = spec["num_microbatches"]

    def loss_func(output_tensor):
        loss = output_tensor.float().mean()
        return loss, {"loss": loss.detach()}

    def forward_step(data_iterator, mdl):
        ids, labels = next(data_iterator)
        pos = torch.arange(ids.shape[1], device=ids.device).unsqueeze(0)
        out = mdl(ids, pos, None, labels=labels)
        return out, loss_func

    if lay["vpp"]:
        data_iter = [iter(list(batches)) for _ in model]
    else:
        data_iter = iter(list(batches))
    if not forward_only:
        for c in model:
            c.zero_grad_buffer()
        optimizer.zero_grad()
    fb = get_forward_backward_func()
    fb(
        forward_step_func=forward_step,
        data_iterator=data_iter,
        model=model if len(model) > 1 else model[0],
        num_microbatches=nmb,
        seq_length=S,
        micro_batch_size=1,
        forward_only=forward_only,
    )
    if not forward_only:
        optimizer.step()


def timed_steps(spec: dict, model: list, optimizer, batches: list, forward_only: bool, warmup: int,
                steps: int) -> float:
    """Mean seconds of `steps` steps after `warmup` untimed ones (all ranks start together)."""
    import torch
    import torch.distributed as dist

    for _ in range(warmup):
        train_step(spec, model, optimizer, batches, forward_only)
    torch.cuda.synchronize()
    dist.barrier()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        train_step(spec, model, optimizer, batches, forward_only)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return sum(times) / len(times)
