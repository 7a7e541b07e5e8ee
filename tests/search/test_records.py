"""The typed records an Index returns (documents, collections, stats): their JSON shape is the one
clients read (the MCP tools, `hybridlab stats --json`, `memories list --json`), key for key."""

import dataclasses
import json

from hybridlab.index.format import wal
from hybridlab.search.records import CollectionSummary, IndexStats, StoredDocument, listed

DOCUMENT_KEYS = [
    "doc_id",
    "source",
    "collection",
    "title",
    "text",
    "doc_type",
    "created_at",
    "updated_at",
    "metadata",
    "tags",
]


def test_a_document_is_its_row_with_parsed_metadata_and_iso_dates(opened_tiny_index):
    index = opened_tiny_index
    doc_id = index.snapshot().generation.doc_ids[0]
    document = index.get_document(doc_id)
    assert isinstance(document, StoredDocument) and document.doc_id == doc_id
    row = dict(
        zip(
            DOCUMENT_KEYS,
            index._con.execute(
                f"SELECT {', '.join(DOCUMENT_KEYS)} FROM documents WHERE doc_id = ?", [doc_id]
            ).fetchall()[0],
        )
    )
    expected = {
        **row,
        "metadata": json.loads(row["metadata"] or "{}"),
        "tags": list(row["tags"] or []),
        "created_at": None if row["created_at"] is None else row["created_at"].isoformat() + "Z",
        "updated_at": None if row["updated_at"] is None else row["updated_at"].isoformat() + "Z",
    }
    data = document.to_dict()
    assert list(data) == DOCUMENT_KEYS and data == expected and isinstance(data["tags"], list)
    assert listed(document, 3) == {"rank": 3, **{k: v for k, v in expected.items() if k != "source"}}


def test_listings_return_documents_newest_first(opened_tiny_index):
    documents, cursor = opened_tiny_index.list_documents(limit=2)
    assert len(documents) == 2 and cursor is not None
    assert all(isinstance(d, StoredDocument) for d in documents)
    assert documents[0] == opened_tiny_index.get_document(documents[0].doc_id)


def test_collection_summaries(opened_tiny_index):
    index = opened_tiny_index
    collections = index.list_collections(top_tags=1)
    assert [c.name for c in collections] == sorted(index.known_collections)
    assert all(isinstance(c, CollectionSummary) for c in collections)
    for summary in collections:
        data = summary.to_dict()
        assert list(data) == ["name", "documents", "chunks", "chunk_types", "tags", "tag_count"]
        assert data["chunks"] == sum(data["chunk_types"].values()) and len(data["tags"]) <= 1
    assert sum(c.chunks for c in collections) == index.n_chunks


def test_stats_json_is_the_manifest_and_store_facts(opened_tiny_index):
    index = opened_tiny_index
    stats = index.stats()
    assert isinstance(stats, IndexStats)
    manifest = index.manifest
    data = stats.to_dict()
    assert list(data) == [
        "index",
        "generation",
        "built_at",
        "documents",
        "chunks",
        "tags",
        "by_collection",
        "documents_by_collection",
        "by_chunk_type",
        "vectors_by_model",
        "models",
        "bm25",
        "chunking",
        "segments",
        "tombstones",
        "last_merge",
        "write_ahead_log",
    ]
    assert data["models"] == {
        m: {"dim": info.dim, "vectors": info.vectors, "index": info.index, "encoder": info.encoder}
        for m, info in manifest.models.items()
    }
    assert data["bm25"] == manifest.bm25.to_json()
    assert data["chunking"] == dataclasses.asdict(manifest.index_config.chunk)
    assert data["segments"] == [
        {"name": s.name, "chunks": s.chunks, "tombstones": len(s.deleted)} for s in manifest.segment_list
    ]
    assert data["write_ahead_log"] == {
        "file": wal.wal_path(index.index_dir, manifest.generation).name,
        "memories": 0,
        "chunks": 0,
        "tombstones": 0,
    }
    assert (data["documents"], data["chunks"]) == (
        len(set(index.snapshot().generation.doc_ids)),
        index.n_chunks,
    )
    assert json.loads(json.dumps(data, default=str))["generation"] == stats.generation
