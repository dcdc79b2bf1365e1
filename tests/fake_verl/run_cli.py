"""`autotune ...` as a user runs it, with the verl backend's trials going to the test double.

`python -m tests.fake_verl.run_cli run --backend verl ...`: the CLI's own code (progress bar, live line, summary)
with `make_runner` answering the double's runner. FAKE_VERL_* variables reach the double. It exists because no user
command may select the double.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import autotune.cli as cli
import autotune.cli.run as cli_run
from tests.fake_verl import fake_runner


def main(argv: list[str]) -> int:
    env = {k: v for k, v in os.environ.items() if k.startswith("FAKE_VERL_")}

    def make_runner(name: str, **_: Any) -> Any:
        assert name == "verl", name
        return fake_runner(env=env, preflight=False)  # verl's own config check is tested elsewhere

    cli_run.make_runner = make_runner
    return cli.main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
