"""Where a study lives: Optuna storages by URL (SQLite in the run folder, a journal file, a
database server), the URL as workers and records see it, and a finished sweep's study loaded back."""

from __future__ import annotations

import os
from pathlib import Path

from hybridlab.errors import InvalidValueError
from hybridlab.extras import require
from hybridlab.tune.record import SweepRecord

#: `journal:PATH` selects Optuna's JournalStorage over the file PATH
JOURNAL_PREFIX = "journal:"


def storage_for(url: str | None, run_dir: str | os.PathLike | None = None):
    """An Optuna storage for `url`: None = SQLite `study.db` in the run folder; `sqlite:///…` with a
    long lock timeout (several local worker processes share it); `journal:PATH` = Optuna's
    JournalStorage over an append-only file (a file on shared storage, NFS-safe lock); any other
    SQLAlchemy URL (`postgresql://…`, through psycopg 3) as an RDBStorage that checks pooled
    connections before use."""
    require("optuna")
    import optuna

    if url is None:
        if run_dir is None:
            raise InvalidValueError("give a storage URL or a run folder")
        url = f"sqlite:///{Path(run_dir).resolve() / 'study.db'}"
    if url.startswith(JOURNAL_PREFIX):
        from optuna.storages.journal import JournalFileBackend

        path = Path(url.removeprefix(JOURNAL_PREFIX)).expanduser()
        if not path.name:
            raise InvalidValueError(f"journal storage needs a file: journal:PATH, got {url!r}")
        path.parent.mkdir(parents=True, exist_ok=True)
        return optuna.storages.JournalStorage(JournalFileBackend(str(path)))
    if url.startswith("sqlite:"):
        return optuna.storages.RDBStorage(url, engine_kwargs={"connect_args": {"timeout": 60}})
    if url.startswith("postgresql://"):  # psycopg 3 (the `postgres` extra), whatever SQLAlchemy's default
        url = "postgresql+psycopg://" + url.removeprefix("postgresql://")
    try:
        return optuna.storages.RDBStorage(url, engine_kwargs={"pool_pre_ping": True})
    except ImportError as error:  # the database driver is missing
        driver = getattr(error.__cause__, "name", None) or "its database driver"
        extra = " (pip install 'hybridlab[postgres]')" if url.startswith("postgres") else ""
        raise ImportError(f"storage {url.split('://')[0]}:// needs {driver}{extra}") from error


def shared_storage(storage: str | None, run_dir: str | os.PathLike | None) -> str:
    """The storage URL worker processes reach the study at: `storage`, else the run folder's SQLite
    file, as an absolute path."""
    if storage:
        return storage
    # the study is in the run folder's SQLite file (`storage_for` refused neither given)
    assert run_dir is not None
    return f"sqlite:///{Path(run_dir).resolve() / 'study.db'}"


def absolute_storage(url: str | None) -> str | None:
    """`url` with a relative `journal:` or SQLite path made absolute (notebooks and workers run in
    other folders)."""
    if url is None:
        return None
    if url.startswith(JOURNAL_PREFIX):
        return JOURNAL_PREFIX + str(Path(url.removeprefix(JOURNAL_PREFIX)).expanduser().resolve())
    path = url.removeprefix("sqlite:///")
    if url.startswith("sqlite:///") and path and not path.startswith("/") and path != ":memory:":
        return f"sqlite:///{Path(path).resolve()}"
    return url


def public_storage(url: str | None) -> str | None:
    """`url` without its password, for records (libpq reads it from PGPASSWORD or ~/.pgpass)."""
    if url is None or url.startswith(JOURNAL_PREFIX) or "@" not in url:
        return url
    require("sqlalchemy")
    from sqlalchemy.engine import URL, make_url

    parsed = make_url(url)
    return URL.create(
        parsed.drivername, parsed.username, None, parsed.host, parsed.port, parsed.database, parsed.query
    ).render_as_string(hide_password=False)


def load_study(run_dir: str | os.PathLike):
    """The Optuna study a sweep run recorded (its storage URL, else `study.db` in the folder)."""
    require("optuna")
    import optuna

    run_dir = Path(run_dir)
    record = SweepRecord.read(run_dir)
    return optuna.load_study(study_name=record.study, storage=storage_for(record.storage, run_dir))
