"""Device memory readings of the probe: a background sampler of the GPU's used memory.

torch's allocator peaks miss what NCCL, the CUDA context and fragmentation hold; the sampler polls NVML (through
torch, else nvidia-ml-py, else cudaMemGetInfo) and keeps the peak since the last reset, so a result can report
what the device itself saw. torch is imported when a sampler is made.
"""

from __future__ import annotations

import os
import threading
import time


class MemSampler:
    """Background sampler of device memory used (NVML, else cudaMemGetInfo), for one GPU."""

    def __init__(self, device_index: int, interval: float = 0.02):
        import torch

        self.torch = torch
        self.dev = device_index
        self.interval = interval
        self.peak = 0
        self._gen = 0
        self._stop = threading.Event()
        self._read = None
        try:  # torch maps the CUDA index to the NVML one (CUDA_VISIBLE_DEVICES aware)
            torch.cuda.device_memory_used(device_index)
            self._read = lambda: int(torch.cuda.device_memory_used(self.dev))
            self.source = "nvml (torch.cuda.device_memory_used: device memory used incl. context/NCCL)"
        except Exception:
            try:
                import pynvml  # nvidia-ml-py

                pynvml.nvmlInit()
                vis = os.environ.get("CUDA_VISIBLE_DEVICES")
                idx = int(vis.split(",")[device_index]) if vis else device_index
                h = pynvml.nvmlDeviceGetHandleByIndex(idx)
                self._read = lambda: int(pynvml.nvmlDeviceGetMemoryInfo(h).used)
                self.source = "nvml (nvidia-ml-py, device memory used incl. context/NCCL)"
            except Exception:
                self._read = None
        if self._read is None:
            self.source = "torch.cuda.mem_get_info (total - free)"
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def read(self) -> int:
        if self._read is not None:
            return self._read()
        free, total = self.torch.cuda.mem_get_info(self.dev)
        return int(total - free)

    def _run(self):
        while not self._stop.is_set():
            gen = self._gen
            try:
                v = self.read()
                if gen == self._gen:  # drop a reading that started before a reset
                    self.peak = max(self.peak, v)
            except Exception:
                pass
            time.sleep(self.interval)

    def reset(self):
        self._gen += 1
        try:
            self.peak = self.read()
        except Exception:
            self.peak = 0

    def stop(self):
        self._stop.set()
