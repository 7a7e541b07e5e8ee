"""The write path's process-wide caches, in one explicit object (`WRITE_CACHES`): things that never
change once committed (a segment's FAISS index, its tombstoned chunk ids, its document table, its
open store, the file signatures of a generation), kept for the next write of this process so that
a long-running writer (the MCP server) pays a look-up, not a file read, per write. Every member
is thread-safe (a locked LRU, or a pool with its own lock), so writer threads of one process share
them safely; keys carry file identities or checksums, so no entry can go stale."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hybridlab.index.format import layout, store
from hybridlab.index.format.lru import LruCache


class SegmentStores:
    """Read-only connections to committed segment stores, kept open by (path, store checksum) for the
    next write of this process (a segment is never written again, so a connection to it never goes
    stale; a long-running writer such as the MCP server then pays a query, not an open, per write)."""

    def __init__(self, size: int = 64) -> None:
        self._connections: dict[tuple[str, str], Any] = {}
        self._size = size
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def connection(self, folder: Path, checksum: str) -> Iterator[Any]:
        """A read-only connection to the store of the segment whose files are in `folder` (kept
        open by its path and `checksum`, the sha256 the manifest records: `segments.store_checksum`)."""
        if store.is_parquet_segment(folder):  # views over its Parquet files on the scratch instance
            with contextlib.closing(store.open_segment(folder)) as con:
                yield con
            return
        path = folder / layout.STORE_FILE
        key = (str(path.resolve()), checksum)
        with self._lock:
            con = self._connections.pop(key, None)
        if con is None:
            con = store.connect(path, read_only=True)
        cursor = (
            con.cursor()
        )  # a connection of its own for this thread (a DuckDB connection is not thread-safe)
        try:
            yield cursor
        except BaseException:
            cursor.close()
            con.close()
            raise
        cursor.close()
        with self._lock:
            self._connections[key] = con  # most recently used last
            while len(self._connections) > self._size:
                self._connections.pop(next(iter(self._connections))).close()


@dataclass
class WriteCaches:
    """The caches of the write path (see the module docstring)."""

    #: committed segments' FAISS indexes, by (path, inode, size, mtime)
    dense: LruCache[tuple[str, int, int, int], Any] = field(default_factory=lambda: LruCache(16))
    #: committed segments' tombstoned chunk ids, by (folder, inode, mtime, tombstones)
    dead: LruCache[tuple[str, int, int, tuple[str, ...]], Any] = field(default_factory=lambda: LruCache(16))
    #: Parquet segments' `{doc_id: (source, content_sha256)}`, by (folder, checksum of documents.parquet)
    small_documents: LruCache[tuple[str, str], dict[str, tuple[str, str]]] = field(
        default_factory=lambda: LruCache(256)
    )
    #: the same of segments written but not committed yet, by private folder
    uncommitted_documents: LruCache[str, dict[str, tuple[str, str]]] = field(
        default_factory=lambda: LruCache(64)
    )
    #: the last file-signature table read, by (path, sha256)
    signatures: LruCache[tuple[str, str], Any] = field(default_factory=lambda: LruCache(1))
    #: generation folders' manifest copies, by (path, inode, size, mtime) (written once, never stale)
    manifest_copies: LruCache[tuple[str, int, int, int], dict[str, Any]] = field(
        default_factory=lambda: LruCache(8)
    )
    #: open read-only connections to committed segment stores
    stores: SegmentStores = field(default_factory=SegmentStores)


#: the one instance of this process
WRITE_CACHES = WriteCaches()
