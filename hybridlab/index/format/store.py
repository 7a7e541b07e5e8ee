"""The DuckDB store: documents, chunks, tags and per-model vector assignments.

DuckDB is the single source of ids: chunk ids are int64 assigned here, FAISS ids and BM25 rows
align to them.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import threading
import weakref
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, overload

import duckdb
import numpy as np

from hybridlab.errors import InvalidValueError, StoreError, StoreLockedError

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key VARCHAR, value VARCHAR);
CREATE TABLE IF NOT EXISTS documents (
    doc_id VARCHAR NOT NULL, source VARCHAR, collection VARCHAR, title VARCHAR, text VARCHAR,
    doc_type VARCHAR, created_at TIMESTAMP, updated_at TIMESTAMP, metadata JSON,
    language VARCHAR, tags VARCHAR[], content_sha256 VARCHAR, content_key VARCHAR
);
CREATE TABLE IF NOT EXISTS chunks (
    chunk_id BIGINT NOT NULL, doc_id VARCHAR NOT NULL, chunk_index INTEGER, section VARCHAR,
    chunk_type VARCHAR, text VARCHAR, start_char INTEGER, end_char INTEGER, language VARCHAR,
    embed_text VARCHAR, embed_sha256 VARCHAR
);
CREATE TABLE IF NOT EXISTS tags (chunk_id BIGINT NOT NULL, doc_id VARCHAR NOT NULL, tag VARCHAR NOT NULL);
CREATE TABLE IF NOT EXISTS chunk_vectors (chunk_id BIGINT NOT NULL, model VARCHAR NOT NULL, embed_sha256 VARCHAR NOT NULL);
"""


@dataclass(frozen=True)
class StoredDocument:
    """One row of the `documents` table as a reader returns it: `created_at`/`updated_at` as
    ISO-8601 UTC strings with a Z (None when the source gave none), `metadata` parsed from its JSON,
    `tags` in their stored order. Defined here, below the read side and the write path, because both
    take it: the search engine builds it and the memory writer derives a memory's next version
    from it. :meth:`to_dict` is its JSON shape (tags as a list), field for field in this order."""

    doc_id: str
    source: str
    collection: str
    title: str
    text: str
    doc_type: str
    created_at: str | None = None
    updated_at: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    tags: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["metadata"] = dict(self.metadata)
        data["tags"] = list(self.tags)
        return data


#: the old name of StoreError, kept so existing imports and `except` clauses still work
IndexError_ = StoreError


# DuckDB's buffer pool for writing connections (`HYBRIDLAB_DUCKDB_MEMORY` overrides, e.g. "4GB");
# why 512MB, as measured: docs/internals/index.md#store
WRITER_MEMORY_LIMIT = "512MB"


def writer_memory_limit() -> str:
    value = os.environ.get("HYBRIDLAB_DUCKDB_MEMORY", WRITER_MEMORY_LIMIT).strip()
    if not re.fullmatch(r"\d+(\.\d+)?\s*[KMGT]i?B", value, flags=re.IGNORECASE):
        raise InvalidValueError(f"HYBRIDLAB_DUCKDB_MEMORY must look like '1GB' or '512MiB', got {value!r}")
    return value


def connect(path: Path, read_only: bool = False):
    """A DuckDB connection; a collision with another process becomes a clear message. Writers get a
    bounded buffer pool (`writer_memory_limit`)."""

    try:
        con = duckdb.connect(str(path), read_only=read_only)
        if not read_only:
            con.execute(f"SET memory_limit = '{writer_memory_limit()}'")
        return con
    except duckdb.IOException as error:
        text = str(error)
        if "lock" in text.lower():
            raise StoreLockedError(
                f"{path} is opened for writing by another process ({text.splitlines()[0][:200]}); "
                "open the index read-only or wait for the writer to finish"
            ) from None
        raise StoreError(
            f"cannot open DuckDB file {path}: {text.splitlines()[0][:200]}; "
            "run `hybridlab verify --repair --index DIR`"
        ) from None


def create_schema(con) -> None:
    con.execute(SCHEMA)


@overload
def get_meta(con, key: str) -> str | None: ...
@overload
def get_meta(con, key: str, default: str) -> str: ...
@overload
def get_meta(con, key: str, default: str | None) -> str | None: ...
def get_meta(con, key: str, default: str | None = None) -> str | None:
    rows = con.execute("SELECT value FROM meta WHERE key = ?", [key]).fetchall()  # fetchall: no open result
    return rows[0][0] if rows else default


def set_meta(con, values: dict[str, Any]) -> None:
    """Set meta keys (two statements whatever their number)."""
    con.execute("DELETE FROM meta WHERE list_contains(?::VARCHAR[], key)", [list(values)])
    con.execute(
        f"INSERT INTO meta VALUES {', '.join(['(?, ?)'] * len(values))}",
        [item for key, value in values.items() for item in (key, str(value))],
    )


def document_hashes(con) -> dict[str, tuple[str, str]]:
    """`{doc_id: (source, content_sha256)}` of every stored document."""
    return {
        row[0]: (row[1], row[2])
        for row in con.execute("SELECT doc_id, source, content_sha256 FROM documents").fetchall()
    }


@contextlib.contextmanager
def registered(con, name: str, columns: Mapping[str, Any]) -> Iterator[None]:
    """`columns` ({name: values}, equally long) readable in `con` as table `name` for the block.

    DuckDB scans a dict of numpy arrays in place, as fast as a pandas frame and without pandas (which
    the server install leaves out). Numbers and booleans go as their numpy dtype; everything else
    (text, bytes, datetimes, None) as Python objects, which DuckDB types by their values (a numpy
    text array would become an ENUM)."""
    con.register(name, {column: _scannable(values) for column, values in columns.items()})
    try:
        yield
    finally:
        con.unregister(name)


def _scannable(values: Any) -> Any:
    """One column as a numpy array DuckDB reads with the right type (see `registered`)."""

    if isinstance(values, np.ndarray) and values.dtype.kind in "biufO":
        return values
    values = list(values)
    if values and all(isinstance(v, (int, float, np.number, np.bool_)) for v in values):
        return np.asarray(values)  # (a text column never becomes a fixed-width numpy array first)
    return np.fromiter(values, dtype=object, count=len(values))


def delete_documents(con, doc_ids: Sequence[str]) -> None:
    """Remove documents with their chunks, tags and vector assignments."""
    if not doc_ids:
        return
    with registered(con, "doomed", {"doc_id": list(doc_ids)}):
        con.execute(
            "DELETE FROM chunk_vectors WHERE chunk_id IN "
            "(SELECT chunk_id FROM chunks WHERE doc_id IN (SELECT doc_id FROM doomed))"
        )
        for table in ("tags", "chunks", "documents"):
            con.execute(f"DELETE FROM {table} WHERE doc_id IN (SELECT doc_id FROM doomed)")


def insert_rows(con, table: str, rows: dict[str, list]) -> None:
    """Bulk insert column lists (scanned as numpy arrays: far faster than executemany)."""
    if not rows or not next(iter(rows.values())):
        return
    columns = ", ".join(rows)
    with registered(con, "incoming", rows):
        con.execute(f"INSERT INTO {table} ({columns}) SELECT {columns} FROM incoming")


def metadata_json(metadata: dict) -> str:
    return json.dumps(metadata, sort_keys=True, default=str)


def counts(con) -> dict[str, Any]:
    """Counts per table, per collection, per chunk type and per model."""
    one = lambda sql: con.execute(sql).fetchone()[0]
    return {
        "documents": one("SELECT count(*) FROM documents"),
        "chunks": one("SELECT count(*) FROM chunks"),
        "tags": one("SELECT count(DISTINCT tag) FROM tags"),
        "by_collection": dict(
            con.execute(
                "SELECT d.collection, count(*) FROM chunks c JOIN documents d USING (doc_id) GROUP BY 1 ORDER BY 1"
            ).fetchall()
        ),
        "documents_by_collection": dict(
            con.execute("SELECT collection, count(*) FROM documents GROUP BY 1 ORDER BY 1").fetchall()
        ),
        "by_chunk_type": dict(
            con.execute("SELECT chunk_type, count(*) FROM chunks GROUP BY 1 ORDER BY 1").fetchall()
        ),
        "vectors_by_model": dict(
            con.execute("SELECT model, count(*) FROM chunk_vectors GROUP BY 1 ORDER BY 1").fetchall()
        ),
    }


def chunk_ids(con) -> list[int]:
    return [row[0] for row in con.execute("SELECT chunk_id FROM chunks ORDER BY chunk_id").fetchall()]


TABLES = ("documents", "chunks", "tags", "chunk_vectors")


def quote_path(path: str | Path) -> str:
    """`path` as a SQL string literal."""
    return "'" + str(path).replace("'", "''") + "'"


# ------------------------------------------------------------------------------ small segments: Parquet
#: a segment's tables as Parquet files (one per table) instead of a `store.duckdb`: what a write or a
#: merge of fewer than `SMALL_SEGMENT_ROWS` chunks stores (no DuckDB file created, opened or checkpointed)
PARQUET_TABLES = ("meta", "documents", "chunks", "tags", "chunk_vectors")
SMALL_SEGMENT_ROWS = 100_000


def parquet_file(table: str) -> str:
    return f"{table}.parquet"


#: every file that holds a segment's rows (the DuckDB store or its Parquet tables)
STORE_FILES = ("store.duckdb", *(parquet_file(table) for table in PARQUET_TABLES))


def is_parquet_segment(folder: Path) -> bool:
    """Whether a segment folder stores its rows as Parquet tables (else as `store.duckdb`)."""
    return (Path(folder) / parquet_file("chunks")).is_file() and not (Path(folder) / "store.duckdb").exists()


_SCRATCH: Any = None
_SCRATCH_PID = 0
_SCRATCH_LOCK = threading.Lock()
_NAMES = itertools.count()


def scratch():
    """A cursor on this process's in-memory DuckDB (created once: a DuckDB instance costs ~10 ms to
    start, a cursor microseconds). Each user works in a database of its own (`private_database`)."""
    global _SCRATCH, _SCRATCH_PID
    with _SCRATCH_LOCK:
        if _SCRATCH is None or _SCRATCH_PID != os.getpid():  # a forked child starts its own instance
            _SCRATCH = duckdb.connect(":memory:")
            _SCRATCH.execute(f"SET memory_limit = '{writer_memory_limit()}'")
            _SCRATCH_PID = os.getpid()
        return _SCRATCH.cursor()


def unique_name(prefix: str) -> str:
    """A database alias no other user of the scratch instance has."""
    return f"{prefix}_{os.getpid()}_{next(_NAMES)}"


class ScratchConnection:
    """A cursor on the scratch instance `USE`-ing an in-memory database of its own; `close` detaches
    it and every database attached through `attach` (so no segment file stays open)."""

    def __init__(self) -> None:
        self._cursor = scratch()
        self.database = unique_name("w")
        self._attached: list[str] = []
        self._cursor.execute(f"ATTACH ':memory:' AS {self.database}")
        self._cursor.execute(f"USE {self.database}")
        # the databases live in the process-wide instance, not in the cursor: one that is dropped
        # without `close` (a snapshot replaced by a refresh, let go by its last search) must still
        # detach them, or every generation an MCP server opens stays in memory (0.7 MB a store;
        # the 512MB pool was full after ~4,000 stores)
        self._finalizer = weakref.finalize(self, _detach_all, self._cursor, self._attached, self.database)

    def attach(self, alias: str, sql: str) -> None:
        self._cursor.execute(sql)
        self._attached.append(alias)

    def adopt(self, other: ScratchConnection) -> str:
        """Take over `other`'s database (same instance): readable here as `<name>.<table>`, detached
        when this connection closes; `other` is closed without detaching it. Returns its name."""
        name, cursor = other.database, other._cursor
        other._cursor = None
        other._finalizer.detach()
        if cursor is not None:
            cursor.close()
        self._attached.append(name)
        return name

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)

    def close(self) -> None:
        if self._cursor is None:
            return
        self._cursor = None
        self._finalizer()  # detaches every database now (once: a finalizer runs at most once)


def _detach_all(cursor: Any, attached: list[str], database: str) -> None:
    """Detach a scratch connection's databases from the shared instance and close its cursor."""
    try:
        cursor.execute("USE memory")
        for alias in [*attached, database]:
            cursor.execute(f"DETACH DATABASE IF EXISTS {alias}")
    finally:
        cursor.close()


class PinnedFiles:
    """A Parquet segment's table files held open: a reader reads them as `/proc/self/fd/N`, so a
    segment that a writer removes (after a merge) stays readable for as long as the reader holds it,
    as an attached DuckDB file does (an open file outlives its unlinking). Where `/proc/self/fd` does
    not exist, the paths are used as they are. The descriptors close when the object is collected."""

    def __init__(self, folder: Path) -> None:
        folder = Path(folder)
        self.paths = {table: str(folder / parquet_file(table)) for table in PARQUET_TABLES}
        fds: list[int] = []
        if os.path.isdir("/proc/self/fd"):
            try:
                for table in PARQUET_TABLES:
                    fds.append(os.open(self.paths[table], os.O_RDONLY))
                    self.paths[table] = f"/proc/self/fd/{fds[-1]}"
            except OSError:
                _close_fds(fds)
                raise
        weakref.finalize(self, _close_fds, fds)


def _close_fds(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def attach_segment(con, folder: Path, alias: str, pinned: PinnedFiles | None = None) -> None:
    """Make a segment's tables readable in `con` as `alias.documents`, `alias.chunks`, ...: its
    `store.duckdb` attached read-only, or views over its Parquet tables (`pinned`: their files held
    open) in an in-memory database."""
    folder = Path(folder)
    register = con.attach if isinstance(con, ScratchConnection) else (lambda _alias, sql: con.execute(sql))
    if pinned is not None or is_parquet_segment(folder):
        paths = pinned.paths if pinned is not None else {t: folder / parquet_file(t) for t in PARQUET_TABLES}
        register(alias, f"ATTACH ':memory:' AS {alias}")
        for table in PARQUET_TABLES:
            con.execute(
                f"CREATE VIEW {alias}.{table} AS SELECT * FROM read_parquet({quote_path(paths[table])})"
            )
    else:
        register(alias, f"ATTACH {quote_path(folder / 'store.duckdb')} AS {alias} (READ_ONLY)")


def open_segment(folder: Path, pinned: PinnedFiles | None = None):
    """A read-only connection to one segment's tables (close it after use)."""
    folder = Path(folder)
    if pinned is None and not is_parquet_segment(folder):
        return connect(folder / "store.duckdb", read_only=True)

    paths = pinned.paths if pinned is not None else {t: folder / parquet_file(t) for t in PARQUET_TABLES}
    con = ScratchConnection()
    try:
        for table in PARQUET_TABLES:
            con.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet({quote_path(paths[table])})")
    except duckdb.Error as error:
        con.close()
        raise StoreError(
            f"cannot read the Parquet tables of {folder}: {str(error).splitlines()[0][:200]}; "
            "run `hybridlab verify --repair --index DIR`"
        ) from None
    except BaseException:
        con.close()
        raise
    return con


def write_parquet(con, folder: Path) -> None:
    """Write `con`'s segment tables as one Parquet file each into `folder` (zstd-compressed)."""
    for table in PARQUET_TABLES:
        con.execute(
            f"COPY (SELECT * FROM {table}) TO {quote_path(Path(folder) / parquet_file(table))} "
            "(FORMAT parquet, COMPRESSION zstd)"
        )


def segment_alias(con: ScratchConnection, i: int) -> str:
    """The database holding the `i`-th segment's own tables in a `connect_segments` connection."""
    return f"{con.database}_s{i}"


def connect_segments(
    paths: Sequence[Path],
    deleted: Sequence[Sequence[str]],
    pinned: Sequence[PinnedFiles | None] | None = None,
    inline: ScratchConnection | None = None,
):
    """One read-only view over several segment stores: a database of the scratch instance that
    attaches each segment (`store.duckdb` read-only, or its Parquet tables; `paths` are the
    segments' `store.duckdb` paths, present or not) and defines `documents`, `chunks`, `tags`,
    `chunk_vectors` (and `meta`, the newest segment's) as the union of the segments minus each
    segment's tombstoned documents (`deleted[i]`: doc ids); `pinned[i]`: a Parquet segment's files
    held open. `inline`: a scratch connection whose tables are one more segment (the write-ahead
    log's rows, in memory), taken over by the returned connection. Readers never take a write lock,
    so a writer is never blocked."""

    con = ScratchConnection()
    inline_name = con.adopt(inline) if inline is not None else None
    try:
        for i, path in enumerate(paths):
            alias = segment_alias(con, i)
            try:
                attach_segment(con, Path(path).parent, alias, pinned[i] if pinned else None)
                con.execute(f"SELECT count(*) FROM {alias}.chunks").fetchall()
            except duckdb.Error as error:
                raise StoreError(
                    f"cannot open DuckDB file {path}: {str(error).splitlines()[0][:200]}; "
                    "run `hybridlab verify --repair --index DIR`"
                ) from None
        con.execute("CREATE TABLE deleted_docs (segment INTEGER, doc_id VARCHAR)")
        rows: dict[str, list] = {
            "segment": [i for i, ids in enumerate(deleted) for _ in ids],
            "doc_id": [doc_id for ids in deleted for doc_id in ids],
        }
        insert_rows(con, "deleted_docs", rows)
        parts: dict[str, list[str]] = {table: [] for table in TABLES}
        for i in range(len(paths)):
            gone = f"(SELECT doc_id FROM deleted_docs WHERE segment = {i})"
            if deleted[i]:
                parts["documents"].append(
                    f"SELECT * FROM {con.database}_s{i}.documents WHERE doc_id NOT IN {gone}"
                )
                parts["chunks"].append(f"SELECT * FROM {con.database}_s{i}.chunks WHERE doc_id NOT IN {gone}")
                parts["tags"].append(f"SELECT * FROM {con.database}_s{i}.tags WHERE doc_id NOT IN {gone}")
                parts["chunk_vectors"].append(
                    f"SELECT * FROM {con.database}_s{i}.chunk_vectors WHERE chunk_id NOT IN "
                    f"(SELECT chunk_id FROM {con.database}_s{i}.chunks WHERE doc_id IN {gone})"
                )
            else:
                for table in TABLES:
                    parts[table].append(f"SELECT * FROM {con.database}_s{i}.{table}")
        if inline_name is not None:
            for table in TABLES:
                parts[table].append(f"SELECT * FROM {inline_name}.{table}")
        for table, selects in parts.items():  # by name: segments written before `content_key` lack it (NULL)
            con.execute(f"CREATE VIEW {table} AS {' UNION ALL BY NAME '.join(selects)}")
        meta = f"{con.database}_s{len(paths) - 1}" if paths else inline_name
        con.execute(f"CREATE VIEW meta AS SELECT * FROM {meta}.meta")
        return con
    except BaseException:
        con.close()
        raise
