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

from autotune import __version__, units, verl
from autotune.candidate import Candidate
from autotune.cluster import Cluster
from autotune.estimate import PREDICTED_OOM
from autotune.job import Job
from autotune.results.labels import label, provenance
from autotune.search.setup import setup_from_row
from autotune.store.schema import TrialRow
from autotune.store.store import Store

FORMATS = ("sh", "yaml", "json", "ray")

# What a verl job cannot run without and autotune cannot guess: without them verl falls back to its own example
# paths. An export of a job that does not set them names them in its header and refuses to run until they are set.
# (No quote characters in the words: they go inside bash's "${VAR:?...}".)
FILL_IN: dict[str, tuple[str, str]] = {
    verl.MODEL_PATH: ("MODEL_PATH", "the model directory in Hugging Face format, or its hub id"),
    verl.TRAIN_FILES: ("TRAIN_FILES", "training prompts (parquet)"),
    verl.VAL_FILES: ("VAL_FILES", "validation prompts (parquet)"),
}
MISSING = "???"  # Hydra's mark of a mandatory value that is not set: verl stops on it


def missing_keys(job: Job) -> list[str]:
    """FILL_IN keys the job does not set (`export` without `--job` sets none of them)."""
    return [k for k in FILL_IN if job.get(k) in (None, "")]


def tuned_values(job: Job, cand: Candidate) -> dict[str, Any]:
    """verl key -> value of what autotune sets for a tuned configuration: the candidate's keys, and vLLM's
    max_model_len (the job's, else prompt + response: left null, vLLM sizes its KV cache for the model's whole
    context, not for what was tuned). Every export writes these, a plain one and `--like SCRIPT` alike."""
    return {**cand.verl_overrides(), verl.MAX_MODEL_LEN: job.max_model_len}


def launch_values(
    job: Job, cluster: Cluster, cand: Candidate, extra: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """verl key -> value: base arguments, the job's fixed keys, the tuned keys, the cluster, then `extra`."""
    values: dict[str, Any] = dict(verl.BASE_ARGS)
    values.update(job.mapping)
    tuned = tuned_values(job, cand)
    for key in tuned:
        bare = key.lstrip("+")
        for form in (bare, "+" + bare, "++" + bare):  # the candidate's key replaces the job's, however prefixed
            values.pop(form, None)
    values.update(tuned)
    values[verl.N_GPUS_PER_NODE] = cluster.gpus_per_node
    values[verl.NNODES] = cluster.nodes
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
    label: str = ""  # what tells the trial apart (autotune.results.labels); the layout when empty
    replayed: bool = False  # looked up in a table of earlier measurements (backend replay): nothing ran now
    node_defaults: tuple[tuple[str, Any], ...] = ()  # what the trial's node needed beyond the job (autotune doctor)

    def memory_line(self) -> str:
        """The memory verdict and the node's additions, as header comment lines ("" when there are none)."""
        out = f"# memory (model estimate): {self.memory_verdict}\n" if self.memory_verdict else ""
        if self.node_defaults:
            added = ", ".join(f"{k}={verl.format_value(v)}" for k, v in self.node_defaults)
            out += f"# added because the node the trial ran on needed it (autotune doctor): {added}\n"
        return out

    def headline(self) -> str:
        if self.throughput is None:
            speed = "no measured throughput"
        elif self.simulated:
            speed = f"SIMULATED {units.throughput(self.throughput)} tokens/s/GPU (a model estimate, not a measurement)"
        elif self.replayed:
            speed = (f"REPLAYED {units.throughput(self.throughput)} tokens/s/GPU (measured earlier, looked up in a "
                     "table: nothing ran now)")
        else:
            speed = f"measured {units.throughput(self.throughput)} tokens/s/GPU"
        what = self.label or self.layout
        return f"autotune {__version__}: study {self.study}, trial {self.trial} ({what}), {self.model}: {speed}"


def fill_in_header(missing: list[str], script: bool = True) -> list[str]:
    """Comment lines naming what the user must set (empty when the job set everything)."""
    if not missing:
        return []
    width = max(len(FILL_IN[k][0]) for k in missing)
    how = ["# TO FILL IN: the job autotune tuned did not set these; this script stops until they are set",
           "# (export them, or write the values into the lines below):"] if script else [
           f"# TO FILL IN: the job autotune tuned did not set these; they read {MISSING} (verl's Hydra config stops",
           "# on it) until you write the values:"]
    return [*how, *(f"#   {FILL_IN[k][0]:<{width}}  {k}: {FILL_IN[k][1]}" for k in missing)]


def _shell_guards(missing: list[str]) -> list[str]:
    """bash stops at the first of these that is unset or empty, with the message, before anything runs."""
    return [f': "${{{FILL_IN[k][0]}:?set {FILL_IN[k][0]} to {FILL_IN[k][1]} ({k}); see the header of this script}}"'
            for k in missing]


def _shell_word(arg: str, missing: list[str]) -> str:
    key = arg.split("=", 1)[0]
    return f'{key}="${FILL_IN[key][0]}"' if key in missing else shlex.quote(arg)


def to_sh(info: ExportInfo, argv: list[str], missing: list[str] = ()) -> str:
    missing = list(missing)
    lines = [
        "#!/usr/bin/env bash",
        f"# {info.headline()}",
        *info.memory_line().splitlines(),
        f"# verl {verl.VERL_VERSION}, Megatron actor, vLLM rollout. Hydra overrides given to this script are appended.",
        *fill_in_header(missing),
        "set -euo pipefail",
        *_shell_guards(missing),
        "",
        " ".join(shlex.quote(a) for a in argv[:3]) + " \\",
    ]
    lines += [f"    {_shell_word(a, missing)} \\" for a in argv[3:]]
    lines.append('    "$@"')
    return "\n".join(lines) + "\n"


def to_yaml(info: ExportInfo, values: Mapping[str, Any], missing: list[str] = ()) -> str:
    """verl keys -> values: Hydra overrides as a mapping, also usable as an autotune job file (`--job`)."""
    fill = "".join(line + "\n" for line in fill_in_header(list(missing), script=False))
    header = (f"# {info.headline()}\n{info.memory_line()}# verl {verl.VERL_VERSION} overrides for "
              f"`python -m verl.trainer.main_ppo`\n{fill}")
    return header + yaml.safe_dump(dict(values), sort_keys=False, default_flow_style=False, width=1000)


def to_json(info: ExportInfo, values: Mapping[str, Any], params: Mapping[str, Any], argv: list[str],
            missing: list[str] = ()) -> str:
    doc = {
        "study": info.study,
        "trial": info.trial,
        "model": info.model,
        "throughput": info.throughput,
        "simulated": info.simulated,
        "measured": info.throughput is not None and not info.simulated and not info.replayed,
        "replayed": info.replayed,
        "layout": info.layout,
        "memory_verdict": info.memory_verdict or None,
        "verl_version": verl.VERL_VERSION,
        "params": dict(params),
        "verl_overrides": dict(values),
        "argv": argv,
        "fill_in": {k: FILL_IN[k][1] for k in missing},  # keys set to MISSING: the job did not set them
    }
    return json.dumps(doc, indent=2, default=str) + "\n"


def to_ray(info: ExportInfo, argv: list[str], missing: list[str] = ()) -> str:
    missing = list(missing)
    entry = " ".join(_shell_word(a, missing) for a in argv)
    return "\n".join([
        "#!/usr/bin/env bash",
        f"# {info.headline()}",
        *info.memory_line().splitlines(),
        "# Submits the tuned verl job to a running Ray cluster (RAY_ADDRESS, default the local dashboard).",
        *fill_in_header(missing),
        "set -euo pipefail",
        *_shell_guards(missing),
        'ray job submit --address "${RAY_ADDRESS:-http://127.0.0.1:8265}" --working-dir . -- \\',
        f"    {entry} \"$@\"",
    ]) + "\n"


def render(fmt: str, info: ExportInfo, job: Job, cluster: Cluster, cand: Candidate) -> str:
    if fmt not in FORMATS:
        raise ValueError(f"unknown export format {fmt!r}; choose one of {', '.join(FORMATS)}")
    missing = missing_keys(job)
    placeholders = {**dict(info.node_defaults), **{k: MISSING for k in missing}}
    values = launch_values(job, cluster, cand, placeholders)
    argv = launch_argv(job, cluster, cand, placeholders)
    if fmt == "sh":
        return to_sh(info, argv, missing)
    if fmt == "yaml":
        return to_yaml(info, values, missing)
    if fmt == "ray":
        return to_ray(info, argv, missing)
    return to_json(info, values, cand.applied_params(), argv, missing)


def export_text(store: Store, study: str, row: TrialRow, fmt: str) -> str:
    """The export of one recorded trial, as `autotune export` and the dashboard's download buttons give it."""
    if not row.params:
        raise ValueError(f"trial {row.number} has no configuration (its tuner stopped before choosing one): nothing "
                         "to export")
    setup = setup_from_row(store.get_study(study))
    cand = Candidate(**row.params)
    broken = setup.evaluate_uncorrected(cand).violations
    if broken:
        raise ValueError(f"trial {row.number} cannot run: it breaks {broken[0]}; export one that can: the best "
                         "(without --trial), or a trial that `autotune status` shows ok")
    info = ExportInfo(study, row.number, row.throughput, row.simulated, cand.layout(), setup.model.name,
                      memory_verdict=(row.predicted_memory or {}).get("verdict", ""), label=label(cand, setup.stock),
                      replayed=provenance(row.simulated, row.backend) == "replayed",
                      node_defaults=tuple(((row.extra or {}).get("job_defaults") or {}).items()))
    return render(fmt, info, setup.job, setup.cluster, cand)


def export_warning(row: TrialRow) -> str | None:
    """Why an exported trial may not run: it ran out of memory, or was never launched because the memory model
    predicts it would (None when neither)."""
    if row.status == "oom":
        return f"trial {row.number} ran out of memory when it ran ({units.clip(row.reason, 120)}); it will again"
    if row.status == "pruned" and row.reason.startswith(PREDICTED_OOM):
        return (f"trial {row.number} was never launched: {units.clip(row.reason, 160)}; expect it to run out of "
                "memory (`autotune run --enqueue` checks the verdict on a real run)")
    return None
