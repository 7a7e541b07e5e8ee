"""One object owns the lifecycle of an index's memories: :class:`MemoryService`.

A store, each step inside the service once an adapter has handed it the call:

1. its project: the argument, else the service's default; a project is a collection, and dedupe,
   exact and near, looks only within the memory's own project;
2. under a lock per (collection, normalised content), so two equal stores cannot both miss the
   other: a memory of equal content (ignoring case and whitespace) queued for a deferred commit
   (`commit_delay`; the queue is not flushed for this), else one committed, comes back unchanged;
3. the memory validated and built (:func:`make_memory`) and, when near duplicates are looked for,
   embedded once, as a document (:meth:`MemoryWriter.embed`);
4. the nearest memory of the project on one snapshot (:func:`nearest_memory`): reported at
   `near_threshold` cosine or above, or returned instead with `skip_near_duplicate`;
5. written with the very vectors of step 3 (:meth:`MemoryWriter.store_embedded`), and the index
   re-opened, so the next search, and the next equal store, find it.

Updates and deletes read, then write, one at a time (`lifecycle`); each re-opens the index after its
write. Reads flush the deferred commits first, so an acknowledged memory is always found."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from hybridlab.errors import DocumentNotFoundError, InvalidValueError
from hybridlab.index.write.memory import (
    LOCK_WAIT_SECONDS,
    EmbeddedMemory,
    MemoryWriter,
    StoredMemory,
    check_project,
    create_memory_index,
    find_duplicate,
    make_memory,
    memory_collection,
    normalised_content,
)
from hybridlab.ingest.sources import Document
from hybridlab.search.engine import Index, StoredDocument
from hybridlab.search.listing import NearestMemory, memories_by_id, nearest_memory
from hybridlab.search.snapshot import Snapshot
from hybridlab.search.time_range import iso_z

__all__ = [
    "ALL_PROJECTS",
    "MEMORY_CHUNK_TYPES",
    "NEAR_THRESHOLD",
    "Deletion",
    "MemoryFilters",
    "MemoryPage",
    "MemoryService",
    "ProjectScope",
    "StoreOutcome",
    "Updated",
    "check_project",
]

logger = logging.getLogger(__name__)

#: `project` of a read that covers every project
ALL_PROJECTS = "*"
MEMORY_CHUNK_TYPES = ("memory",)
#: a store reports the nearest memory at this cosine or above: 0 of the 274 distinct demo memories
#: reach it, 95% of one-word edits do (reports/bench/2026-11-27-near-duplicate)
NEAR_THRESHOLD = 0.95
#: memories per page when every memory under a filter is listed (`MemoryService.memories`)
PAGE_SIZE = 500


@dataclass(frozen=True)
class ProjectScope:
    """What one read covers: the documents of `collection` (None: all), or nothing (`empty`: a
    project the index does not have, or a `collection` outside the call's project)."""

    collection: str | None = None
    empty: bool = False


@dataclass(frozen=True)
class MemoryFilters:
    """Which memories a listing or a delete by filter covers: those with all (`match="all"`) or any
    of `tags`, updated within `since`..`until` (ISO-8601 or aware times; None: open)."""

    tags: tuple[str, ...] = ()
    match: str = "all"
    since: str | datetime | None = None
    until: str | datetime | None = None


@dataclass(frozen=True)
class StoreOutcome:
    """What one store did: wrote a new memory (`created`; `pending` while its deferred commit waits),
    or returned an existing one instead: of equal content (`duplicate_of`), or, when asked to, the
    nearest (`near_duplicate_of`, at cosine `similarity`, also reported beside a new memory)."""

    id: str
    generation: int | None
    tags: tuple[str, ...]
    created_at: str
    updated_at: str | None
    batch_size: int  # memories committed together (0: nothing was written)
    seconds: float
    pending: bool = False
    created: bool = True
    duplicate_of: str | None = None
    near_duplicate_of: str | None = None
    similarity: float | None = None
    project: str | None = None

    @classmethod
    def written(cls, stored: StoredMemory, project: str | None, near: NearestMemory | None) -> StoreOutcome:
        """A new memory the writer stored (`stored`), in `project`, `near` its nearest neighbour."""
        fields = {**stored.to_dict(), "tags": tuple(stored.tags)}
        return cls(**fields, **_near_fields(near), project=project)

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "tags": list(self.tags)}


@dataclass(frozen=True)
class Updated:
    """An updated memory: the writer's record of the write, and the project the memory is in now."""

    stored: StoredMemory
    project: str | None


@dataclass(frozen=True)
class Deletion:
    """What a delete covered: the memories found (`ids`, deleted unless `dry_run`), the ids asked for
    that are no memory of the project (`not_found`), the generation without them (the one read when
    nothing was written) and how many were indexed and are gone (`removed`, 0: nothing written)."""

    dry_run: bool
    ids: tuple[str, ...]
    not_found: tuple[str, ...]
    generation: int | None
    removed: int = 0


@dataclass(frozen=True)
class MemoryPage:
    """Memories newest first (as `Index.list_documents` gives them) and the next page's cursor."""

    documents: list[StoredDocument]
    next_cursor: str | None


class MemoryService:
    """The memories of one index folder: its :class:`Index` (reads, near-duplicate search) and its
    :class:`MemoryWriter` (writes), and the default project of calls that name none (None: a read
    covers every project and a store goes to none). Thread-safe: stores of different contents run
    side by side (and group-commit); equal ones, updates and deletes wait for each other."""

    def __init__(self, index: Index, writer: MemoryWriter, default_project: str | None = None) -> None:
        self.index = index
        self.writer = writer
        self.default_project = None if default_project is None else check_project(default_project)
        self.lifecycle = threading.Lock()  # an update or delete reads, then writes: one at a time
        #: normalised content -> [its lock, calls holding or waiting for it]: equal stores one at a time
        self._contents: dict[str, list[Any]] = {}
        self._storing_lock = threading.Lock()

    @classmethod
    def open(
        cls,
        index_dir: str | os.PathLike,
        config: str | os.PathLike | Mapping | None = None,
        *,
        backend: Callable[[Any], Any] | None = None,
        lock_wait: float = LOCK_WAIT_SECONDS,
        commit_delay: float = 0.0,
        wal_records: int | None = None,
        default_project: str | None = None,
    ) -> MemoryService:
        """The service of the index at `index_dir`, searched under `config` (`backend`: the snapshot
        factory of :class:`Index`); the writer's settings as :class:`MemoryWriter` takes them."""
        index = Index(index_dir, config) if backend is None else Index(index_dir, config, backend=backend)
        writer = MemoryWriter(
            index_dir, lock_wait=lock_wait, commit_delay=commit_delay, wal_records=wal_records
        )
        return cls(index, writer, default_project)

    @staticmethod
    def create_if_missing(index_dir: str | os.PathLike) -> bool:
        """Create an empty index (default model and settings) where there is none, so a store works at
        once; True when it did."""
        return create_memory_index(index_dir)

    def close(self) -> None:
        """Let go of the index and the writer's open log (deferred memories not flushed: call
        `writer.flush()` first to keep them)."""
        self.writer.close()
        self.index.close()

    # ---------------------------------------------------------------- projects and reads
    def scope(self, project: str | None, known: Sequence[str], collection: str | None = None) -> ProjectScope:
        """What a read covers: `project`, else the `collection` asked for (an explicit collection
        replaces the default project), else the default project; "*" (or no default) every
        collection. A project not among `known` (the snapshot's collections) is an empty read, not
        an error: a client may ask for a project before storing its first memory."""
        name = self.default_project if project is None and collection is None else project
        if name is None or name == ALL_PROJECTS:
            return ProjectScope(collection)
        check_project(name)
        return ProjectScope(name, empty=name not in known or collection not in (None, name))

    def home(self, project: str | None) -> str | None:
        """The project a new memory goes to: `project`, else the default one (None: no project)."""
        name = self.default_project if project is None else project
        return None if name is None else check_project(name)

    def index_for_read(self, flush: bool = True) -> Index:
        """The index, deferred memories (`commit_delay`) committed first. Without `commit_delay` a
        read never waits for a commit: every acknowledged memory is committed already, and the stores
        still queued are committed by their own calls. A failed flush is logged, not raised: the read
        still answers, from the committed data."""
        try:
            if flush and self.writer.commit_delay > 0:
                self.writer.flush()
        except Exception as error:  # noqa: BLE001 - the read still answers, from the committed data
            logger.warning(
                "could not commit %d queued memories before reading: %s", self.writer.pending, error
            )
        return self.index

    def refresh(self, what: str) -> None:
        """Re-open the index after a write, so the next read sees it (a failure is retried by that read)."""
        try:
            self.index.refresh()
        except Exception as error:  # noqa: BLE001 - committed and durable: an error would make a client retry it
            logger.warning(
                "%s is committed, but re-opening the index failed (the next read retries): %s", what, error
            )

    def page(
        self,
        filters: MemoryFilters,
        project: str | None = None,
        *,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> MemoryPage:
        """Up to `limit` (None: all) memories of `project` under `filters`, newest first, after `cursor`."""
        index = self.index_for_read()
        documents, next_cursor = _listed(
            index, self.scope(project, index.known_collections), filters, limit=limit, cursor=cursor
        )
        return MemoryPage(documents, next_cursor)

    def memories(
        self, filters: MemoryFilters, project: str | None = None, limit: int | None = None
    ) -> Iterator[StoredDocument]:
        """Every memory of `project` under `filters` (at most `limit`), newest first, read a page of
        :data:`PAGE_SIZE` at a time."""
        cursor, left = None, limit
        while True:
            page = self.page(
                filters, project, limit=PAGE_SIZE if left is None else min(PAGE_SIZE, left), cursor=cursor
            )
            yield from page.documents
            cursor = page.next_cursor
            if left is not None:
                left -= len(page.documents)
            if cursor is None or not page.documents or (left is not None and left <= 0):
                return

    # ---------------------------------------------------------------- writes
    def store(
        self,
        content: str,
        tags: Sequence[str] = (),
        memory_type: str = "note",
        created_at: str | None = None,
        *,
        context: str | None = None,
        allow_duplicate: bool = False,
        near_threshold: float | None = NEAR_THRESHOLD,
        skip_near_duplicate: bool = False,
        project: str | None = None,
    ) -> StoreOutcome:
        """Store a memory in `project` (else the default one), unless one of equal content is there
        (`allow_duplicate` stores a copy); report its nearest memory at `near_threshold` or above
        (None: not looked for), or return that one instead with `skip_near_duplicate`. `context`
        (the turn before it) is indexed with it, not part of its content. The steps are in the
        module's docstring."""
        started = time.perf_counter()
        home = self.home(project)
        collection = memory_collection(home)
        key = normalised_content(content) if isinstance(content, str) and not allow_duplicate else ""
        with self._storing(f"{collection}/{key}") if key else contextlib.nullcontext():
            equal = self._equal(content, collection, started) if key else None
            if equal is not None:
                return equal
            document = make_memory(
                content,
                tags,
                memory_type,
                created_at,
                source=self.writer.source,
                metadata={"context": context} if context else None,
                project=home,
            )
            # embedded once, as a document: the near-duplicate look-up compares it with the stored
            # memories' vectors, and the log records the same vectors
            memory = self.writer.embed(document) if key and near_threshold is not None else None
            near = None
            if memory is not None and near_threshold is not None:
                snapshot, near = self._nearest(memory, collection, near_threshold)
                if near and skip_near_duplicate:
                    return _existing(self.index, snapshot, near.doc_id, started, near)
            stored = self.writer.store_embedded(memory) if memory else self.writer.store_document(document)
            self.refresh(f"memory {stored.id}")  # so the next search (and an equal store) finds it
        return StoreOutcome.written(stored, home, near)

    def update(
        self,
        memory_id: str,
        *,
        content: str | None = None,
        tags: Sequence[str] | None = None,
        memory_type: str | None = None,
        project: str | None = None,
        move_to: str | None = None,
    ) -> Updated:
        """Replace the fields given of the memory `memory_id` of `project` (else the default one; "*":
        any), same id and created_at, updated_at now; `move_to` moves it to that project."""
        with self.lifecycle:
            index = self.index_for_read()
            current = index.get_document(memory_id)
            scope = self.scope(project, index.known_collections)
            if scope.empty or scope.collection not in (None, current.collection):
                raise DocumentNotFoundError(f"no memory {memory_id!r} in project {scope.collection!r}")
            stored = self.writer.update(
                current, content=content, tags=tags, memory_type=memory_type, project=move_to
            )
            self.refresh(f"memory {memory_id}")
        return Updated(stored, move_to or _project_of(current))

    def delete(
        self,
        ids: Sequence[str] = (),
        filters: MemoryFilters | None = None,
        *,
        dry_run: bool = False,
        project: str | None = None,
    ) -> Deletion:
        """Forget memories for good: `ids`, or every memory under `filters` (one of the two), of
        `project` (else the default one; "*": all); `dry_run` only finds them. The id of another
        project's memory is not found: a delete never reaches into another project."""
        if bool(ids) == (filters is not None):
            raise InvalidValueError("give ids, or filters: one of the two")
        with self.lifecycle:
            index = self.index_for_read()
            scope = self.scope(project, index.known_collections)
            found, not_found = _matching(index, scope, ids, filters)
            if dry_run or not found:
                return Deletion(dry_run, tuple(found), tuple(not_found), self.index.generation)
            deleted = self.writer.delete(found)
            self.refresh(f"the deletion of {len(found)} memories")
        return Deletion(False, tuple(found), tuple(not_found), deleted.generation, deleted.removed)

    # ---------------------------------------------------------------- the steps of a store
    @contextlib.contextmanager
    def _storing(self, key: str) -> Iterator[None]:
        """Held while one content is looked up and stored, so two equal stores cannot both miss the
        other; stores of different contents still run side by side (and group-commit)."""
        with self._storing_lock:
            entry = self._contents.setdefault(key, [threading.Lock(), 0])
            entry[1] += 1
        try:
            with entry[0]:
                yield
        finally:
            with self._storing_lock:
                entry[1] -= 1
                if not entry[1]:
                    del self._contents[key]

    def _equal(self, content: str, collection: str, started: float) -> StoreOutcome | None:
        """The memory of equal content in `collection`: one acknowledged and waiting for its deferred
        commit (not flushed for this), else a committed one; None when there is none."""
        queued = self.writer.queued_duplicate(content, collection) if self.writer.commit_delay > 0 else None
        if queued is not None:
            return _queued(queued, started)
        snapshot = self.index.snapshot()
        existing = find_duplicate(snapshot.generation.store, content, collection)
        return None if existing is None else _existing(self.index, snapshot, existing, started)

    def _nearest(
        self, memory: EmbeddedMemory, collection: str, threshold: float
    ) -> tuple[Snapshot, NearestMemory | None]:
        """The snapshot read and the memory of `collection` nearest to `memory` in it, when at
        `threshold` cosine or above (without flushing the writer)."""
        snapshot = self.index.snapshot()
        near = nearest_memory(snapshot, memory.vectors, collection=collection)
        return snapshot, near if near and near.similarity >= threshold else None


def _matching(
    index: Index, scope: ProjectScope, ids: Sequence[str], filters: MemoryFilters | None
) -> tuple[list[str], list[str]]:
    """(the memories a delete covers, the ids asked for that are no memory within `scope`)."""
    if ids and scope.empty:
        return [], list(dict.fromkeys(ids))
    if ids:
        return memories_by_id(index, list(ids), scope.collection)
    return [d.doc_id for d in _listed(index, scope, filters or MemoryFilters())[0]], []


def _listed(
    index: Index, scope: ProjectScope, filters: MemoryFilters, **page: Any
) -> tuple[list[StoredDocument], str | None]:
    """The memories under `filters` within `scope` (`page`: limit, cursor): nothing for an empty
    scope, nor when the project's last memory was deleted since the scope was read (its collection
    is gone: unknown)."""
    if scope.empty:
        return [], None
    try:
        return index.list_documents(
            collection=scope.collection,
            tags=filters.tags,
            match=filters.match,
            since=filters.since,
            until=filters.until,
            chunk_types=MEMORY_CHUNK_TYPES,
            **page,
        )
    except InvalidValueError as error:
        if scope.collection is None or error.field != "collection":
            raise
        return [], None


def _near_fields(near: NearestMemory | None) -> dict[str, Any]:
    return {
        "near_duplicate_of": near.doc_id if near else None,
        "similarity": round(near.similarity, 4) if near else None,
    }


def _existing(
    index: Index, snapshot: Snapshot, doc_id: str, started: float, near: NearestMemory | None = None
) -> StoreOutcome:
    """The outcome of a store that returns the memory `doc_id` of `snapshot` instead of a new one."""
    document = index.get_document(doc_id, snapshot=snapshot)
    return StoreOutcome(
        id=doc_id,
        generation=snapshot.number,
        tags=document.tags,
        created_at=document.created_at or "",
        updated_at=document.updated_at,
        batch_size=0,
        seconds=round(time.perf_counter() - started, 3),
        created=False,
        duplicate_of=doc_id,
        project=_project_of(document),
        **_near_fields(near),
    )


def _queued(queued: Document, started: float) -> StoreOutcome:
    """The outcome of a store that returns `queued`, a memory of equal content acknowledged and
    waiting for its deferred commit (pending, in no generation yet)."""
    return StoreOutcome(
        id=queued.doc_id,
        generation=None,
        tags=tuple(queued.tags),
        created_at=iso_z(queued.created_at) or "",
        updated_at=iso_z(queued.updated_at) or "",
        batch_size=0,
        seconds=round(time.perf_counter() - started, 3),
        pending=True,
        created=False,
        duplicate_of=queued.doc_id,
        project=queued.metadata.get("project"),
    )


def _project_of(memory: StoredDocument) -> str | None:
    """The project a memory (as `Index.get_document` returns it) is in; None: none."""
    return memory.metadata.get("project")
