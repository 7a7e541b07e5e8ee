"""The rows of a segment: a document's chunks, the text each is indexed as, and the inserts that
put documents, chunks, tags and per-model vector assignments into a segment's DuckDB tables.
Shared by the writer (`build`) and the write-ahead log's reader (`wal`), so both build the same rows."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from datetime import UTC, datetime

from hybridlab.config import ChunkConfig, IndexConfig
from hybridlab.index.format import store
from hybridlab.index.format.embedding_cache import text_sha256
from hybridlab.ingest.chunking import Chunk, chunk_text, embedding_text, single_chunk, split_span
from hybridlab.ingest.sources import Document

INSERT_BATCH = 10_000  # documents per DuckDB insert (bounds the chunk texts held in Python)
SMALL_INSERT = 16  # up to this many hashes are looked up with a list parameter, not a registered table
VALUES_INSERT = 32  # up to this many documents are inserted by one multi-row INSERT (faster than scanned arrays below ~30)


#: the whitespace :func:`normalised_content` collapses, the same class in Python and in DuckDB's regex
WHITESPACE = r"[ \t\n\r\f\v]+"


def normalised_content(content: str) -> str:
    """The text two memories must share to be duplicates: whitespace runs collapsed to one space,
    stripped, lowercased (Python's and DuckDB's `lower()` agree on it, so the store can compare)."""
    return re.sub(WHITESPACE, " ", content).strip(" ").lower()


def content_key(document: Document) -> str | None:
    """A memory's `content_key` column: sha256 of its normalised content (the duplicate check looks
    it up by equality); None for other documents."""
    if document.doc_type != "memory":
        return None
    return hashlib.sha256(normalised_content(document.text).encode("utf-8")).hexdigest()


def indexed_text(chunk: Chunk, document: Document, config: ChunkConfig) -> str:
    """The text a chunk is embedded and BM25-indexed as: its heading (the title, except for
    memories), the document's tags when `config.index_tags`, a memory's `context` (metadata: the
    conversation turn before it), then the chunk's text."""
    memory = document.doc_type == "memory"
    context = str((document.metadata or {}).get("context") or "") if memory else ""
    return embedding_text(
        chunk, "" if memory else document.title, document.tags if config.index_tags else (), context
    )


def memory_chunks(document: Document, config: ChunkConfig) -> list[Chunk]:
    """A memory as one chunk, or, longer than `memory_chunk_size`, as overlapping pieces cut at paragraph
    and sentence ends (a long memory is searchable by all of its text: an encoder reads ~256 tokens,
    ~1,000 characters, of a chunk); the search ranks the memory by its pieces together."""
    text = document.text
    size, overlap = config.memory_piece
    if len(text) <= size:
        return single_chunk(text, chunk_type="memory", language=document.language)
    spans = [
        (start, end)
        for start, end in split_span(text, 0, len(text), size, overlap)
        if text[start:end].strip()
    ]
    return [
        Chunk(i, text[start:end], start, end, "", "memory", document.language)
        for i, (start, end) in enumerate(spans)
    ]


def chunk_document(document: Document, config: IndexConfig) -> list[Chunk]:
    """The chunks of one document, by its type: header chunking for markdown/reST/notebooks."""
    if document.doc_type == "memory":
        return memory_chunks(document, config.chunk)
    if document.doc_type == "beir" or config.chunk.strategy == "whole":
        chunk_type = "memory" if document.doc_type == "memory" else "text"
        return single_chunk(
            document.text or document.title,
            section=document.title,
            chunk_type=chunk_type,
            language=document.language,
        )
    fmt = {"markdown": "markdown", "notebook": "markdown", "rst": "rst"}.get(document.doc_type, "text")
    default_language = "markdown" if document.doc_type == "notebook" else document.language
    return chunk_text(document.text, config.chunk, fmt=fmt, title=document.title, language=default_language)


def insert_documents(
    con, documents: Sequence[Document], config: IndexConfig, next_id: int
) -> tuple[int, int]:
    """Insert documents, their chunks and tags, `INSERT_BATCH` documents at a time (so chunk texts
    exist in Python for one batch only); returns (next free chunk id, chunks inserted)."""
    inserted = 0
    for start in range(0, len(documents), INSERT_BATCH):
        con.execute("BEGIN TRANSACTION")
        next_id, count = _insert_batch(con, documents[start : start + INSERT_BATCH], config, next_id)
        con.execute("COMMIT")
        inserted += count
    return next_id, inserted


#: the columns of the `documents`, `chunks` and `tags` tables one insert batch fills, in order
DOCUMENT_COLUMNS = (
    "doc_id",
    "source",
    "collection",
    "title",
    "text",
    "doc_type",
    "created_at",
    "updated_at",
    "metadata",
    "language",
    "tags",
    "content_sha256",
    "content_key",
)
CHUNK_COLUMNS = (
    "chunk_id",
    "doc_id",
    "chunk_index",
    "section",
    "chunk_type",
    "text",
    "start_char",
    "end_char",
    "language",
    "embed_text",
    "embed_sha256",
)
TAG_COLUMNS = ("chunk_id", "doc_id", "tag")


class _BatchRows:
    """The rows of one insert batch, column by column (`{column: values}`, what `store.insert_rows`
    takes): its documents, their chunks (numbered on from the first free chunk id) and each chunk's
    copy of its document's tags."""

    def __init__(self, next_id: int) -> None:
        self.docs: dict[str, list] = {k: [] for k in DOCUMENT_COLUMNS}
        self.chunks: dict[str, list] = {k: [] for k in CHUNK_COLUMNS}
        self.tags: dict[str, list] = {k: [] for k in TAG_COLUMNS}
        self.next_id = next_id  # the next free chunk id

    def add(self, document: Document, config: IndexConfig) -> None:
        """Add a document's row, then its chunks' and their tags' rows."""
        for key, value in (
            ("doc_id", document.doc_id),
            ("source", document.source),
            ("collection", document.collection),
            ("title", document.title),
            ("text", document.text),
            ("doc_type", document.doc_type),
            ("created_at", document.created_at),
            ("updated_at", document.updated_at),
            ("metadata", store.metadata_json(document.metadata)),
            ("language", document.language),
            ("tags", list(document.tags)),
            ("content_sha256", document.content_sha256),
            ("content_key", content_key(document)),
        ):
            self.docs[key].append(value)
        for chunk in chunk_document(document, config):
            self._add_chunk(chunk, document, config)

    def _add_chunk(self, chunk: Chunk, document: Document, config: IndexConfig) -> None:
        """Add one chunk's row (with the text it is indexed as) and its tags' rows, under the next free id."""
        text = indexed_text(chunk, document, config.chunk)
        for column, cell in (
            ("chunk_id", self.next_id),
            ("doc_id", document.doc_id),
            ("chunk_index", chunk.chunk_index),
            ("section", chunk.section),
            ("chunk_type", chunk.chunk_type),
            ("text", chunk.text),
            ("start_char", chunk.start_char),
            ("end_char", chunk.end_char),
            ("language", chunk.language),
            ("embed_text", text),
            ("embed_sha256", text_sha256(text)),
        ):
            self.chunks[column].append(cell)
        for tag in document.tags:
            self.tags["chunk_id"].append(self.next_id)
            self.tags["doc_id"].append(document.doc_id)
            self.tags["tag"].append(tag)
        self.next_id += 1

    def insert_values(self, con) -> None:
        """A few rows: one multi-row INSERT per table (dates made naive UTC, as `insert_frames` stores them)."""
        docs = {
            **self.docs,
            **{
                column: [_naive_utc(value) for value in self.docs[column]]
                for column in ("created_at", "updated_at")
            },
        }
        for table, columns in (("documents", docs), ("chunks", self.chunks), ("tags", self.tags)):
            rows = list(zip(*columns.values()))
            if rows:  # one statement: executemany runs one per row (~0.5 ms each)
                values = ", ".join([f"({', '.join('?' * len(columns))})"] * len(rows))
                con.execute(
                    f"INSERT INTO {table} ({', '.join(columns)}) VALUES {values}",
                    [value for row in rows for value in row],
                )

    def insert_frames(self, con) -> None:
        """Many rows: each table's columns scanned as numpy arrays by `store.insert_rows` (dates made
        naive UTC, as DuckDB's TIMESTAMP stores them)."""
        docs = {
            **self.docs,
            **{
                column: [_naive_utc(value) for value in self.docs[column]]
                for column in ("created_at", "updated_at")
            },
        }
        store.insert_rows(con, "documents", docs)
        store.insert_rows(con, "chunks", self.chunks)
        store.insert_rows(con, "tags", self.tags)


def _insert_batch(con, documents: Sequence[Document], config: IndexConfig, next_id: int) -> tuple[int, int]:
    """Insert one batch of documents with their chunks (ids from `next_id` on) and tags; returns
    (next free chunk id, chunks inserted)."""
    rows = _BatchRows(next_id)
    for document in documents:
        rows.add(document, config)
    if len(rows.docs["doc_id"]) <= VALUES_INSERT:
        rows.insert_values(con)
    else:
        rows.insert_frames(con)
    return rows.next_id, len(rows.chunks["chunk_id"])


def _naive_utc(value: datetime | None) -> datetime | None:
    """A datetime as DuckDB's TIMESTAMP stores it: UTC, without a time zone."""
    if value is None or value.tzinfo is None:
        return value
    return value.astimezone(UTC).replace(tzinfo=None)


def assign_vectors(con, config: IndexConfig) -> None:
    """(Re)derive which chunks each model embeds, from the config's per-collection/language table."""
    con.execute("DELETE FROM chunk_vectors")
    if not config.model_by_collection and not config.model_by_language:  # every chunk, every model: in SQL
        for model in config.models:
            con.execute("INSERT INTO chunk_vectors SELECT chunk_id, ?, embed_sha256 FROM chunks", [model])
        return
    rows = con.execute(
        "SELECT c.chunk_id, d.collection, c.language, c.embed_sha256 FROM chunks c JOIN documents d USING (doc_id) ORDER BY c.chunk_id"
    ).fetchall()
    assignment: dict[str, list] = {"chunk_id": [], "model": [], "embed_sha256": []}
    for chunk_id, collection, language, sha in rows:
        for model in config.model_for(collection, language):
            assignment["chunk_id"].append(chunk_id)
            assignment["model"].append(model)
            assignment["embed_sha256"].append(sha)
    store.insert_rows(con, "chunk_vectors", assignment)
