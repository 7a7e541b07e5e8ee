"""The first implementation of the retriever seam: one generation on local disk (bm25s, FAISS, DuckDB).

Each object wraps what :func:`hybridlab.index.reader.read_generation` loaded and lives exactly as long
as the snapshot that holds it, so its caches (filter masks, chunk details, FAISS filter state) never
mix generations. Every one may be used by several threads at once.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import numpy as np

from hybridlab.errors import InvalidValueError
from hybridlab.index.format import store
from hybridlab.index.format.dense import DenseIndex, RowGather, SegmentedDense
from hybridlab.index.format.embedding_cache import hashed_text
from hybridlab.index.format.graph import expand_by_graph
from hybridlab.index.format.lru import LruCache
from hybridlab.index.format.sparse import SparseIndex
from hybridlab.index.reader import Generation, segment_details
from hybridlab.search.filters import Filters
from hybridlab.search.retrievers import RowFilter

FILTER_CACHE_SIZE = 64


class Bm25Retriever:
    """:class:`~hybridlab.search.retrievers.SparseRetriever` over a bm25s index (rows = its rows);
    the filter is applied as a score mask, so the top `depth` are taken among allowed rows."""

    def __init__(self, index: SparseIndex) -> None:
        self.index = index

    def search(self, query: str, depth: int, allowed: RowFilter) -> tuple[np.ndarray, np.ndarray]:
        return self.index.top_terms(self.index.query_terms(query), depth, allowed.mask)

    def lexical_evidence(self, query: str, rows: np.ndarray) -> np.ndarray:
        return self.index.matched_idf_share(query, rows)

    def document_frequencies(self, query: str) -> dict[str, int]:
        """The live document frequency of each distinct in-vocabulary term of `query`."""
        return {
            term: self.index.document_frequency(term) for term in dict.fromkeys(self.index.query_terms(query))
        }

    def term_rows(self, term: str, depth: int, allowed: RowFilter) -> np.ndarray:
        """Up to `depth` allowed rows holding `term`, ascending (its BM25 score is positive exactly there)."""
        rows, _ = self.index.top_terms([term], depth, allowed.mask)
        return np.sort(rows)


class FaissRetriever:
    """:class:`~hybridlab.search.retrievers.DenseRetriever` over one model's FAISS index (ids =
    chunk ids) and its corpus graph; FAISS rows are mapped to snapshot rows with `to_rows`."""

    def __init__(
        self,
        index: DenseIndex | SegmentedDense,
        chunk_ids: np.ndarray,
        to_rows: np.ndarray,
        graph: np.ndarray | None,
    ) -> None:
        self.index = index
        self.model = index.model
        self.dim = index.dim
        self._chunk_ids = chunk_ids
        self._to_rows = to_rows  # FAISS row -> snapshot row
        self._graph = graph

    @property
    def has_graph(self) -> bool:
        return self._graph is not None

    def search(self, vector: np.ndarray, depth: int, allowed: RowFilter) -> tuple[np.ndarray, np.ndarray]:
        ids, scores = self.index.search(
            vector, depth, None if allowed.mask is None else self._chunk_ids[allowed.mask]
        )
        return np.searchsorted(self._chunk_ids, ids), scores

    def _score(self, vector: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(FAISS rows, scores) of the snapshot `rows` this model has vectors for."""
        dense_rows = self.index.rows_of(self._chunk_ids[rows])
        return dense_rows, self.index.take(dense_rows) @ np.asarray(vector, dtype=np.float32).reshape(-1)

    def score(self, vector: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        dense_rows, scores = self._score(vector, rows)
        return self._to_rows[dense_rows], scores

    def vectors(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        dense_rows = self.index.rows_of(self._chunk_ids[np.asarray(rows, dtype=np.int64)])
        return self._to_rows[dense_rows], self.index.take(dense_rows)

    def score_pool(
        self, vector: np.ndarray, rows: np.ndarray, *, hops: int, seeds: int, allowed: RowFilter
    ) -> tuple[np.ndarray, np.ndarray, int]:
        dense_rows, scores = self._score(vector, rows)  # FAISS rows, scored once, no id round trip
        added = 0
        if self._graph is not None and hops > 0:
            mask, to_rows = allowed.mask, self._to_rows
            keep = None if mask is None else (lambda candidates: mask[to_rows[candidates]])
            grown, scores = expand_by_graph(
                RowGather(self.index),
                self._graph,
                vector,
                dense_rows,
                scores,
                hops=hops,
                seeds=seeds,
                keep=keep,
            )
            added = len(grown) - len(dense_rows)
            dense_rows = grown
        return self._to_rows[dense_rows], scores, added


class DuckDBStore:
    """:class:`~hybridlab.search.retrievers.MetadataStore` over the generation's DuckDB store: filters
    resolved by SQL into row masks (the last `FILTER_CACHE_SIZE` kept), chunk details read once."""

    def __init__(self, generation: Generation, filter_cache_size: int = FILTER_CACHE_SIZE) -> None:
        self._generation = generation
        self._everything = RowFilter(Filters(), None, generation.n_chunks)
        self._filters: LruCache[Filters, RowFilter] = LruCache(filter_cache_size)
        self._details_lock = threading.Lock()
        self._locations: tuple[np.ndarray, np.ndarray] | None = None

    def allowed(self, filters: Filters) -> RowFilter:
        if filters.empty:
            return self._everything
        return self._filters.get_or_compute(filters, lambda: self._resolve(filters))

    def _resolve(self, filters: Filters) -> RowFilter:
        generation = self._generation
        for chunk_type in filters.chunk_types:
            if chunk_type not in generation.known_chunk_types:
                raise InvalidValueError(
                    f"unknown chunk type {chunk_type!r}; this index has {list(generation.known_chunk_types)}",
                    field="chunk_types",
                )
        for collection in filters.collections:
            if collection not in generation.known_collections:
                raise InvalidValueError(
                    f"unknown collection {collection!r}; this index has {list(generation.known_collections)}",
                    field="collection",
                )
        sql, params = filters.sql()
        ids = np.asarray([r[0] for r in generation.store.fetchall(sql, params)], dtype=np.int64)
        mask = np.zeros(generation.n_chunks, dtype=bool)
        mask[generation.rows_of(ids)] = True
        if mask.all():  # e.g. embedding_model of a single-model index: no restriction to push down
            return RowFilter(filters, None, generation.n_chunks)
        mask.flags.writeable = False
        return RowFilter(filters, mask, int(mask.sum()))

    def details(self, rows: Sequence[int]) -> list[tuple[str, tuple[str, ...], datetime | None]]:
        """Chunk text, document tags and date of each row. Read per segment on first need and kept
        with the segment (segments are immutable), so a refresh after a write reads only the new
        segment's rows, not every chunk's text again."""
        if not len(rows):  # a generation without segments has no rows
            return []
        segment_of, local_of = self._row_locations()
        found = []
        for row in rows:
            texts, tags, when = self._segment_details(int(segment_of[row]))
            local = int(local_of[row])
            found.append((texts[local], tags[local], when[local]))
        return found

    def _row_locations(self) -> tuple[np.ndarray, np.ndarray]:
        """(segment, local row) of every row of the generation (computed once per snapshot)."""
        locations = self._locations
        if locations is None:
            generation = self._generation
            segments, locals_ = [], []
            for i, (segment, mask) in enumerate(
                zip(generation.segments, generation.live or [None] * len(generation.segments))
            ):
                local = np.arange(segment.rows, dtype=np.int64) if mask is None else np.flatnonzero(mask)
                segments.append(np.full(len(local), i, dtype=np.int32))
                locals_.append(local)
            locations = self._locations = (np.concatenate(segments), np.concatenate(locals_))
        return locations

    def _segment_details(self, i: int) -> tuple[list[str], list[tuple[str, ...]], list[datetime | None]]:
        segment = self._generation.segments[i]
        details = segment.details.get("rows")
        if details is None:
            with self._details_lock:
                details = segment.details.get("rows")
                if details is None:
                    store = self._generation.store
                    with store.connection() as con:
                        details = segment_details(con, store.prefixes[i])
                    segment.details["rows"] = details
        return details

    def passages(self, rows: Sequence[int]) -> list[str]:
        if not len(rows):
            return []
        chunk_ids = self._generation.chunk_ids[np.asarray(rows, dtype=np.int64)].tolist()
        found = dict(
            self._generation.store.fetchall(
                f"SELECT chunk_id, COALESCE(embed_text, text) FROM chunks WHERE chunk_id IN ({', '.join('?' * len(chunk_ids))})",
                chunk_ids,
            )
        )
        return [found[chunk_id] for chunk_id in chunk_ids]

    def embedded(self, rows: Sequence[int]) -> list[tuple[str, str]]:
        if not len(rows):
            return []
        chunk_ids = self._generation.chunk_ids[np.asarray(rows, dtype=np.int64)].tolist()
        found = {
            chunk_id: (sha, text)
            for chunk_id, sha, text in self._generation.store.fetchall(
                "SELECT chunk_id, embed_sha256, COALESCE(embed_text, text) FROM chunks "
                f"WHERE chunk_id IN ({', '.join('?' * len(chunk_ids))})",
                chunk_ids,
            )
        }
        return [hashed_text(*found[chunk_id]) for chunk_id in chunk_ids]

    def document(self, doc_id: str) -> dict[str, Any] | None:
        row = self._generation.store.fetchone(
            f"SELECT {', '.join(DOCUMENT_FIELDS)} FROM documents WHERE doc_id = ?", [doc_id]
        )
        return None if row is None else dict(zip(DOCUMENT_FIELDS, row))

    def counts(self) -> dict[str, Any]:
        with self._generation.store.connection() as con:
            return store.counts(con)


#: the columns a document is read with: the fields of the record the engine builds of them
DOCUMENT_FIELDS = tuple(field.name for field in dataclasses.fields(store.StoredDocument))
