"""Per-GPU memory and utilisation of a trial, sampled with NVML (nvidia-ml-py), and the check that a trial's
GPU memory was given back.

verl's own `actor/perf/max_memory_*` is torch's counter in one training rank and misses vLLM; NVML sees every
process on every GPU. The monitor watches the GPUs CUDA_VISIBLE_DEVICES leaves the study (GPU i: CUDA's device i),
so studies pinned to different GPUs of one node neither read nor wait for each other's memory.
Without NVML (no driver, no GPUs) every number is None and `reason` says why.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune.cluster import visible_nvml_indices

GIB = 2**30


@dataclass(frozen=True)
class GpuUsage:
    """What the sampler saw during one trial."""

    available: bool
    reason: str = ""
    baseline_gib: tuple[float, ...] = ()
    peak_gib: tuple[float, ...] = ()  # peak used per GPU, absolute (what nvidia-smi shows)
    mean_util: tuple[float, ...] = ()  # mean GPU utilisation per GPU, percent
    samples: int = 0

    @property
    def peak_max_gib(self) -> float | None:
        return max(self.peak_gib) if self.peak_gib else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "available": self.available, "reason": self.reason, "samples": self.samples,
            "baseline_gib": [round(x, 3) for x in self.baseline_gib], "peak_gib": [round(x, 3) for x in self.peak_gib],
            "mean_util_pct": [round(x, 1) for x in self.mean_util],
        }


def _load_nvml() -> tuple[Any, str]:
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        return None, "nvidia-ml-py is not installed"
    try:
        pynvml.nvmlInit()
        if pynvml.nvmlDeviceGetCount() < 1:
            return None, "NVML sees no GPU"
    except Exception as e:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return None, f"NVML unavailable ({type(e).__name__}: {e}); GPU memory not measured"
    return pynvml, ""


@dataclass
class GpuMonitor:
    """Samples every visible GPU every `interval_s` in a thread between start() and stop()."""

    interval_s: float = 0.5
    nvml: Any = None  # the pynvml module; injectable so the arithmetic can be tested without GPUs
    reason: str = ""
    # a CSV of every sample (seconds since start, GiB used per GPU, then NVML's utilization % per GPU): memory per
    # moment, and when in a phase the GPU sat idle (autotune/results/memory_trace.py)
    trace: Path | None = None
    _handles: list[Any] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.nvml is None:
            self.nvml, self.reason = _load_nvml()
        if self.nvml is not None:
            try:
                self._handles = [self.nvml.nvmlDeviceGetHandleByIndex(i) for i in visible_nvml_indices(self.nvml)]
            except Exception as e:
                self.nvml, self.reason = None, f"NVML unavailable ({type(e).__name__}: {e})"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.baseline: tuple[float, ...] = ()

    @property
    def available(self) -> bool:
        return self.nvml is not None and bool(self._handles)

    def used_gib(self) -> tuple[float, ...]:
        if not self.available:
            return ()
        return tuple(self.nvml.nvmlDeviceGetMemoryInfo(h).used / GIB for h in self._handles)

    def compute_pids(self) -> dict[int, set[int]]:
        """GPU index -> PIDs NVML lists as compute processes on it (empty where the container hides them)."""
        out: dict[int, set[int]] = {}
        if not self.available:
            return out
        for i, h in enumerate(self._handles):
            try:
                out[i] = {p.pid for p in self.nvml.nvmlDeviceGetComputeRunningProcesses(h)}
            except Exception:
                out[i] = set()
        return out

    def start(self) -> None:
        self.baseline = self.used_gib()
        self._peak = list(self.baseline)
        self._util_sum = [0.0] * len(self._handles)
        self._n = 0
        self._t0 = time.monotonic()
        self._trace = None
        if not self.available:
            return
        if self.trace is not None:
            self._trace = self.trace.open("w", buffering=1)  # line by line: a killed trial keeps its samples
            gpus = range(len(self._handles))
            self._trace.write(",".join(["t_s", *(f"gpu{i}_used_gib" for i in gpus),
                                        *(f"gpu{i}_util_pct" for i in gpus)]) + "\n")
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="gpu-monitor")
        self._thread.start()

    def peak_so_far(self) -> float | None:
        """Largest memory used on any GPU since start() (None without NVML); read while the sampler runs."""
        peak = getattr(self, "_peak", None)
        return max(peak) if self.available and peak else None

    def _utilization(self, i: int) -> int | None:
        try:
            return int(self.nvml.nvmlDeviceGetUtilizationRates(self._handles[i]).gpu)
        except Exception:
            return None  # not every GPU or container reports it

    def _sample(self) -> None:
        t = time.monotonic() - self._t0
        used = self.used_gib()
        util = [self._utilization(i) for i in range(len(used))]
        if self._trace is not None:
            self._trace.write(",".join([f"{t:.2f}", *(f"{u:.3f}" for u in used),
                                        *("" if u is None else str(u) for u in util)]) + "\n")
        for i, u in enumerate(used):
            self._peak[i] = max(self._peak[i], u)
            self._util_sum[i] += util[i] or 0
        self._n += 1

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._sample()
            except Exception as e:  # a driver hiccup must not kill the trial
                self.reason = f"sampling stopped: {type(e).__name__}: {e}"
                return
            self._stop.wait(self.interval_s)

    def stop(self) -> GpuUsage:
        if not self.available:
            return GpuUsage(False, self.reason or "no GPU monitor")
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=5)
        self._sample()
        if self._trace is not None:
            self._trace.close()
            self._trace = None
        n = max(self._n, 1)
        return GpuUsage(True, self.reason, tuple(self.baseline), tuple(self._peak),
                        tuple(u / n for u in self._util_sum), self._n)

    def wait_released(self, baseline: tuple[float, ...], tolerance_gib: float, timeout_s: float,
                      poll_s: float = 0.5) -> list[str]:
        """Wait until every GPU is back within tolerance of its baseline; returns what is still held (empty: ok)."""
        if not self.available:
            return []
        deadline = time.monotonic() + timeout_s
        while True:
            used = self.used_gib()
            busy = [f"GPU {i}: {u:.2f} GiB used, {b:.2f} GiB before the trial"
                    for i, (u, b) in enumerate(zip(used, baseline, strict=False)) if u > b + tolerance_gib]
            if not busy or time.monotonic() >= deadline:
                return busy
            time.sleep(poll_s)


class RemoteGpus(GpuMonitor):
    """A trial on a Ray cluster: its GPUs are not this host's, so NVML here says nothing about them."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.nvml, self._handles = None, []
        self.reason = "trial on a Ray cluster: GPU memory is not sampled from the tuner's host"
