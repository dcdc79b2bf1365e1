"""The GPU-node install is one set of pins everywhere: verl.GPU_STACK (what `autotune doctor` checks), the
constraints file, pyproject's `gpu` extra, the README, docs/verl_runner.md and the Dockerfile. Whether the set
resolves from the package index is checked by scripts/check_gpu_install.sh (network; benchmarks/results)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from autotune import verl

ROOT = Path(__file__).resolve().parent.parent
CONSTRAINTS = ROOT / "constraints" / "gpu-node-torch2.11.txt"
norm = lambda n: re.sub(r"[-_.]+", "-", n).lower()  # noqa: E731


def pins() -> dict[str, str]:
    out = {}
    for line in CONSTRAINTS.read_text().splitlines():
        line = line.split("#")[0].strip()
        if "==" in line:
            n, v = line.split("==")
            out[norm(n)] = v
    return out


def test_the_doctors_pins_are_the_constraints() -> None:
    p = pins()
    assert {d: p.get(norm(d)) for d in verl.GPU_STACK} == {norm(d): v for d, v in verl.GPU_STACK.items()}


def test_the_gpu_extra_pins_the_same_versions() -> None:
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["gpu"]
    p = pins()
    for req in extra:
        m = re.match(r"^([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?==([\w.]+)$", req)
        assert m, f"unpinned requirement in the gpu extra: {req}"
        assert p[norm(m.group(1))] == m.group(2), req
    assert any(r.startswith("verl[vllm,mcore]==") for r in extra)  # not `megatron`: megatron-bridge 0.5.2 is missing


def _code_blocks(text: str) -> str:
    return "\n".join(re.findall(r"```(?:bash)?\n(.*?)```", text, re.S))


def test_readme_docs_and_dockerfile_install_with_the_constraints() -> None:
    readme, docs = (ROOT / "README.md").read_text(), (ROOT / "docs" / "verl_runner.md").read_text()
    docker = (ROOT / "docker" / "Dockerfile").read_text()
    for text in (_code_blocks(readme), _code_blocks(docs), docker):
        assert "-c " in text and "gpu-node-torch2.11.txt" in text and "[gpu" in text
        assert "transformer_engine_torch==2.12.0" in text and "--no-build-isolation" in text
        assert "verl[vllm,megatron]" not in text
    assert "autotune doctor" in _code_blocks(readme) and "autotune doctor" in _code_blocks(docs)
    assert (ROOT / "scripts" / "check_gpu_install.sh").stat().st_mode & 0o111


def test_the_gpu_smokes_payload_carries_the_same_versions() -> None:
    """benchmarks/gpu_verl/payload.txt (what the lent GPU ran with) and the constraints never disagree."""
    payload = ROOT / "benchmarks" / "gpu_verl" / "payload.txt"
    p = pins()
    carried = {}
    for line in payload.read_text().splitlines():
        line = line.split("#")[0].strip()
        if "==" in line:
            n, v = line.split("==")
            carried[norm(n)] = v.strip()
    assert {n: (v, p.get(n)) for n, v in carried.items() if p.get(n) != v} == {}
