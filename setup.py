"""Packaging that pyproject.toml cannot say: the search spaces stay at the repository's top (search_spaces/, where a
user reads and copies them) and ship inside the package as `autotune/search_spaces/`, so that a wheel or a non-editable
`pip install .` has them (autotune/search/space.py looks there first, then at the checkout's top). So does the GPU
node's constraints file (constraints/gpu-node-torch2.11.txt as autotune/constraints/), which `autotune doctor`'s fixes
name."""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["autotune", "autotune.*"]), "autotune.search_spaces", "autotune.constraints"],
    package_dir={"autotune.search_spaces": "search_spaces", "autotune.constraints": "constraints"},
)
