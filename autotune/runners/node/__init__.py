"""What a runner does on its node, beside the trial itself: the trial's processes (`procs`: tracked through /proc,
stopped, kill-safe records), the GPUs (`gpu_monitor`: NVML samples, memory given back) and the Ray head kept across
trials (`ray_head`). One package so that the runners' package stays small (tests/test_imports.py).
"""
