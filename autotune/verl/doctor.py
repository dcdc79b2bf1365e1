"""`autotune doctor`: can this node run a verl trial? The stack a trial needs, checked in a minute instead of
found out by a trial that dies after a 5-minute launch.

Checks: Python, the pinned versions (autotune/verl/keys.py GPU_STACK), NVML and the GPUs, torch's CUDA, Transformer
Engine loads, an attention backend for the model's head size, Megatron-core, mbridge (with autotune's shim) or
Megatron-Bridge, vLLM and verl import. The heavy imports run in a child process (autotune/verl/doctor_probe.py) with a
timeout. The verl runner runs the same checks before its first trial and refuses with these lines; what the checks
find also picks the job defaults the runner adds where the job sets nothing (attention backend, vanilla_mbridge).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune import verl

CONSTRAINTS = "gpu-node-torch2.11.txt"  # the pins the GPU stack ran with: constraints/ in a checkout, shipped inside
# the package as autotune/constraints/ (setup.py), so that a wheel install can name a file the user has
_PKG = Path(__file__).resolve().parent.parent  # autotune/


def _shown(path: Path) -> str:
    """A path as a user types it: relative where it lies under the current directory."""
    try:
        if Path.cwd() == Path("/"):
            return str(path)
        rel = path.relative_to(Path.cwd())
        return str(rel) if str(rel) != "." else "."
    except ValueError:
        return str(path)


def constraints_path() -> Path:
    """The constraints file this autotune has: the checkout's, else the copy its wheel shipped."""
    checkout = _PKG.parent / "constraints" / CONSTRAINTS
    return checkout if checkout.is_file() else _PKG / "constraints" / CONSTRAINTS


def _installed_from() -> str:
    """This autotune with its `gpu` extra as pip can install it again: from where pip installed it (a wheel file,
    a directory, a git URL: the distribution's direct_url.json), else by name."""
    from importlib import metadata

    try:
        doc = json.loads(metadata.distribution("autotune").read_text("direct_url.json") or "{}")
    except (metadata.PackageNotFoundError, json.JSONDecodeError):
        doc = {}
    url = doc.get("url", "")
    if url and doc.get("vcs_info"):
        url = f"{doc['vcs_info'].get('vcs', 'git')}+{url}"
    return f"autotune[gpu] @ {url}" if url else "autotune[gpu]"


def install() -> str:
    """What installs the GPU stack, naming files this install has (a checkout: its own; a wheel: the shipped copy)."""
    c = _shown(constraints_path())
    if (_PKG.parent / "constraints" / CONSTRAINTS).is_file():
        return f"pip install -c {c} -e '{_shown(_PKG.parent)}[gpu]' (README: GPU node install)"
    return f"pip install -c {c} '{_installed_from()}' (README: GPU node install)"


TORCH_HINT = (f"install the node's CUDA torch {verl.GPU_STACK['torch']} (vLLM {verl.GPU_STACK['vllm']} pins it; "
              "pytorch.org says which index serves your CUDA)")


def install_te_torch() -> str:
    return f"pip install --no-build-isolation -c {_shown(constraints_path())} transformer_engine_torch==2.12.0"


DEFAULT_TIMEOUT_S = 300.0
_LEVELS = {"ok": "ok", "warn": "warn", "fix": "FIX"}
# What each check's child-process step is called in a "did not finish" line.
_STEPS = {"nvml": "NVML", "torch": "importing torch", "transformer_engine": "loading Transformer Engine",
          "attention": "asking Transformer Engine for attention backends",
          "fused_attention_run": "running TE's fused attention once", "megatron_core": "importing megatron.core",
          "megatron_bridge": "looking for Megatron-Bridge", "mbridge": "importing mbridge", "vllm": "importing vLLM",
          "verl": "importing verl", "verl_megatron": "importing verl's Megatron engine"}


@dataclass(frozen=True)
class Finding:
    check: str
    level: str  # ok | warn | fix (a trial cannot run until it is fixed)
    text: str

    def line(self) -> str:
        return f"{_LEVELS[self.level]:4s}  {self.check}: {self.text}"


@dataclass(frozen=True)
class Diagnosis:
    findings: tuple[Finding, ...]
    job_defaults: dict[str, Any] = field(default_factory=dict)  # verl key -> value, where the job sets none
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not any(f.level == "fix" for f in self.findings)

    def problems(self) -> list[str]:
        return [f.line() for f in self.findings if f.level == "fix"]

    def lines(self) -> list[str]:
        return [f.line() for f in self.findings]

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "seconds": round(self.seconds, 1), "job_defaults": self.job_defaults,
                "findings": [{"check": f.check, "level": f.level, "text": f.text} for f in self.findings]}


def with_autotune_on_path(env: Mapping[str, str]) -> dict[str, str]:
    """`env` with this autotune importable in a child (verl's processes import its Ray hook and shims): the package's
    parent goes first on PYTHONPATH unless it is a site-packages directory (an installed autotune is found anyway)."""
    out = dict(env)
    root = str(Path(__file__).resolve().parent.parent.parent)
    parts = [p for p in out.get("PYTHONPATH", "").split(os.pathsep) if p]
    if not root.endswith(("site-packages", "dist-packages")) and root not in parts:
        out["PYTHONPATH"] = os.pathsep.join([root, *parts])
    return out


def torch_cudnn_lib() -> str | None:
    """The folder of the cuDNN that torch loads (the nvidia-cudnn wheel), without importing torch; None without it."""
    try:
        spec = importlib.util.find_spec("nvidia.cudnn")
    except (ImportError, ValueError):
        return None
    for loc in (spec.submodule_search_locations or []) if spec else []:
        lib = Path(loc) / "lib"
        if any(lib.glob("libcudnn.so*")):
            return str(lib)
    return None


def has_bytecode(package: str = "torch") -> bool | None:
    """Whether `package`'s `__init__` has its compiled bytecode beside it, found without importing it (None: the
    package is not found). torch is every verl process's largest import (2,141 modules), so it stands for the rest."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    src = Path(spec.origin)
    return (src.parent / "__pycache__" / f"{src.stem}.{sys.implementation.cache_tag}.pyc").is_file()


def bytecode_forbidden(env: Mapping[str, str]) -> bool:
    """Python may not write bytecode under `env`: PYTHONDONTWRITEBYTECODE set (a common container default) and no
    PYTHONPYCACHEPREFIX of the user's to write it to instead."""
    return bool(env.get(verl.NO_BYTECODE_ENV)) and not env.get(verl.BYTECODE_PREFIX_ENV)


def bytecode_finding(env: Mapping[str, str], bytecode: bool | None) -> Finding | None:
    """A warning where every process of a verl run compiles what it imports: bytecode may not be written and the
    packages carry none (the lent machines' image)."""
    if not bytecode_forbidden(env) or bytecode is not False:
        return None
    return Finding("bytecode", "warn", f"{verl.NO_BYTECODE_ENV} is set and torch has no bytecode: every process of "
                                       "a verl run compiles each module it imports (a worker's imports: 20.5 s, 14.0 s "
                                       "with the bytecode kept, on a lent H200). autotune's trials keep it under "
                                       "<workdir>/cache/pycache; for runs of your own, set "
                                       f"{verl.BYTECODE_PREFIX_ENV} to a folder and unset {verl.NO_BYTECODE_ENV}")


def stack_env(env: Mapping[str, str]) -> dict[str, str]:
    """The environment of verl's processes (and of the doctor's child, which checks exactly that): autotune
    importable, and torch's cuDNN the only one loaded.

    Transformer Engine loads cuDNN itself, looking at CUDNN_PATH/CUDNN_HOME, then CUDA's folders, before Python
    packages, and cuDNN opens its sub-libraries by name: where the machine has a system cuDNN of another release
    than torch's wheel, the two mix. With the system one first, TE did not load (`libcudnn_heuristic.so.9:
    undefined symbol`, H100, 2026-11-24); with torch's first on LD_LIBRARY_PATH alone, TE still mapped the system's
    `libcudnn.so.9.14` beside torch's 9.19 and every fused attention failed at `cudnnFinalize` (H100, 2026-11-25).
    CUDNN_PATH and CUDNN_HOME set to torch's wheel leave one cuDNN in the process, and fused attention runs. They
    replace a value the environment had: torch refuses to start with any cuDNN but its own, so no other can serve.
    """
    out = with_autotune_on_path(env)
    lib = torch_cudnn_lib()
    parts = [p for p in out.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
    if lib and lib not in parts:
        out["LD_LIBRARY_PATH"] = os.pathsep.join([lib, *parts])
    if lib:
        out["CUDNN_PATH"] = out["CUDNN_HOME"] = str(Path(lib).parent)
    return out


def probe(head_dim: int, python: str = sys.executable, env: Mapping[str, str] | None = None,
          timeout_s: float = DEFAULT_TIMEOUT_S) -> tuple[list[dict[str, Any]], str]:
    """The child's records, and why they are incomplete ("" when it finished)."""
    env = stack_env(os.environ if env is None else env)
    env["PYTHONUNBUFFERED"] = "1"
    try:
        proc = subprocess.run([python, "-m", "autotune.verl.doctor_probe", str(head_dim)], env=env, capture_output=True,
                              text=True, timeout=timeout_s, start_new_session=True)
        stdout, stderr, rc = proc.stdout, proc.stderr, proc.returncode
        why = ""
    except subprocess.TimeoutExpired as e:
        stdout = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        stderr = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        rc, why = None, f"did not finish in {timeout_s:g} s"
    except OSError as e:
        return [], f"cannot start {python}: {e}"
    records = []
    for line in stdout.splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict) and "check" in rec:
            records.append(rec)
    if not why and not any(r["check"] == "done" for r in records):
        last = next((ln.strip() for ln in reversed(stderr.splitlines()) if ln.strip()), "")
        why = f"died with exit code {rc}" + (f" ({last[:300]})" if last else "")
    return records, why


def _v(text: str | None) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text or "")[:3])


def _versions(found: dict[str, str | None], bridge: bool) -> list[Finding]:
    out = []
    for dist, pinned in verl.GPU_STACK.items():
        have = found.get(dist)
        if have is None:
            if dist == "mbridge" and bridge:
                continue  # Megatron-Bridge builds the models instead
            hint = install_te_torch() if dist == "transformer-engine-torch" else TORCH_HINT if dist == "torch" \
                else install()
            out.append(Finding(dist, "fix", f"not installed (tested: {pinned}): {hint}"))
        elif have == pinned or have.split("+")[0] == pinned:
            out.append(Finding(dist, "ok", have))
        elif dist == "verl":
            out.append(Finding(dist, "fix", f"{have} installed; autotune maps verl {pinned}'s keys and logs: "
                                            f"pip install verl=={pinned}"))
        elif dist == "transformers" and not _v(verl.TRANSFORMERS_RANGE[0]) <= _v(have) < _v(verl.TRANSFORMERS_RANGE[1]):
            out.append(Finding(dist, "fix", f"{have} installed; verl {verl.VERL_VERSION} needs "
                                            f">={verl.TRANSFORMERS_RANGE[0]},<{verl.TRANSFORMERS_RANGE[1]}: "
                                            f"pip install transformers=={pinned}"))
        elif dist.startswith("transformer-engine") and _v(have) >= _v(verl.TE_TOO_NEW_FOR_TORCH_2_11) \
                and _v(found.get("torch"))[:2] == (2, 11):
            out.append(Finding(dist, "fix", f"{have} installed; Transformer Engine {verl.TE_TOO_NEW_FOR_TORCH_2_11}+ "
                                            "does not load with torch 2.11's cuBLAS: install 2.12.0 ("
                                            f"{install_te_torch() if dist.endswith('torch') else install()})"))
        else:
            out.append(Finding(dist, "warn", f"{have} installed, tested with {pinned} "
                                             f"({_shown(constraints_path())})"))
    return out


# Top-level module -> its distribution: an import that fails because the distribution is missing is said once.
_MODULE_DIST = {"vllm": "vllm", "megatron": "megatron-core", "mbridge": "mbridge", "transformer_engine":
                "transformer-engine", "torch": "torch", "verl": "verl", "transfer_queue": "transferqueue"}


def _said(findings: list[Finding], error: str | None) -> bool:
    """The error is a missing module whose distribution already has a "not installed" line."""
    m = re.search(r"No module named '([\w]+)", error or "")
    dist = _MODULE_DIST.get(m.group(1)) if m else None
    return dist is not None and any(f.check == dist and f.level == "fix" for f in findings)


def _no_gpu(got: dict[str, dict[str, Any]]) -> str:
    """"no GPU here, ..." when neither NVML nor torch sees a GPU (and NVML was asked); "" otherwise."""
    nv, torch, cuda = got.get("nvml"), got.get("torch"), got.get("cuda")
    if nv is None or torch is None or (nv["ok"] and nv.get("gpus")) or (cuda and cuda["ok"] and cuda.get("devices")):
        return ""  # a GPU seen, or the probe stopped before torch: nothing to say here
    why = [f"NVML: {nv.get('error')}" if not nv["ok"] else "NVML sees no GPU"]
    if torch is not None and not torch["ok"]:
        why.append("torch does not import")
    elif cuda is not None:
        why.append(f"torch {torch.get('version')} sees no CUDA GPU")
    return (f"no GPU here ({'; '.join(why)}): a verl trial runs on a node with NVIDIA GPUs; run autotune there "
            "(the fixes below are for that node), or use --backend simulate here")


def diagnose(records: list[dict[str, Any]], incomplete: str = "", seconds: float = 0.0) -> Diagnosis:
    """What the child found, in one line per check: ok, warn, or FIX with what to do (no GPU here: first)."""
    got = {r["check"]: r for r in records if r["check"] not in ("start",)}
    f: list[Finding] = []
    defaults: dict[str, Any] = {}
    if "python" in got:
        py = got["python"]["version"]
        if _v(py) < (3, 10):
            f.append(Finding("python", "fix", f"{py}: verl {verl.VERL_VERSION} needs Python 3.10+ (the pins were "
                                              "tested on 3.12)"))
        else:
            f.append(Finding("python", "ok" if _v(py)[:2] == (3, 12) else "warn",
                             py + ("" if _v(py)[:2] == (3, 12) else " (the pins were tested on 3.12)")))
    bridge = bool(got.get("megatron_bridge", {}).get("ok"))
    if "versions" in got:
        f += _versions(got["versions"]["versions"], bridge)
    no_gpu = _no_gpu(got)
    if no_gpu:  # said first: every other fix is for a GPU node
        f.insert(0, Finding("gpus", "fix", no_gpu))
    elif "nvml" in got:
        r = got["nvml"]
        if r["ok"] and r.get("gpus"):
            busy = [f"GPU {i} holds {g['used_gib']} GiB" for i, g in enumerate(r["gpus"]) if g["used_gib"] > 1.0]
            names = ", ".join(sorted({g["name"] for g in r["gpus"]}))
            f.append(Finding("gpus", "ok", f"{len(r['gpus'])} x {names} (NVIDIA driver {r['driver']})"))
            if busy:
                f.append(Finding("gpus", "warn", "; ".join(busy) + " already: stop what holds them (`nvidia-smi`) "
                                                                   "or trials measure memory on top of it"))
        elif r["ok"]:
            f.append(Finding("gpus", "fix", "NVML sees no GPU: a verl trial needs at least one"))
        else:
            f.append(Finding("nvml", "warn", f"NVML unavailable ({r.get('error')}): trials record verl's own memory "
                                             "numbers instead of the GPUs' peak (NVIDIA driver / nvidia-ml-py)"))
    if "torch" in got and not got["torch"]["ok"] and not _said(f, got["torch"].get("error")):
        f.append(Finding("torch", "fix", f"does not import: {got['torch'].get('error')}: {TORCH_HINT}"))
    if "cuda" in got:
        r = got["cuda"]
        if r["ok"] and r.get("devices"):
            f.append(Finding("cuda", "ok", f"torch sees {r['devices']} GPU(s), {r.get('name')} (sm "
                                           f"{'.'.join(map(str, r.get('capability') or []))}), CUDA {r.get('cuda')}, "
                                           f"cuDNN {r.get('cudnn')}"))
        elif not no_gpu:
            f.append(Finding("cuda", "fix", "torch sees no CUDA GPU (torch.cuda.is_available() is False; CUDA "
                                            f"{r.get('cuda')}): a CPU-only torch, CUDA_VISIBLE_DEVICES, or the "
                                            "driver"))
    if "transformer_engine" in got and not _said(f, got["transformer_engine"].get("error")):
        r = got["transformer_engine"]
        if r["ok"]:
            f.append(Finding("transformer_engine", "ok", f"loads ({r.get('seconds')} s)"))
        else:
            err = r.get("error", "")
            if "cublasLt" in err or "undefined symbol" in err:
                hint = ("built for another CUDA/cuBLAS than torch's: Transformer Engine 2.12.0 loads with torch "
                        f"2.11 ({install_te_torch()})")
            elif "No module named" in err:
                hint = f"install it: {install()}, then {install_te_torch()}"
            else:
                hint = f"reinstall it against this torch: {install_te_torch()}"
            f.append(Finding("transformer_engine", "fix", f"does not load ({err}): {hint}; mbridge builds the "
                                                          "actor with Transformer Engine layers"))
    if "attention" in got:
        r = got["attention"]
        h = r.get("head_dim")
        fused_ran = got.get("fused_attention_run", {})
        if r.get("flash"):
            f.append(Finding("attention", "ok", f"flash (flash-attn) serves head size {h}"))
        elif r.get("fused") and not fused_ran.get("ok", True):
            defaults[verl.ATTENTION_BACKEND] = "unfused"
            f.append(Finding("attention", "warn", f"TE's fused (cuDNN) attention is offered for head size {h} but "
                                                  f"failed when run ({fused_ran.get('error', '')[:200]}): trials run "
                                                  f"with {verl.ATTENTION_BACKEND}=unfused (slower, more memory) "
                                                  "unless the job sets it; pip install flash-attn for speed"))
        elif r.get("fused"):
            defaults[verl.ATTENTION_BACKEND] = "fused"
            f.append(Finding("attention", "ok", f"flash-attn not installed (verl's default backend `flash` needs "
                                                f"it); TE's fused (cuDNN) attention serves head size {h}: trials "
                                                f"run with {verl.ATTENTION_BACKEND}=fused unless the job sets it"))
        elif r.get("unfused"):
            defaults[verl.ATTENTION_BACKEND] = "unfused"
            f.append(Finding("attention", "warn", f"neither flash-attn nor TE's fused attention serves head size {h} "
                                                  f"here: trials run with {verl.ATTENTION_BACKEND}=unfused (slow, "
                                                  "more memory); pip install flash-attn for speed"))
        elif "transformer_engine" in got and got["transformer_engine"]["ok"]:
            f.append(Finding("attention", "fix", f"no attention backend for head size {h} "
                                                 f"({r.get('error') or r.get('te_query') or 'none available'})"))
    if "megatron_core" in got and not got["megatron_core"]["ok"]:
        if not _said(f, got["megatron_core"].get("error")):
            f.append(Finding("megatron_core", "fix", f"does not import: {got['megatron_core'].get('error')}: "
                                                     f"{install()}"))
    elif "megatron_core" in got:
        f.append(Finding("megatron_core", "ok", f"imports ({got['megatron_core'].get('seconds')} s)"))
    mt = got.get("megatron_model_type")
    if mt and mt["ok"] and not mt.get("encoder_and_decoder"):
        f.append(Finding("mbridge_shim", "ok", "megatron-core has no ModelType.encoder_and_decoder, which mbridge "
                                               "0.15.1 uses: autotune adds it in verl's workers "
                                               "(autotune/verl/shims.py)"))
    if "megatron_bridge" in got and not bridge:
        defaults[verl.VANILLA_MBRIDGE] = True
        f.append(Finding("megatron_bridge", "ok", "not installed (verl's `megatron` extra pins megatron-bridge "
                                                  f"0.5.2, not on the package index): trials run with "
                                                  f"{verl.VANILLA_MBRIDGE}=true (mbridge) unless the job sets it"))
    for check, what in (("mbridge", "mbridge"), ("vllm", "vLLM"), ("verl", "verl"),
                        ("verl_megatron", "verl's Megatron engine")):
        r = got.get(check)
        if r is None or (check == "mbridge" and bridge):
            continue
        if r["ok"]:
            f.append(Finding(check, "ok", f"imports ({r.get('seconds')} s)"))
        elif not _said(f, r.get("error")):
            f.append(Finding(check, "fix", f"{what} does not import: {r.get('error')}: {install()}"))
    if incomplete:
        started = [r["what"] for r in records if r["check"] == "start"]
        at = started[-1] if started else ""
        where = f" while {_STEPS.get(at, at)}" if at and at not in got else ""
        f.append(Finding("probe", "fix", f"the check {incomplete}{where}; run `python -m autotune.verl.doctor_probe` "
                                         "to see its output"))
    return Diagnosis(tuple(f), defaults, seconds)


def run_doctor(head_dim: int = 128, python: str = sys.executable, env: Mapping[str, str] | None = None,
               timeout_s: float = DEFAULT_TIMEOUT_S) -> Diagnosis:
    t0 = time.monotonic()
    records, why = probe(head_dim, python, env, timeout_s)
    dx = diagnose(records, why, time.monotonic() - t0)
    slow = bytecode_finding(os.environ if env is None else env, has_bytecode())
    return dataclasses.replace(dx, findings=(*dx.findings, slow)) if slow else dx
