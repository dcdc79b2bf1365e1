"""A tuner process for tests: a study of qwen2.5-7b on 8 H100s whose verl runs go to the test double.

`python -m tests.fake_verl.run_study STORAGE WORKDIR N_TRIALS` behaves like `autotune run` on Ctrl-C (exit 130, the
running trial recorded as interrupted). It exists because no user command may select the double.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

from autotune.study.study import Tuner
from tests.conftest import make_setup
from tests.fake_verl import fake_runner


def main(argv: list[str]) -> int:
    storage, workdir, n_trials = argv[0], Path(argv[1]), int(argv[2])
    # A shell without job control starts background commands with SIGINT ignored, and Python then never raises
    # KeyboardInterrupt: restore it, as an interactive `autotune run` has it.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    runner = fake_runner(grace_s=2.0, stall_timeout_s=30.0, preflight=False)  # verl's config check: tested elsewhere
    tuner = Tuner(make_setup(), runner, storage, "ctrl-c", workdir=workdir)
    try:
        summary = tuner.run(n_trials)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        return 130
    print(summary, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
