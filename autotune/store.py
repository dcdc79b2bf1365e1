"""autotune's own tables, in the same database as Optuna's: what Optuna's tables do not hold.

Studies keep the full model, cluster, job and space they were made for (so export and the dashboard need only
the database); trials keep status, reason, predicted and measured numbers, phase timings, memory breakdown, log
path and excerpt; steps keep every step's metrics.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    String,
    Text,
    UniqueConstraint,
    create_engine,
    func,
    select,
    update,
)
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker


class StoreError(RuntimeError):
    """The database cannot be opened or written; the message says which URL and what to do."""


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


class Base(DeclarativeBase):
    pass


class StudyRow(Base):
    __tablename__ = "autotune_studies"

    name: Mapped[str] = mapped_column(String(255), primary_key=True)
    model_name: Mapped[str] = mapped_column(String(255))
    model: Mapped[dict] = mapped_column(JSON)
    cluster: Mapped[dict] = mapped_column(JSON)
    job: Mapped[list] = mapped_column(JSON)  # [[verl key, value], ...]
    job_source: Mapped[str] = mapped_column(Text, default="")
    space_name: Mapped[str] = mapped_column(String(255))
    space_text: Mapped[str] = mapped_column(Text)
    backend: Mapped[str] = mapped_column(String(64))
    simulated: Mapped[bool] = mapped_column(Boolean)
    fingerprint: Mapped[dict] = mapped_column(JSON)
    measure_step: Mapped[int] = mapped_column(Integer, default=3)
    note: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[dt.datetime] = mapped_column(DateTime, default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(DateTime, default=utcnow)


class TrialRow(Base):
    __tablename__ = "autotune_trials"
    __table_args__ = (UniqueConstraint("study", "number"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    study: Mapped[str] = mapped_column(String(255), ForeignKey("autotune_studies.name"), index=True)
    number: Mapped[int] = mapped_column(Integer)  # Optuna's trial number in the study
    status: Mapped[str] = mapped_column(String(32), index=True)
    reason: Mapped[str] = mapped_column(Text, default="")
    # sampler | model-seed | stock | baseline | requeue
    origin: Mapped[str] = mapped_column(String(64), default="sampler")
    launched: Mapped[bool] = mapped_column(Boolean, default=False)
    simulated: Mapped[bool] = mapped_column(Boolean, default=False)
    backend: Mapped[str] = mapped_column(String(64), default="")
    candidate_key: Mapped[str] = mapped_column(String(32), index=True)
    params: Mapped[dict] = mapped_column(JSON)  # every candidate parameter, by search-space name
    verl_overrides: Mapped[dict] = mapped_column(JSON)
    predicted_throughput: Mapped[float | None] = mapped_column(Float, nullable=True)
    predicted_step_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    predicted_phases: Mapped[dict | None] = mapped_column(JSON, nullable=True)
    predicted_peak_gib: Mapped[float | None] = mapped_column(Float, nullable=True)
    predicted_memory: Mapped[dict | None] = mapped_column(JSON, nullable=True)
    throughput: Mapped[float | None] = mapped_column(Float, nullable=True)
    phase_timings: Mapped[dict | None] = mapped_column(JSON, nullable=True)
    peak_memory_gib: Mapped[float | None] = mapped_column(Float, nullable=True)
    peak_memory_per_gpu: Mapped[list | None] = mapped_column(JSON, nullable=True)
    framework_memory_gib: Mapped[float | None] = mapped_column(Float, nullable=True)
    log_path: Mapped[str | None] = mapped_column(Text, nullable=True)
    log_excerpt: Mapped[str] = mapped_column(Text, default="")
    extra: Mapped[dict | None] = mapped_column(JSON, nullable=True)
    # Where an executor placed the trial: {"executor", "nodes": [...], "gpus_per_node", "gpus", "groups": [...]}
    placement: Mapped[dict | None] = mapped_column(JSON, nullable=True)
    note: Mapped[str] = mapped_column(Text, default="")
    worker: Mapped[str] = mapped_column(String(255), default="")
    started_at: Mapped[dt.datetime] = mapped_column(DateTime, default=utcnow)
    heartbeat_at: Mapped[dt.datetime] = mapped_column(DateTime, default=utcnow)
    finished_at: Mapped[dt.datetime | None] = mapped_column(DateTime, nullable=True)
    duration_s: Mapped[float | None] = mapped_column(Float, nullable=True)


class StepRow(Base):
    __tablename__ = "autotune_steps"
    __table_args__ = (UniqueConstraint("trial_id", "step"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    trial_id: Mapped[int] = mapped_column(Integer, ForeignKey("autotune_trials.id"), index=True)
    step: Mapped[int] = mapped_column(Integer)
    metrics: Mapped[dict] = mapped_column(JSON)


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def row_dict(row: Base) -> dict[str, Any]:
    return {c.name: getattr(row, c.name) for c in row.__table__.columns}


class Store:
    """Sessions over one database URL (the same URL Optuna's storage uses)."""

    def __init__(self, url: str, engine: Engine | None = None):
        self.url = url
        try:
            self.engine = engine or create_engine(url, pool_pre_ping=True)
            try:
                Base.metadata.create_all(self.engine)
                _add_new_columns(self.engine)
            except SQLAlchemyError:  # another worker creating the same tables at the same moment: once more
                time.sleep(0.5)
                Base.metadata.create_all(self.engine)
                _add_new_columns(self.engine)
        except SQLAlchemyError as e:
            raise StoreError(unreachable_message(url, e)) from None
        self._session = sessionmaker(self.engine, expire_on_commit=False)

    @contextmanager
    def session(self) -> Iterator[Session]:
        with self._session() as s:
            try:
                yield s
                s.commit()
            except SQLAlchemyError as e:
                s.rollback()
                raise StoreError(f"database error on {safe_url(self.url)}: {e.__class__.__name__}: {e}") from e

    # Studies
    def get_study(self, name: str) -> StudyRow | None:
        with self.session() as s:
            return s.get(StudyRow, name)

    def list_studies(self) -> list[StudyRow]:
        with self.session() as s:
            return list(s.scalars(select(StudyRow).order_by(StudyRow.created_at)))

    def add_study(self, row: StudyRow) -> None:
        with self.session() as s:
            s.add(row)

    def touch_study(self, name: str) -> None:
        with self.session() as s:
            s.execute(update(StudyRow).where(StudyRow.name == name).values(updated_at=utcnow()))

    def set_study_note(self, name: str, note: str) -> None:
        with self.session() as s:
            s.execute(update(StudyRow).where(StudyRow.name == name).values(note=note))

    # Trials
    def add_trial(self, row: TrialRow) -> int:
        with self.session() as s:
            s.add(row)
            s.flush()
            return row.id

    def add_launched(self, row: TrialRow, limit: int | None = None) -> tuple[int | None, str]:
        """Insert a trial about to launch, atomically with the checks that several workers must agree on:
        fewer than `limit` launched trials in the study, and no launched or running trial of the same
        configuration. Returns (id, "") or (None, why not). The study row is updated first: a row lock in
        PostgreSQL, the write lock in SQLite, held until commit, so concurrent workers take turns here.
        """
        with self.session() as s:
            s.execute(update(StudyRow).where(StudyRow.name == row.study).values(updated_at=utcnow()))
            if limit is not None:
                n = s.scalar(select(func.count()).select_from(TrialRow).where(
                    TrialRow.study == row.study, TrialRow.launched.is_(True)))
                if int(n or 0) >= limit:
                    return None, f"not launched: the study holds {n} launched trials already (--n-trials {limit})"
            dup = s.scalar(select(TrialRow.number).where(
                TrialRow.study == row.study, TrialRow.candidate_key == row.candidate_key, TrialRow.launched.is_(True),
                TrialRow.status != "interrupted").order_by(TrialRow.number).limit(1))
            if dup is not None:
                return None, f"duplicate of trial {dup}: same configuration, launched by another worker"
            s.add(row)
            s.flush()
            return row.id, ""

    def update_trial(self, trial_id: int, **values: Any) -> None:
        with self.session() as s:
            s.execute(update(TrialRow).where(TrialRow.id == trial_id).values(**values))

    def heartbeat(self, trial_id: int) -> None:
        self.update_trial(trial_id, heartbeat_at=utcnow())

    def add_steps(self, trial_id: int, steps: list[dict[str, Any]] | tuple[dict[str, Any], ...]) -> None:
        with self.session() as s:
            for st in steps:
                metrics = {k: v for k, v in st.items() if k != "step"}
                s.add(StepRow(trial_id=trial_id, step=int(st["step"]), metrics=metrics))

    def trials(self, study: str, status: str | None = None) -> list[TrialRow]:
        with self.session() as s:
            q = select(TrialRow).where(TrialRow.study == study)
            if status:
                q = q.where(TrialRow.status == status)
            return list(s.scalars(q.order_by(TrialRow.number)))

    def trial(self, study: str, number: int) -> TrialRow | None:
        with self.session() as s:
            return s.scalars(select(TrialRow).where(TrialRow.study == study, TrialRow.number == number)).first()

    def steps(self, trial_id: int) -> list[StepRow]:
        with self.session() as s:
            return list(s.scalars(select(StepRow).where(StepRow.trial_id == trial_id).order_by(StepRow.step)))

    def set_trial_note(self, trial_id: int, note: str) -> None:
        self.update_trial(trial_id, note=note)

    def best(self, study: str) -> TrialRow | None:
        """The fastest trial that ran to its measured step."""
        with self.session() as s:
            q = (
                select(TrialRow)
                .where(TrialRow.study == study, TrialRow.status == "ok", TrialRow.throughput.is_not(None))
                .order_by(TrialRow.throughput.desc(), TrialRow.number)
                .limit(1)  # the ORM would otherwise load every ok trial to return the first
            )
            return s.scalars(q).first()

    def running(self, study: str) -> list[TrialRow]:
        return self.trials(study, "running")

    def launched_count(self, study: str) -> int:
        """Trials launched so far (one COUNT query: the tuner asks before every step)."""
        with self.session() as s:
            q = select(func.count()).select_from(TrialRow).where(TrialRow.study == study, TrialRow.launched.is_(True))
            return int(s.scalar(q) or 0)

    def launched_with_key(self, study: str, key: str, exclude: tuple[str, ...] = ()) -> int | None:
        """Number of the first launched trial of this configuration (statuses in `exclude` left out), or None."""
        with self.session() as s:
            q = select(TrialRow.number).where(TrialRow.study == study, TrialRow.candidate_key == key,
                                              TrialRow.launched.is_(True))
            if exclude:
                q = q.where(TrialRow.status.not_in(exclude))
            return s.scalar(q.order_by(TrialRow.number).limit(1))


# Columns added after a table's first release: databases made before get them on open (nullable, no default).
_NEW_COLUMNS = {"autotune_trials": ("placement",)}


def _add_new_columns(engine: Engine) -> None:
    from sqlalchemy import inspect, text

    insp = inspect(engine)
    for table, names in _NEW_COLUMNS.items():
        have = {c["name"] for c in insp.get_columns(table)}
        for name in names:
            if name not in have:
                col = Base.metadata.tables[table].c[name]
                with engine.begin() as conn:
                    conn.execute(text(f"ALTER TABLE {table} ADD COLUMN {name} {col.type.compile(engine.dialect)}"))


def safe_url(url: str) -> str:
    """The URL without its password, for messages."""
    try:
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return url


def unreachable_message(url: str, err: Exception) -> str:
    first = str(err).splitlines()[0] if str(err) else type(err).__name__
    return (
        f"cannot open the study database {safe_url(url)}: {first}. "
        "Check that the server is running and the URL, user and password are right, or use a local file: "
        "--storage sqlite:///trials/autotune.db"
    )
