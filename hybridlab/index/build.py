"""Build and update an index: read sources, chunk, embed what is new, write a new generation.

Only changed documents are re-chunked; chunk text already embedded by a model is taken from the
embeddings cache. A run writes a complete new generation aside and commits it by replacing the
manifest, so a failed or interrupted run leaves the previous index intact and searchable.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import math
import os
import platform
import shutil
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from hybridlab.config import IndexConfig
from hybridlab.errors import HybridlabError
from hybridlab.index import layout, store, wal
from hybridlab.index.embedding_cache import EmbeddingCache, VectorBuffer
from hybridlab.index.lru import LruCache
from hybridlab.index.rows import (
    SMALL_INSERT,
    assign_vectors,
    insert_documents,
)
from hybridlab.ingest.sources import (
    READER_VERSION,
    Document,
    FileSignature,
    FolderScan,
    IngestReport,
    read_folder,
    read_source,
    source_kind,
)

logger = logging.getLogger(__name__)

EMBED_BATCH = 256
READ_BATCH = 20_000  # chunk ids per query when streaming chunk texts out of DuckDB

# Test hook for fault injection: called with a stage name at each step of a build.
_CHECKPOINT: Callable[[str], None] | None = None


def _checkpoint(stage: str) -> None:
    hook = _CHECKPOINT
    if hook is None and os.environ.get("HYBRIDLAB_TRACE_STAGES"):
        print(f"STAGE {stage}", flush=True)
        # the fault-injection tests SIGKILL the process right after a stage line: a short pause lets
        # the kill land before the next stage's work on a busy machine (HYBRIDLAB_TRACE_PAUSE seconds)
        time.sleep(float(os.environ.get("HYBRIDLAB_TRACE_PAUSE", "0.05")))
    elif hook is not None:
        hook(stage)


@dataclass
class IndexReport:
    """What one indexing run did, with its timing."""

    index_dir: str
    generation: int | None = None
    documents: int = 0
    added: int = 0
    changed: int = 0
    removed: int = 0
    unchanged: int = 0
    chunks: int = 0
    new_chunks: int = 0
    embedded: int = 0
    cache_hits: int = 0  # vectors not embedded: found in the cache, or kept in an earlier segment
    skipped: list[tuple[str, str]] = field(default_factory=list)
    seconds: float = 0.0
    embed_seconds: float = 0.0
    committed: bool = False

    @property
    def chunks_per_second(self) -> float:
        return self.new_chunks / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "chunks_per_second": round(self.chunks_per_second, 1)}

    def summary(self) -> str:
        state = f"generation {self.generation}" if self.committed else "no change (index untouched)"
        return (
            f"{self.documents} documents: {self.added} added, {self.changed} changed, {self.removed} removed, "
            f"{self.unchanged} unchanged; {self.chunks} chunks ({self.new_chunks} new), {self.embedded} embedded, "
            f"{self.cache_hits} from cache; {len(self.skipped)} files skipped; {self.seconds:.1f} s, "
            f"{self.chunks_per_second:.1f} chunks/s; {state}"
        )


def canonical_models(names: Iterable[str]) -> tuple[str, ...]:
    from hybridlab.encoders.registry import get_spec

    return tuple(dict.fromkeys(get_spec(name).name for name in names))


def _documents_from_store(con) -> list[Document]:
    rows = con.execute(
        "SELECT doc_id, source, collection, title, text, doc_type, created_at, updated_at, metadata, language, tags "
        "FROM documents ORDER BY doc_id"
    ).fetchall()

    return [
        Document(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], json.loads(r[8]) if r[8] else {}, tuple(r[10] or ()), r[9])
        for r in rows
    ]


def _embed_missing(con, cache: EmbeddingCache, models: Sequence[str], report: IndexReport, config: IndexConfig,
                   known_dims: dict[str, int], progress: bool) -> dict[str, int]:
    """Embed every assigned chunk text not yet in the cache; returns each model's dimension."""
    from hybridlab.encoders.registry import get_spec, load_encoder

    dims: dict[str, int] = {}
    for model in models:
        spec = get_spec(model)
        if model in known_dims and known_dims[model] != spec.dim:
            raise ValueError(
                f"model {model!r} was indexed with dimension {known_dims[model]} but now has {spec.dim}; "
                f"drop its vectors first: hybridlab reindex --drop-model {model}"
            )
        dims[model] = spec.dim
        hashes = [row[0] for row in con.execute(
            "SELECT DISTINCT embed_sha256 FROM chunk_vectors WHERE model = ?", [model]).fetchall()]
        todo = cache.missing(model, hashes, dim=spec.dim)
        report.cache_hits += len(hashes) - len(todo)
        del hashes
        if not todo:
            continue
        missing = _texts_of(con, todo)
        encoder = load_encoder(model)
        missing.sort(key=lambda pair: len(pair[1]))
        started = time.perf_counter()
        bar = _progress(total=len(missing), desc=f"embedding ({model})", enabled=progress, unit="chunk")
        step = int(os.environ.get("HYBRIDLAB_EMBED_BATCH", EMBED_BATCH))  # small in fault-injection tests
        for start in range(0, len(missing), step):
            batch = missing[start:start + step]
            vectors = encoder.encode_documents([text for _, text in batch], batch_size=config.embed_batch_size)
            if vectors.shape[1] != spec.dim:
                raise ValueError(f"model {model!r} returned dimension {vectors.shape[1]}, registry says {spec.dim}")
            cache.put(model, [sha for sha, _ in batch], vectors)
            report.embedded += len(batch)
            bar.update(len(batch))
            _checkpoint("embedded-batch")
        bar.close()
        report.embed_seconds += time.perf_counter() - started
    return dims


def _texts_of(con, hashes: Sequence[str]) -> list[tuple[str, str]]:
    """(sha, embed_text) of the given embedding-text hashes, one text per hash."""
    if len(hashes) <= SMALL_INSERT:  # a few: a list parameter, no pandas frame
        return con.execute("SELECT c.embed_sha256, any_value(c.embed_text) FROM chunks c WHERE "
                           "list_contains(?::VARCHAR[], c.embed_sha256) GROUP BY 1 ORDER BY 1", [list(hashes)]).fetchall()
    import pandas as pd

    con.register("wanted_sha", pd.DataFrame({"sha": list(hashes)}))
    try:
        return con.execute("SELECT w.sha, any_value(c.embed_text) FROM wanted_sha w "
                           "JOIN chunks c ON c.embed_sha256 = w.sha GROUP BY w.sha ORDER BY w.sha").fetchall()
    finally:
        con.unregister("wanted_sha")


def _streamed_texts(con, ids: np.ndarray) -> Iterable[str]:
    """The embedding text of each chunk of `ids` (every chunk id, ascending), `READ_BATCH` ids per
    query: each query sorts one small range (one sort of all texts overruns a bounded buffer pool)."""
    step = READ_BATCH
    for start in range(0, len(ids), step):
        low, high = int(ids[start]), int(ids[min(start + step, len(ids)) - 1])
        rows = con.execute("SELECT embed_text FROM chunks WHERE chunk_id BETWEEN ? AND ? ORDER BY chunk_id",
                           [low, high]).fetchall()
        for (text,) in rows:
            yield text


def _progress(total: int, desc: str, enabled: bool, unit: str = "it"):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=unit, disable=not enabled, leave=False)


VectorSource = Callable[[str, dict[str, np.ndarray], int], np.ndarray]


def cache_vectors(cache: EmbeddingCache) -> VectorSource:
    """Vectors of (model, chunk_vectors rows, dim) from the embeddings cache."""
    def vectors(model: str, pairs: dict[str, np.ndarray], dim: int) -> np.ndarray:
        try:
            return cache.matrix(model, pairs["embed_sha256"].tolist(), dim)
        except KeyError as error:
            raise RuntimeError(str(error).strip("'\"")) from None

    return vectors


def build_artifacts(con, vectors_of: VectorSource, folder: Path, config: IndexConfig, dims: dict[str, int],
                    progress: bool = False) -> dict[str, Any]:
    """Write one segment's BM25 postings and one FAISS index per model into `folder` from its
    store; vectors come from `vectors_of`."""
    from hybridlab.index.dense import DenseIndex
    from hybridlab.index.sparse import SparseIndex

    ids = con.execute("SELECT chunk_id FROM chunks ORDER BY chunk_id").fetchnumpy()["chunk_id"].astype(np.int64)
    sparse = SparseIndex.build(_streamed_texts(con, ids), ids, config.bm25, show_progress=progress)
    sparse.save(folder / layout.BM25_DIR)
    del sparse
    _checkpoint("bm25-written")
    models: dict[str, Any] = {}
    for model, dim in dims.items():
        pairs = con.execute(
            "SELECT chunk_id, embed_sha256 FROM chunk_vectors WHERE model = ? ORDER BY chunk_id", [model]
        ).fetchnumpy()
        matrix = vectors_of(model, pairs, dim)
        dense = DenseIndex.build(matrix, pairs["chunk_id"].astype(np.int64), model, config.dense_index)
        del matrix  # FAISS holds its own copy
        dense.save(folder / layout.dense_file(model))
        models[model] = {"dim": dim, "vectors": len(pairs["chunk_id"]), "file": layout.dense_file(model),
                         "index": config.dense_index}
        _checkpoint("faiss-written")
    return {"models": models, "bm25": {"dir": layout.BM25_DIR, "rows": len(ids), "config": dataclasses.asdict(config.bm25)}}


@functools.cache
def _versions() -> tuple[tuple[str, str], ...]:
    import importlib.metadata as md

    found = [("python", platform.python_version())]
    for package in ("hybridlab", "duckdb", "faiss-cpu", "bm25s", "sentence-transformers", "torch", "numpy"):
        try:
            found.append((package, md.version(package)))
        except md.PackageNotFoundError:
            pass
    return tuple(found)


def versions() -> dict[str, str]:
    """Python and the versions of the packages an index depends on (read once per process)."""
    return dict(_versions())


Batch = tuple[str, list[Document], bool]  # (source, documents, remove_missing)


def last_versions(batches: Sequence[Batch]) -> list[Batch]:
    """The batches with each (source, doc id)'s last document only: a write that brings an id twice
    keeps its later version, exactly as two writes in a row would (the one rule of every write
    path: `apply_changes`, the memory writer's group commits and the write-ahead log's records)."""
    last: dict[tuple[str, str], tuple[int, int]] = {}
    total = 0
    for b, (source, documents, _) in enumerate(batches):
        total += len(documents)
        for i, document in enumerate(documents):
            last[(source, document.doc_id)] = (b, i)
    if len(last) == total:
        return list(batches)
    return [(source, [document for i, document in enumerate(documents) if last[(source, document.doc_id)] == (b, i)],
             remove_missing) for b, (source, documents, remove_missing) in enumerate(batches)]


def _plan(existing: dict[str, tuple[str, str]], batches: Sequence[tuple[str, list[Document], bool]],
          report: IndexReport, unchanged: dict[str, Iterable[str]] | None = None) -> tuple[list[Document], list[str]]:
    """Which documents to (re)insert and which doc ids to delete. `unchanged`: by source, the doc
    ids of files not read because their signature is the recorded one (kept as they are)."""
    to_insert: list[Document] = []
    to_delete: list[str] = []
    seen: dict[str, str] = {}
    for source, documents, remove_missing in batches:
        ids_here = set()
        for doc_id in (unchanged or {}).get(source, ()):
            ids_here.add(doc_id)
            seen[doc_id] = source
            if existing.get(doc_id, ("",))[0] == source:
                report.unchanged += 1
            else:  # recorded but no longer indexed (removed by another write): read by the next run
                logger.warning("%s: %s has a recorded file signature but no indexed document", source, doc_id)
        for document in documents:
            if document.doc_id in seen and seen[document.doc_id] != source:
                raise ValueError(
                    f"document id {document.doc_id!r} comes from two sources: {seen[document.doc_id]} and {source}"
                )
            seen[document.doc_id] = source
            ids_here.add(document.doc_id)
            old = existing.get(document.doc_id)
            if old is None:
                report.added += 1
                to_insert.append(document)
            elif old[1] != document.content_sha256 or old[0] != source:
                report.changed += 1
                to_delete.append(document.doc_id)
                to_insert.append(document)
            else:
                report.unchanged += 1
        if remove_missing:
            gone = [doc_id for doc_id, (src, _) in existing.items() if src == source and doc_id not in ids_here]
            report.removed += len(gone)
            to_delete.extend(gone)
    report.documents = len(seen)
    return to_insert, to_delete


# ------------------------------------------------------------------------------------- file signatures
#: the file signatures of a generation's folder sources: JSON `{"reader": READER_VERSION, "sources":
#: {source: {doc_id: [size, inode, mtime_ns, ctime_ns]}}}`, in the folder the manifest's
#: `file_signatures.file` names (written into the commit folder by a write that changes them)
SIGNATURES_FILE = "file-signatures.json"

Signatures = dict[str, dict[str, FileSignature]]  # {source: {doc_id: signature}}
_SIGNATURES: LruCache[tuple[str, str], Signatures] = LruCache(1)  # the last table read, by (path, sha256)


def recorded_signatures(index_dir: str | os.PathLike, manifest: dict[str, Any] | None = None) -> Signatures:
    """`{source: {doc_id: file signature}}` the live generation recorded for its folder sources'
    files: each the signature the file had when its document was last read into the index (settled
    files only: see `read_folder`). Empty when there is no index, none was recorded, they were
    recorded by another `READER_VERSION`, or the file does not match its checksum. Do not mutate."""
    if manifest is None:
        try:
            manifest = layout.read_manifest(Path(index_dir))
        except HybridlabError:
            return {}
    info = manifest.get("file_signatures") or {}
    name = info.get("file")
    recorded = (manifest.get("files") or {}).get(name) if name else None
    if not recorded or info.get("reader") != READER_VERSION:
        return {}
    path = Path(index_dir) / name
    key = (str(path), str(recorded.get("sha256")))
    known = _SIGNATURES.get(key)
    if known is not None:
        return known
    import hashlib

    try:
        data = path.read_bytes()
        if hashlib.sha256(data).hexdigest() != recorded.get("sha256"):
            raise ValueError("it does not match its sha256 in the manifest")
        table = {source: {doc_id: tuple(signature) for doc_id, signature in files.items()}
                 for source, files in json.loads(data)["sources"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        logger.warning("not using the file signatures %s (every file is read): %s", path, error)
        return {}
    _SIGNATURES.put(key, table)
    return table


def _next_signatures(index_dir: Path, manifest: dict[str, Any] | None, scans: Sequence[FolderScan],
                     to_insert: Sequence[Document], to_delete: Sequence[str],
                     existing: dict[str, tuple[str, str, int]]) -> Signatures | None:
    """The signatures this write commits; None when they are the live generation's, unchanged.

    A scanned source's are replaced: the files left unread keep their recorded signature (when it
    is still the live generation's and their document is indexed), the files read record theirs.
    Every other source keeps its own, less the documents this write inserts or deletes (whose file
    is then read by the next scan)."""
    info = (manifest or {}).get("file_signatures") or {}
    touched: dict[str, set[str]] = {}
    for document in to_insert:
        touched.setdefault(document.source, set()).add(document.doc_id)
    for doc_id in to_delete:
        touched.setdefault(existing[doc_id][0], set()).add(doc_id)
    scanned = {scan.source for scan in scans}
    if not scans and not set(info.get("sources") or ()) & set(touched):
        return None  # e.g. a memory write: no recorded source touched
    old = recorded_signatures(index_dir, manifest) if manifest else {}
    table = {source: {d: s for d, s in files.items() if d not in touched.get(source, ())}
             for source, files in old.items() if source not in scanned}
    for scan in scans:
        before = old.get(scan.source, {})
        files = {doc_id: signature for doc_id, signature in scan.unchanged.items()
                 if before.get(doc_id) == signature and existing.get(doc_id, ("",))[0] == scan.source}
        files.update((d.doc_id, scan.signatures[d.doc_id]) for d in scan.documents if d.doc_id in scan.signatures)
        table[scan.source] = files
    table = {source: files for source, files in table.items() if files}
    return None if table == old else table


def _commit_signatures(index_dir: Path, old: dict[str, Any] | None, table: Signatures | None, folder: Path,
                       name: str, live: set[str]) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The manifest's `file_signatures` for a commit into `folder` (becoming `name`) whose live
    segments are `live`, and the `files` entry of a signatures file kept where it is (None: written
    now). `table` None keeps the old generation's: by reference while their folder stays live, else
    copied into `folder`."""
    if table is None:
        info = (old or {}).get("file_signatures")
        if not info:
            return None, None
        recorded = (old.get("files") or {}).get(info["file"])
        if info["file"].split("/")[0] in live and recorded:
            return info, recorded
        table = recorded_signatures(index_dir, old)
    if not table:
        return None, None
    payload = {"reader": READER_VERSION,
               "sources": {source: {doc_id: list(signature) for doc_id, signature in sorted(files.items())}
                           for source, files in sorted(table.items())}}
    (folder / SIGNATURES_FILE).write_text(json.dumps(payload, separators=(",", ":")), encoding="utf-8")
    return {"file": f"{name}/{SIGNATURES_FILE}", "reader": READER_VERSION,
            "sources": {source: len(files) for source, files in sorted(table.items())}}, None


# ---------------------------------------------------------------------------------------------- segments
#: tiered merge policy: this many adjacent segments of the same size tier (log10 of live chunks) are
#: merged into one after a commit, so an index holds at most ~(MERGE_FACTOR - 1) segments per tier
MERGE_FACTOR = 10
#: a segment of at least `MIN_REWRITE_ROWS` rows whose share of tombstoned chunks exceeds this is
#: rewritten without them by the next merge (smaller ones are merged by their tier soon enough)
MAX_DELETED_SHARE = 0.5
MIN_REWRITE_ROWS = 1000


def segment_models(manifest: dict[str, Any], entry: dict[str, Any]) -> dict[str, Any]:
    """A segment's per-model files (a legacy segment's are the manifest's)."""
    return (manifest.get("models") or {}) if entry.get("legacy") else (entry.get("models") or {})


def _segment_files(manifest: dict[str, Any], entry: dict[str, Any]) -> dict[str, Any]:
    """The manifest's checksums of one segment's files, by name relative to the segment folder."""
    files = manifest.get("files") or {}
    if entry.get("legacy"):
        return dict(files)
    prefix = f"{entry['name']}/"
    return {name[len(prefix):]: value for name, value in files.items() if name.startswith(prefix)}


def _attach(con, index_dir: Path, entries: Sequence[dict[str, Any]]) -> list[str]:
    """Attach the segments' tables to `con` (read-only); their aliases, unique in this process."""
    aliases = []
    for entry in entries:
        aliases.append(store.unique_name("s"))
        store.attach_segment(con, _folder(index_dir, entry), aliases[-1])
    return aliases


def _detach(con, aliases: Sequence[str]) -> None:
    for alias in aliases:
        con.execute(f"DETACH DATABASE IF EXISTS {alias}")


def _register_deleted(con, entries: Sequence[dict[str, Any]], extra: Sequence[str] = ()) -> None:
    """Table `gone (segment, doc_id)`: each segment's tombstones, plus `extra` doc ids in every segment."""
    import pandas as pd

    rows = [(i, doc_id) for i, entry in enumerate(entries) for doc_id in (entry.get("deleted") or ())]
    rows += [(i, doc_id) for i in range(len(entries)) for doc_id in extra]
    con.execute("CREATE OR REPLACE TEMP TABLE gone (segment INTEGER, doc_id VARCHAR)")
    if rows:
        con.register("gone_frame", pd.DataFrame(rows, columns=["segment", "doc_id"]))
        con.execute("INSERT INTO gone SELECT * FROM gone_frame")
        con.unregister("gone_frame")


def _copy_live_rows(con, aliases: Sequence[str], entries: Sequence[dict[str, Any]],
                    extra_deleted: Sequence[str] = (), vectors: bool = True) -> None:
    """Insert the live rows of the attached segments (`aliases`, as `_attach` gave) into `con`'s own tables."""
    _register_deleted(con, entries, extra_deleted)
    for i, alias in enumerate(aliases):
        gone = f"(SELECT doc_id FROM gone WHERE segment = {i})"
        con.execute("BEGIN TRANSACTION")
        con.execute(f"INSERT INTO documents SELECT * FROM {alias}.documents WHERE doc_id NOT IN {gone}")
        con.execute(f"INSERT INTO chunks SELECT * FROM {alias}.chunks WHERE doc_id NOT IN {gone}")
        con.execute(f"INSERT INTO tags SELECT * FROM {alias}.tags WHERE doc_id NOT IN {gone}")
        if vectors:
            con.execute(f"INSERT INTO chunk_vectors SELECT * FROM {alias}.chunk_vectors WHERE chunk_id NOT IN "
                        f"(SELECT chunk_id FROM {alias}.chunks WHERE doc_id IN {gone})")
        con.execute("COMMIT")


def _keep_newest_versions(con) -> list[str]:
    """Drop the older versions of documents held twice in `con`'s tables (rows copied from the
    segments of an index written before one id meant one document): the newest version of each is
    its last row and the chunks from its last first chunk on (chunk ids grow with every write).
    Returns the doc ids that had several versions."""
    duplicated = [row[0] for row in con.execute(
        "SELECT doc_id FROM documents GROUP BY doc_id HAVING count(*) > 1 ORDER BY doc_id").fetchall()]
    if not duplicated:
        return []
    logger.warning("%d document ids are held more than once (e.g. %r): keeping the newest version of each",
                   len(duplicated), duplicated[0])
    con.execute("BEGIN TRANSACTION")
    con.execute("DELETE FROM documents WHERE rowid NOT IN (SELECT max(rowid) FROM documents GROUP BY doc_id)")
    con.execute("DELETE FROM chunks WHERE chunk_id < (SELECT max(c.chunk_id) FROM chunks c "
                "WHERE c.doc_id = chunks.doc_id AND c.chunk_index = 0)")
    con.execute("DELETE FROM tags WHERE chunk_id NOT IN (SELECT chunk_id FROM chunks)")
    con.execute("DELETE FROM chunk_vectors WHERE chunk_id NOT IN (SELECT chunk_id FROM chunks)")
    con.execute("COMMIT")
    return duplicated


def _copy_live_parquet(con, folders: Sequence[Path], entries: Sequence[dict[str, Any]]) -> None:
    """`_copy_live_rows` for segments that all store Parquet tables: one statement per table over
    every segment's file (a merge of ten small segments runs a handful of statements, not ~100)."""
    files = {table: [str(Path(folder) / store.parquet_file(table)) for folder in folders] for table in store.TABLES}
    gone: dict[str, list] = {"documents": [], "chunks": [], "doc_id": []}
    for folder, entry in zip(folders, entries, strict=True):
        for doc_id in entry.get("deleted") or ():
            gone["documents"].append(str(Path(folder) / store.parquet_file("documents")))
            gone["chunks"].append(str(Path(folder) / store.parquet_file("chunks")))
            gone["doc_id"].append(doc_id)
    con.execute("CREATE OR REPLACE TEMP TABLE gone_rows (documents VARCHAR, chunks VARCHAR, doc_id VARCHAR)")
    store.insert_rows(con, "gone_rows", gone)
    con.execute("CREATE OR REPLACE TEMP TABLE dead_chunks AS SELECT c.chunk_id FROM read_parquet(?, filename = true) c "
                "JOIN gone_rows g ON g.chunks = c.filename AND g.doc_id = c.doc_id", [files["chunks"]])
    con.execute("BEGIN TRANSACTION")
    con.execute("INSERT INTO documents SELECT * EXCLUDE (filename) FROM read_parquet(?, filename = true) d WHERE NOT "
                "EXISTS (SELECT 1 FROM gone_rows g WHERE g.documents = d.filename AND g.doc_id = d.doc_id)",
                [files["documents"]])
    for table in ("chunks", "tags", "chunk_vectors"):
        con.execute(f"INSERT INTO {table} SELECT * FROM read_parquet(?) WHERE chunk_id NOT IN "
                    "(SELECT chunk_id FROM dead_chunks)", [files[table]])
    con.execute("COMMIT")


class _SegmentStores:
    """Read-only connections to committed segment stores, kept open by (path, store checksum) for the
    next write of this process (a segment is never written again, so a connection to it never goes
    stale; a long-running writer such as the MCP server then pays a query, not an open, per write)."""

    def __init__(self, size: int = 64) -> None:
        self._connections: dict[tuple[str, str], Any] = {}
        self._size = size
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def connection(self, index_dir: Path, manifest: dict[str, Any], entry: dict[str, Any]) -> Iterator[Any]:
        folder = _folder(index_dir, entry)
        if store.is_parquet_segment(folder):  # views over its Parquet files on the scratch instance
            con = store.open_segment(folder)
            try:
                yield con
            finally:
                con.close()
            return
        path = folder / layout.STORE_FILE
        files = manifest.get("files") or {}
        recorded = files.get(f"{entry['name']}/{layout.STORE_FILE}") or files.get(layout.STORE_FILE) or {}
        key = (str(path.resolve()), str(recorded.get("sha256", "")))
        with self._lock:
            con = self._connections.pop(key, None)
        if con is None:
            con = store.connect(path, read_only=True)
        cursor = con.cursor()  # a connection of its own for this thread (a DuckDB connection is not thread-safe)
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


_STORES = _SegmentStores()


def _existing_documents(index_dir: Path, manifest: dict[str, Any] | None, entries: Sequence[dict[str, Any]],
                        batches: Sequence[tuple[str, list[Document], bool]]) -> dict[str, tuple[str, str, int]]:
    """`{doc_id: (source, content_sha256, segment)}` of the live documents a write may change: those
    with an incoming doc id, and every document of a source whose missing documents are removed."""

    if not entries or manifest is None:
        return {}
    ids = [document.doc_id for _, documents, _ in batches for document in documents]
    sources = [source for source, _, remove_missing in batches if remove_missing]
    if not ids and not sources:
        return {}
    found: dict[str, tuple[str, str, int]] = {}
    wanted_ids, wanted_sources = set(ids), set(sources)
    for i, entry in enumerate(entries):
        deleted = set(entry.get("deleted") or ())
        documents = _small_segment_documents(index_dir, manifest, entry)
        if documents is not None:  # a Parquet segment: its documents held in memory, looked up by id
            rows = [(doc_id, *documents[doc_id]) for doc_id in wanted_ids if doc_id in documents]
            if wanted_sources:
                rows += [(doc_id, source, sha) for doc_id, (source, sha) in documents.items()
                         if source in wanted_sources and doc_id not in wanted_ids]
        else:
            with _STORES.connection(index_dir, manifest, entry) as con:
                # list parameters, not registered frames: a kept connection serves several threads
                rows = con.execute(
                    "SELECT doc_id, source, content_sha256 FROM documents WHERE list_contains(?::VARCHAR[], doc_id) "
                    "OR list_contains(?::VARCHAR[], source)", [ids, sources]).fetchall()
        for doc_id, source, sha in rows:
            if doc_id not in deleted:
                found[doc_id] = (source, sha, i)
    return found


def indexed_doc_ids(index_dir: Path, manifest: dict[str, Any], doc_ids: Sequence[str]) -> set[str]:
    """Which of `doc_ids` the generation `manifest` names holds in its segments (live ones)."""
    probe = [Document(doc_id, "", "", "", "", "memory") for doc_id in doc_ids]
    entries = [dict(entry) for entry in layout.segments(manifest)]
    return set(_existing_documents(Path(index_dir), manifest, entries, [("", probe, False)]))


#: Parquet segments' `{doc_id: (source, sha)}`, by (folder, checksum of documents.parquet)
_SMALL_DOCUMENTS: LruCache[tuple[str, str], dict[str, tuple[str, str]]] = LruCache(256)
#: the same of segments written but not committed yet, by private folder
_UNCOMMITTED_DOCUMENTS: LruCache[str, dict[str, tuple[str, str]]] = LruCache(64)


def _small_segment_documents(index_dir: Path, manifest: dict[str, Any],
                             entry: dict[str, Any]) -> dict[str, tuple[str, str]] | None:
    """`{doc_id: (source, content_sha256)}` of a Parquet segment (None for a DuckDB one), read once
    per process: segments never change, and a write then looks up its ids without opening a file."""
    folder = _folder(index_dir, entry)
    if not store.is_parquet_segment(folder):
        return None
    recorded = (manifest.get("files") or {}).get(f"{entry['name']}/{store.parquet_file('documents')}") or {}
    key = (str(folder), str(recorded.get("sha256", "")))
    documents = _SMALL_DOCUMENTS.get(key)
    if documents is None:
        con = store.open_segment(folder)
        try:
            documents = {doc_id: (source, sha) for doc_id, source, sha in con.execute(
                "SELECT doc_id, source, content_sha256 FROM documents").fetchall()}
        finally:
            con.close()
        _SMALL_DOCUMENTS.put(key, documents)
    return documents


def _live_counts(index_dir: Path, manifest: dict[str, Any], entry: dict[str, Any]) -> dict[str, Any]:
    """(documents, chunks, vectors per model) of a segment's live rows, read from its store."""

    with _STORES.connection(index_dir, manifest, entry) as con:
        gone = [list(entry.get("deleted") or ())]
        alive = "NOT list_contains(?::VARCHAR[], doc_id)"
        documents = con.execute(f"SELECT count(*) FROM documents WHERE {alive}", gone).fetchone()[0]
        chunks = con.execute(f"SELECT count(*) FROM chunks WHERE {alive}", gone).fetchone()[0]
        vectors = dict(con.execute(
            f"SELECT v.model, count(*) FROM chunk_vectors v JOIN chunks c USING (chunk_id) WHERE {alive} "
            "GROUP BY 1", gone).fetchall())
    return {"documents": documents, "chunks": chunks, "vectors": vectors}


def _next_chunk_id(index_dir: Path, manifest: dict[str, Any] | None) -> int:
    if not manifest:
        return 0
    if "next_chunk_id" in manifest:
        return int(manifest["next_chunk_id"])
    con = store.connect(index_dir / manifest["path"] / layout.STORE_FILE, read_only=True)  # a legacy index
    try:
        return int(store.get_meta(con, "next_chunk_id", "0"))
    finally:
        con.close()


def _with_segments(manifest_base: dict[str, Any], entries: list[dict[str, Any]], old: dict[str, Any] | None,
                   new_files: dict[str, Any], config: IndexConfig, dims: dict[str, int],
                   graphs: dict[str, dict[str, Any]],
                   signatures: tuple[dict[str, Any] | None, dict[str, Any] | None] = (None, None)) -> dict[str, Any]:
    """The manifest fields that follow from the segment list and the corpus graphs: files, counts,
    models, bm25 (`new_files`: the checksums of the new folder's files, by name)."""
    files: dict[str, Any] = {}
    for folder_files in new_files.values():
        files.update({n: v for n, v in folder_files.items() if not _generation_wide(n)})
    for entry in entries:
        if entry["name"] in new_files:
            continue
        if old is not None:
            prefix = f"{entry['name']}/"
            if entry.get("legacy"):
                raise ValueError("a legacy segment cannot be kept in a segmented index")
            files.update({name: value for name, value in (old.get("files") or {}).items()
                          if name.startswith(prefix) and not _generation_wide(name)})
    documents = sum(entry["documents"] for entry in entries)
    chunks = sum(entry["chunks"] for entry in entries)
    models: dict[str, Any] = {}
    for model, dim in dims.items():
        info = {"dim": dim, "vectors": sum(entry["vectors"].get(model, 0) for entry in entries),
                "file": layout.dense_file(model), "index": config.dense_index, "segments": len(entries)}
        if model in graphs:
            info.update(graphs[model])
            for key in ("graph", "graph_reserve"):
                graph_name = f"{graphs[model]['graph_dir']}/{graphs[model][key]}"
                files[graph_name] = new_files[graphs[model]["graph_dir"]][graph_name]
        models[model] = info
    signature_info, kept_file = signatures
    extra = {}
    if signature_info:
        name = signature_info["file"]
        files[name] = kept_file or new_files[name.split("/")[0]][name]
        extra["file_signatures"] = signature_info
    return {**manifest_base, "files": files, "counts": {"documents": documents, "chunks": chunks},
            "segments": entries, "models": models,
            "bm25": {"dir": layout.BM25_DIR, "rows": chunks, "config": dataclasses.asdict(config.bm25)}, **extra}


def _generation_wide(name: str) -> bool:
    """Whether a file of a segment's folder belongs to the generation committed there (corpus
    graphs, file signatures), not to the segment: named in a manifest only while current."""
    base = Path(name).name
    return base.startswith("graph-") or base == SIGNATURES_FILE


def _segment_entry(name: str, counts: dict[str, Any], artifacts: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "documents": counts["documents"], "chunks": counts["chunks"],
            "rows": counts["chunks"], "deleted": [],
            "first_chunk_id": counts.get("first_chunk_id"), "last_chunk_id": counts.get("last_chunk_id"),
            "vectors": {model: info["vectors"] for model, info in artifacts["models"].items()},
            "models": {model: {k: v for k, v in info.items() if k not in {"dim", "index"}}
                       for model, info in artifacts["models"].items()}}


def _store_counts(con) -> dict[str, Any]:
    documents = con.execute("SELECT count(*) FROM documents").fetchone()[0]
    chunks, first, last = con.execute("SELECT count(*), min(chunk_id), max(chunk_id) FROM chunks").fetchone()
    return {"documents": documents, "chunks": chunks, "first_chunk_id": first, "last_chunk_id": last}


def _manifest_base(number: int, config: IndexConfig, cache_file: Path, seconds: float,
                   old: dict[str, Any] | None, next_id: int) -> dict[str, Any]:
    base = {
        "format": layout.FORMAT_VERSION, "generation": number, "path": layout.generation_name(number),
        "built_at": datetime.now(UTC).isoformat(), "build_seconds": round(seconds, 3), "config": config.to_dict(),
        "store": layout.STORE_FILE, "embedding_cache": str(cache_file.resolve()), "versions": versions(),
        "next_chunk_id": next_id,
    }
    if old and old.get("last_merge"):
        base["last_merge"] = old["last_merge"]
    return base


#: committed segments' dead chunk ids, by folder identity and tombstones
_DEAD: LruCache[tuple[str, int, int, tuple[str, ...]], np.ndarray] = LruCache(16)


def _dead_chunk_ids(folder: Path, entry: dict[str, Any]) -> np.ndarray:
    """Chunk ids of a segment's tombstoned documents. A committed segment's are kept for the next
    write of this process (keyed by the folder's path, inode and mtime and the tombstones: segment
    folders are never rewritten), which finds them again as the previous generation's."""
    deleted = tuple(entry.get("deleted") or ())
    if not deleted:
        return np.zeros(0, np.int64)
    key = None
    if ".tmp-" not in folder.name:
        info = folder.stat()
        key = (str(folder.resolve()), info.st_ino, info.st_mtime_ns, deleted)
        known = _DEAD.get(key)
        if known is not None:
            return known
    con = store.open_segment(folder)
    try:
        rows = con.execute("SELECT chunk_id FROM chunks WHERE list_contains(?::VARCHAR[], doc_id)",
                           [list(deleted)]).fetchall()
    finally:
        con.close()
    ids = np.asarray([r[0] for r in rows], dtype=np.int64)
    if key is not None:
        ids.flags.writeable = False  # shared by later calls
        _DEAD.put(key, ids)
    return ids


#: committed segments' FAISS indexes, by file identity
_DENSE: LruCache[tuple[str, int, int, int], Any] = LruCache(16)


def _load_dense(path: Path, model: str):
    """A segment's FAISS index; a committed segment's is kept for the next write of this process
    (keyed by path, inode, size and mtime: segment files are never rewritten)."""
    from hybridlab.index.dense import DenseIndex

    if ".tmp-" in path.parent.name:
        return DenseIndex.load(path, model)
    info = path.stat()
    key = (str(path.resolve()), info.st_ino, info.st_size, info.st_mtime_ns)
    return _DENSE.get_or_make(key, lambda: DenseIndex.load(path, model))


def _corpus_graphs(index_dir: Path, old: dict[str, Any] | None, entries: Sequence[dict[str, Any]], name: str,
                   tmp: Path, config: IndexConfig, dims: dict[str, int], progress: bool) -> dict[str, dict[str, Any]]:
    """The corpus graph of each model over the live vectors of every segment (rows = the
    generation's dense rows, in chunk-id order), written into `tmp` (the folder becoming `name`):
    the previous generation's graph updated (`update_corpus_graph`: exactly the graph a full build
    gives), or built when there is none to reuse."""
    from hybridlab.index.graph import (
        GRAPH_RESERVE,
        SegmentRows,
        build_corpus_graph,
        graph_size,
        load_graph,
        load_reserve,
        save_graph,
        update_corpus_graph,
    )

    dense_of: dict[tuple[str, str], Any] = {}
    dead_of: dict[tuple[str, tuple[str, ...]], np.ndarray] = {}

    def live(manifest: dict[str, Any] | None, segs: Sequence[dict[str, Any]], model: str,
             with_vectors: bool) -> tuple[np.ndarray, SegmentRows | None]:
        ids_parts, kept = [], []
        for entry in segs:
            folder = _folder(index_dir, entry)
            info = segment_models(manifest or {}, entry).get(model)
            if not info:
                continue
            key = (entry["name"], model)
            if key not in dense_of:
                dense_of[key] = _load_dense(folder / info["file"], model)
            dense = dense_of[key]
            dead_key = (entry["name"], tuple(entry.get("deleted") or ()))
            if dead_key not in dead_of:
                dead_of[dead_key] = _dead_chunk_ids(folder, entry)
            keep = ~np.isin(dense.ids, dead_of[dead_key]) if len(dead_of[dead_key]) else None
            ids_parts.append(dense.ids if keep is None else dense.ids[keep])
            kept.append((dense, keep))
        ids = np.concatenate(ids_parts) if ids_parts else np.zeros(0, np.int64)
        if not with_vectors or not kept:
            return ids, None
        # each segment's vectors where they are, with its live rows: not copied into one array (an
        # O(index) copy per write; each new array of several MB also costs its fresh pages, ~4 ms a
        # 2 MB huge page on the benchmark's VM); a full build copies them (`SegmentRows.array`)
        return ids, SegmentRows([(dense.vectors, None if keep is None else np.flatnonzero(keep))
                                 for dense, keep in kept])

    graphs: dict[str, dict[str, Any]] = {}
    for model in dims:
        k = graph_size(config.graph_k, sum(int(e.get("vectors", {}).get(model, 0)) for e in entries))
        if not k:
            continue
        started = time.perf_counter()
        ids, vectors = live(None, entries, model, True)
        if vectors is None or len(ids) < 2:
            continue
        reuse = None
        info = ((old or {}).get("models") or {}).get(model) or {}
        if info.get("graph") and info.get("graph_k") == k:
            folder = info.get("graph_dir") or old["path"]
            recorded = (old.get("files") or {}).get(f"{folder}/{info['graph']}" if old.get("format", 0) >= 2 else info["graph"])
            path = index_dir / folder / info["graph"]
            try:
                if recorded and layout.file_sha256(path) == recorded["sha256"]:
                    old_ids, _ = live(old, layout.segments(old), model, False)
                    old_graph = load_graph(path, len(old_ids))
                    old_graph = _with_reserve(index_dir, old, folder, info, old_graph, load_reserve)
                    position = np.minimum(np.searchsorted(ids, old_ids), len(ids) - 1)
                    reuse = old_graph, np.where(ids[position] == old_ids, position, -1)
                else:
                    logger.warning("not reusing %s: it does not match its checksum", path)
            except Exception as error:  # noqa: BLE001 - any doubt about the old graph means a fresh build
                logger.warning("not reusing the corpus graph %s: %s", path, error)
        if reuse is None:
            graph, how = build_corpus_graph(vectors.array(), k, progress=progress, reserve=GRAPH_RESERVE), "built"
        else:
            graph, how = update_corpus_graph(vectors, *reuse, k, progress=progress, reserve=GRAPH_RESERVE)
        save_graph(np.ascontiguousarray(graph[:, :k]), tmp / layout.graph_file(model))
        save_graph(np.ascontiguousarray(graph[:, k:]), tmp / _reserve_file(model))
        graphs[model] = {"graph": layout.graph_file(model), "graph_dir": name, "graph_k": k, "graph_build": how,
                         "graph_reserve": _reserve_file(model), "graph_reserve_k": GRAPH_RESERVE}
        logger.info("corpus graph of %s (%d vectors): %s in %.1f s", model, len(ids), how,
                    time.perf_counter() - started)
    _checkpoint("graph-written")
    return graphs


def _reserve_file(model: str) -> str:
    """The file of a corpus graph's reserve columns (`graph.GRAPH_RESERVE` next nearest neighbours)."""
    return layout.graph_file(model).removesuffix(".npy") + ".reserve.npy"


def _with_reserve(index_dir: Path, old: dict[str, Any], folder: str, info: dict[str, Any], graph: np.ndarray,
                  load_reserve: Callable[[Path, int], np.ndarray]) -> np.ndarray:
    """An old corpus graph with its reserve columns appended when it has intact ones (else alone:
    its rows that lose a neighbour are then searched afresh)."""
    name = info.get("graph_reserve")
    recorded = (old.get("files") or {}).get(f"{folder}/{name}") if name else None
    if not recorded:
        return graph
    path = index_dir / folder / name
    try:
        if layout.file_sha256(path) != recorded["sha256"]:
            raise ValueError("it does not match its checksum")
        return np.concatenate([graph, load_reserve(path, len(graph))], axis=1)
    except (OSError, ValueError) as error:
        logger.warning("not using the corpus graph reserve %s: %s", path, error)
        return graph


def merge_factor() -> int:
    """`MERGE_FACTOR`, or env `HYBRIDLAB_MERGE_FACTOR` (>= 2; small in fault-injection tests)."""
    value = os.environ.get("HYBRIDLAB_MERGE_FACTOR")
    if value is None:
        return MERGE_FACTOR
    if not value.isdigit() or int(value) < 2:
        raise ValueError(f"HYBRIDLAB_MERGE_FACTOR must be an integer >= 2, got {value!r}")
    return int(value)


def merge_plan(entries: Sequence[dict[str, Any]], factor: int | None = None) -> tuple[int, int] | None:
    """The adjacent segments [start, end) the tiered policy merges next, None when none: the oldest
    run of `factor` adjacent segments in the same size tier (floor(log10(live chunks))), else a
    segment of `MIN_REWRITE_ROWS`+ rows (with its right neighbour when there is one) whose
    tombstoned share exceeds `MAX_DELETED_SHARE`."""
    factor = factor or merge_factor()
    tiers = [int(math.log10(max(int(entry.get("chunks", 0)), 1))) for entry in entries]
    start = 0
    for i in range(1, len(tiers) + 1):
        if i == len(tiers) or tiers[i] != tiers[start]:
            if i - start >= factor:
                return start, start + factor
            start = i
    for i, entry in enumerate(entries):
        rows = int(entry.get("rows", entry.get("chunks", 0)) or 0)
        if rows >= MIN_REWRITE_ROWS and (rows - int(entry.get("chunks", 0))) / rows > MAX_DELETED_SHARE:
            return i, min(i + 2, len(entries))
    return None


def _folder(index_dir: Path, entry: dict[str, Any]) -> Path:
    """Where a segment's files are: its committed folder, or the private folder it is being built in."""
    return Path(entry["_folder"]) if entry.get("_folder") else Path(index_dir) / entry["name"]


def _build_merged(index_dir: Path, manifest: dict[str, Any], entries: Sequence[dict[str, Any]], config: IndexConfig,
                  dims: dict[str, int], progress: bool) -> tuple[dict[str, Any] | None, Path]:
    """Merge `entries` (adjacent segments) into one new segment in a private folder: live rows only,
    vectors taken from their FAISS files (nothing re-embedded), BM25 postings re-derived. Returns its
    entry (None when no live row is left) and the folder."""
    number = layout.next_generation_number(index_dir)
    name = layout.generation_name(number)
    tmp = index_dir / f"{name}.tmp-{os.getpid()}"
    tmp.mkdir(parents=True)
    con = None
    try:
        _checkpoint("merge-start")
        small = sum(int(entry.get("chunks", 0)) for entry in entries) < store.SMALL_SEGMENT_ROWS
        con = store.ScratchConnection() if small else store.connect(tmp / layout.STORE_FILE)
        store.create_schema(con)
        folders = [_folder(index_dir, entry) for entry in entries]
        if all(store.is_parquet_segment(folder) for folder in folders):
            _copy_live_parquet(con, folders, entries)
        else:
            aliases = _attach(con, index_dir, entries)
            _copy_live_rows(con, aliases, entries)
            _detach(con, aliases)
        highest = con.execute("SELECT max(chunk_id) FROM chunks").fetchone()[0]
        store.set_meta(con, {"next_chunk_id": max(_next_chunk_id(index_dir, manifest),
                                                  -1 if highest is None else highest + 1), "generation": number})
        _checkpoint("merge-store-written")
        loaded: dict[str, list[Any]] = {}

        def vectors_of(model: str, pairs: dict[str, np.ndarray], dim: int) -> np.ndarray:
            if model not in loaded:
                loaded[model] = [_load_dense(_folder(index_dir, entry) / segment_models(manifest, entry)[model]["file"],
                                             model) for entry in entries if model in segment_models(manifest, entry)]
            wanted = pairs["chunk_id"].astype(np.int64)
            parts = []
            for dense in loaded[model]:
                rows = dense.rows_of(wanted)
                parts.append((dense.ids[rows], dense.take(rows)))
            ids = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, np.int64)
            matrix = np.concatenate([p[1] for p in parts]) if parts else np.zeros((0, dim), np.float32)
            if not np.array_equal(ids, wanted):
                raise RuntimeError(f"merging {model!r}: the segments' FAISS ids do not cover their stores' vectors")
            return matrix

        counts = _store_counts(con)
        artifacts = build_artifacts(con, vectors_of, tmp, config, dims, progress=progress)
        _persist(con, tmp)
        con.close()
        con = None
        if not counts["chunks"] and not counts["documents"]:
            return None, tmp
        return {**_segment_entry(name, counts, artifacts), "_folder": str(tmp)}, tmp
    except BaseException:
        if con is not None:
            con.close()
        shutil.rmtree(tmp, ignore_errors=True)
        raise


#: a write is built in memory (then written as Parquet, or copied into a DuckDB file when it has
#: `SMALL_SEGMENT_ROWS`+ chunks) below these bounds, else directly in a DuckDB file whose buffer
#: pool spills to disk: the in-memory database holds every row of the write at once
SMALL_WRITE_DOCUMENTS = 10_000
SMALL_WRITE_CHARS = 32_000_000


def _small_write(documents: Sequence[Document]) -> bool:
    """Whether a write's new segment is built in the in-memory DuckDB (few documents, bounded text)."""
    if len(documents) >= SMALL_WRITE_DOCUMENTS:
        return False
    return sum(len(document.text) for document in documents) < SMALL_WRITE_CHARS


def _persist(con, folder: Path) -> None:
    """Make a segment's store durable-ready in `folder`: a DuckDB file is checkpointed; a segment
    built in memory is written as Parquet tables when small, else copied into `store.duckdb`."""
    if not isinstance(con, store.ScratchConnection):
        con.execute("CHECKPOINT")
        return
    rows = con.execute("SELECT count(*) FROM chunks").fetchone()[0]
    if rows < store.SMALL_SEGMENT_ROWS:
        store.write_parquet(con, folder)
        _UNCOMMITTED_DOCUMENTS.put(str(folder), {doc_id: (source, sha) for doc_id, source, sha in con.execute(
            "SELECT doc_id, source, content_sha256 FROM documents").fetchall()})
        return
    alias = store.unique_name("f")
    con.attach(alias, f"ATTACH {store.quote_path(folder / layout.STORE_FILE)} AS {alias}")
    con.execute(f"COPY FROM DATABASE {con.database} TO {alias}")
    con.execute(f"CHECKPOINT {alias}")
    con.execute(f"DETACH {alias}")


def _commit_generation(index_dir: Path, old: dict[str, Any] | None, entries: list[dict[str, Any]],
                       folders: list[Path], config: IndexConfig, dims: dict[str, int], base: dict[str, Any],
                       progress: bool, policy: bool, reason: str | None = None,
                       merge_range: tuple[int, int] | None = None,
                       signatures: Signatures | None = None) -> dict[str, Any]:
    """Merge by the tiered policy (`policy`) and/or the given `merge_range`, then commit `entries`
    as one new generation: every new folder (`folders`: private, oldest first; the first is the
    write's own) flushed and renamed, the corpus graphs and the manifest copy written into the
    newest, the manifest replaced. Readers see one new generation per call. `signatures`: the file
    signatures to record (None: the old generation's). Returns the manifest."""
    folders = list(folders)
    last_merge = None
    while True:
        plan = merge_range or (merge_plan(entries) if policy else None)
        merge_range = None
        if plan is None:
            break
        started = time.perf_counter()
        start, end = plan
        inputs = entries[start:end]
        merged, folder = _build_merged(index_dir, old or {}, inputs, config, dims, progress)
        folders.append(folder)
        entries = entries[:start] + ([merged] if merged else []) + entries[end:]
        last_merge = {"segments": len(inputs), "chunks": merged["chunks"] if merged else 0,
                      "seconds": round(time.perf_counter() - started, 3), "reason": reason or "tiered policy"}
        for entry in inputs:  # a segment built by this call and merged away already is never committed
            if entry.get("_folder"):
                shutil.rmtree(entry["_folder"], ignore_errors=True)
    live = {Path(e["_folder"]) for e in entries if e.get("_folder")}
    kept = [folder for folder in folders if folder in live or (folder == folders[0] and folder.exists())]
    if not kept:  # everything new was merged away into nothing: the write's folder holds the commit
        folders[0].mkdir(parents=True, exist_ok=True)
        kept = [folders[0]]
    commit_folder = max(kept, key=lambda folder: folder.name)
    for folder in folders:
        if folder not in kept:
            shutil.rmtree(folder, ignore_errors=True)
    commit_name = commit_folder.name.split(".")[0]
    number = int(commit_name.split("-")[1])
    graphs = _corpus_graphs(index_dir, old, entries, commit_name, commit_folder, config, dims, progress)
    signature_info = _commit_signatures(index_dir, old, signatures, commit_folder, commit_name,
                                        {entry["name"] for entry in entries})
    new_files = {folder.name.split(".")[0]: layout.generation_files(folder, prefix=f"{folder.name.split('.')[0]}/")
                 for folder in kept}
    manifest_base = {**base, "generation": number, "path": commit_name}
    if last_merge is not None:
        manifest_base["last_merge"] = {"at": manifest_base["built_at"], "generation": number, **last_merge}
    committed = [{k: v for k, v in entry.items() if k != "_folder"} for entry in entries]
    manifest = _with_segments(manifest_base, committed, old, new_files, config, dims, graphs, signature_info)
    text = layout.manifest_text(manifest)
    (commit_folder / layout.MANIFEST).write_text(text, encoding="utf-8")
    for folder in kept:
        layout.fsync_tree(folder)
    _checkpoint("generation-flushed")
    for folder in sorted(kept, key=lambda f: f.name):  # the commit folder (the newest) last
        os.rename(folder, index_dir / folder.name.split(".")[0])
    _checkpoint("generation-renamed")
    layout.write_manifest(index_dir, manifest, text)
    _checkpoint("manifest-committed")
    names = {entry["name"] for entry in committed}
    for folder in folders:  # what a Parquet segment holds, for the next write's look-ups
        documents = _UNCOMMITTED_DOCUMENTS.pop(str(folder))
        name = folder.name.split(".")[0]
        recorded = manifest["files"].get(f"{name}/{store.parquet_file('documents')}")
        if documents is not None and name in names and recorded:
            _SMALL_DOCUMENTS.put((str(index_dir / name), str(recorded["sha256"])), documents)
    previous = index_dir / old["path"] if old else None
    layout.remove_stale(index_dir, keep=index_dir / commit_name, previous=previous)
    return manifest


def _logged_batches(records: Sequence[wal.WalRecord]) -> list[tuple[str, list[Document], bool]]:
    """The write-ahead log's documents (each id's last record) as write batches, one per source (nothing removed)."""
    by_source: dict[str, list[Document]] = {}
    for record in wal.latest_records(records):
        by_source.setdefault(record.document.source, []).append(record.document)
    return [(source, documents, False) for source, documents in by_source.items()]


def fold_log(index_dir: str | os.PathLike, *, progress: bool = False, lock_wait: float | None = None) -> IndexReport | None:
    """Commit the live generation's write-ahead log as a segment (None: it holds nothing)."""
    index_dir = Path(index_dir)
    try:
        manifest = layout.read_manifest(index_dir)
    except FileNotFoundError:
        return None
    if wal.log_size(wal.wal_path(index_dir, manifest["generation"])) <= len(wal.MAGIC):
        return None  # no log, or an empty one (apply_changes reads the records)
    report = apply_changes(index_dir, [], progress=progress, cache_path=layout.recorded_cache(index_dir, manifest),
                           use_cache=False, lock_wait=lock_wait)
    return report if report.committed else None


def optimize(index_dir: str | os.PathLike, *, progress: bool = False) -> IndexReport:
    """Merge every segment into one, dropping tombstoned rows (`hybridlab index --optimize`);
    readers keep answering from the generation they hold meanwhile. The write-ahead log is folded first."""
    index_dir = Path(index_dir)
    started = time.perf_counter()
    report = IndexReport(str(index_dir))
    fold_log(index_dir, progress=progress)
    with layout.WriterLock(index_dir):
        manifest = layout.read_manifest(index_dir)
        entries = [dict(entry) for entry in layout.segments(manifest)]
        if len(entries) > 1 or any(e.get("deleted") for e in entries) or any(e.get("legacy") for e in entries):
            config = IndexConfig.from_manifest(manifest["config"])
            dims = {model: info["dim"] for model, info in (manifest.get("models") or {}).items()}
            base = _manifest_base(0, config, Path(manifest["embedding_cache"]), 0.0, manifest,
                                  _next_chunk_id(index_dir, manifest))
            number = layout.next_generation_number(index_dir)
            tmp = index_dir / f"{layout.generation_name(number)}.tmp-{os.getpid()}"
            tmp.mkdir(parents=True)
            try:
                manifest = _commit_generation(index_dir, manifest, entries, [tmp], config, dims, base, progress,
                                              policy=False, reason="optimize", merge_range=(0, len(entries)))
            finally:
                for leftover in index_dir.glob(f"gen-*.tmp-{os.getpid()}"):
                    shutil.rmtree(leftover, ignore_errors=True)
            report.committed = True
        report.generation = manifest["generation"]
        report.documents = manifest["counts"]["documents"]
        report.chunks = manifest["counts"]["chunks"]
    report.seconds = time.perf_counter() - started
    return report


def apply_changes(
    index_dir: str | os.PathLike,
    batches: Sequence[tuple[str, list[Document], bool]],
    config: IndexConfig | None = None,
    *,
    progress: bool = True,
    force: bool = False,
    report: IndexReport | None = None,
    cache_path: str | os.PathLike | None = None,
    merge: bool = True,
    use_cache: bool = True,
    scans: Sequence[FolderScan] = (),
    lock_wait: float | None = None,
) -> IndexReport:
    """Apply (source, documents, remove_missing) batches as one new generation of the index.

    A write adds one segment holding the new and changed documents and tombstones the changed and
    removed ones in the segments that hold them; nothing written before is rewritten. A first build,
    a changed config (chunking, models, ...) or `force` writes one segment holding everything. With
    `merge`, the tiered merge policy runs after the commit (:func:`merge_plan`). Without `use_cache`
    (the memory writer's stores: new texts), a write's new texts are embedded without opening the
    embeddings cache and their vectors live in the segment's FAISS files only.

    `scans`: the folder sources among the batches as `read_folder` read them (a batch's documents
    are a scan's `documents`); their files left unread (`unchanged`) keep their documents, and the
    write records the scans' file signatures for the next `index_paths` (`recorded_signatures`).

    A document id brought twice (in one batch or two of one source) keeps its last version
    (:func:`last_versions`). `lock_wait`: seconds to wait for another writer (None:
    `layout.lock_wait_seconds()`)."""
    index_dir = Path(index_dir)
    started = time.perf_counter()
    report = report or IndexReport(str(index_dir))
    with layout.WriterLock(index_dir, timeout=lock_wait):
        manifest = None
        cache_file = Path(cache_path) if cache_path else index_dir / layout.CACHE_FILE
        if (index_dir / layout.MANIFEST).exists():
            manifest = layout.read_manifest(index_dir)
        elif layout.generations(index_dir):
            raise layout.CorruptIndexError(
                f"{index_dir / layout.MANIFEST} is missing but generation folders exist; "
                f"{layout.repair_hint(index_dir)} before indexing into it"
            )
        old_config = IndexConfig.from_manifest(manifest["config"]) if manifest else None
        config = config or old_config or IndexConfig()
        config = dataclasses.replace(
            config, models=canonical_models(config.models),
            model_by_collection=tuple((k, canonical_models([m])[0]) for k, m in config.model_by_collection),
            model_by_language=tuple((k, canonical_models([m])[0]) for k, m in config.model_by_language),
        )
        old_generation = index_dir / manifest["path"] if manifest else None
        layout.remove_stale(index_dir, keep=old_generation,
                            previous=layout.previous_generation(index_dir, old_generation))
        _checkpoint("start")
        entries = [dict(entry) for entry in layout.segments(manifest)] if manifest else []
        # memories in the live generation's write-ahead log go into this write's segment first
        logged = wal.read_wal(wal.wal_path(index_dir, manifest["generation"])) if manifest else None
        batches = last_versions(batches)  # an id brought twice: its last version
        if logged is not None and logged.records:  # a document this write brings again: its version wins
            incoming = {document.doc_id for _, documents, _ in batches for document in documents}
            batches = [*_logged_batches([r for r in logged.records if r.document.doc_id not in incoming]), *batches]
        number = layout.next_generation_number(index_dir)
        tmp = index_dir / f"{layout.generation_name(number)}.tmp-{os.getpid()}"
        tmp.mkdir(parents=True)
        cache = None
        con = None
        try:
            existing = _existing_documents(index_dir, manifest, entries, batches)
            _checkpoint("store-copied")
            rechunk = old_config is not None and (old_config.chunk != config.chunk)
            relayout = old_config is None or rechunk or old_config != config
            to_insert, to_delete = _plan({k: v[:2] for k, v in existing.items()}, batches, report,
                                         {scan.source: scan.unchanged for scan in scans})
            # a pre-segment (format 1) index is rewritten as one segment by its first change
            full = relayout or force or any(entry.get("legacy") for entry in entries)
            if not (to_insert or to_delete or relayout or force):
                report.chunks = manifest["counts"]["chunks"] if manifest else 0
                report.generation = manifest["generation"] if manifest else None
                report.seconds = time.perf_counter() - started
                return report
            next_id = _next_chunk_id(index_dir, manifest)
            if full or not _small_write(to_insert):
                con = store.connect(tmp / layout.STORE_FILE)
                store.create_schema(con)
            elif to_insert:  # a small segment: built in memory, written as Parquet tables (`_persist`)
                con = store.ScratchConnection()
                store.create_schema(con)
            if full:  # one segment holding every live document
                if entries:
                    aliases = _attach(con, index_dir, entries)
                    _copy_live_rows(con, aliases, entries, extra_deleted=to_delete, vectors=False)
                    _detach(con, aliases)
                    _keep_newest_versions(con)
                if rechunk:
                    kept = _documents_from_store(con)
                    con.execute("DELETE FROM chunk_vectors; DELETE FROM tags; DELETE FROM chunks; DELETE FROM documents")
                    to_insert = kept + to_insert
            if con is not None:
                # The segment is private until the manifest names it, so its store may commit in steps:
                # each insert batch commits on its own (DuckDB keeps the frames registered in a
                # transaction, i.e. every chunk text of the build, alive until the transaction ends).
                next_id, report.new_chunks = insert_documents(con, to_insert, config, next_id)
                con.execute("BEGIN TRANSACTION")
                store.set_meta(con, {"next_chunk_id": next_id, "generation": number})
                assign_vectors(con, config)
                con.execute("COMMIT")
            _checkpoint("store-committed")
            known = {m: v["dim"] for m, v in (manifest or {}).get("models", {}).items()}
            if con is not None:
                cache = EmbeddingCache(cache_file) if use_cache or full else VectorBuffer()
                if logged is not None and logged.records:  # their vectors are in the log: not embedded again
                    for model, (hashes, vectors) in wal.record_vectors(logged.latest, config).items():
                        cache.put(model, hashes, vectors)
                dims = _embed_missing(con, cache, config.all_models, report, config, known, progress)
                artifacts = build_artifacts(con, cache_vectors(cache), tmp, config, dims, progress=progress)
                counts = _store_counts(con)
                _persist(con, tmp)
                con.close()
                con = None
                cache.close()
                cache = None
            else:
                dims = known
            name = layout.generation_name(number)
            if full:
                entries = [{**_segment_entry(name, counts, artifacts), "_folder": str(tmp)}]
            else:
                by_segment: dict[int, list[str]] = {}
                for doc_id in to_delete:
                    by_segment.setdefault(existing[doc_id][2], []).append(doc_id)
                for i, doc_ids in by_segment.items():
                    entries[i]["deleted"] = sorted({*entries[i].get("deleted", ()), *doc_ids})
                    live = _live_counts(index_dir, manifest, entries[i])
                    entries[i].update(documents=live["documents"], chunks=live["chunks"], vectors=live["vectors"])
                # vectors of the kept segments are reused as they are: counted with the cache hits
                report.cache_hits += sum(sum(entry.get("vectors", {}).values()) for entry in entries)
                if to_insert:
                    entries.append({**_segment_entry(name, counts, artifacts), "_folder": str(tmp)})
            base = _manifest_base(number, config, cache_file, time.perf_counter() - started, manifest, next_id)
            signatures = _next_signatures(index_dir, manifest, scans, to_insert, to_delete, existing)
            new_manifest = _commit_generation(index_dir, manifest, entries, [tmp], config, dims, base, progress,
                                              policy=merge, signatures=signatures)
            report.chunks = new_manifest["counts"]["chunks"]
            report.generation = new_manifest["generation"]
            report.committed = True
        finally:
            if con is not None:
                con.close()
            if cache is not None:
                cache.close()
            for leftover in index_dir.glob(f"gen-*.tmp-{os.getpid()}"):
                _UNCOMMITTED_DOCUMENTS.pop(str(leftover))
                shutil.rmtree(leftover, ignore_errors=True)
        report.seconds = time.perf_counter() - started
        return report


def index_paths(
    paths: Sequence[str | os.PathLike],
    index_dir: str | os.PathLike,
    config: IndexConfig | None = None,
    *,
    progress: bool = True,
    force: bool = False,
    check_content: bool = False,
    cache_path: str | os.PathLike | None = None,
) -> IndexReport:
    """Index (or update) folders, BEIR datasets and memories files into `index_dir`.

    Re-indexing a folder reads only the files that may have changed: a file whose signature (size,
    inode, mtime and ctime) is the one the index recorded when it last read the file is skipped, its
    document kept as it is. Every other file is read and its document compared by content hash
    (title, text, mtime as `updated_at`, ...), so only changed documents are written; files gone from
    the folder are deleted. Signatures are recorded by each write for the files it read, except those
    changed within `layout.SETTLED_NS` (2 s) before the scan (racy: a same-size edit in the same clock
    tick moves neither mtime nor ctime), which the next run reads again. `check_content` reads every
    file whatever its signature (`hybridlab index --check-content`); `force` does too and also
    rewrites the whole index as one segment (`--force`)."""
    started = time.perf_counter()
    ingest = IngestReport()
    batches = []
    scans = []
    recorded = {} if force or check_content else recorded_signatures(index_dir)
    for raw in paths:
        path = Path(raw)
        if source_kind(path) == "folder":
            scan = read_folder(path, ingest, None if force or check_content else recorded.get(str(path.resolve()), {}),
                               settled_ns=layout.SETTLED_NS)
            ingest.documents += len(scan.documents)
            scans.append(scan)
            batches.append((scan.source, scan.documents, True))
            continue
        documents = read_source(path, ingest)
        batches.append((str(path.resolve()), documents, True))
    report = IndexReport(str(index_dir), skipped=ingest.skipped)
    report = apply_changes(index_dir, batches, config, progress=progress, force=force, report=report,
                           cache_path=cache_path, scans=scans)
    report.seconds = time.perf_counter() - started
    return report
