"""Segments as the writer sees them: their stores (kept open per process), live documents and counts,
rows copied between stores, tombstoned chunk ids, FAISS files, and a new segment persisted."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hybridlab.index.format import layout, store
from hybridlab.index.format.caches import WRITE_CACHES
from hybridlab.index.format.dense import DenseIndex
from hybridlab.index.format.manifest import Manifest, Segment, SegmentModel
from hybridlab.ingest.sources import Document

logger = logging.getLogger(__name__)


def attach(con, index_dir: Path, entries: Sequence[Segment]) -> list[str]:
    """Attach the segments' tables to `con` (read-only); their aliases, unique in this process."""
    aliases = []
    for entry in entries:
        aliases.append(store.unique_name("s"))
        store.attach_segment(con, segment_folder(index_dir, entry), aliases[-1])
    return aliases


def detach(con, aliases: Sequence[str]) -> None:
    for alias in aliases:
        con.execute(f"DETACH DATABASE IF EXISTS {alias}")


def _register_deleted(con, entries: Sequence[Segment], extra: Sequence[str] = ()) -> None:
    """Table `gone (segment, doc_id)`: each segment's tombstones, plus `extra` doc ids in every segment."""
    rows = [(i, doc_id) for i, entry in enumerate(entries) for doc_id in entry.deleted]
    rows += [(i, doc_id) for i in range(len(entries)) for doc_id in extra]
    con.execute("CREATE OR REPLACE TEMP TABLE gone (segment INTEGER, doc_id VARCHAR)")
    if rows:
        columns = {"segment": [i for i, _ in rows], "doc_id": [doc_id for _, doc_id in rows]}
        with store.registered(con, "gone_frame", columns):
            con.execute("INSERT INTO gone SELECT * FROM gone_frame")


def copy_live_rows(
    con,
    aliases: Sequence[str],
    entries: Sequence[Segment],
    extra_deleted: Sequence[str] = (),
    vectors: bool = True,
) -> None:
    """Insert the live rows of the attached segments (`aliases`, as `attach` gave) into `con`'s own tables."""
    _register_deleted(con, entries, extra_deleted)
    for i, alias in enumerate(aliases):
        gone = f"(SELECT doc_id FROM gone WHERE segment = {i})"
        con.execute("BEGIN TRANSACTION")
        con.execute(
            f"INSERT INTO documents BY NAME SELECT * FROM {alias}.documents WHERE doc_id NOT IN {gone}"
        )
        con.execute(f"INSERT INTO chunks SELECT * FROM {alias}.chunks WHERE doc_id NOT IN {gone}")
        con.execute(f"INSERT INTO tags SELECT * FROM {alias}.tags WHERE doc_id NOT IN {gone}")
        if vectors:
            con.execute(
                f"INSERT INTO chunk_vectors SELECT * FROM {alias}.chunk_vectors WHERE chunk_id NOT IN "
                f"(SELECT chunk_id FROM {alias}.chunks WHERE doc_id IN {gone})"
            )
        con.execute("COMMIT")


def keep_newest_versions(con) -> list[str]:
    """Drop the older versions of documents held twice in `con`'s tables (rows copied from the
    segments of an index written before one id meant one document): the newest version of each is
    its last row and the chunks from its last first chunk on (chunk ids grow with every write).
    Returns the doc ids that had several versions."""
    duplicated = [
        row[0]
        for row in con.execute(
            "SELECT doc_id FROM documents GROUP BY doc_id HAVING count(*) > 1 ORDER BY doc_id"
        ).fetchall()
    ]
    if not duplicated:
        return []
    logger.warning(
        "%d document ids are held more than once (e.g. %r): keeping the newest version of each",
        len(duplicated),
        duplicated[0],
    )
    con.execute("BEGIN TRANSACTION")
    con.execute("DELETE FROM documents WHERE rowid NOT IN (SELECT max(rowid) FROM documents GROUP BY doc_id)")
    con.execute(
        "DELETE FROM chunks WHERE chunk_id < (SELECT max(c.chunk_id) FROM chunks c "
        "WHERE c.doc_id = chunks.doc_id AND c.chunk_index = 0)"
    )
    con.execute("DELETE FROM tags WHERE chunk_id NOT IN (SELECT chunk_id FROM chunks)")
    con.execute("DELETE FROM chunk_vectors WHERE chunk_id NOT IN (SELECT chunk_id FROM chunks)")
    con.execute("COMMIT")
    return duplicated


def copy_live_parquet(con, folders: Sequence[Path], entries: Sequence[Segment]) -> None:
    """`copy_live_rows` for segments that all store Parquet tables: one statement per table over
    every segment's file (a merge of ten small segments runs a handful of statements, not ~100)."""
    files = {
        table: [str(Path(folder) / store.parquet_file(table)) for folder in folders] for table in store.TABLES
    }
    gone: dict[str, list] = {"documents": [], "chunks": [], "doc_id": []}
    for folder, entry in zip(folders, entries, strict=True):
        for doc_id in entry.deleted:
            gone["documents"].append(str(Path(folder) / store.parquet_file("documents")))
            gone["chunks"].append(str(Path(folder) / store.parquet_file("chunks")))
            gone["doc_id"].append(doc_id)
    con.execute("CREATE OR REPLACE TEMP TABLE gone_rows (documents VARCHAR, chunks VARCHAR, doc_id VARCHAR)")
    store.insert_rows(con, "gone_rows", gone)
    con.execute(
        "CREATE OR REPLACE TEMP TABLE dead_chunks AS SELECT c.chunk_id FROM read_parquet(?, filename = true) c "
        "JOIN gone_rows g ON g.chunks = c.filename AND g.doc_id = c.doc_id",
        [files["chunks"]],
    )
    con.execute("BEGIN TRANSACTION")
    con.execute(
        "INSERT INTO documents BY NAME SELECT * EXCLUDE (filename) FROM read_parquet(?, filename = true, "
        "union_by_name = true) d WHERE NOT "
        "EXISTS (SELECT 1 FROM gone_rows g WHERE g.documents = d.filename AND g.doc_id = d.doc_id)",
        [files["documents"]],
    )
    for table in ("chunks", "tags", "chunk_vectors"):
        con.execute(
            f"INSERT INTO {table} SELECT * FROM read_parquet(?) WHERE chunk_id NOT IN "
            "(SELECT chunk_id FROM dead_chunks)",
            [files[table]],
        )
    con.execute("COMMIT")


def existing_documents(
    index_dir: Path,
    manifest: Manifest | None,
    entries: Sequence[Segment],
    batches: Sequence[tuple[str, list[Document], bool]],
) -> dict[str, tuple[str, str, int]]:
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
        deleted = set(entry.deleted)
        documents = _small_segment_documents(index_dir, manifest, entry)
        if documents is not None:  # a Parquet segment: its documents held in memory, looked up by id
            rows = [(doc_id, *documents[doc_id]) for doc_id in wanted_ids if doc_id in documents]
            if wanted_sources:
                rows += [
                    (doc_id, source, sha)
                    for doc_id, (source, sha) in documents.items()
                    if source in wanted_sources and doc_id not in wanted_ids
                ]
        else:
            with WRITE_CACHES.stores.connection(
                segment_folder(index_dir, entry), store_checksum(manifest, entry)
            ) as con:
                # list parameters, not registered frames: a kept connection serves several threads
                rows = con.execute(
                    "SELECT doc_id, source, content_sha256 FROM documents WHERE list_contains(?::VARCHAR[], doc_id) "
                    "OR list_contains(?::VARCHAR[], source)",
                    [ids, sources],
                ).fetchall()
        for doc_id, source, sha in rows:
            if doc_id not in deleted:
                found[doc_id] = (source, sha, i)
    return found


def indexed_doc_ids(index_dir: Path, manifest: Manifest, doc_ids: Sequence[str]) -> set[str]:
    """Which of `doc_ids` the generation `manifest` names holds in its segments (live ones)."""
    probe = [Document(doc_id, "", "", "", "", "memory") for doc_id in doc_ids]
    return set(existing_documents(Path(index_dir), manifest, manifest.segment_list, [("", probe, False)]))


def store_checksum(manifest: Manifest, entry: Segment) -> str:
    """The sha256 the manifest records of a segment's DuckDB store (a format-1 index names it
    without its folder); "" when it records none."""
    recorded = manifest.file(f"{entry.name}/{layout.STORE_FILE}") or manifest.file(layout.STORE_FILE)
    return recorded.sha256 if recorded else ""


def _small_segment_documents(
    index_dir: Path, manifest: Manifest, entry: Segment
) -> dict[str, tuple[str, str]] | None:
    """`{doc_id: (source, content_sha256)}` of a Parquet segment (None for a DuckDB one), read once
    per process: segments never change, and a write then looks up its ids without opening a file."""
    folder = segment_folder(index_dir, entry)
    if not store.is_parquet_segment(folder):
        return None
    recorded = manifest.file(f"{entry.name}/{store.parquet_file('documents')}")
    key = (str(folder), recorded.sha256 if recorded else "")
    documents = WRITE_CACHES.small_documents.get(key)
    if documents is None:
        with contextlib.closing(store.open_segment(folder)) as con:
            documents = {
                doc_id: (source, sha)
                for doc_id, source, sha in con.execute(
                    "SELECT doc_id, source, content_sha256 FROM documents"
                ).fetchall()
            }
        WRITE_CACHES.small_documents.put(key, documents)
    return documents


def with_live_counts(index_dir: Path, manifest: Manifest, entry: Segment) -> Segment:
    """`entry` with the documents, chunks and vectors per model of its live rows, read from its store."""

    with WRITE_CACHES.stores.connection(
        segment_folder(index_dir, entry), store_checksum(manifest, entry)
    ) as con:
        gone = [list(entry.deleted)]
        alive = "NOT list_contains(?::VARCHAR[], doc_id)"
        documents = con.execute(f"SELECT count(*) FROM documents WHERE {alive}", gone).fetchone()[0]
        chunks = con.execute(f"SELECT count(*) FROM chunks WHERE {alive}", gone).fetchone()[0]
        vectors = dict(
            con.execute(
                f"SELECT v.model, count(*) FROM chunk_vectors v JOIN chunks c USING (chunk_id) WHERE {alive} "
                "GROUP BY 1",
                gone,
            ).fetchall()
        )
    return dataclasses.replace(entry, documents=documents, chunks=chunks, vectors=vectors)


def next_chunk_id(index_dir: Path, manifest: Manifest | None) -> int:
    if manifest is None:
        return 0
    if manifest.next_chunk_id is not None:
        return manifest.next_chunk_id
    legacy = index_dir / manifest.path / layout.STORE_FILE  # a legacy index
    with contextlib.closing(store.connect(legacy, read_only=True)) as con:
        return int(store.get_meta(con, "next_chunk_id", "0"))


def new_segment(
    name: str, counts: dict[str, Any], models: Mapping[str, SegmentModel], folder: Path
) -> Segment:
    """The record of a segment just written into the private `folder` (becoming `name` on commit):
    `counts` from `store_counts`, its FAISS files (`models`) from `build_artifacts`."""
    return Segment(
        name=name,
        documents=counts["documents"],
        chunks=counts["chunks"],
        rows=counts["chunks"],
        first_chunk_id=counts.get("first_chunk_id"),
        last_chunk_id=counts.get("last_chunk_id"),
        vectors={model: info.vectors for model, info in models.items()},
        models=dict(models),
        folder=str(folder),
    )


def store_counts(con) -> dict[str, Any]:
    documents = con.execute("SELECT count(*) FROM documents").fetchone()[0]
    chunks, first, last = con.execute("SELECT count(*), min(chunk_id), max(chunk_id) FROM chunks").fetchone()
    return {"documents": documents, "chunks": chunks, "first_chunk_id": first, "last_chunk_id": last}


def dead_chunk_ids(folder: Path, entry: Segment) -> np.ndarray:
    """Chunk ids of a segment's tombstoned documents. A committed segment's are kept for the next
    write of this process (keyed by the folder's path, inode and mtime and the tombstones: segment
    folders are never rewritten), which finds them again as the previous generation's."""
    deleted = entry.deleted
    if not deleted:
        return np.zeros(0, np.int64)
    key = None
    if ".tmp-" not in folder.name:
        info = folder.stat()
        key = (str(folder.resolve()), info.st_ino, info.st_mtime_ns, deleted)
        known = WRITE_CACHES.dead.get(key)
        if known is not None:
            return known
    with contextlib.closing(store.open_segment(folder)) as con:
        rows = con.execute(
            "SELECT chunk_id FROM chunks WHERE list_contains(?::VARCHAR[], doc_id)", [list(deleted)]
        ).fetchall()
    ids = np.asarray([r[0] for r in rows], dtype=np.int64)
    if key is not None:
        ids.flags.writeable = False  # shared by later calls
        WRITE_CACHES.dead.put(key, ids)
    return ids


def load_dense(path: Path, model: str):
    """A segment's FAISS index; a committed segment's is kept for the next write of this process
    (keyed by path, inode, size and mtime: segment files are never rewritten)."""
    if ".tmp-" in path.parent.name:
        return DenseIndex.load(path, model)
    info = path.stat()
    key = (str(path.resolve()), info.st_ino, info.st_size, info.st_mtime_ns)
    return WRITE_CACHES.dense.get_or_compute(key, lambda: DenseIndex.load(path, model))


def segment_folder(index_dir: Path, entry: Segment) -> Path:
    """Where a segment's files are: its committed folder, or the private folder it is being built in."""
    return Path(entry.folder) if entry.folder else Path(index_dir) / entry.name


#: a write is built in memory (then written as Parquet, or copied into a DuckDB file when it has
#: `SMALL_SEGMENT_ROWS`+ chunks) below these bounds, else directly in a DuckDB file whose buffer
#: pool spills to disk: the in-memory database holds every row of the write at once
SMALL_WRITE_DOCUMENTS = 10_000
SMALL_WRITE_CHARS = 32_000_000


def small_write(documents: Sequence[Document]) -> bool:
    """Whether a write's new segment is built in the in-memory DuckDB (few documents, bounded text)."""
    if len(documents) >= SMALL_WRITE_DOCUMENTS:
        return False
    return sum(len(document.text) for document in documents) < SMALL_WRITE_CHARS


def persist(con, folder: Path) -> None:
    """Make a segment's store durable-ready in `folder`: a DuckDB file is checkpointed; a segment
    built in memory is written as Parquet tables when small, else copied into `store.duckdb`."""
    if not isinstance(con, store.ScratchConnection):
        con.execute("CHECKPOINT")
        return
    rows = con.execute("SELECT count(*) FROM chunks").fetchone()[0]
    if rows < store.SMALL_SEGMENT_ROWS:
        store.write_parquet(con, folder)
        WRITE_CACHES.uncommitted_documents.put(
            str(folder),
            {
                doc_id: (source, sha)
                for doc_id, source, sha in con.execute(
                    "SELECT doc_id, source, content_sha256 FROM documents"
                ).fetchall()
            },
        )
        return
    alias = store.unique_name("f")
    con.attach(alias, f"ATTACH {store.quote_path(folder / layout.STORE_FILE)} AS {alias}")
    con.execute(f"COPY FROM DATABASE {con.database} TO {alias}")
    con.execute(f"CHECKPOINT {alias}")
    con.execute(f"DETACH {alias}")
