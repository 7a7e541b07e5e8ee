"""What an :class:`~hybridlab.search.engine.Index` returns besides search results: its documents,
its collections and its stats, as typed records read from one snapshot.

A document is a :class:`~hybridlab.index.format.store.StoredDocument` (defined with the store, so
the memory writer below the search layer takes it too). Each record's `to_dict` is its JSON shape:
the MCP tools and the CLI print it, so its keys and their order are a contract with clients.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hybridlab.config import ChunkConfig
from hybridlab.errors import DocumentNotFoundError
from hybridlab.index.format import wal
from hybridlab.index.format.manifest import Bm25Record, LastMerge
from hybridlab.index.format.store import StoredDocument
from hybridlab.index.reader import Generation
from hybridlab.search.results import iso_utc
from hybridlab.search.snapshot import Snapshot

__all__ = [
    "CollectionSummary",
    "IndexStats",
    "LogStats",
    "ModelStats",
    "SegmentStats",
    "StoredDocument",
    "collection_summaries",
    "index_stats",
    "listed",
    "stored_document",
]


def stored_document(snapshot: Snapshot, doc_id: str) -> StoredDocument:
    """One document of the snapshot, its metadata parsed and dates in ISO-8601
    (DocumentNotFoundError when absent)."""
    row = snapshot.store.document(doc_id)
    if row is None:
        raise DocumentNotFoundError(f"no document {doc_id!r} in the index")
    return StoredDocument(
        **{
            **row,
            "metadata": json.loads(row["metadata"] or "{}"),
            "tags": tuple(row["tags"] or ()),
            "created_at": iso_utc(row["created_at"]),
            "updated_at": iso_utc(row["updated_at"]),
        }
    )


def listed(document: StoredDocument, rank: int) -> dict[str, Any]:
    """A document as a listing prints it (`hybridlab memories list --json`): its rank (1 = the
    newest), then its fields but its source."""
    return {"rank": rank, **{k: v for k, v in document.to_dict().items() if k != "source"}}


@dataclass(frozen=True)
class CollectionSummary:
    """One collection: its documents and chunks, chunks per chunk type, its most common tags
    (tag -> documents carrying it, most first) and how many distinct tags it has."""

    name: str
    documents: int
    chunks: int
    chunk_types: Mapping[str, int]
    tags: Mapping[str, int]
    tag_count: int

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "chunk_types": dict(self.chunk_types), "tags": dict(self.tags)}


def collection_summaries(generation: Generation, top_tags: int) -> list[CollectionSummary]:
    """Each collection of `generation`, sorted by name, with its `top_tags` most common tags."""
    doc_ids, collections, chunk_types = generation.doc_ids, generation.collections, generation.chunk_types
    documents: dict[str, set[str]] = {name: set() for name in generation.known_collections}
    chunks: dict[str, Counter[str]] = {name: Counter() for name in generation.known_collections}
    for row in range(len(doc_ids)):
        documents[collections[row]].add(doc_ids[row])
        chunks[collections[row]][chunk_types[row]] += 1
    tags: dict[str, Counter[str]] = {name: Counter() for name in generation.known_collections}
    for tag, rows in generation.tag_rows.items():
        for name, _doc in {(collections[row], doc_ids[row]) for row in rows.tolist()}:
            tags[name][tag] += 1
    return [
        CollectionSummary(
            name=name,
            documents=len(documents[name]),
            chunks=sum(chunks[name].values()),
            chunk_types=dict(sorted(chunks[name].items())),
            tags=dict(sorted(tags[name].items(), key=lambda item: (-item[1], item[0]))[:top_tags]),
            tag_count=len(tags[name]),
        )
        for name in generation.known_collections
    ]


@dataclass(frozen=True)
class ModelStats:
    """One embedding model of the index: vector size and count, FAISS index type, and the encoder
    spec the manifest records (source, revision, dim, pooling, prompts, ...; None: an older index)."""

    dim: int
    vectors: int
    index: str
    encoder: Mapping[str, Any] | None

    def to_dict(self) -> dict[str, Any]:
        return {"dim": self.dim, "vectors": self.vectors, "index": self.index, "encoder": self.encoder}


@dataclass(frozen=True)
class SegmentStats:
    """One segment: its name, its chunks and its tombstoned documents."""

    name: str
    chunks: int
    tombstones: int


@dataclass(frozen=True)
class LogStats:
    """The generation's write-ahead log: its file name and what it holds that no segment does yet."""

    file: str
    memories: int
    chunks: int
    tombstones: int


@dataclass(frozen=True)
class IndexStats:
    """`Index.stats`: the store's counts (per table, collection, chunk type and model), each model,
    BM25 and chunking as built, the segments and the log. `tombstones` counts the segments' and the
    log's (not folded yet). :meth:`to_dict` is the JSON `hybridlab stats --json` prints and the MCP
    `stats` tool extends."""

    index: str
    generation: int
    built_at: str
    documents: int
    chunks: int
    tags: int  # distinct tags
    by_collection: Mapping[str, int]
    documents_by_collection: Mapping[str, int]
    by_chunk_type: Mapping[str, int]
    vectors_by_model: Mapping[str, int]
    models: Mapping[str, ModelStats]
    bm25: Bm25Record
    chunking: ChunkConfig
    segments: tuple[SegmentStats, ...]
    tombstones: int
    last_merge: LastMerge | None
    write_ahead_log: LogStats

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "generation": self.generation,
            "built_at": self.built_at,
            "documents": self.documents,
            "chunks": self.chunks,
            "tags": self.tags,
            "by_collection": dict(self.by_collection),
            "documents_by_collection": dict(self.documents_by_collection),
            "by_chunk_type": dict(self.by_chunk_type),
            "vectors_by_model": dict(self.vectors_by_model),
            "models": {name: info.to_dict() for name, info in self.models.items()},
            "bm25": self.bm25.to_json(),
            "chunking": dataclasses.asdict(self.chunking),
            "segments": [dataclasses.asdict(segment) for segment in self.segments],
            "tombstones": self.tombstones,
            "last_merge": self.last_merge.to_json() if self.last_merge else None,
            "write_ahead_log": dataclasses.asdict(self.write_ahead_log),
        }


def index_stats(index_dir: Path, snapshot: Snapshot) -> IndexStats:
    """The stats of `snapshot`, an index at `index_dir`."""
    generation = snapshot.generation
    manifest = generation.manifest
    counts = snapshot.store.counts()
    segments = tuple(SegmentStats(s.name, s.chunks, len(s.deleted)) for s in manifest.segment_list)
    return IndexStats(
        index=str(index_dir),
        generation=manifest.generation,
        built_at=manifest.built_at,
        documents=counts["documents"],
        chunks=counts["chunks"],
        tags=counts["tags"],
        by_collection=counts["by_collection"],
        documents_by_collection=counts["documents_by_collection"],
        by_chunk_type=counts["by_chunk_type"],
        vectors_by_model=counts["vectors_by_model"],
        models={
            name: ModelStats(info.dim, info.vectors, info.index, info.encoder)
            for name, info in manifest.models.items()
        },
        bm25=manifest.bm25,
        chunking=manifest.index_config.chunk,
        segments=segments,
        tombstones=sum(s.tombstones for s in segments) + generation.logged_deletes,
        last_merge=manifest.last_merge,
        write_ahead_log=LogStats(
            file=wal.wal_path(index_dir, manifest.generation).name,
            memories=generation.logged_records,
            chunks=generation.logged_chunks,
            tombstones=generation.logged_deletes,
        ),
    )
