"""Fault injection for the kill-safety tests: the tuner signals itself at the N-th point of its write path.

Only the soak and concurrency tests set AUTOTUNE_TEST_FAULTS (e.g. ``SIGKILL@137``: send SIGKILL to this
process at the 137th fault point it passes); no command or option of autotune sets it. Unset, `point` is a
dictionary lookup and a counter.
"""

from __future__ import annotations

import os
import signal

ENV = "AUTOTUNE_TEST_FAULTS"
FIRED = "AUTOTUNE_TEST_FAULTS_FIRED"  # a file each fired fault appends "pid plan point" to

_passed = 0


def point(name: str) -> None:
    """A moment at which a kill must lose nothing (`name` documents where; the plan counts all points)."""
    plan = os.environ.get(ENV)
    if not plan:
        return
    global _passed
    _passed += 1
    sig, _, at = plan.partition("@")
    if _passed == int(at):
        fired = os.environ.get(FIRED)
        if fired:  # the soak tells a kill that landed from one the study ended before
            with open(fired, "a") as f:
                f.write(f"{os.getpid()} {plan} {name}\n")
        os.kill(os.getpid(), signal.Signals[sig])


def reset() -> None:
    """Start counting again (a forked test worker inherits its parent's count)."""
    global _passed
    _passed = 0
