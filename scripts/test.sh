#!/usr/bin/env bash
# The project's test command (README, .ci/run): a virtual environment of the tests' own with the test extras, the
# system pieces the tests drive for real (PostgreSQL server, Debian's Chromium, verl 0.9.1 with CPU torch), then the
# whole suite. The environment is .venv-test, not the .venv the README installs autotune into: the test extras,
# verl and CPU torch stay out of the user's environment (TEST_VENV=... to put it elsewhere).
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${TEST_VENV:-.venv-test}
python3 -m venv "$VENV"
# shellcheck disable=SC1091
. "$VENV/bin/activate"
python -m pip install -q --upgrade pip
python -m pip install -q -e '.[test]'

[ -x scripts/install-browser.sh ] && bash scripts/install-browser.sh
[ -x scripts/install-verl-cpu.sh ] && bash scripts/install-verl-cpu.sh
if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
    (apt-get update -qq && apt-get install -y -qq postgresql) >/dev/null
fi

ruff check autotune tests benchmarks
# Two workers, each test file whole on one (module fixtures, one Ray or PostgreSQL per file at a time): 12 min on a fast
# 2-core machine, 30 on a slow one (11 with -m "not slow"). The longest files first, in tests/conftest.py's order
# (LONGEST_FIRST), not xdist's by the number of tests in a file. TEST_WORKERS=0 runs it in this process; arguments go to
# pytest.
python -m pytest -q -ra -n "${TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder "$@"
