"""The GPUs a job runs on: GPU type figures, node count, and detection through NVML."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

GIB = 1024**3


class ClusterError(ValueError):
    """A cluster description that cannot be used (unknown GPU type, non-positive counts)."""


@dataclass(frozen=True)
class GPUType:
    """Figures of one GPU model that the estimates need."""

    name: str
    memory_gib: float  # what the driver reports as total (what vLLM's utilisation multiplies)
    bf16_tflops: float  # dense bf16 vendor peak
    hbm_tbps: float  # memory bandwidth, TB/s
    link_gbps: float  # intra-node GPU-GPU bandwidth per direction, GB/s (NVLink, or PCIe)
    inter_node_gbps: float = 50.0  # per GPU, GB/s (400 Gb/s InfiniBand)
    # Host <-> device per direction, GB/s: the GPU's PCIe link (Gen5 x16 64, Gen4 x16 32; the datasheets give both
    # directions together: H100/H200/H20 "PCIe Gen5 128 GB/s", A100/L40S "PCIe Gen4 64 GB/s"). Offload moves over it.
    host_gbps: float = 64.0

    @property
    def memory_bytes(self) -> float:
        return self.memory_gib * GIB


# Vendor figures; memory as reported by nvidia-smi where seen (../shared/reference/MODELS.md).
GPU_TYPES: dict[str, GPUType] = {
    g.name: g
    for g in [
        GPUType("h100", 81559 / 1024, 989.0, 3.35, 450.0),
        GPUType("h200", 143771 / 1024, 989.0, 4.8, 450.0),
        GPUType("h800", 81559 / 1024, 989.0, 3.35, 200.0),
        GPUType("h20", 97871 / 1024, 148.0, 4.0, 450.0),
        GPUType("a100", 81920 / 1024, 312.0, 2.0, 300.0, host_gbps=32.0),
        GPUType("a100-40gb", 40960 / 1024, 312.0, 1.55, 300.0, host_gbps=32.0),
        GPUType("a800", 81920 / 1024, 312.0, 2.0, 200.0, host_gbps=32.0),
        GPUType("l40s", 46068 / 1024, 362.0, 0.864, 32.0, host_gbps=32.0),
        GPUType("b200", 183359 / 1024, 2250.0, 8.0, 900.0),
    ]
}


def get_gpu_type(name: str) -> GPUType:
    key = name.strip().lower().replace("_", "-")
    for prefix in ("nvidia-", "nvidia "):
        key = key.removeprefix(prefix)
    if key not in GPU_TYPES:
        raise ClusterError(f"unknown GPU type {name!r}; known: {', '.join(GPU_TYPES)}")
    return GPU_TYPES[key]


@dataclass(frozen=True)
class Cluster:
    gpu: GPUType
    gpus_per_node: int = 8
    nodes: int = 1
    detected: bool = False  # True when read from the local GPUs with NVML
    # Host memory of a node, GiB (the cgroup's limit where lower: what Ray's memory monitor measures against); None:
    # unknown, and the memory model checks no host memory (--host-memory, or read on a GPU node itself).
    host_memory_gib: float | None = None
    # Trials that may run at once on one node (--parallel trials of fewer GPUs than a node holds): they share its
    # host memory, and Ray's memory monitor kills for the node as a whole (two one-GPU studies on a node of two, each
    # counting all of its memory, lost a 7B and a 3B trial at once: tests/data/real_verl_gpu/h200_2026-11-28_l42).
    trials_per_node: int = 1

    def __post_init__(self) -> None:
        if self.gpus_per_node < 1 or self.nodes < 1:
            raise ClusterError(f"--gpus and --nodes must be at least 1 (got {self.gpus_per_node}, {self.nodes})")

    @property
    def world_size(self) -> int:
        return self.gpus_per_node * self.nodes

    def describe(self) -> str:
        return f"{self.nodes}x{self.gpus_per_node}x{self.gpu.name}"


def gpu_type_from_device_name(device_name: str) -> GPUType | None:
    """Map an NVML device name ('NVIDIA H100 80GB HBM3') to a known type."""
    n = device_name.lower()
    for key in ("h200", "h100", "h800", "h20", "a800", "l40s", "b200"):
        if key in n:
            return GPU_TYPES[key]
    if "a100" in n:
        return GPU_TYPES["a100-40gb" if "40gb" in n else "a100"]
    return None


def visible_gpus(count: int, uuids: Sequence[str] = (), env: str | None = None) -> list[int]:
    """NVML indices of the GPUs CUDA_VISIBLE_DEVICES leaves this process, in CUDA's order (all where it is unset).
    NVML sees every GPU of the node; a study pinned to some of them must watch and count only those. CUDA's rule:
    indices or (prefixes of) UUIDs, read up to the first entry that names no GPU."""
    if env is None:
        env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is None:
        return list(range(count))
    out: list[int] = []
    for entry in (e.strip() for e in env.split(",")):
        if re.fullmatch(r"\d+", entry):
            i = int(entry)
        else:
            i = next((k for k, u in enumerate(uuids) if entry and u.startswith(entry)), -1)
        if not 0 <= i < count or i in out:
            break
        out.append(i)
    return out


def _nvml_uuids(pynvml: Any, count: int) -> list[str]:
    out = []
    for i in range(count):
        u = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i))
        out.append(u.decode() if isinstance(u, bytes) else str(u))
    return out


def visible_nvml_indices(pynvml: Any) -> list[int]:
    """`visible_gpus` of an initialised pynvml (UUIDs read only where CUDA_VISIBLE_DEVICES names GPUs by UUID)."""
    count = pynvml.nvmlDeviceGetCount()
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    by_uuid = env is not None and any(e.strip() and not e.strip().isdigit() for e in env.split(","))
    return visible_gpus(count, _nvml_uuids(pynvml, count) if by_uuid else ())


def detect_local_gpus() -> tuple[int, str, float] | None:
    """(count, device name, total GiB) of the local GPUs this process may use (CUDA_VISIBLE_DEVICES) via
    nvidia-ml-py, or None without GPUs or NVML."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # no driver: NVMLError_LibraryNotFound and friends
        return None
    try:
        visible = visible_nvml_indices(pynvml)
        if not visible:
            return None
        count = len(visible)
        handle = pynvml.nvmlDeviceGetHandleByIndex(visible[0])
        name = pynvml.nvmlDeviceGetName(handle)
        name = name.decode() if isinstance(name, bytes) else name
        total = pynvml.nvmlDeviceGetMemoryInfo(handle).total / GIB
        return count, name, total
    finally:
        pynvml.nvmlShutdown()


def detect_host_memory_gib() -> float | None:
    """This machine's memory in GiB as Ray's memory monitor sees it: MemTotal, or the cgroup's limit where lower."""
    try:
        total = next(int(ln.split()[1]) * 1024 for ln in open("/proc/meminfo") if ln.startswith("MemTotal:"))
    except (OSError, StopIteration, ValueError, IndexError):
        return None
    for limit_file in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = open(limit_file).read().strip()
        except OSError:
            continue
        if text.isdigit():
            total = min(total, int(text))
        break
    return total / GIB


def make_cluster(gpus: int | None, nodes: int | None, gpu_type: str | None,
                 host_memory_gib: float | None = None, parallel: int = 1) -> Cluster:
    """Cluster from the CLI options; what the user leaves out is read from the local GPUs, else 8 x H100. Host
    memory: as given, else this machine's where it has GPUs (autotune runs on a node of the cluster), else unknown.
    `parallel` trials at once share a node where it holds several of them (its GPUs: the local ones, else 8)."""
    local = detect_local_gpus()
    node_gpus = local[0] if local else 8
    if gpu_type:
        gtype = get_gpu_type(gpu_type)
    elif local and (found := gpu_type_from_device_name(local[1])):
        gtype = found
    elif local:
        gtype = GPUType(local[1], local[2], 989.0, 3.35, 450.0)
    else:
        gtype = GPU_TYPES["h100"]
    return Cluster(
        gpu=gtype,
        gpus_per_node=gpus if gpus is not None else node_gpus,
        nodes=nodes if nodes is not None else 1,
        detected=local is not None and gpus is None and gpu_type is None,
        host_memory_gib=host_memory_gib if host_memory_gib is not None else (
            detect_host_memory_gib() if local else None),
        trials_per_node=trials_per_node(parallel, gpus if gpus is not None else node_gpus, node_gpus),
    )


def trials_per_node(parallel: int, trial_gpus_per_node: int, node_gpus: int) -> int:
    """How many of `parallel` trials at once can land on one node of `node_gpus` GPUs, each taking
    `trial_gpus_per_node` of them (Ray packs a trial's GPUs of a node onto one node): the most that may share its host
    memory."""
    return max(1, min(parallel, node_gpus // max(1, trial_gpus_per_node)))
