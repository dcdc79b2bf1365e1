"""Everything about verl itself, written once: its config keys, metric names, defaults and launch arguments (`keys`,
re-exported here, so `from autotune import verl; verl.KEY` reads the same everywhere), its console log and metrics
lines (`log`), a user's launch script (`launch_script`), runs made by hand read back (`runs`), the pre-flight check of
a config (`preflight`), what verl's processes import from autotune (`shims`, `ray_hook`), what a node's trials share
(`caches`: compile, dataset and bytecode caches) and `autotune doctor` (`doctor`, `doctor_probe`, the node's verl
stack).

May import: the flat values (model, cluster, units, faults) only. Nothing here knows a candidate, a job or a study:
the callers pass verl's values in.
"""

from autotune.verl.keys import *  # noqa: F403
