"""autotune's tables, in the same database as Optuna's: what Optuna's tables do not hold (the rows' schema; the
sessions over them are store.py's).

Studies keep the full model, cluster, job and space they were made for (so export and the dashboard need only
the database); trials keep status, reason, predicted and measured numbers, phase timings, memory breakdown, log
path and excerpt; steps keep every step's metrics.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import JSON, Boolean, DateTime, Float, ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


REQUESTED = "user"  # origin of a configuration the user asked to launch (`run --enqueue`)
FORCED = "requested"  # extra key: why a requested configuration launched although the model predicted it fails
NVML_MOMENTS = "nvml_moments_gib"  # extra key: {moment: GiB NVML saw in the measured step} (results/memory_trace.py)


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
    # What the study knew of the sequence lengths before any measurement (Setup.length_inputs: --response-length,
    # the prompts of the job's data): a setup rebuilt where the data is not (export, the dashboard, a replay) judges
    # as the study did. None: a study made before it was kept.
    lengths: Mapped[dict | None] = mapped_column(JSON, nullable=True)


class TrialRow(Base):
    __tablename__ = "autotune_trials"
    __table_args__ = (UniqueConstraint("study", "number"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    study: Mapped[str] = mapped_column(String(255), ForeignKey("autotune_studies.name"), index=True)
    number: Mapped[int] = mapped_column(Integer)  # Optuna's trial number in the study
    status: Mapped[str] = mapped_column(String(32), index=True)
    reason: Mapped[str] = mapped_column(Text, default="")
    # sampler | model-seed | stock | baseline | requeue | user (REQUESTED)
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


class ProfileRow(Base):
    """A profile of a configuration (autotune profile): where its step's time went, and the advice it gave.

    Its own table (databases from before it get it on open); linked to a trial by (study, trial number) when it
    profiles one, else standalone (`autotune profile --model ... --set ...`). The profiled run's own speed is not the
    trial's measurement (the profiler slows it) and never replaces it.
    """

    __tablename__ = "autotune_profiles"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    study: Mapped[str | None] = mapped_column(String(255), nullable=True, index=True)
    trial_number: Mapped[int | None] = mapped_column(Integer, nullable=True)
    backend: Mapped[str] = mapped_column(String(64), default="")  # verl | mcore | traces (analysed as found)
    tool: Mapped[str] = mapped_column(String(32), default="torch")
    step: Mapped[int | None] = mapped_column(Integer, nullable=True)  # the profiled training step
    status: Mapped[str] = mapped_column(String(32), default="ok")  # ok | failed (the run gave no traces)
    reason: Mapped[str] = mapped_column(Text, default="")
    params: Mapped[dict | None] = mapped_column(JSON, nullable=True)  # the configuration's parameters
    trace_dir: Mapped[str] = mapped_column(Text, default="")
    analysis: Mapped[dict | None] = mapped_column(JSON, nullable=True)  # autotune.profile.analysis as_dict()
    advice: Mapped[list | None] = mapped_column(JSON, nullable=True)  # autotune.profile.advice, judged proposals
    run: Mapped[dict | None] = mapped_column(JSON, nullable=True)  # the profiled run: status, phase timings, log
    created_at: Mapped[dt.datetime] = mapped_column(DateTime, default=utcnow)


class CorrectionRow(Base):
    """A study's learned correction of the model (autotune/search/learning.py), refitted after each measured trial; what
    `status`, the dashboard, `estimate --study` and later studies' warm starts read."""

    __tablename__ = "autotune_corrections"

    study: Mapped[str] = mapped_column(String(255), ForeignKey("autotune_studies.name"), primary_key=True)
    gpu: Mapped[str] = mapped_column(String(64), default="")  # GPU type: warm starts match on it
    family: Mapped[str] = mapped_column(String(255), default="")  # model family (architecture), likewise
    objective: Mapped[str] = mapped_column(String(32), default="step")
    trials: Mapped[int] = mapped_column(Integer, default=0)  # measured trials of this study it was fitted on
    doc: Mapped[dict] = mapped_column(JSON)  # Correction.as_dict()
    updated_at: Mapped[dt.datetime] = mapped_column(DateTime, default=utcnow)


def row_dict(row: Base) -> dict[str, Any]:
    return {c.name: getattr(row, c.name) for c in row.__table__.columns}


# Columns added after a table's first release: databases made before get them on open (nullable, no default).
NEW_COLUMNS = {"autotune_trials": ("placement",), "autotune_studies": ("lengths",)}


def add_new_columns(engine: Engine) -> None:
    from sqlalchemy import inspect, text

    insp = inspect(engine)
    for table, names in NEW_COLUMNS.items():
        have = {c["name"] for c in insp.get_columns(table)}
        for name in names:
            if name not in have:
                col = Base.metadata.tables[table].c[name]
                with engine.begin() as conn:
                    conn.execute(text(f"ALTER TABLE {table} ADD COLUMN {name} {col.type.compile(engine.dialect)}"))
