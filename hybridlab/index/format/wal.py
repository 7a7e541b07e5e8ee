"""The write-ahead log: a stored memory is durable after one append and one fsync, searchable at
once, and folded into a segment later.

The record format (the contract every reader and writer of ``wal-<N>.log`` keeps):

- the file starts with the 8-byte :data:`MAGIC` ``HLWAL1\n\0``;
- then records, each ``<payload bytes: u32 LE><crc32 of the payload: u32 LE><payload>``
  (:data:`HEADER`), appended and fsynced (``fdatasync``) before a store returns;
- a payload is JSON (never pickle): a put carries the document's fields (id, source, collection,
  text, tags, ISO-8601 dates with their zone, metadata) and, per model, the vectors of its chunks
  (float32, base64), cut and embedded as a segment write would; a delete is ``{"delete": id}``;
- within a log an id's last record wins; a torn or corrupt tail (short header, length past the end,
  crc mismatch) ends the log there: what precedes it is read, nothing after it.

Design and history: docs/internals/index.md#wal."""

from __future__ import annotations

import base64
import json
import os
import struct
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from hybridlab.config import IndexConfig
from hybridlab.errors import CorruptIndexError, InvalidValueError
from hybridlab.index.format import layout, store
from hybridlab.index.format.embedding_cache import text_sha256
from hybridlab.index.format.layout import WAL_PREFIX, wal_path  # noqa: F401  (the log's name, owned by layout)
from hybridlab.index.format.rows import assign_vectors, chunk_document, indexed_text, insert_documents
from hybridlab.ingest.sources import Document

MAGIC = b"HLWAL1\n\x00"
HEADER = struct.Struct("<II")  # payload bytes, crc32 of the payload
MAX_RECORD_BYTES = 64 << 20
#: records a log holds before the memory writer folds it into a segment (`HYBRIDLAB_WAL_RECORDS`)
FOLD_RECORDS = 64


def fold_records() -> int:
    """Records a log may hold before the memory writer folds it (0 = no log: every store commits a segment)."""
    value = os.environ.get("HYBRIDLAB_WAL_RECORDS", str(FOLD_RECORDS)).strip()
    if not value.isdigit():
        raise InvalidValueError(f"HYBRIDLAB_WAL_RECORDS must be a whole number >= 0, got {value!r}")
    return int(value)


@dataclass(frozen=True)
class WalRecord:
    """One logged document and, per model, the vectors of its chunks that model embeds (chunk order);
    or a tombstone: no document, `deleted` = the id deleted."""

    document: Document | None
    vectors: Mapping[str, np.ndarray] = field(default_factory=dict)
    deleted: str | None = None

    @property
    def doc_id(self) -> str:
        if self.document is not None:
            return self.document.doc_id
        assert self.deleted is not None  # a tombstone (the only record without a document) names its id
        return self.deleted


def tombstone(doc_id: str) -> WalRecord:
    """The record that deletes `doc_id`."""
    return WalRecord(None, deleted=doc_id)


# ---------------------------------------------------------------------------------------- encoding
def _time(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def document_json(document: Document) -> dict[str, Any]:
    """A document's fields as JSON values (dates as ISO-8601, time zone kept)."""
    return {
        "doc_id": document.doc_id,
        "source": document.source,
        "collection": document.collection,
        "title": document.title,
        "text": document.text,
        "doc_type": document.doc_type,
        "created_at": _time(document.created_at),
        "updated_at": _time(document.updated_at),
        "metadata": document.metadata,
        "tags": list(document.tags),
        "language": document.language,
    }


def document_from_json(value: Mapping[str, Any]) -> Document:
    parse = lambda text: None if text is None else datetime.fromisoformat(text)
    return Document(
        value["doc_id"],
        value["source"],
        value["collection"],
        value["title"],
        value["text"],
        value["doc_type"],
        parse(value.get("created_at")),
        parse(value.get("updated_at")),
        dict(value.get("metadata") or {}),
        tuple(value.get("tags") or ()),
        value.get("language"),
    )


def encode_record(record: WalRecord) -> bytes:
    """A record as it is appended: header (length, crc32) and JSON payload."""
    vectors = {}
    for model, matrix in record.vectors.items():
        matrix = np.ascontiguousarray(matrix, dtype="<f4")
        vectors[model] = {
            "shape": list(matrix.shape),
            "f32": base64.b64encode(matrix.tobytes()).decode("ascii"),
        }
    value = (
        {"delete": record.deleted}
        if record.document is None
        else {"document": document_json(record.document), "vectors": vectors}
    )
    payload = json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return HEADER.pack(len(payload), zlib.crc32(payload)) + payload


def _decode(payload: bytes) -> WalRecord:
    value = json.loads(payload.decode("utf-8"))
    if "delete" in value:
        return tombstone(str(value["delete"]))
    vectors = {}
    for model, item in value.get("vectors", {}).items():
        shape = tuple(int(n) for n in item["shape"])
        data = np.frombuffer(base64.b64decode(item["f32"]), dtype="<f4")
        vectors[model] = data.reshape(shape).astype(np.float32)
    return WalRecord(document_from_json(value["document"]), vectors)


@dataclass(frozen=True)
class WalContents:
    """What a log held when it was read: its complete records, the bytes read (the file's size at
    that moment), where the last complete record ends, and what ended it early (None: nothing)."""

    path: Path
    records: tuple[WalRecord, ...] = ()
    size: int = -1  # -1: no log
    valid_end: int = 0
    problem: str | None = None

    @property
    def doc_ids(self) -> set[str]:
        """Every id the log touches (put or deleted): masked in every segment."""
        return {record.doc_id for record in self.records}

    @property
    def latest(self) -> tuple[WalRecord, ...]:
        """The records that count: each document id's last one (see :func:`latest_records`)."""
        return latest_records(self.records)

    @property
    def puts(self) -> tuple[WalRecord, ...]:
        """The documents the log holds: each id's last record, tombstones left out."""
        return tuple(record for record in self.latest if record.document is not None)

    @property
    def deleted(self) -> set[str]:
        """The ids whose last record is a tombstone."""
        return {record.doc_id for record in self.latest if record.document is None}


def latest_records(records: Sequence[WalRecord]) -> tuple[WalRecord, ...]:
    """Each document id's last record, in log order: a later record of an id replaces an earlier
    one, as a later write does (one id, one document, whatever wrote the log)."""
    last = {record.doc_id: position for position, record in enumerate(records)}
    if len(last) == len(records):
        return tuple(records)
    return tuple(record for position, record in enumerate(records) if last[record.doc_id] == position)


def read_wal(path: str | os.PathLike) -> WalContents:
    """Every complete record of the log at `path` (none when it does not exist). A record cut short
    or failing its checksum ends the log; `problem` says where and why."""
    path = Path(path)
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        return WalContents(path)
    if len(data) < len(MAGIC):
        problem = None if not data or MAGIC.startswith(data) else f"{path}: not a hybridlab write-ahead log"
        return WalContents(path, (), len(data), 0, problem)
    if data[: len(MAGIC)] != MAGIC:
        return WalContents(path, (), len(data), 0, f"{path}: not a hybridlab write-ahead log (bad magic)")
    records: list[WalRecord] = []
    offset, problem = len(MAGIC), None
    while offset < len(data):
        if len(data) - offset < HEADER.size:
            problem = f"{path}: record {len(records) + 1} at byte {offset} is cut short (its header)"
            break
        length, crc = HEADER.unpack_from(data, offset)
        start, end = offset + HEADER.size, offset + HEADER.size + length
        if length > MAX_RECORD_BYTES or end > len(data):
            problem = (
                f"{path}: record {len(records) + 1} at byte {offset} is cut short ({length} bytes announced)"
            )
            break
        payload = data[start:end]
        if zlib.crc32(payload) != crc:
            problem = f"{path}: record {len(records) + 1} at byte {offset} fails its checksum"
            break
        try:
            records.append(_decode(payload))
        except (ValueError, KeyError, TypeError) as error:
            problem = f"{path}: record {len(records) + 1} at byte {offset} cannot be decoded ({error})"
            break
        offset = end
    return WalContents(path, tuple(records), len(data), offset, problem)


def log_size(path: str | os.PathLike) -> int:
    """The log's size in bytes, -1 when there is none (one stat: what a reader compares to refresh)."""
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return -1


# ------------------------------------------------------------------------------------------ writing
def embed_documents(
    documents: Sequence[Document], config: IndexConfig, encode: Callable[[str, list[str]], np.ndarray]
) -> list[WalRecord]:
    """Each document's record: its chunks as the index would cut them, each embedded by the models
    the index assigns it (`encode(model, texts)`: one call per model for all documents)."""
    wanted: dict[str, list[tuple[int, str]]] = {}
    for position, document in enumerate(documents):
        for chunk in chunk_document(document, config):
            text = indexed_text(chunk, document, config.chunk)
            for model in config.model_for(document.collection, chunk.language):
                wanted.setdefault(model, []).append((position, text))
    per_document: list[dict[str, list[np.ndarray]]] = [{} for _ in documents]
    for model, items in wanted.items():
        vectors = np.asarray(encode(model, [text for _, text in items]), dtype=np.float32)
        for (position, _), vector in zip(items, vectors, strict=True):
            per_document[position].setdefault(model, []).append(vector)
    return [
        WalRecord(document, {model: np.stack(rows) for model, rows in vectors.items()})
        for document, vectors in zip(documents, per_document)
    ]


def record_vectors(
    records: Sequence[WalRecord], config: IndexConfig
) -> dict[str, tuple[list[str], np.ndarray]]:
    """model -> (embedding-text hashes, vectors) of the records' chunks under `config`: what a write
    puts into its vector source so that logged memories are not embedded again. Chunks the record
    has no vector for (another config) are left out: the write embeds them."""
    found: dict[str, tuple[list[str], list[np.ndarray]]] = {}
    for record in records:
        document = record.document
        if document is None:
            continue
        seen: dict[str, int] = {}
        for chunk in chunk_document(document, config):
            text = indexed_text(chunk, document, config.chunk)
            for model in config.model_for(document.collection, chunk.language):
                matrix = record.vectors.get(model)
                row = seen.get(model, 0)
                seen[model] = row + 1
                if matrix is None or row >= len(matrix):
                    continue
                hashes, vectors = found.setdefault(model, ([], []))
                hashes.append(text_sha256(text))
                vectors.append(matrix[row])
    return {model: (hashes, np.stack(vectors)) for model, (hashes, vectors) in found.items() if hashes}


class WalWriter:
    """Appends records to one generation's log; the caller holds the index's writer lock. Opening
    a log left by a crashed append cuts its unacknowledged tail first. `size` is the log's size as
    this writer last left it: another size on disk means another writer appended since (reopen).
    `doc_ids`: every id the log touches; `deleted`: those whose last record is a tombstone."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        contents = read_wal(self.path)
        if contents.problem and contents.valid_end == 0 and contents.size >= len(MAGIC):
            raise CorruptIndexError(f"{contents.problem}; move it aside or run `hybridlab verify --repair`")
        created = contents.size < len(MAGIC)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if created:
                os.ftruncate(self._fd, 0)
                os.write(self._fd, MAGIC)
                os.fsync(self._fd)
                layout.fsync_path(self.path.parent)  # the new name must survive a crash too
            elif contents.valid_end < contents.size:  # a torn tail: never acknowledged
                os.ftruncate(self._fd, contents.valid_end)
                os.fsync(self._fd)
            self.size = os.lseek(self._fd, 0, os.SEEK_END)  # the log's size as this writer left it
        except BaseException:
            os.close(self._fd)
            raise
        self.records = len(contents.records)
        self.doc_ids = contents.doc_ids
        self.deleted = contents.deleted

    def append(self, records: Sequence[WalRecord], checkpoint: Callable[[str], None] | None = None) -> None:
        """Append `records` and fsync: durable on return. A failure leaves at most a torn tail,
        which readers ignore and the next writer cuts."""
        data = b"".join(encode_record(record) for record in records)
        start = os.lseek(self._fd, 0, os.SEEK_END)
        try:
            view = memoryview(data)
            while view:
                written = os.write(self._fd, view)
                view = view[written:]
            if checkpoint is not None:
                checkpoint("wal-written")
            os.fdatasync(self._fd)
        except BaseException:  # not acknowledged: cut it, so later records never follow a torn one
            try:
                os.ftruncate(self._fd, start)
                os.lseek(self._fd, start, os.SEEK_SET)
            except OSError:
                self.close()  # the next writer cuts the torn tail when it opens the log
            raise
        self.records += len(records)
        self.size = start + len(data)
        for record in records:
            self.doc_ids.add(record.doc_id)
            (self.deleted.add if record.document is None else self.deleted.discard)(record.doc_id)
        if checkpoint is not None:
            checkpoint("wal-synced")

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def truncate_torn_tail(path: str | os.PathLike) -> str | None:
    """Cut a log back to its last complete record (`verify --repair`); returns what was wrong, if anything."""
    contents = read_wal(path)
    if contents.problem is None:
        return None
    with open(path, "r+b") as handle:
        handle.truncate(contents.valid_end)
        if not contents.valid_end:  # not even its magic was intact
            handle.write(MAGIC)
        handle.flush()
        os.fsync(handle.fileno())
    return contents.problem


# ------------------------------------------------------------------------------------------ reading
@dataclass
class LoggedRows:
    """A log's records as segment rows: their DuckDB tables (in the process's scratch instance,
    owned by whoever takes `database`), the chunk ids in order, and per model (chunk ids, vectors)."""

    con: Any
    chunk_ids: np.ndarray
    vectors: dict[str, tuple[np.ndarray, np.ndarray]]
    chunks: int


def logged_rows(
    records: Sequence[WalRecord], config: IndexConfig, next_chunk_id: int, path: Path
) -> LoggedRows:
    """Build the rows of a log's records exactly as a write would (same chunking, inserts and
    vector assignment), their chunk ids following `next_chunk_id` (tombstones make no rows)."""
    records = [record for record in records if record.document is not None]
    con = store.ScratchConnection()
    try:
        store.create_schema(con)
        documents = [record.document for record in records if record.document is not None]
        insert_documents(con, documents, config, next_chunk_id)
        assign_vectors(con, config)
        ids = (
            con.execute("SELECT chunk_id FROM chunks ORDER BY chunk_id")
            .fetchnumpy()["chunk_id"]
            .astype(np.int64)
        )
        vectors: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for model in config.all_models:
            assigned = (
                con.execute("SELECT chunk_id FROM chunk_vectors WHERE model = ? ORDER BY chunk_id", [model])
                .fetchnumpy()["chunk_id"]
                .astype(np.int64)
            )
            if not len(assigned):
                continue
            parts = [record.vectors[model] for record in records if model in record.vectors]
            matrix = np.concatenate(parts) if parts else np.zeros((0, 0), np.float32)
            if len(matrix) != len(assigned):
                raise CorruptIndexError(
                    f"{path}: its records carry {len(matrix)} vectors of {model!r} for "
                    f"{len(assigned)} chunks; run `hybridlab verify --repair`"
                )
            vectors[model] = (assigned, np.ascontiguousarray(matrix, dtype=np.float32))
        return LoggedRows(con, ids, vectors, len(ids))
    except BaseException:
        con.close()
        raise
