"""Host memory of a node: what verl's workers keep in the CPU's RAM, against what Ray lets them use.

Offload and Megatron's CPU optimizer move GPU memory to the host, and the host has a limit too: Ray's memory monitor
kills the workers once the node uses more than `RAY_memory_usage_threshold` (0.95) of its memory (the cgroup's
limit where there is one), and verl's trial dies with `ray.exceptions.OutOfMemoryError` at the first update. Three
7B trials on one H200 of a 128 GiB host died so (tests/data/real_verl_gpu/h200_2026-11-26_l9, _l12): each with
~85 GiB of optimizer state on the host, the update's worker at 107 GiB and the node at 121-122 GiB when Ray
killed it. Per node, in bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

from autotune import units
from autotune.candidate import Candidate
from autotune.cluster import GIB, Cluster
from autotune.estimate.offload import cpu_optimizer_bytes, gpu_optimizer


@dataclass(frozen=True)
class HostCalibration:
    """Constants of host memory, from the three 7B trials Ray's memory monitor killed (module docstring)."""

    # Per GPU worker: its own process (torch, CUDA's host side, the libraries) besides the checkpoint's bf16 weights
    # it loads on the CPU to build the model. The update's worker held 107 GiB with ~85 GiB of optimizer state:
    # 22 GiB for a rank of the 7B, 14 of them its weights.
    worker_base: float = 8.0 * GIB
    # The rest of the node: Ray's processes, the trainer's driver, vLLM's engine, the reward and agent-loop
    # workers, shared memory: 13.7 and 15.3 GiB beside the update's worker at the two kills.
    node_base: float = 14.0 * GIB
    # Ray's memory monitor (RAY_memory_usage_threshold): the share of the node's memory at which it kills workers.
    monitor_threshold: float = 0.95


DEFAULT_HOST_CALIBRATION = HostCalibration()


@dataclass(frozen=True)
class HostEstimate:
    """A node's host memory as named terms (bytes per node) against what Ray lets it use (None: unknown)."""

    terms: tuple[tuple[str, float], ...]
    capacity: float | None
    sharing: int = 1  # trials at once on the node, whose memory the capacity is this one's share of

    @property
    def need(self) -> float:
        return sum(v for _, v in self.terms)

    @property
    def fits(self) -> bool:
        return self.capacity is None or self.need <= self.capacity

    def reason(self) -> str:
        """Why it does not fit, in words (empty when it fits)."""
        if self.fits or self.capacity is None:
            return ""
        largest = max(self.terms, key=lambda t: t[1])[0]
        shared = (f" (the node's memory over the {self.sharing} trials --parallel may run on it at once)"
                  if self.sharing > 1 else "")
        return (f"predicted {units.gib(self.need / GIB)} GiB of host memory a node > "
                f"{units.gib(self.capacity / GIB)} GiB, the share Ray's memory monitor lets it use before it kills "
                f"workers{shared} (largest: {largest}); "
                "offload less, or a smaller optimizer_offload_fraction"
                + (", or fewer trials at once" if self.sharing > 1 else ""))

    def as_dict(self) -> dict:
        return {"need_gib": round(self.need / GIB, 3),
                "capacity_gib": round(self.capacity / GIB, 3) if self.capacity is not None else None,
                "fits": self.fits, "terms_gib": {k: round(v / GIB, 3) for k, v in self.terms},
                "trials_per_node": self.sharing}


def estimate_host(cl: Cluster, c: Candidate, states: dict[str, float], ref_bytes: float,
                  cal: HostCalibration = DEFAULT_HOST_CALIBRATION) -> HostEstimate:
    """Host memory of one node at the update (the CPU optimizer's states exist from the first step on).

    `states`: the rank's model_state_bytes (its bf16 `params` are also what it loads on the CPU); `ref_bytes`: the
    reference model's bytes per GPU (0 without one).
    verl's offload keeps what it moves in pinned host memory for the whole step: the bf16 weights
    (`param_offload`), the GPU's share of the optimizer (`optimizer_offload`), an offloaded reference model.
    """
    n = cl.gpus_per_node
    master, adam = gpu_optimizer(states, c)
    terms = (
        ("workers", n * (cal.worker_base + states["params"])),
        ("cpu_optimizer", n * cpu_optimizer_bytes(states, c)),
        ("offloaded_params", n * states["params"] if c.param_offload else 0.0),
        ("offloaded_optimizer", n * (master + adam) if c.optimizer_offload else 0.0),
        ("offloaded_ref", n * ref_bytes if ref_bytes and c.ref_offloaded else 0.0),
        ("node", cal.node_base),
    )
    capacity = (cl.host_memory_gib * GIB * cal.monitor_threshold / cl.trials_per_node if cl.host_memory_gib
                else None)
    return HostEstimate(tuple(t for t in terms if t[1]), capacity, cl.trials_per_node)
