"""Add memories to an index: validate, commit as a new generation, searchable at once.

Every commit adds one small segment holding the new memories (its own DuckDB store, BM25 postings
and FAISS index) and commits a new manifest naming it; nothing written before is rewritten, so a
commit costs about what the memories themselves cost (plus the corpus graph's update and, now and
then, a tiered merge of small segments). :class:`MemoryWriter` also group-commits: stores that
arrive while a commit is running are written together by the next one.
Each :meth:`MemoryWriter.store` returns only once its memory is committed (durable, and visible to
any reader that refreshes), so there is no window in which an acknowledged memory can be lost.

With `commit_delay > 0` (opt-in, for write-heavy loads) a store returns at once and its memory waits
up to that long in a queue; :meth:`MemoryWriter.flush` (which the MCP server calls before every read)
commits the queue, so a memory is still found by the next search. The price: a crash loses the
memories of the last `commit_delay` seconds although they were acknowledged.
"""
from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hybridlab.index import layout
from hybridlab.ingest.sources import Document, memory_document

logger = logging.getLogger(__name__)

MEMORY_SOURCE = "mcp:memories"
MAX_CONTENT_CHARS = 20_000
MAX_TAGS = 32
MAX_TAG_CHARS = 100
MAX_TYPE_CHARS = 50
LOCK_WAIT_SECONDS = 10.0


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

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "generation": self.generation, "tags": list(self.tags),
                "created_at": self.created_at, "batch_size": self.batch_size, "seconds": round(self.seconds, 3),
                "pending": self.pending}


def new_memory_id() -> str:
    """A fresh memory id (`mem-` + 16 hex digits of a random UUID)."""
    return f"mem-{uuid.uuid4().hex[:16]}"


def make_memory(content: str, tags: Sequence[str] = (), memory_type: str = "note", created_at: str | None = None,
                *, memory_id: str | None = None, source: str = MEMORY_SOURCE) -> Document:
    """Validate a memory and build its Document (ValueError names the offending field)."""
    if not isinstance(content, str) or not content.strip():
        raise ValueError("content must be a non-empty string")
    if len(content) > MAX_CONTENT_CHARS:
        raise ValueError(f"content is {len(content)} characters long; at most {MAX_CONTENT_CHARS} are allowed")
    if isinstance(tags, str) or not all(isinstance(tag, str) for tag in tags):
        raise ValueError(f"tags must be a list of strings, got {tags!r}")
    if len(tags) > MAX_TAGS:
        raise ValueError(f"at most {MAX_TAGS} tags per memory, got {len(tags)}")
    long_tags = [tag for tag in tags if len(tag) > MAX_TAG_CHARS]
    if long_tags:
        raise ValueError(f"tags must be at most {MAX_TAG_CHARS} characters: {long_tags[0][:40]!r}…")
    if not isinstance(memory_type, str) or not memory_type.strip() or len(memory_type) > MAX_TYPE_CHARS:
        raise ValueError(f"memory_type must be a non-empty string of at most {MAX_TYPE_CHARS} characters")
    when = created_at or datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    obj = {"id": memory_id or new_memory_id(), "content": content, "tags": list(tags),
           "created_at": when, "memory_type": memory_type.strip()}
    return memory_document(obj, "memory", source)


def _cache_path(index_dir: Path) -> Path | None:
    """The index's own embeddings cache when it has one (also in a copied or moved index, whose
    manifest still names the original's), else the one it was built with (the shared cache of the
    evaluation indexes); None = the indexer's default."""
    if (index_dir / layout.CACHE_FILE).exists():
        return index_dir / layout.CACHE_FILE
    try:
        recorded = layout.read_manifest(index_dir).get("embedding_cache")
    except (FileNotFoundError, layout.CorruptIndexError):
        return None
    return Path(recorded) if recorded and Path(recorded).exists() else None


class MemoryWriter:
    """Commits memories to one index folder; concurrent stores share a generation (group commit).
    `commit_delay` > 0 defers commits (see the module docstring); call :meth:`flush` before reading."""

    def __init__(self, index_dir: str | os.PathLike, *, source: str = MEMORY_SOURCE,
                 lock_wait: float = LOCK_WAIT_SECONDS, commit_delay: float = 0.0) -> None:
        if commit_delay < 0:
            raise ValueError(f"commit_delay must be >= 0 seconds, got {commit_delay}")
        self.index_dir = Path(index_dir)
        self.source = source
        self.lock_wait = lock_wait
        self.commit_delay = commit_delay
        self._timer: threading.Timer | None = None
        self._pending: list[tuple[Document, Future]] = []
        self._pending_lock = threading.Lock()
        self._commit_lock = threading.Lock()
        self.commits = 0

    def store(self, content: str, tags: Sequence[str] = (), memory_type: str = "note",
              created_at: str | None = None) -> StoredMemory:
        """Validate and commit one memory; returns when it is durable and searchable."""
        document = make_memory(content, tags, memory_type, created_at, source=self.source)
        started = time.perf_counter()
        future: Future = Future()
        with self._pending_lock:
            self._pending.append((document, future))
            if self.commit_delay > 0:
                if self._timer is None:
                    self._timer = threading.Timer(self.commit_delay, self._flush_quietly)
                    self._timer.daemon = True
                    self._timer.start()
                return StoredMemory(document.doc_id, None, document.tags, _iso(document.created_at), 0,
                                    time.perf_counter() - started, pending=True)
        with self._commit_lock:
            if not future.done():  # nobody committed it meanwhile: commit everything pending
                self._commit()
        generation, batch_size = future.result()
        return StoredMemory(document.doc_id, generation, document.tags, _iso(document.created_at), batch_size,
                            time.perf_counter() - started)

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
        from hybridlab.index.build import apply_changes

        with self._pending_lock:
            batch, self._pending = self._pending, []
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
        if not batch:
            return
        documents = [document for document, _ in batch]
        try:
            report = self._apply(apply_changes, documents)
        except BaseException as error:  # handed to every waiting store, re-raised there
            if self.commit_delay > 0:  # acknowledged already: keep them queued for the next flush
                with self._pending_lock:
                    self._pending[:0] = batch
                raise
            for _, future in batch:
                future.set_exception(error)
            return
        self.commits += 1
        logger.info("committed %d memories as generation %s in %.2fs", len(batch), report.generation, report.seconds)
        for _, future in batch:
            future.set_result((report.generation, len(batch)))

    def _apply(self, apply_changes, documents: list[Document]):
        """apply_changes, waiting up to `lock_wait` seconds while another process holds the writer lock."""
        deadline = time.monotonic() + self.lock_wait
        while True:
            try:
                return apply_changes(self.index_dir, [(self.source, documents, False)], progress=False,
                                     cache_path=_cache_path(self.index_dir), use_cache=False)
            except layout.IndexLockedError as error:
                if time.monotonic() >= deadline:
                    raise layout.IndexLockedError(
                        f"{error}; the memory was not stored (waited {self.lock_wait:.0f}s)") from None
                time.sleep(0.2)


def _iso(value: datetime | None) -> str:
    return "" if value is None else value.astimezone(UTC).isoformat().replace("+00:00", "Z")
