"""The seam between the search pipeline and what stores an index: three small protocols.

The pipeline asks a :class:`SparseRetriever` and one :class:`DenseRetriever` per embedding model
for candidates, and a :class:`MetadataStore` for the rows a filter allows and the documents it
returns (local disk: :mod:`hybridlab.search.local`; Qdrant: :mod:`hybridlab.search.qdrant`).
Every implementation keeps these conventions (the contract; tests/search/test_qdrant_backend.py
runs the same queries through both):

- **Rows.** Candidates are rows of the snapshot: row ``r`` is the chunk ``chunk_ids[r]`` of its
  ascending chunk-id table, so every run the pipeline fuses is ``{row: score}``. An engine that
  speaks chunk ids maps them with that table (``np.searchsorted``); a segment store numbers its
  segments' chunks into one row space and hides tombstoned rows through the filter.
- **Filters are pushed down.** A search gets a :class:`RowFilter` (the declarative ``Filters`` a
  remote engine turns into a payload filter, and the row mask a local retriever applies) and
  returns up to ``depth`` allowed rows: filtering happens inside the retriever, never by dropping
  results afterwards.
- **Ranking order.** Best first, ties by ascending row; scores are the retriever's own (BM25,
  cosine), comparable only within one retriever.
- **Statistics are the retriever's business.** BM25 over several segments (and the write-ahead
  log) uses global statistics, so its scores do not depend on how the index is cut into segments.

Why the seam exists and how it came to be: docs/internals/search.md#retrievers."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

import numpy as np

from hybridlab.search.filters import Filters


@dataclass(frozen=True, eq=False)
class RowFilter:
    """The rows a search may return: `filters` as asked, `mask` as resolved (a boolean per row;
    None = every row), `count` = rows allowed."""

    filters: Filters
    mask: np.ndarray | None
    count: int


class SparseRetriever(Protocol):
    """Lexical retrieval (BM25) over the snapshot's rows."""

    def search(self, query: str, depth: int, allowed: RowFilter) -> tuple[np.ndarray, np.ndarray]:
        """(rows, scores) of the `depth` best rows with a positive score among the allowed ones,
        best first; the query is tokenised as the documents were."""
        ...

    def lexical_evidence(self, query: str, rows: np.ndarray) -> np.ndarray:
        """For each of `rows`, the share of the query's IDF mass its text contains (terms the index
        never saw count at the IDF of an unseen term; see :mod:`hybridlab.search.evidence`)."""
        ...

    def document_frequencies(self, query: str) -> dict[str, int]:
        """For each distinct query term the index has, the live rows containing it (global over
        the live segments, as BM25's IDF counts them)."""
        ...

    def term_rows(self, term: str, depth: int, allowed: RowFilter) -> np.ndarray:
        """Up to `depth` allowed rows containing `term` (a term of :meth:`document_frequencies`,
        already tokenised), ascending."""
        ...


class DenseRetriever(Protocol):
    """Vector retrieval for one embedding model (inner product of L2-normalised vectors)."""

    model: str
    dim: int

    @property
    def has_graph(self) -> bool:
        """Whether :meth:`score_pool` can grow a pool along a corpus graph."""
        ...

    def search(self, vector: np.ndarray, depth: int, allowed: RowFilter) -> tuple[np.ndarray, np.ndarray]:
        """(rows, scores) of the `depth` nearest allowed rows, best first; exact whenever a filter
        applies (min(depth, allowed rows with vectors) results)."""
        ...

    def score(self, vector: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(rows, scores): the exact score of each of `rows` this model has a vector for, in the
        order given (rows without a vector are left out)."""
        ...

    def vectors(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(rows, their stored vectors as a float32 matrix), in the order given (rows without a
        vector are left out); feeds the dense pseudo-relevance feedback."""
        ...

    def score_pool(
        self, vector: np.ndarray, rows: np.ndarray, *, hops: int, seeds: int, allowed: RowFilter
    ) -> tuple[np.ndarray, np.ndarray, int]:
        """Staged search: the exact scores of the candidate `rows` (as :meth:`score`), the pool
        grown `hops` times along the corpus graph from its `seeds` best (allowed rows only, see
        :func:`~hybridlab.index.format.graph.expand_by_graph`); (rows, scores, rows the graph added),
        unordered."""
        ...


class MetadataStore(Protocol):
    """Filters, documents and counts of the snapshot's chunks."""

    def allowed(self, filters: Filters) -> RowFilter:
        """The rows `filters` allow (resolved once per distinct filter and kept); ValueError names
        a chunk type or collection the index does not have."""
        ...

    def details(self, rows: Sequence[int]) -> list[tuple[str, tuple[str, ...], datetime | None]]:
        """(chunk text, document tags, document update time) of each row, for hydrating results."""
        ...

    def passages(self, rows: Sequence[int]) -> list[str]:
        """The text each row was embedded and BM25-indexed as (heading + chunk text), for rerankers."""
        ...

    def embedded(self, rows: Sequence[int]) -> list[tuple[str, str]]:
        """(sha256, text) of what each row was embedded as: the key of its stored token vectors."""
        ...

    def document(self, doc_id: str) -> dict[str, Any] | None:
        """One document's stored fields (doc_id, source, collection, title, text, doc_type,
        created_at, updated_at, metadata as JSON text, tags), None when absent."""
        ...

    def counts(self) -> dict[str, Any]:
        """Counts per table, collection, chunk type and model (see :func:`hybridlab.index.format.store.counts`)."""
        ...
