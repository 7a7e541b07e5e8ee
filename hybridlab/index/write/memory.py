"""Add memories to an index: validate, make durable, searchable at once.
See docs/internals/index.md#memory."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import duckdb
import numpy as np

from hybridlab.config import IndexConfig
from hybridlab.encoders.registry import load_document_encoder, register_recorded
from hybridlab.errors import InvalidValueError
from hybridlab.index.format import layout, wal
from hybridlab.index.format.artifacts import document_batch_size
from hybridlab.index.format.faults import checkpoint
from hybridlab.index.format.manifest import LOG_DELETES_FORMAT, Manifest
from hybridlab.index.format.rows import WHITESPACE, normalised_content
from hybridlab.index.format.segments import indexed_doc_ids
from hybridlab.index.format.store import StoredDocument
from hybridlab.index.reader import manifest_stamp
from hybridlab.index.write.build import apply_changes, fold_log
from hybridlab.index.write.tokens import memory_texts, store_token_vectors
from hybridlab.ingest.sources import MEMORY_COLLECTION, Document, memory_document

logger = logging.getLogger(__name__)
T = TypeVar("T")

MEMORY_SOURCE = "mcp:memories"
MAX_CONTENT_CHARS = 20_000
MAX_TAGS = 32
MAX_TAG_CHARS = 100
MAX_TYPE_CHARS = 50
#: a project name: a plain identifier, so that it reads the same in a path, a URL and a shell
PROJECT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
LOCK_WAIT_SECONDS = 10.0
#: one memory embedding at a time in a process: stores embed outside the writer lock (`MemoryWriter.embed`),
#: and a Hugging Face tokenizer used by two threads at once fails ("Already borrowed")
_ENCODE_LOCK = threading.Lock()


@dataclass(frozen=True)
class StoredMemory:
    """A committed memory: its id and the index generation that holds it."""

    id: str
    generation: int | None
    tags: tuple[str, ...]
    created_at: str
    batch_size: int
    seconds: float
    pending: bool = False
    updated_at: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "generation": self.generation,
            "tags": list(self.tags),
            "created_at": self.created_at,
            "updated_at": self.updated_at or self.created_at,
            "batch_size": self.batch_size,
            "seconds": round(self.seconds, 3),
            "pending": self.pending,
        }


@dataclass(frozen=True)
class DeletedMemories:
    """What :meth:`MemoryWriter.delete` removed: the ids asked for, how many were indexed (and are
    gone now), the generation that no longer holds them (whose log holds their tombstones)."""

    ids: tuple[str, ...]
    removed: int
    generation: int | None
    seconds: float


@dataclass(frozen=True)
class EmbeddedMemory:
    """A memory embedded as the index's log embeds it (:meth:`MemoryWriter.embed`): its one chunk's
    text (tags included when the index indexes tags) by the document encoder of each model the index
    config assigns it. Stored with :meth:`MemoryWriter.store_embedded`, the log records these very
    vectors, so the near-duplicate look-up and the write embed the text once. The text is embedded
    again only when the write cannot use them: the index's config, or a model's dimension or encoder
    record, changed since (a reindex), or the write commits a segment instead of appending to a log
    (`wal_records=0`, an index of a format before 5): `apply_changes` embeds a commit's new texts itself."""

    document: Document
    record: wal.WalRecord  # what the log appends: the document and model -> its chunk's vector (1 row)
    config: Any  # the IndexConfig it was embedded under
    encoders: Mapping[str, Any]  # model -> (dimension, encoder record) of the index then

    @property
    def vectors(self) -> dict[str, np.ndarray]:
        """Model -> the memory's unit vector, in the order the config assigns the models."""
        return {model: matrix[0] for model, matrix in self.record.vectors.items()}


def check_project(name: Any) -> str:
    """`name` when it is a project name (:data:`PROJECT_NAME`), else InvalidValueError naming `project`."""
    if not isinstance(name, str) or not PROJECT_NAME.fullmatch(name):
        raise InvalidValueError(
            f"project must be 1-64 letters, digits, '_', '.' or '-' (starting with a letter or digit), "
            f"got {name!r}",
            "project",
        )
    return name


def memory_collection(project: str | None) -> str:
    """The collection a memory of `project` is in (a project is a collection; no project: the
    collection memories had before projects, where they stay)."""
    return MEMORY_COLLECTION if project is None else check_project(project)


def make_memory(
    content: str,
    tags: Sequence[str] = (),
    memory_type: str = "note",
    created_at: str | None = None,
    *,
    memory_id: str | None = None,
    source: str = MEMORY_SOURCE,
    updated_at: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    project: str | None = None,
) -> Document:
    """Validate a memory and build its Document (InvalidValueError, a ValueError, names the offending field);
    `updated_at` defaults to `created_at`. `project` (else `metadata`'s, else none) is recorded as
    `metadata.project`, which makes it the memory's collection (:func:`memory_collection`)."""
    if not isinstance(content, str) or not content.strip():
        raise InvalidValueError("content must be a non-empty string", "content")
    if len(content) > MAX_CONTENT_CHARS:
        raise InvalidValueError(
            f"content is {len(content)} characters long; at most {MAX_CONTENT_CHARS} are allowed", "content"
        )
    if isinstance(tags, str) or not all(isinstance(tag, str) for tag in tags):
        raise InvalidValueError(f"tags must be a list of strings, got {tags!r}", "tags")
    if len(tags) > MAX_TAGS:
        raise InvalidValueError(f"at most {MAX_TAGS} tags per memory, got {len(tags)}", "tags")
    long_tags = [tag for tag in tags if len(tag) > MAX_TAG_CHARS]
    if long_tags:
        raise InvalidValueError(
            f"tags must be at most {MAX_TAG_CHARS} characters: {long_tags[0][:40]!r}…", "tags"
        )
    if not isinstance(memory_type, str) or not memory_type.strip() or len(memory_type) > MAX_TYPE_CHARS:
        raise InvalidValueError(
            f"memory_type must be a non-empty string of at most {MAX_TYPE_CHARS} characters", "memory_type"
        )
    for field_name, value in (
        ("content", content),
        ("memory_type", memory_type),
        *(("tags", tag) for tag in tags),
    ):
        _check_unicode(field_name, value)
    metadata = dict(metadata or {})
    if project is not None:
        metadata["project"] = check_project(project)
    when = created_at or datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    obj = {
        "id": memory_id or f"mem-{uuid.uuid4().hex[:16]}",
        "content": content,
        "tags": list(tags),
        "created_at": when,
        "updated_at": updated_at,
        "memory_type": memory_type.strip(),
        "metadata": metadata,
    }
    return memory_document(obj, "memory", source)


def updated_memory(
    current: StoredDocument,
    *,
    content: str | None = None,
    tags: Sequence[str] | None = None,
    memory_type: str | None = None,
    updated_at: str | None = None,
    source: str = MEMORY_SOURCE,
    project: str | None = None,
) -> Document:
    """The next version of a memory (`current` as `Index.get_document` returns it): the fields given
    replace its own (`project` moves it to that project); the id, `created_at` and other metadata
    stay; `updated_at` = the given time, else now."""
    if current.doc_type != "memory":
        raise InvalidValueError(
            f"{current.doc_id!r} is a {current.doc_type!r} document, not a memory", "memory_id"
        )
    if content is None and tags is None and memory_type is None and project is None:
        raise InvalidValueError("nothing to update: give content, tags, memory_type and/or a project")
    metadata = {k: v for k, v in current.metadata.items() if k != "memory_type"}
    return make_memory(
        current.text if content is None else content,
        current.tags if tags is None else tags,
        memory_type or current.metadata.get("memory_type") or "note",
        current.created_at,
        memory_id=current.doc_id,
        source=source,
        updated_at=updated_at or _iso(datetime.now(UTC)),
        metadata=metadata,
        project=project,
    )


def find_duplicate(store: Any, content: str, collection: str | None = None) -> str | None:
    """The id of a memory (a `memory` document, stored over MCP or indexed from a JSONL file) whose
    normalised content equals `content`'s, else None (the oldest when several do); only one of
    `collection` when given (a project's memories are never duplicates of another's). `store`: a reader's
    document store (`fetchall(sql, params)` over its `documents`: segments and write-ahead log alike).
    Looked up by equality on each memory's `content_key` (:func:`~hybridlab.index.format.rows.content_key`);
    the rows of segments written before that column (NULL, or no column at all) are normalised in SQL.
    The match is checked in Python."""
    wanted = normalised_content(content)
    if not wanted:
        return None
    key = hashlib.sha256(wanted.encode("utf-8")).hexdigest()
    scan = (
        f"doc_type = 'memory' AND length(text) >= ? "
        f"AND lower(trim(regexp_replace(text, '{WHITESPACE}', ' ', 'g'), ' ')) = ?"
    )
    within, scope = ("AND collection = ?", [collection]) if collection is not None else ("", [])
    order = "ORDER BY created_at NULLS LAST, doc_id"
    try:  # rows written before the column (NULL) are the only ones scanned
        rows = store.fetchall(
            f"SELECT doc_id, text FROM documents WHERE (content_key = ? "
            f"OR (content_key IS NULL AND {scan})) {within} {order}",
            [key, len(wanted), wanted, *scope],
        )
    except duckdb.BinderException:  # an index whose every segment predates the column
        rows = store.fetchall(
            f"SELECT doc_id, text FROM documents WHERE {scan} {within} {order}",
            [len(wanted), wanted, *scope],
        )
    return next((doc_id for doc_id, text in rows if normalised_content(text) == wanted), None)


def memory_record(document: StoredDocument) -> dict[str, Any]:
    """A memory (as `Index.get_document` returns it) as one line of a memories JSONL file, the fields
    :func:`hybridlab.ingest.sources.memory_document` reads back to the same document."""
    metadata = dict(document.metadata)
    record: dict[str, Any] = {"id": document.doc_id, "content": document.text, "tags": list(document.tags)}
    if document.created_at:
        record["created_at"] = document.created_at
    if document.updated_at and document.updated_at != document.created_at:
        record["updated_at"] = document.updated_at
    record["memory_type"] = metadata.pop("memory_type", None) or "note"
    if metadata:
        record["metadata"] = metadata
    return record


def create_memory_index(index_dir: str | os.PathLike, config: Any = None) -> bool:
    """Create an empty index at `index_dir` when the folder is missing or empty (`config`: an
    IndexConfig, default the default one; its models and settings are recorded in the manifest), so
    memories can be stored at once; True when it did, False when the folder holds something already."""
    index_dir = Path(index_dir)
    if index_dir.exists() and any(index_dir.iterdir()):
        return False
    report = apply_changes(index_dir, [], config, progress=False)
    return report.committed


def _check_unicode(field_name: str, value: str) -> None:
    """InvalidValueError naming the field when `value` cannot be stored as UTF-8 (a lone surrogate)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        raise InvalidValueError(
            f"{field_name} is not valid Unicode text: {error.reason} at character {error.start} "
            f"({value[max(0, error.start - 20) : error.start]!r}…)",
            field_name,
        ) from None


def _cache_path(index_dir: Path) -> Path | None:
    """The index's own embeddings cache when it has one (also in a copied or moved index, whose
    manifest still names the original's), else the one it was built with (the shared cache of the
    evaluation indexes); None = the indexer's default."""
    try:
        return layout.recorded_cache(index_dir, layout.read_manifest(index_dir))
    except (FileNotFoundError, layout.CorruptIndexError):
        return None


class MemoryWriter:
    """Writes memories to one index folder: appended to its write-ahead log (`wal_records` > 0,
    default `HYBRIDLAB_WAL_RECORDS` or 64) and folded into a segment when the log is full, or each
    committed as a segment (`wal_records=0`); concurrent stores share one append or commit.
    Each :meth:`store` returns once its memory is durable (the log's fsync or the segment's commit),
    except with `commit_delay` > 0 (opt-in, write-heavy loads): a store then returns at once and its
    memory waits up to that long in a queue, so **a crash loses the memories of the last
    `commit_delay` seconds although they were acknowledged**; :meth:`flush` (the MCP server calls it
    before every read) writes the queue, so the next search still finds them."""

    def __init__(
        self,
        index_dir: str | os.PathLike,
        *,
        source: str = MEMORY_SOURCE,
        lock_wait: float = LOCK_WAIT_SECONDS,
        commit_delay: float = 0.0,
        wal_records: int | None = None,
    ) -> None:
        if commit_delay < 0:
            raise InvalidValueError(
                f"commit_delay must be >= 0 seconds, got {commit_delay}", field="commit_delay"
            )
        wal_records = wal.fold_records() if wal_records is None else wal_records
        if wal_records < 0:
            raise InvalidValueError(f"wal_records must be >= 0, got {wal_records}", field="wal_records")
        self.index_dir = Path(index_dir)
        self.source = source
        self.lock_wait = lock_wait
        self.commit_delay = commit_delay
        self.wal_records = wal_records
        self._timer: threading.Timer | None = None
        self._pending: list[tuple[Document, Future, EmbeddedMemory | None]] = []
        self._pending_lock = threading.Lock()
        self._commit_lock = threading.Lock()
        self._log: _OpenLog | None = None
        self.commits = 0  # stores and deletes committed as a generation of their own (no log)
        self.appends = 0  # stores, updates and deletes appended to the log (each append: one or more records)
        self.folds = 0  # logs folded into a segment

    def store(
        self, content: str, tags: Sequence[str] = (), memory_type: str = "note", created_at: str | None = None
    ) -> StoredMemory:
        """Validate and write one memory; returns when it is durable and searchable."""
        return self.store_document(make_memory(content, tags, memory_type, created_at, source=self.source))

    def update(
        self,
        current: StoredDocument,
        *,
        content: str | None = None,
        tags: Sequence[str] | None = None,
        memory_type: str | None = None,
        project: str | None = None,
    ) -> StoredMemory:
        """Replace a memory (`current` as `Index.get_document` returns it) by its next version
        (:func:`updated_memory`: same id, `created_at` kept, `updated_at` now; `project` moves it),
        re-embedded; one log append (a commit without a log)."""
        document = updated_memory(
            current, content=content, tags=tags, memory_type=memory_type, source=self.source, project=project
        )
        return self.store_document(document)

    def delete(self, ids: Sequence[str]) -> DeletedMemories:
        """Delete memories by id (queued stores are written first); durable when it returns: no
        reader sees them again, nor does a restarted server. One append of a tombstone per live id
        (in a segment, or put in the log), or one commit without a log. Ids not indexed are ignored
        (`removed` counts the others)."""
        if isinstance(ids, str) or not all(isinstance(i, str) and i for i in ids):
            raise InvalidValueError(f"ids must be a list of non-empty strings, got {ids!r}", "ids")
        ids = tuple(dict.fromkeys(ids))
        started = time.perf_counter()
        with self._commit_lock:
            self._commit()  # stores queued before this call stay ordered before it
            logged: tuple[int, int | None] | None = self._append_tombstones(ids) if self.wal_records else None
            if logged is None:
                report = self._waiting(
                    lambda: apply_changes(
                        self.index_dir,
                        [],
                        progress=False,
                        cache_path=_cache_path(self.index_dir),
                        use_cache=False,
                        lock_wait=self.lock_wait,
                        delete_ids=ids,
                    ),
                    "nothing was deleted",
                )
                logged = (report.removed, report.generation)
                if report.committed:
                    self.commits += 1
                    logger.info(
                        "deleted %d memories in generation %s in %.2fs",
                        report.removed,
                        report.generation,
                        report.seconds,
                    )
            self._fold_if_full()
        return DeletedMemories(ids, *logged, time.perf_counter() - started)

    def store_document(self, document: Document) -> StoredMemory:
        """Write one document built by :func:`make_memory` (its id and dates as given); returns
        when it is durable and searchable. A document whose id is already indexed replaces it."""
        return self._store(document, None)

    def embed(self, document: Document) -> EmbeddedMemory | None:
        """`document` (built by :func:`make_memory`) embedded as the live generation's log would
        embed it, without taking the writer lock; None when there is no index yet (its first write
        commits one). Hand the result to :meth:`store_embedded` to store it without embedding again."""
        try:
            manifest = layout.read_manifest(self.index_dir)
        except FileNotFoundError:
            return None
        encoding = _Encoding.of(manifest)
        record = wal.embed_documents([document], encoding.config, encoding.encode)[0]
        return EmbeddedMemory(document, record, encoding.config, encoding.encoders)

    def store_embedded(self, memory: EmbeddedMemory) -> StoredMemory:
        """:meth:`store_document` of a memory :meth:`embed` embedded: the log appends its vectors
        (see :class:`EmbeddedMemory` for when the text is embedded again)."""
        return self._store(memory.document, memory)

    def _store(self, document: Document, embedded: EmbeddedMemory | None) -> StoredMemory:
        started = time.perf_counter()
        future: Future = Future()
        with self._pending_lock:
            self._pending.append((document, future, embedded))
            if self.commit_delay > 0:
                if self._timer is None:
                    self._timer = threading.Timer(self.commit_delay, self._flush_quietly)
                    self._timer.daemon = True
                    self._timer.start()
                return StoredMemory(
                    document.doc_id,
                    None,
                    document.tags,
                    _iso(document.created_at),
                    0,
                    time.perf_counter() - started,
                    pending=True,
                )
        with self._commit_lock:
            if not future.done():  # nobody committed it meanwhile: commit everything pending
                self._commit()
        generation, batch_size = future.result()
        return StoredMemory(
            document.doc_id,
            generation,
            document.tags,
            _iso(document.created_at),
            batch_size,
            time.perf_counter() - started,
            updated_at=_iso(document.updated_at),
        )

    def queued_duplicate(self, content: str, collection: str | None = None) -> Document | None:
        """A memory queued by `commit_delay` (acknowledged, not yet written) whose normalised content
        equals `content`'s (in `collection` when given), else None: a duplicate check that does not
        force the queue's commit."""
        wanted = normalised_content(content)
        with self._pending_lock:
            return next(
                (
                    d
                    for d, _, _ in self._pending
                    if normalised_content(d.text) == wanted and collection in (None, d.collection)
                ),
                None,
            )

    @property
    def writes(self) -> int:
        """Durable writes of stores so far: log appends plus segment commits (group commits count once)."""
        return self.appends + self.commits

    @property
    def pending(self) -> int:
        """Memories acknowledged but not committed yet (only with `commit_delay`)."""
        return len(self._pending)

    def flush(self) -> None:
        """Commit every queued memory now (a no-op when nothing waits). With `commit_delay`, a failed
        commit puts the memories back in the queue and raises."""
        if not self._pending:
            return
        with self._commit_lock:
            self._commit()

    def _flush_quietly(self) -> None:
        try:
            self.flush()
        except Exception as error:  # noqa: BLE001 - a timer thread has nobody to raise to
            logger.warning("deferred commit of memories failed (%s); retrying on the next read", error)

    def _commit(self) -> None:
        with self._pending_lock:
            batch, self._pending = self._pending, []
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
        if not batch:
            return
        # one id stored twice in a group commit: its last version, as two commits in a row would leave
        latest = list({document.doc_id: (document, embedded) for document, _, embedded in batch}.values())
        documents = [document for document, _ in latest]
        try:
            generation = self._append(latest) if self.wal_records else None
            if generation is None:
                report = self._waiting(
                    lambda: apply_changes(
                        self.index_dir,
                        [(self.source, documents, False)],
                        progress=False,
                        cache_path=_cache_path(self.index_dir),
                        use_cache=False,
                        lock_wait=self.lock_wait,
                    ),
                    "the memory was not stored",
                )
                generation = report.generation
                self.commits += 1
                logger.info(
                    "committed %d memories as generation %s in %.2fs", len(batch), generation, report.seconds
                )
        except BaseException as error:  # handed to every waiting store, re-raised there
            if self.commit_delay > 0:  # acknowledged already: keep them queued for the next flush
                with self._pending_lock:
                    self._pending[:0] = batch
                raise
            for _, future, _ in batch:
                future.set_exception(error)
            return
        for _, future, _ in batch:
            future.set_result((generation, len(batch)))
        self._fold_if_full()

    def _fold_if_full(self) -> None:
        if self._log is not None and self._log.writer.records >= self.wal_records:
            self._fold()

    def _append(self, entries: list[tuple[Document, EmbeddedMemory | None]]) -> int | None:
        """Append the memories to the live generation's log (durable on return; a memory whose id
        is indexed already is replaced: readers hide the old version), with the vectors of those
        embedded already under the log's config; returns its generation number, or None when there
        is no log (no index yet: the first write commits one)."""
        with self._locked():
            log = self._current_log()
            if log is None:
                return None
            config = log.encoding.config
            if config.late_models:  # before the log holds them: a failed append leaves unused vectors only
                store_token_vectors(self.index_dir, config, memory_texts([d for d, _ in entries], config))
            self._write(log, log.encoding.records(entries))
            return log.generation

    def _append_tombstones(self, ids: Sequence[str]) -> tuple[int, int] | None:
        """Append a tombstone for each of `ids` that is live (put in the log and not deleted since,
        or in a segment and untouched by the log): (how many, the log's generation); None: no log."""
        with self._locked():
            log = self._current_log()
            if log is None:
                return None
            writer = log.writer
            untouched = [doc_id for doc_id in ids if doc_id not in writer.doc_ids]
            indexed = indexed_doc_ids(self.index_dir, log.manifest, untouched) if untouched else set()
            live = [
                doc_id
                for doc_id in ids
                if doc_id in indexed or (doc_id in writer.doc_ids and doc_id not in writer.deleted)
            ]
            if live:
                self._write(log, [wal.tombstone(doc_id) for doc_id in live])
            return len(live), log.generation

    def _current_log(self) -> _OpenLog | None:
        """The live generation's log (the writer lock held), reopened when a commit or another
        writer's append changed it; None when there is no index or its manifest reads no log."""
        stamp = manifest_stamp(self.index_dir)
        if stamp is None:
            return None
        if (
            self._log is None
            or self._log.stamp != stamp
            or wal.log_size(self._log.writer.path) != self._log.writer.size
        ):  # another writer appended
            self._open_log(stamp)
        return self._log

    def _write(self, log: _OpenLog, records: list[wal.WalRecord]) -> None:
        """Append `records` to `log` and fsync (durable on return); a failure closes the log."""
        try:
            log.writer.append(records, checkpoint=checkpoint)
        except BaseException:
            log.writer.close()
            self._log = None  # reopened (its tail checked) by the next write
            raise
        self.appends += 1

    def _open_log(self, stamp: tuple[int, int]) -> None:
        if self._log is not None:
            self._log.writer.close()
            self._log = None
        manifest = layout.read_manifest(self.index_dir)
        if manifest.format < LOG_DELETES_FORMAT or manifest.next_chunk_id is None:
            return  # written by code that reads no deletes in a log: the first write commits (format 5)
        writer = wal.WalWriter(wal.wal_path(self.index_dir, manifest.generation))
        self._log = _OpenLog(stamp, manifest.generation, _Encoding.of(manifest), writer, manifest)

    def _fold(self) -> None:
        """Commit the full log as a segment. The memories are durable in the log already, so a
        failure is logged, not raised: the next store (or any write) folds it."""
        try:
            report = self._waiting(
                lambda: fold_log(self.index_dir, progress=False, lock_wait=self.lock_wait),
                "the log stays as it is",
            )
        except Exception as error:  # noqa: BLE001 - the memories stay in the log, folded later
            logger.warning(
                "folding the write-ahead log of %s failed (%s); it is retried", self.index_dir, error
            )
            return
        if report is not None:
            self.folds += 1
            logger.info(
                "folded the write-ahead log into generation %s in %.2fs", report.generation, report.seconds
            )

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Hold the index's writer lock, waiting up to `lock_wait` seconds for another writer."""
        lock = self._waiting(
            layout.WriterLock(self.index_dir, timeout=self.lock_wait).__enter__, "the memory was not stored"
        )
        try:
            yield
        finally:
            lock.__exit__(None, None, None)

    def close(self) -> None:
        """Close the open log (its memories stay in it: durable, and folded by the next write)."""
        with self._commit_lock:
            if self._log is not None:
                self._log.writer.close()
                self._log = None

    def _waiting(self, call: Callable[[], T], consequence: str) -> T:
        """`call()`, which waits up to `lock_wait` seconds for the index's writer lock (queued behind
        this process's other writers, then blocked on the file lock); IndexLockedError says what a
        timeout means (`consequence`)."""
        try:
            return call()
        except layout.IndexLockedError as error:
            raise layout.IndexLockedError(f"{error}; {consequence}") from None


@dataclass(frozen=True)
class _Encoding:
    """How a generation embeds the memories its log records: its config, its models' dimensions
    and encoder records (the manifest's `models` section)."""

    config: IndexConfig
    dims: dict[str, int]
    models: Mapping[str, Mapping[str, Any] | None]  # model -> its encoder record (`Manifest.encoders`)

    @classmethod
    def of(cls, manifest: Manifest) -> _Encoding:
        return cls(manifest.index_config, manifest.dims, manifest.encoders)

    def encode(self, model: str, texts: list[str]) -> np.ndarray:
        register_recorded(self.models)  # the prompts and length the index recorded
        encoder = load_document_encoder(model)
        with _ENCODE_LOCK:
            vectors = encoder.encode_documents(texts, batch_size=document_batch_size(self.config, encoder))
        if model in self.dims and vectors.shape[1] != self.dims[model]:
            raise InvalidValueError(
                f"model {model!r} returned dimension {vectors.shape[1]}, the index has {self.dims[model]}"
            )
        return vectors

    @property
    def encoders(self) -> dict[str, Any]:
        """Model -> (dimension, encoder record): what must be unchanged for vectors to be reused."""
        return {model: (self.dims[model], record) for model, record in self.models.items()}

    def records(self, entries: Sequence[tuple[Document, EmbeddedMemory | None]]) -> list[wal.WalRecord]:
        """Each document's log record: the one :meth:`MemoryWriter.embed` made when it was embedded
        under this config and these encoders, else embedded now (one encoder call per model)."""
        encoders = self.encoders
        reused = {
            position: embedded.record
            for position, (_, embedded) in enumerate(entries)
            if embedded is not None and embedded.config == self.config and embedded.encoders == encoders
        }
        todo = [document for position, (document, _) in enumerate(entries) if position not in reused]
        fresh = iter(wal.embed_documents(todo, self.config, self.encode) if todo else ())
        return [reused[position] if position in reused else next(fresh) for position in range(len(entries))]


@dataclass
class _OpenLog:
    """The log a writer appends to: the generation it extends (as of the manifest `stamp`), how that
    generation embeds, and the open file."""

    stamp: tuple[int, int]
    generation: int
    encoding: _Encoding
    writer: wal.WalWriter
    manifest: Manifest


def _iso(value: datetime | None) -> str:
    return "" if value is None else value.astimezone(UTC).isoformat().replace("+00:00", "Z")
