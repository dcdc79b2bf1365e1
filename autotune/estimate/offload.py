"""What offload moves between host and GPU, when, and what it costs; and Megatron's CPU optimizer.

verl 0.9.1's Megatron engine (workers/engine/base.py BaseEngineCtx, engine/megatron/transformer_impl.py `to`,
utils/megatron_utils.py) moves, with `param_offload`, the bf16 weights in and out around each phase that uses them:
the log-prob pass (eval mode: weights only), the update (train mode: weights; the gradient buffer is freed and
re-zeroed on the GPU, not copied) and the weight sync to vLLM (`get_per_tensor_param` loads them, the sync offloads
them after). With `optimizer_offload` the update also brings the optimizer in and out (fp32 master shard + Adam
moments, `load_megatron_optimizer` / `offload_megatron_optimizer`). The reference model's weights move around its
own pass when it is offloaded. Every copy is a pinned-memory copy over the GPU's PCIe link.

Megatron's CPU optimizer (`optimizer_cpu_offload`, megatron/core/optimizer/cpu_offloading/hybrid_optimizer.py)
is another thing: a share (`optimizer_offload_fraction`) of the optimizer's parameters lives on the CPU for good
(fp32 master + Adam moments), and every step sends their gradients down, steps them with torch's fused CPU AdamW
and sends the updated parameters back (overlapped per parameter with `overlap_cpu_optimizer_d2h_h2d`).
"""

from __future__ import annotations

from dataclasses import dataclass

from autotune.candidate import Candidate
from autotune.cluster import Cluster


@dataclass(frozen=True)
class HostCopy:
    """Constants of host <-> device copies and of the CPU optimizer."""

    # Share of the PCIe link a pinned cudaMemcpy reaches (CUDA's bandwidthTest/nvbandwidth on Gen5 x16: ~51-55 of
    # 64 GB/s per direction).
    link_share: float = 0.8
    # HGX H100/H200 baseboards hang two GPUs on each PCIe switch with one Gen5 x16 uplink to the CPU (NVIDIA DGX
    # H100 user guide, system topology): every rank offloads at the same moment, so two GPUs share one uplink.
    # Together with link_share: 64 * 0.8 / 2 = 25.6 GB/s per GPU on an 8-GPU H100 node, the 25 GB/s the time model
    # used before it priced each move.
    gpus_per_uplink: int = 2
    # Megatron's CPU optimizer step as verl runs it, parameters a second: the median of the real trials' pairs with it
    # and without it on one host (benchmarks/cost_fits.py fit_cpu_adam_rate: lease 44's and lease 51's 3B two each,
    # lease 49's 1.5B three, 4.3e8-6.2e8). Alone, torch.optim.AdamW(fused=True) on fp32 CPU tensors, one thread (Ray
    # starts workers with OMP_NUM_THREADS=1), did 6.2e8-7.8e8 on the lent H200s' hosts and 7.6e8 on an H100's (`python
    # -m benchmarks.cpu_adam_rate`); the build host (AMD EPYC) 1.35e9-1.75e9. Lease 51 ran both on one host: its pairs
    # said 0.57 and 0.71 of its microbenchmark, so a host's AdamW alone would price the step fast. One rank per GPU
    # steps its own shard.
    cpu_adam_params_per_s: float = 5.4e8


DEFAULT_HOST_COPY = HostCopy()


def host_gbps(cl: Cluster, hc: HostCopy = DEFAULT_HOST_COPY) -> float:
    """Effective host <-> device bandwidth per GPU (GB/s) while every GPU of the node copies at once."""
    return cl.gpu.host_gbps * hc.link_share / max(1, min(hc.gpus_per_uplink, cl.gpus_per_node))


def cpu_fraction(c: Candidate) -> float:
    """Share of the optimizer's parameters that Megatron's CPU optimizer keeps on the CPU (0 without it)."""
    return float(c.optimizer_offload_fraction or 0.0) if c.optimizer_cpu_offload else 0.0


def gpu_optimizer(states: dict[str, float], c: Candidate) -> tuple[float, float]:
    """(fp32 master, Adam moments) of the optimizer kept on the GPU (at the update, before verl's own offload).

    With the CPU optimizer (which autotune runs with use_precision_aware_optimizer, as Megatron's CPU-offload
    recipes do) the distributed optimizer hands its bf16 shard to the hybrid optimizer, which keeps the fp32 copy
    and the moments of the offloaded share on the CPU only: the GPU holds (1 - fraction) of both.
    """
    keep = 1.0 - cpu_fraction(c)
    return states["optimizer_master"] * keep, states["optimizer_adam"] * keep


def cpu_optimizer_bytes(states: dict[str, float], c: Candidate) -> float:
    """Host memory of the CPU optimizer per GPU: fp32 master + moments of its share, and its pinned fp32 grads."""
    f = cpu_fraction(c)
    return f * (states["optimizer_master"] + states["optimizer_adam"]) + f * states["optimizer_master"]


def cpu_optimizer_params(states: dict[str, float], c: Candidate) -> float:
    """Parameters the CPU optimizer steps on this GPU's rank: its share of the shard (4 bytes of fp32 master each)."""
    return cpu_fraction(c) * states["optimizer_master"] / 4


def cpu_optimizer_seconds(states: dict[str, float], c: Candidate, cl: Cluster,
                          hc: HostCopy = DEFAULT_HOST_COPY) -> float:
    """One optimizer step of the CPU share: fp32 grads down, CPU AdamW, fp32 params up (copy_ into the bf16 shard
    converts on the GPU, so 4 bytes cross). autotune turns overlap_cpu_optimizer_d2h_h2d on with it: the copies run
    under the CPU step, parameter by parameter, so the step costs the slower of the two. An update runs one step per
    mini-batch: the caller multiplies."""
    params = cpu_optimizer_params(states, c)
    if not params:
        return 0.0
    copies = 2 * 4 * params / (host_gbps(cl, hc) * 1e9)
    compute = params / hc.cpu_adam_params_per_s
    return max(copies, compute)


def offload_seconds(states: dict[str, float], ref_params: float, c: Candidate, cl: Cluster,
                    hc: HostCopy = DEFAULT_HOST_COPY) -> dict[str, float]:
    """Seconds of verl's offload copies per phase (in and out): {phase: seconds}, only phases that copy.

    `states`: model_state_bytes of the candidate; `ref_params`: the reference model's bytes per GPU (0 without one).
    """
    bw = host_gbps(cl, hc) * 1e9
    out: dict[str, float] = {}
    if c.param_offload:
        weights = 2 * states["params"] / bw
        out["old_log_prob"] = weights
        # An actor whole on one GPU hands its weights to vLLM with no measurable reload: lease 10's offload pair
        # (Qwen2.5-3B, one H100) took 0.58 s in update_weights with them offloaded, 0.59 s without. Sharded, the
        # gather loads them first (verl's get_per_tensor_param).
        if c.tp * c.pp * c.ep > 1:
            out["update_weights"] = weights
        out["update_actor"] = weights
    if c.optimizer_offload:
        master, adam = gpu_optimizer(states, c)
        out["update_actor"] = out.get("update_actor", 0.0) + 2 * (master + adam) / bw
    if ref_params and c.ref_offloaded:
        out["ref"] = 2 * ref_params / bw
    return out
