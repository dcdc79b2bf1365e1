"""Export a trial's configuration as a ready-to-run verl job: bash script, Hydra overrides (YAML), JSON, Ray job.

The trial launcher of the verl runner builds its argv with `launch_argv` too, so what was measured is what is
exported.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from autotune import __version__, verl
from autotune.candidate import Candidate
from autotune.cluster import Cluster
from autotune.job import Job
from autotune.labels import label
from autotune.setup import setup_from_row
from autotune.store import Store, TrialRow

FORMATS = ("sh", "yaml", "json", "ray")


def launch_values(
    job: Job, cluster: Cluster, cand: Candidate, extra: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """verl key -> value: base arguments, the job's fixed keys, the candidate's keys, the cluster, then `extra`."""
    values: dict[str, Any] = dict(verl.BASE_ARGS)
    values.update(job.mapping)
    tuned = cand.verl_overrides()
    for key in tuned:
        values.pop("+" + key, None)
    values.update(tuned)
    values[verl.N_GPUS_PER_NODE] = cluster.gpus_per_node
    values[verl.NNODES] = cluster.nodes
    values.setdefault(verl.MAX_MODEL_LEN, job.max_seq_len)  # left null, vLLM sizes KV for max_position_embeddings
    values.update(extra or {})
    return values


def launch_argv(job: Job, cluster: Cluster, cand: Candidate, extra: Mapping[str, Any] | None = None) -> list[str]:
    return [*verl.ENTRY, *(verl.override(k, v) for k, v in launch_values(job, cluster, cand, extra).items())]


@dataclass(frozen=True)
class ExportInfo:
    """Where the exported configuration comes from, for the header of every format."""

    study: str
    trial: int | None
    throughput: float | None
    simulated: bool
    layout: str
    model: str
    memory_verdict: str = ""  # "fits at step 3; OOM in update_actor once responses reach N tokens" (the memory model's)
    label: str = ""  # what tells the trial apart (autotune.labels); the layout when empty

    def memory_line(self) -> str:
        return f"# memory (model estimate): {self.memory_verdict}\n" if self.memory_verdict else ""

    def headline(self) -> str:
        if self.throughput is None:
            speed = "no measured throughput"
        elif self.simulated:
            speed = f"SIMULATED {self.throughput:.1f} tokens/s/GPU (a model estimate, not a measurement)"
        else:
            speed = f"measured {self.throughput:.1f} tokens/s/GPU"
        what = self.label or self.layout
        return f"autotune {__version__}: study {self.study}, trial {self.trial} ({what}), {self.model}: {speed}"


def to_sh(info: ExportInfo, argv: list[str]) -> str:
    lines = [
        "#!/usr/bin/env bash",
        f"# {info.headline()}",
        *([info.memory_line().rstrip()] if info.memory_verdict else []),
        f"# verl {verl.VERL_VERSION}, Megatron actor, vLLM rollout. Hydra overrides given to this script are appended.",
        "set -euo pipefail",
        "",
        " ".join(shlex.quote(a) for a in argv[:3]) + " \\",
    ]
    lines += [f"    {shlex.quote(a)} \\" for a in argv[3:]]
    lines.append('    "$@"')
    return "\n".join(lines) + "\n"


def to_yaml(info: ExportInfo, values: Mapping[str, Any]) -> str:
    """verl keys -> values: Hydra overrides as a mapping, also usable as an autotune job file (`--job`)."""
    header = (f"# {info.headline()}\n{info.memory_line()}# verl {verl.VERL_VERSION} overrides for "
              "`python -m verl.trainer.main_ppo`\n")
    return header + yaml.safe_dump(dict(values), sort_keys=False, default_flow_style=False, width=1000)


def to_json(info: ExportInfo, values: Mapping[str, Any], params: Mapping[str, Any], argv: list[str]) -> str:
    doc = {
        "study": info.study,
        "trial": info.trial,
        "model": info.model,
        "throughput": info.throughput,
        "simulated": info.simulated,
        "measured": info.throughput is not None and not info.simulated,
        "layout": info.layout,
        "memory_verdict": info.memory_verdict or None,
        "verl_version": verl.VERL_VERSION,
        "params": dict(params),
        "verl_overrides": dict(values),
        "argv": argv,
    }
    return json.dumps(doc, indent=2, default=str) + "\n"


def to_ray(info: ExportInfo, argv: list[str]) -> str:
    entry = " ".join(shlex.quote(a) for a in argv)
    return "\n".join([
        "#!/usr/bin/env bash",
        f"# {info.headline()}",
        *([info.memory_line().rstrip()] if info.memory_verdict else []),
        "# Submits the tuned verl job to a running Ray cluster (RAY_ADDRESS, default the local dashboard).",
        "set -euo pipefail",
        'ray job submit --address "${RAY_ADDRESS:-http://127.0.0.1:8265}" --working-dir . -- \\',
        f"    {entry} \"$@\"",
    ]) + "\n"


def render(fmt: str, info: ExportInfo, job: Job, cluster: Cluster, cand: Candidate) -> str:
    if fmt not in FORMATS:
        raise ValueError(f"unknown export format {fmt!r}; choose one of {', '.join(FORMATS)}")
    values = launch_values(job, cluster, cand)
    argv = launch_argv(job, cluster, cand)
    if fmt == "sh":
        return to_sh(info, argv)
    if fmt == "yaml":
        return to_yaml(info, values)
    if fmt == "ray":
        return to_ray(info, argv)
    return to_json(info, values, cand.applied_params(), argv)


def export_text(store: Store, study: str, row: TrialRow, fmt: str) -> str:
    """The export of one recorded trial, as `autotune export` and the dashboard's download buttons give it."""
    setup = setup_from_row(store.get_study(study))
    cand = Candidate(**row.params)
    info = ExportInfo(study, row.number, row.throughput, row.simulated, cand.layout(), setup.model.name,
                      memory_verdict=(row.predicted_memory or {}).get("verdict", ""), label=label(cand, setup.stock))
    return render(fmt, info, setup.job, setup.cluster, cand)
