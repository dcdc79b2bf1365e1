"""Opening a study database, and whether it can be used, said in one line before anything is written: the URL's
driver missing, the server unreachable, the file read-only, or the database not there yet (then a refused run must
not create it). autotune/store/store.py holds the tables; this module imports nothing of autotune.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import optuna
from sqlalchemy import text
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import IntegrityError


class StoreError(RuntimeError):
    """The database cannot be opened or written; the message says which URL and what to do."""


# The pyproject extra that installs autotune's PostgreSQL driver (psycopg 3).
POSTGRES_EXTRA = "pip install 'autotune[postgres]'"
# SQLAlchemy's PostgreSQL drivers and what installs each.
_DRIVERS = {"psycopg": f"{POSTGRES_EXTRA} (psycopg 3)", "psycopg2": "pip install psycopg2-binary",
            "asyncpg": "pip install asyncpg", "pg8000": "pip install pg8000"}


def sqlite_file(url: str) -> Path | None:
    """The file a SQLite URL names (`sqlite:///x.db`, `sqlite:///file:x.db?mode=ro&uri=true`); None for another
    database or an in-memory one."""
    try:
        u = make_url(url)
    except Exception:
        return None
    if u.get_backend_name() != "sqlite" or not u.database or u.database == ":memory:":
        return None
    name = u.database
    if name.startswith("file:"):
        if "mode=memory" in name or u.query.get("mode") == "memory":
            return None
        name = name.removeprefix("file:").split("?", 1)[0]
    return Path(name).expanduser()


def database_absent(url: str) -> bool:
    """The URL names a SQLite file that does not exist yet: opening it would create it."""
    path = sqlite_file(url)
    return path is not None and not path.exists()


def open_storage(url: str) -> optuna.storages.RDBStorage:
    """Optuna's storage over the URL (its tables made where missing); StoreError in one line when it cannot be."""
    try:
        path = sqlite_file(url)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
        engine_kwargs = {"connect_args": {"timeout": 30}} if url.startswith("sqlite") else {"pool_pre_ping": True}
        return retry_schema_race(lambda: optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs))
    except Exception as e:  # OSError, sqlalchemy OperationalError / ArgumentError, a missing driver...
        raise StoreError(unreachable_message(url, e)) from None


def check_writable(engine: Engine, url: str) -> None:
    """Refuse a database autotune can read but not write (a read-only file, `chattr +i`, a read-only user or
    transaction), before a study writes its first row: one line naming it and what to do. Optuna's one-row
    `version_info` is rewritten in a transaction that is rolled back: nothing changes."""
    try:
        with engine.connect() as conn, conn.begin() as tx:
            conn.execute(text("UPDATE version_info SET library_version = 'autotune write check'"))
            tx.rollback()
    except Exception as e:
        first = str(getattr(e, "orig", None) or e).splitlines()[0]
        if "no such table" in first or "does not exist" in first:
            return  # no Optuna tables yet: they are made next, and that write says what is wrong
        raise StoreError(readonly_message(url, first)) from None


def readonly_message(url: str, why: str) -> str:
    path = sqlite_file(url)
    if "mode=ro" in url:
        where = "the URL opens it read-only: drop mode=ro from it"
    elif path is not None:
        where = f"make the file and its directory writable (`chattr -i {path}`, `chmod u+w`)"
    else:
        where = "connect as a user who may write it"

    return (f"the study database {safe_url(url)} cannot be written ({why}): {where}, or give --storage a database "
            "you can write; reading commands (status, best, export, dashboard) work on it as it is")


def unreachable_message(url: str, err: Exception) -> str:
    first = str(err).splitlines()[0] if str(err) else type(err).__name__
    first = first.replace(url, safe_url(url))  # SQLAlchemy repeats an unparsable URL whole
    missing = _missing_driver(url, err)
    if missing:
        return missing
    if "readonly database" in first or "read-only" in first:
        return readonly_message(url, first)
    if url.startswith("sqlite"):  # a file, no server: say what can be wrong with a file
        return (f"cannot open the study database {safe_url(url)}: {first}. Check the path: its directory must exist "
                "and be writable, and the file must be a SQLite database (`autotune run` creates one)")
    return (
        f"cannot open the study database {safe_url(url)}: {first}. "
        "Check that the server is running and the URL, user and password are right, or use a local file: "
        "--storage sqlite:///trials/autotune.db"
    )


def _missing_driver(url: str, err: BaseException) -> str | None:
    """One line naming the database driver the URL asks for and how to install it, when it is not installed."""
    chain, e = [], err
    while e is not None and len(chain) < 5:
        chain.append(e)
        e = e.__cause__ or e.__context__
    if not any(isinstance(x, ImportError) or "Failed to import DB access module" in str(x) for x in chain):
        return None
    scheme = url.split("://", 1)[0]
    dialect, _, driver = scheme.partition("+")
    if dialect.startswith("postgres"):
        driver = driver or _default_driver(url)
        how = _DRIVERS.get(driver, f"pip install {driver}")
        alt = "" if driver == "psycopg" else f"; or use postgresql+psycopg://... with {POSTGRES_EXTRA}"
        return f"cannot open the study database {safe_url(url)}: its driver {driver} is not installed: {how}{alt}"
    return (f"cannot open the study database {safe_url(url)}: the driver for {scheme}:// is not installed "
            f"({type(chain[-1]).__name__}: {chain[-1]})")


def _default_driver(url: str) -> str:
    """The driver SQLAlchemy picks for `postgresql://` (psycopg2 up to 2.0, psycopg from 2.1)."""
    try:
        return make_url(url).get_driver_name()
    except Exception:
        return "psycopg2"


def retry_schema_race(create: Any, attempts: int = 6) -> Any:
    """Run `create` (tables made on first use, or a row another tuner may insert at the same moment), again when
    another worker made it first: PostgreSQL then says 'duplicate key ... pg_type', SQLite 'already exists' or
    'database is locked'; a row's insert fails its key (an IntegrityError, also wrapped in a StoreError)."""
    for attempt in range(attempts):
        try:
            return create()
        except Exception as e:
            said = str(e)
            race = isinstance(e, IntegrityError) or isinstance(e.__cause__, IntegrityError) \
                or "already exists" in said or "database is locked" in said or "pg_type_typname_nsp_index" in said
            if not race or attempt == attempts - 1:
                raise
            time.sleep(0.1 * (attempt + 1))
    return None


def safe_url(url: str) -> str:
    """The URL without its password, for messages: also one SQLAlchemy cannot parse (a non-numeric port), whose
    `user:password@` is masked by hand. Every URL autotune prints goes through here."""
    try:
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return re.sub(r"^([^:/?#]+://[^:/@?#]*):[^@/]*@", r"\1:***@", url)
