"""Graceful stops: SIGTERM and Ctrl-C set a flag; the tuner's loop stops at its next safe point. And a run's
--deadline: what is launched must end before it (`past_deadline`).

A handler that raises wherever the interpreter happens to be can land inside a finalizer (SQLAlchemy's
`InstanceState._cleanup`), where Python prints "Exception ignored" and the stop is lost, or between Optuna's ask and
our record, where the trial is left RUNNING. So the handler only records the signal. It raises (as
KeyboardInterrupt, which runners clean up on) only inside an `interruptible()` section: a runner running a trial
or an executor waiting for one, code that expects it. Every other place calls `check()` at its safe points.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

EXIT_CODES = {"SIGTERM": 143, "SIGINT": 130}  # 128 + the signal's number, as a shell reports it


class Stopped(KeyboardInterrupt):
    """A graceful stop asked by a signal; str() is the signal's name (SIGTERM or SIGINT)."""


_requested: str | None = None
_depth = 0  # interruptible sections the main thread is in


def requested() -> str | None:
    """The signal that asked the process to stop (its name), or None."""
    return _requested


def exit_code(e: BaseException | None = None) -> int:
    """143 for SIGTERM, 130 for Ctrl-C (and a KeyboardInterrupt raised by anyone else)."""
    name = _requested or (str(e) if e is not None else "")
    return EXIT_CODES.get(name, 130)


def check() -> None:
    """Raise Stopped when a signal asked to stop: call it at a safe point (nothing half-written)."""
    if _requested is not None:
        raise Stopped(_requested)


@contextmanager
def interruptible() -> Iterator[None]:
    """A section that a signal may interrupt at once (it raises Stopped): a trial running, a wait for one."""
    global _depth
    check()
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1


@contextmanager
def deferred() -> Iterator[None]:
    """A section a signal must not cut, even inside an interruptible() one: a trial's clean-up and its record after
    its run (cut there, a measured trial was lost and its processes left behind). A signal only sets the flag; the
    code after the section reads `requested()`. Off the main thread (the Ray executor's trial threads) a signal never
    raises there anyway, and the main thread's sections are left alone."""
    global _depth
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved, _depth = _depth, 0
    try:
        yield
    finally:
        _depth = saved


def _handler(signum: int, frame: Any) -> None:
    global _requested
    name = signal.Signals(signum).name
    _requested = _requested or name
    if _depth > 0 and threading.current_thread() is threading.main_thread():
        raise Stopped(name)


@contextmanager
def handle_signals() -> Iterator[None]:
    """SIGTERM and SIGINT set the flag while the block runs (the main thread only); the old handlers after."""
    global _requested
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _requested = None
    saved = {s: signal.signal(s, _handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    except BaseException:
        _restore(saved)
        raise
    pending = _restore(saved)
    if pending:  # asked after the block's last safe point: it still stops (a signal is never ignored)
        raise Stopped(pending)


def _restore(saved: dict[signal.Signals, Any]) -> str | None:
    """The old handlers back; the flag forgotten (nothing after the block stops on it). Returns what it held."""
    global _requested
    for s, h in saved.items():
        signal.signal(s, h)
    pending, _requested = _requested, None
    return pending


def reset() -> None:
    """Forget a stop asked before (tests, and a process forked from one that was asked)."""
    global _requested, _depth
    _requested, _depth = None, 0


def past_deadline(ends_by: float | None, need_s: float | None, what: str = "a trial here took up to") -> str | None:
    """Why nothing more is launched against a run's --deadline (`ends_by`, time.monotonic()'s), or None: the deadline
    has passed, or what is next (`need_s`: the longest trial so far, None before any ended) would end after it."""
    if ends_by is None:
        return None
    left = ends_by - time.monotonic()
    if left <= 0:
        return "reached --deadline"
    if need_s is not None and need_s > left:
        return f"reached --deadline: {what} {need_s:.0f} s and {left:.0f} s were left"
    return None
