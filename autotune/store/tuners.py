"""Which tuners are alive: each registers itself when it starts and beats while it runs (autotune_tuners).

Recovery closes what a tuner left only once that tuner is known dead, and never judges from the study's rows (a
tuner that has just asked its first trial of a new study has none yet). A tuner is dead when its process on this
host is gone (known at once), when it deregistered (a graceful stop, after telling every trial it asked), or, on
another host, when its heartbeat is older than GRACE_PERIOD_S. The heartbeat follows Optuna's RDB heartbeat
(RDBStorage's `heartbeat_interval` / `grace_period`): stamped and compared in the database server's clock
(`now()`), so hosts' clocks need not agree. Each Optuna trial a tuner asks carries its worker id (OWNER), so that
a trial asked but not yet recorded has a known owner too.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
import threading
from dataclasses import dataclass

from sqlalchemy import DateTime, Integer, String, func, select, update
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.orm import Mapped, mapped_column

from autotune.store.schema import Base
from autotune.store.store import Store, StoreError, retry_schema_race, worker_id

HEARTBEAT_INTERVAL_S = 10.0  # as Optuna's RDBStorage(heartbeat_interval=...)
GRACE_PERIOD_S = 30.0  # a tuner on another host silent this long is dead (Optuna's grace_period)
OWNER = "autotune:worker"  # the Optuna trial's system attribute: the worker that asked it


class TunerRow(Base):
    """A tuner process working a study: registered at its start, stamped while alive, stopped when it ends."""

    __tablename__ = "autotune_tuners"

    worker: Mapped[str] = mapped_column(String(255), primary_key=True)  # host:pid, as trial rows name it
    study: Mapped[str] = mapped_column(String(255), index=True)
    proc_start: Mapped[int] = mapped_column(Integer, default=0)  # the process's start (clock ticks): a reused PID
    started_at: Mapped[dt.datetime] = mapped_column(DateTime)  # the database server's clock
    heartbeat_at: Mapped[dt.datetime] = mapped_column(DateTime)
    stopped_at: Mapped[dt.datetime | None] = mapped_column(DateTime, nullable=True)


@dataclass(frozen=True)
class Peer:
    """What the registry says of one worker."""

    worker: str
    study: str
    proc_start: int
    silent_s: float  # seconds since its last heartbeat (server clock)
    stopped: bool


def _proc_start(pid: int) -> int:
    """The process's start time in clock ticks since boot (Linux), 0 where unknown: tells a reused PID apart."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return 0


def _pid_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError, ValueError):
        return False
    return False


class Registry:
    """This process's registration, its heartbeat thread, and the liveness of the others."""

    def __init__(self, store: Store):
        self.store = store
        self.me = worker_id()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        retry_schema_race(lambda: TunerRow.__table__.create(store.engine, checkfirst=True))

    def register(self, study: str) -> None:
        """Mark this tuner alive on `study` (again, after a stop) and start beating."""
        with self.store.session() as s:
            now = s.scalar(select(func.now()))
            row = s.get(TunerRow, self.me)
            if row is None:
                row = TunerRow(worker=self.me)
                s.add(row)
            row.study, row.proc_start = study, _proc_start(os.getpid())
            row.started_at = row.heartbeat_at = now
            row.stopped_at = None
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self._thread = threading.Thread(target=self._beat, daemon=True, name="autotune-heartbeat")
            self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_INTERVAL_S):
            try:
                with self.store.session() as s:
                    s.execute(update(TunerRow).where(TunerRow.worker == self.me).values(heartbeat_at=func.now()))
            except (StoreError, SQLAlchemyError):
                pass  # a missed beat: the grace period covers a few

    def deregister(self) -> None:
        """This tuner stops (every trial it asked is told): the others may close whatever it left."""
        self._stop.set()
        try:
            with self.store.session() as s:
                s.execute(update(TunerRow).where(TunerRow.worker == self.me).values(stopped_at=func.now()))
        except (StoreError, IntegrityError):
            pass  # the database is gone: the grace period ends it for the others

    def peers(self) -> dict[str, Peer]:
        """Every registered worker, as the registry says now."""
        with self.store.session() as s:
            now = s.scalar(select(func.now()))
            rows = list(s.scalars(select(TunerRow)))
        now = now.replace(tzinfo=None) if isinstance(now, dt.datetime) else now
        return {r.worker: Peer(r.worker, r.study, r.proc_start or 0, (now - r.heartbeat_at).total_seconds(),
                               r.stopped_at is not None) for r in rows}


@dataclass(frozen=True)
class Liveness:
    """One look at who is alive (taken once per recovery pass). alive(): True, False, or None for a worker the
    registry never saw (a tuner of an older autotune, an import): the caller then judges from its rows."""

    me: str
    peers: dict[str, Peer]

    @classmethod
    def now(cls, registry: Registry) -> Liveness:
        return cls(registry.me, registry.peers())

    def alive(self, worker: str) -> bool | None:
        if worker == self.me:
            return True
        host, _, pid_text = worker.rpartition(":")
        local = host == socket.gethostname()
        pid = int(pid_text) if pid_text.isdigit() else None
        if local and pid is not None and _pid_gone(pid):
            return False  # known at once
        peer = self.peers.get(worker)
        if peer is None:
            return None
        if peer.stopped:
            return False
        if local and pid is not None:
            start = _proc_start(pid)
            return not (start and peer.proc_start and start != peer.proc_start)  # a reused PID is another process
        return peer.silent_s < GRACE_PERIOD_S

    def others_alive(self, study: str) -> bool:
        """Some other tuner of this study is alive (it may be between Optuna's ask and marking its trial)."""
        return any(p.study == study and p.worker != self.me and self.alive(p.worker) for p in self.peers.values())


@dataclass(frozen=True)
class Unrecorded:
    """An Optuna trial with no autotune row: asked, not recorded (yet, or ever: its tuner died there)."""

    number: int
    state: str  # Optuna's: RUNNING, FAIL, ...
    owner: str | None  # the worker that asked it (OWNER), where it said
    owner_alive: bool | None  # None: unknown (no owner, or a worker the registry never saw)

    def describe(self) -> str:
        who = f"asked by {self.owner}" if self.owner else "asked by an unknown tuner"
        alive = {True: "alive", False: "gone: the next tuner to start or look closes it", None: ""}[self.owner_alive]
        return f"#{self.number} {self.state} ({who}{', ' + alive if alive else ''})"


def unrecorded(store: Store, study: str) -> list[Unrecorded]:
    """Optuna trials of `study` without an autotune row (`status` and the dashboard show them: a tuner between its
    ask and its first write, or a dead one's leftover, which optuna-dashboard and SQL would show otherwise)."""
    import json

    from sqlalchemy import text

    q = text("SELECT t.number, t.state, a.value_json FROM trials t JOIN studies s ON s.study_id = t.study_id "
             "LEFT JOIN trial_system_attributes a ON a.trial_id = t.trial_id AND a.key = :owner "
             "WHERE s.study_name = :study AND t.state NOT IN ('WAITING') AND t.number NOT IN "
             "(SELECT number FROM autotune_trials WHERE study = :study) ORDER BY t.number")
    try:
        with store.session() as s:
            found = s.execute(q, {"study": study, "owner": OWNER}).all()
    except StoreError:  # no Optuna tables (a database written by `autotune import` alone)
        return []
    registry = Registry.__new__(Registry)  # a look only: no table made, no heartbeat
    registry.store, registry.me = store, worker_id()
    try:
        live = Liveness.now(registry)
    except StoreError:
        live = Liveness(worker_id(), {})
    out = []
    for number, state, owner_json in found:
        owner = json.loads(owner_json) if owner_json else None
        state = state.name if hasattr(state, "name") else str(state)
        out.append(Unrecorded(int(number), state, owner, live.alive(owner) if owner else None))
    return out
