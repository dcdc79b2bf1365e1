"""Sessions over autotune's tables (schema.py), beside Optuna's in the same database: studies, trials and their
steps, profiles, corrections; the atomic launch claim that keeps two workers from launching one configuration."""

from __future__ import annotations

import datetime as dt
import os
import socket
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import (
    create_engine,
    func,
    select,
    update,
)
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from autotune.estimate import safer
from autotune.store.access import StoreError, database_absent, retry_schema_race, safe_url, unreachable_message
from autotune.store.schema import (
    Base,
    CorrectionRow,
    ProfileRow,
    StepRow,
    StudyRow,
    TrialRow,
    add_new_columns,
    utcnow,
)


class TrialTaken(StoreError):
    """Another tuner already recorded this Optuna trial (a recovery closed it as orphaned): skip it."""


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class Store:
    """Sessions over one database URL (the same URL Optuna's storage uses)."""

    def __init__(self, url: str, engine: Engine | None = None):
        self.url = url
        try:
            # SQLite: wait for a concurrent writer (another worker, Optuna's own engine) rather than fail at 5 s.
            kwargs: dict[str, Any] = {"connect_args": {"timeout": 30}} if url.startswith("sqlite") else {}
            self.engine = engine or create_engine(url, pool_pre_ping=True, **kwargs)
            retry_schema_race(lambda: Base.metadata.create_all(self.engine))
            retry_schema_race(lambda: add_new_columns(self.engine))
        except (SQLAlchemyError, ImportError, ValueError) as e:  # unreachable, no driver, a malformed URL
            raise StoreError(unreachable_message(url, e)) from None
        self._session = sessionmaker(self.engine, expire_on_commit=False)

    @classmethod
    def peek(cls, url: str) -> Store:
        """The database as it is, creating nothing: where it has no file or no autotune tables yet, an empty
        in-memory store (a run refused before its study exists must leave no database behind)."""
        from sqlalchemy import inspect

        if not database_absent(url):
            try:
                kwargs: dict[str, Any] = {"connect_args": {"timeout": 30}} if url.startswith("sqlite") else {}
                engine = create_engine(url, pool_pre_ping=True, **kwargs)
                if inspect(engine).has_table(StudyRow.__tablename__):
                    return cls(url, engine)
                engine.dispose()
            except (SQLAlchemyError, ImportError, ValueError) as e:
                raise StoreError(unreachable_message(url, e)) from None
        return cls("sqlite://")

    @property
    def in_memory(self) -> bool:
        """A peek at a database that does not exist yet (Store.peek)."""
        return self.url == "sqlite://"

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

    # Learned corrections of the model
    def save_correction(self, row: CorrectionRow) -> None:
        """Insert or replace the study's correction. Tuners of one study refit at once: `merge` reads, then
        inserts, so a second first-writer loses the race with a duplicate key; its retry finds the row and
        updates it (last writer wins, as with any refit)."""
        row.updated_at = utcnow()

        def merge() -> None:
            with self.session() as s:
                s.merge(row)

        retry_schema_race(merge)

    def correction(self, study: str) -> CorrectionRow | None:
        with self.session() as s:
            return s.get(CorrectionRow, study)

    def corrections(self, gpu: str | None = None, family: str | None = None, objective: str | None = None
                    ) -> list[CorrectionRow]:
        """Saved corrections with at least one measured trial, newest first (optionally of one GPU type, model
        family and objective)."""
        q = select(CorrectionRow).where(CorrectionRow.trials > 0)
        for col, value in ((CorrectionRow.gpu, gpu), (CorrectionRow.family, family),
                           (CorrectionRow.objective, objective)):
            if value is not None:
                q = q.where(col == value)
        with self.session() as s:
            return list(s.scalars(q.order_by(CorrectionRow.updated_at.desc())))

    def launched_configurations(self, study: str, exclude: tuple[str, ...] = ()) -> list[Any]:
        """(number, origin, status, reason, candidate_key, params, simulated) of launched trials, statuses in
        `exclude` left out: what the study's plan must not propose again."""
        t = TrialRow
        q = select(t.number, t.origin, t.status, t.reason, t.candidate_key, t.params, t.simulated).where(
            t.study == study, t.launched.is_(True))
        if exclude:
            q = q.where(t.status.not_in(exclude))
        with self.session() as s:
            return list(s.execute(q.order_by(t.number)))

    def measured_trials(self, study: str) -> list[TrialRow]:
        """Launched trials that measured something (ok or oom, not simulated): what the model learns from."""
        t = TrialRow
        with self.session() as s:
            return list(s.scalars(select(t).where(t.study == study, t.launched.is_(True), t.simulated.is_(False),
                                                  t.status.in_(("ok", "oom"))).order_by(t.number)))

    def origins(self, study: str) -> list[Any]:
        """(origin, status, reason, launched) of trials seeded by the plan (every origin but the sampler's)."""
        t = TrialRow
        with self.session() as s:
            return list(s.execute(select(t.origin, t.status, t.reason, t.launched).where(
                t.study == study, t.origin != "sampler").order_by(t.number)))

    # Trials
    def add_trial(self, row: TrialRow) -> int:
        try:
            with self.session() as s:
                s.add(row)
                s.flush()
                return row.id
        except StoreError as e:
            if isinstance(e.__cause__, IntegrityError):
                raise TrialTaken(f"trial {row.number} of {row.study} is already recorded") from None
            raise

    def add_finished_trial(self, row: TrialRow, steps: tuple[dict[str, Any], ...] = ()) -> int:
        """A trial recorded final with its steps, in one transaction (`autotune import`)."""
        try:
            with self.session() as s:
                s.add(row)
                s.flush()
                for st in steps:
                    s.add(StepRow(trial_id=row.id, step=int(st["step"]),
                                  metrics={k: v for k, v in st.items() if k != "step"}))
                return row.id
        except StoreError as e:
            if isinstance(e.__cause__, IntegrityError):
                raise TrialTaken(f"trial {row.number} of {row.study} is already recorded") from None
            raise

    def claim_launch(self, row: TrialRow, limit: int | None, exclude: tuple[str, ...]) -> str | None:
        """Record `row` as launched, atomically: None when it may launch, else why not (row recorded as pruned).

        One transaction, serialised per study by a write to its study row: the launched count and the duplicate
        check see every other worker's committed launches, so no configuration is launched twice and the
        study never holds more than `limit` launched trials (statuses in `exclude` do not count).
        """
        try:
            with self.session() as s:
                s.execute(update(StudyRow).where(StudyRow.name == row.study).values(updated_at=utcnow()))
                launched = (TrialRow.study == row.study, TrialRow.launched.is_(True), TrialRow.status.not_in(exclude))
                reason = None
                if limit is not None:
                    n = int(s.scalar(select(func.count()).select_from(TrialRow).where(*launched)) or 0)
                    if n >= limit:
                        reason = f"not launched: the study already holds {n} launched trials (--n-trials {limit})"
                if reason is None:
                    dup = s.scalar(select(TrialRow.number).where(*launched, TrialRow.candidate_key == row.candidate_key)
                                   .order_by(TrialRow.number).limit(1))
                    if dup is not None:
                        reason = f"duplicate of trial {dup}: same configuration, not launched again"
                if reason is not None:
                    row.status, row.reason, row.launched = "pruned", reason, False
                    row.finished_at, row.duration_s = utcnow(), 0.0
                else:
                    row.launched = True
                s.add(row)
                s.flush()
                return reason
        except StoreError as e:
            if isinstance(e.__cause__, IntegrityError):
                raise TrialTaken(f"trial {row.number} of {row.study} is already recorded") from None
            raise

    def finish_trial(self, trial_id: int, values: dict[str, Any], steps: tuple[dict[str, Any], ...] = ()) -> None:
        """A trial's result and its steps in one transaction (a tuner killed half-way leaves neither)."""
        with self.session() as s:
            s.execute(update(TrialRow).where(TrialRow.id == trial_id).values(**values))
            for st in steps:
                metrics = {k: v for k, v in st.items() if k != "step"}
                s.add(StepRow(trial_id=trial_id, step=int(st["step"]), metrics=metrics))

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

    def trial_summaries(self, study: str, launched_only: bool = False) -> list[Any]:
        """The trials' small columns, in trial order (`autotune status`: no memory breakdown, logs or extras)."""
        t = TrialRow
        cols = (t.number, t.status, t.reason, t.origin, t.launched, t.simulated, t.candidate_key, t.params,
                t.throughput, t.predicted_throughput, t.predicted_peak_gib, t.peak_memory_gib, t.framework_memory_gib,
                t.placement)
        q = select(*cols).where(t.study == study)
        if launched_only:
            q = q.where(t.launched.is_(True))
        with self.session() as s:
            return list(s.execute(q.order_by(t.number)))

    def predicted_memories(self, study: str, numbers: Iterable[int]) -> dict[int, dict]:
        """Trial number -> its memory record (`predicted_memory`), for the trials `status` shows (read apart from
        trial_summaries: the records are the large column)."""
        t = TrialRow
        wanted = list(numbers)
        with self.session() as s:
            rows = s.execute(select(t.number, t.predicted_memory).where(t.study == study, t.number.in_(wanted)))
            return {n: m for n, m in rows if m}

    def status_counts(self, study: str) -> dict[str, int]:
        """Trials per status, statuses in the order their first trial appeared."""
        t = TrialRow
        with self.session() as s:
            rows = s.execute(select(t.status, func.count(), func.min(t.number)).where(t.study == study)
                             .group_by(t.status).order_by(func.min(t.number))).all()
        return {status: int(n) for status, n, _ in rows}

    def trial(self, study: str, number: int) -> TrialRow | None:
        with self.session() as s:
            return s.scalars(select(TrialRow).where(TrialRow.study == study, TrialRow.number == number)).first()

    def steps(self, trial_id: int) -> list[StepRow]:
        with self.session() as s:
            return list(s.scalars(select(StepRow).where(StepRow.trial_id == trial_id).order_by(StepRow.step)))

    def set_trial_note(self, trial_id: int, note: str) -> None:
        self.update_trial(trial_id, note=note)

    # Profiles (autotune profile)
    def add_profile(self, row: ProfileRow) -> int:
        with self.session() as s:
            s.add(row)
            s.flush()
            return row.id

    def profiles(self, study: str, number: int) -> list[ProfileRow]:
        """A trial's profiles, newest first."""
        with self.session() as s:
            q = select(ProfileRow).where(ProfileRow.study == study, ProfileRow.trial_number == number)
            return list(s.scalars(q.order_by(ProfileRow.id.desc())))

    def profile(self, profile_id: int) -> ProfileRow | None:
        with self.session() as s:
            return s.get(ProfileRow, profile_id)

    def profile_ids(self) -> list[int]:
        """Every stored profile's id, oldest first: what an error about a missing profile or study can point to."""
        with self.session() as s:
            return list(s.scalars(select(ProfileRow.id).order_by(ProfileRow.id)))

    def best(self, study: str) -> TrialRow | None:
        """The winner of the trials that ran to their measured step: the fastest, unless its memory verdict is not
        safe and a safe trial is within the model's error of it (safer.py); `fastest` is the other."""
        top = self.fastest(study)
        if top is None or safer.verdict_safe(top.predicted_memory):
            return top
        with self.session() as s:
            q = (
                select(TrialRow)
                .where(TrialRow.study == study, TrialRow.status == "ok",
                       TrialRow.throughput >= top.throughput * (1 - safer.SAFE_TOLERANCE))
                .order_by(TrialRow.throughput.desc(), TrialRow.number)
            )
            near = list(s.scalars(q))
        return safer.prefer_safe(near, lambda r: r.throughput, lambda r: safer.verdict_safe(r.predicted_memory))[0]

    def fastest(self, study: str) -> TrialRow | None:
        """The fastest trial that ran to its measured step, safe or not."""
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

    def launched_count(self, study: str, exclude: tuple[str, ...] = ()) -> int:
        """Trials launched so far, statuses in `exclude` left out (one COUNT query: asked before every step)."""
        with self.session() as s:
            q = select(func.count()).select_from(TrialRow).where(TrialRow.study == study, TrialRow.launched.is_(True))
            if exclude:
                q = q.where(TrialRow.status.not_in(exclude))
            return int(s.scalar(q) or 0)

    def recent_workers(self, study: str, since: dt.datetime) -> set[str]:
        """Workers that started or heartbeat a trial of this study since `since` (those that may be alive)."""
        with self.session() as s:
            q = select(TrialRow.worker).where(TrialRow.study == study).where(
                (TrialRow.started_at >= since) | (TrialRow.heartbeat_at >= since)).distinct()
            return set(s.scalars(q))

    def launched_with_key(self, study: str, key: str, exclude: tuple[str, ...] = ()) -> int | None:
        """Number of the first launched trial of this configuration (statuses in `exclude` left out), or None."""
        with self.session() as s:
            q = select(TrialRow.number).where(TrialRow.study == study, TrialRow.candidate_key == key,
                                              TrialRow.launched.is_(True))
            if exclude:
                q = q.where(TrialRow.status.not_in(exclude))
            return s.scalar(q.order_by(TrialRow.number).limit(1))
