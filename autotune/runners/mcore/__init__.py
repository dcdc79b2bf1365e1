"""The Megatron-core probe: a candidate as a probe spec, run by a torchrun worker on the local GPUs, read back as a
trial result (`runner`: `McoreRunner`, `ProbeError`, exposed here). The worker (`worker`) and its parts (`spec`,
`layers`, `model`, `step`, `memory`, `results`, `scaling`, `profile`) import only the standard library and each other
(relatively) at import time; torch and Megatron-core are imported inside functions.

May import: what runners/ may import (the flat values, verl, candidate, job, estimate) and runners.base, runners.procs.
"""

from autotune.runners.mcore.runner import McoreRunner, ProbeError

__all__ = ["McoreRunner", "ProbeError"]
