"""What a non-editable install ships (a wheel, `pip install .`, a git URL): every file a command reads at run time is
package data: the search spaces (kept at the repository's top, shipped as autotune/search_spaces), the dashboard's
templates and assets, and the snapshot of verl 0.9.1's config keys. And the `ray` extra brings what `ray list
placement-groups` needs."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow

# Run from outside the checkout with only the installed wheel on the path: every file it reads comes from the wheel.
PROBE = r"""
import json, sys
sys.modules["verl"] = None  # as where verl is not installed: the unknown-key check must use the shipped snapshot
from pathlib import Path
import autotune
from autotune.verl import doctor
from autotune.dashboard import app
from autotune.verl.preflight import config_schema, unknown_keys
from autotune.search.space import builtin_spaces, load_space

pkg = Path(autotune.__file__).parent
dash = Path(app.__file__).parent
print(json.dumps({
    "package": str(pkg),
    "spaces": {name: load_space(name).name for name in builtin_spaces()},
    "templates": sorted(p.name for p in (dash / "templates").glob("*.html")),
    "static": sorted(p.name for p in (dash / "static").iterdir()),
    "schema": config_schema()[2],
    "unknown": unknown_keys({"actor_rollout_ref.actor.ppo_mini_batchsize": 16, "data.max_prompt_length": 1}),
    "constraints": [str(doctor.constraints_path()), doctor.constraints_path().is_file()],
    "install": [doctor.install(), doctor.install_te_torch()],
}))
"""


def _copy_tracked(dst: Path) -> None:
    """The checkout as a fresh clone has it (what `pip install git+URL` builds from)."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for rel in filter(None, files.decode().split("\0")):
        src = REPO / rel
        if src.is_file():
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / rel)


def test_a_wheel_ships_spaces_dashboard_assets_and_the_verl_key_snapshot(tmp_path):
    src, wheels, target, elsewhere = (tmp_path / d for d in ("src", "wheels", "site", "elsewhere"))
    for d in (src, elsewhere):
        d.mkdir()
    _copy_tracked(src)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    # No build isolation: the build uses this environment's setuptools (no download while testing).
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(src)], check=True,
                   capture_output=True)
    wheel = next(wheels.glob("autotune-*.whl"))
    subprocess.run([*pip, "install", "--no-deps", "--target", str(target), str(wheel)], check=True,
                   capture_output=True)
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(target), "HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=elsewhere, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout)
    assert got["package"] == str(target / "autotune")  # the wheel's copy, not the checkout
    assert got["spaces"] == {"dense": "dense", "moe": "moe"}
    assert sorted(p.name for p in (REPO / "search_spaces").glob("*.yaml")) == ["dense.yaml", "moe.yaml"]
    assert {"base.html", "study.html", "trial.html"} <= set(got["templates"])
    assert set(got["static"]) == {p.name for p in (REPO / "autotune/dashboard/static").iterdir()}
    assert got["schema"].startswith("autotune's snapshot of verl 0.9.1")
    assert len(got["unknown"]) == 1 and "did you mean actor_rollout_ref.actor.ppo_mini_batch_size?" in got["unknown"][0]
    # `autotune doctor`'s fixes name the constraints file the wheel shipped (issue 25 item 22), not a checkout's.
    shipped = str(target / "autotune" / "constraints" / "gpu-node-torch2.11.txt")
    assert got["constraints"] == [shipped, True]
    assert all(f"-c {shipped} " in hint for hint in got["install"]) and "-e '.[gpu]'" not in got["install"][0]
    assert "'autotune[gpu] @ file://" in got["install"][0] and ".whl'" in got["install"][0], got["install"]
    # The command a user runs first, from the wheel alone: the built-in space is found.
    run = subprocess.run([sys.executable, "-m", "autotune", "run", "--model", "qwen2.5-1.5b", "--n-trials", "1",
                          "--confirm", "0", "--storage", f"sqlite:///{tmp_path / 'w.db'}", "--json"],
                         cwd=elsewhere, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads(run.stdout)["launched"] == 1


def test_the_verl_key_snapshot_is_what_the_script_writes_from_verl_0_9_1():
    pytest.importorskip("verl")
    import verl as verl_pkg

    from autotune import verl
    from autotune.verl.preflight import CONFIG_KEYS_SNAPSHOT

    assert verl_pkg.__version__ == verl.VERL_VERSION
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        from verl_config_keys import snapshot
    finally:
        sys.path.remove(str(REPO / "scripts"))
    fresh = snapshot(Path(verl_pkg.__file__).parent / "trainer" / "config", verl.VERL_VERSION)
    assert json.loads(CONFIG_KEYS_SNAPSHOT.read_text()) == fresh, "run `python scripts/verl_config_keys.py`"
    assert "model_engine" in fresh["groups"] and "ppo_mini_batch_size" in fresh["keys"]["actor_rollout_ref"]["actor"]


def test_the_ray_extra_brings_the_state_api_and_dashboard():
    """`ray list placement-groups` (Ray's state API, served by the dashboard) needs ray[default]: the extra names it,
    and the test environment, which installs the extra, has its dependencies."""
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    ray_req = next(r for r in extras["ray"] if r.startswith("ray["))
    assert "default" in ray_req.split("[", 1)[1].split("]", 1)[0].split(",")
    from tests.ray_cluster import dashboard_dependency_error

    assert dashboard_dependency_error() is None
