"""The Qdrant backend behind the retriever seam: BM25 and dense retrieval served by a Qdrant collection.
See docs/internals/search.md#qdrant."""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from hybridlab.errors import InvalidValueError
from hybridlab.index.admin.qdrant import (
    SPARSE,
    SYNC_HINT,
    collection_name,
    connect,
    is_local,
    point_ids,
    qdrant_models,
    sync_generation,
    term_index,
)
from hybridlab.index.format.graph import expand_by_graph
from hybridlab.index.reader import Generation
from hybridlab.search.engine import Index
from hybridlab.search.filters import Filters
from hybridlab.search.local import Bm25Retriever
from hybridlab.search.retrievers import RowFilter
from hybridlab.search.snapshot import Snapshot, snapshot_of

logger = logging.getLogger(__name__)


def payload_filter(filters: Filters) -> Any:
    """The Qdrant filter of `filters` (None when they allow everything)."""
    if filters.empty:
        return None
    models = qdrant_models()
    any_of = (
        ("chunk_type", filters.chunk_types),
        ("collection", filters.collections),
        ("doc_id", filters.doc_ids),
    )
    must: list[Any] = [
        models.FieldCondition(key=key, match=models.MatchAny(any=list(values)))
        for key, values in any_of
        if values
    ]
    if filters.since is not None or filters.until is not None:
        must.append(
            models.FieldCondition(
                key="time",
                range=models.Range(
                    gte=None if filters.since is None else filters.since.timestamp(),
                    lte=None if filters.until is None else filters.until.timestamp(),
                ),
            )
        )
    if filters.tags:
        if filters.tags_any:
            must.append(models.FieldCondition(key="tags", match=models.MatchAny(any=list(filters.tags))))
        else:
            must.extend(
                models.FieldCondition(key="tags", match=models.MatchValue(value=tag))
                for tag in sorted(set(filters.tags))
            )
    if filters.embedding_model:
        must.append(models.HasVectorCondition(has_vector=filters.embedding_model))
    return models.Filter(must=must)


def _query_filter(allowed: RowFilter) -> Any:
    return None if allowed.mask is None else payload_filter(allowed.filters)


def _ranked(chunk_ids: np.ndarray, points: Sequence[Any], depth: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows, scores) of Qdrant's scored points, best first, ties by ascending row. A point that is not
    a chunk of the snapshot (written by a sync running meanwhile for a newer generation) is left out,
    never mapped to another row."""
    ids = np.asarray([int(p.id) for p in points], dtype=np.int64)
    scores = np.asarray([p.score for p in points], dtype=np.float32)
    rows = np.searchsorted(chunk_ids, ids)
    known = rows < len(chunk_ids)
    known[known] = chunk_ids[rows[known]] == ids[known]
    rows, scores = rows[known], scores[known]
    order = np.lexsort((rows, -scores))[:depth]
    return rows[order], scores[order]


# ------------------------------------------------------------------ retrievers
class QdrantSparseRetriever(Bm25Retriever):
    """:class:`~hybridlab.search.retrievers.SparseRetriever`: a sparse-vector query on `bm25`, the
    query tokenised by the generation's tokenizer into its bm25s vocabulary ids. Lexical evidence,
    document frequencies and term rows come from the generation's postings (`Bm25Retriever`'s), which
    the collection's sparse vectors were made of."""

    def __init__(self, client: Any, collection: str, generation: Generation) -> None:
        super().__init__(generation.sparse)
        self.client, self.collection = client, collection
        self._chunk_ids = generation.chunk_ids

    def query_vector(self, query: str) -> Any | None:
        """The query's sparse vector (a term's value = its occurrences; terms outside the generation's
        vocabulary left out), None without known terms."""
        vocab = self.index.vocab
        indices = [term_index(term) for term in self.index.tokenizer.query_terms(query) if term in vocab]
        if not indices:
            return None
        terms, counts = np.unique(np.asarray(indices, dtype=np.int64), return_counts=True)
        return qdrant_models().SparseVector(indices=terms.tolist(), values=counts.astype(float).tolist())

    def search(self, query: str, depth: int, allowed: RowFilter) -> tuple[np.ndarray, np.ndarray]:
        vector = self.query_vector(query)
        if vector is None or depth <= 0:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        points = self.client.query_points(
            self.collection,
            query=vector,
            using=SPARSE,
            limit=depth,
            query_filter=_query_filter(allowed),
            with_payload=False,
        ).points
        return _ranked(self._chunk_ids, [p for p in points if p.score > 0], depth)


class QdrantDenseRetriever:
    """:class:`~hybridlab.search.retrievers.DenseRetriever` over the named vector `model` (dot product
    of L2-normalised vectors = cosine). Staged search grows its pool along the index's corpus graph,
    scoring the new rows with vectors fetched from Qdrant."""

    def __init__(
        self,
        client: Any,
        collection: str,
        model: str,
        dim: int,
        chunk_ids: np.ndarray,
        graph: np.ndarray | None = None,
        graph_ids: np.ndarray | None = None,
    ) -> None:
        self.client, self.collection = client, collection
        self.model, self.dim = model, dim
        self._chunk_ids = chunk_ids
        # the corpus graph over this model's vectors (node i = chunk graph_ids[i], ascending), from the index
        self._graph = graph if graph is not None and graph_ids is not None else None
        self._graph_ids = graph_ids
        # filtered searches are exact (the seam's contract); the local mode is always brute force
        self._exact = None if is_local(client) else qdrant_models().SearchParams(exact=True)

    @property
    def has_graph(self) -> bool:
        return self._graph is not None

    def search(self, vector: np.ndarray, depth: int, allowed: RowFilter) -> tuple[np.ndarray, np.ndarray]:
        if depth <= 0:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        query_filter = _query_filter(allowed)
        models = qdrant_models()
        has_vector = models.HasVectorCondition(has_vector=self.model)
        query_filter = models.Filter(
            must=[has_vector] if query_filter is None else [query_filter, has_vector]
        )
        points = self.client.query_points(
            self.collection,
            query=np.asarray(vector, dtype=np.float32).reshape(-1).astype(float).tolist(),
            using=self.model,
            limit=depth,
            query_filter=query_filter,
            with_payload=False,
            search_params=self._exact if allowed.mask is not None else None,
        ).points
        return _ranked(self._chunk_ids, points, depth)

    def vectors(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        rows = np.asarray(rows, dtype=np.int64)
        if not len(rows):
            return rows, np.zeros((0, self.dim), np.float32)
        points = self.client.retrieve(
            self.collection, ids=self._chunk_ids[rows].tolist(), with_payload=False, with_vectors=[self.model]
        )
        found = {int(p.id): p.vector.get(self.model) for p in points if p.vector and p.vector.get(self.model)}
        kept = np.asarray(
            [row for row in rows.tolist() if int(self._chunk_ids[row]) in found], dtype=np.int64
        )
        matrix = np.asarray([found[int(self._chunk_ids[row])] for row in kept], dtype=np.float32)
        return kept, matrix.reshape(len(kept), self.dim)

    def score(self, vector: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        kept, matrix = self.vectors(rows)
        return kept, matrix @ np.asarray(vector, dtype=np.float32).reshape(-1)

    def score_pool(
        self, vector: np.ndarray, rows: np.ndarray, *, hops: int, seeds: int, allowed: RowFilter
    ) -> tuple[np.ndarray, np.ndarray, int]:
        scored, scores = self.score(vector, rows)
        if self._graph is None or hops < 1 or not len(scored):
            return scored, scores, 0
        graph_ids, chunk_ids = self._graph_ids, self._chunk_ids
        assert graph_ids is not None  # set whenever the graph is
        nodes = np.searchsorted(graph_ids, chunk_ids[scored])
        mask = allowed.mask
        keep = (
            None
            if mask is None
            else (lambda candidates: mask[np.searchsorted(chunk_ids, graph_ids[candidates])])
        )
        grown, scores = expand_by_graph(
            _FetchedVectors(self, graph_ids),
            self._graph,
            np.asarray(vector, dtype=np.float32).reshape(-1),
            nodes,
            scores,
            hops=hops,
            seeds=seeds,
            keep=keep,
        )
        return np.searchsorted(chunk_ids, graph_ids[grown]), scores, len(grown) - len(nodes)


class _FetchedVectors:
    """`vectors[nodes]` for :func:`~hybridlab.index.format.graph.expand_by_graph`: fetched from Qdrant by chunk id."""

    def __init__(self, retriever: QdrantDenseRetriever, graph_ids: np.ndarray) -> None:
        self._retriever, self._graph_ids = retriever, graph_ids

    def __getitem__(self, nodes: np.ndarray) -> np.ndarray:
        ids = self._graph_ids[
            np.asarray(nodes, dtype=np.int64)
        ]  # chunk ids of the model's vectors: each has one
        return self._retriever.vectors(np.searchsorted(self._retriever._chunk_ids, ids))[1]


# ------------------------------------------------------------------ snapshots and server-side fusion
def qdrant_snapshot(generation: Generation, client: Any, collection: str | None = None) -> Snapshot:
    """The snapshot of `generation` with BM25 and dense retrieval served by the Qdrant `collection`
    (row table, metadata store and tag signals stay the generation's); ValueError when the
    collection's points are not the generation's chunks (re-export)."""
    collection = collection or collection_name(generation)
    if not client.collection_exists(collection):
        raise InvalidValueError(
            f"no Qdrant collection {collection!r}; sync the index into it first ({SYNC_HINT})"
        )
    ids = point_ids(client, collection)
    if not np.array_equal(ids, generation.chunk_ids):
        raise InvalidValueError(
            f"Qdrant collection {collection!r} holds {len(ids)} points that are not this index's "
            f"{generation.n_chunks} chunks; sync or re-export it ({SYNC_HINT})"
        )
    local = snapshot_of(generation)
    return dataclasses.replace(
        local,
        sparse=QdrantSparseRetriever(client, collection, generation),
        dense=MappingProxyType(
            {
                model: QdrantDenseRetriever(
                    client,
                    collection,
                    model,
                    dense.dim,
                    generation.chunk_ids,
                    generation.graphs.get(model),
                    dense.ids,
                )
                for model, dense in generation.dense.items()
            }
        ),
    )


def qdrant_backend(client: Any, collection: str | None = None, *, sync: bool = False):
    """A snapshot factory for :class:`~hybridlab.search.engine.Index` (`backend=`). With `sync`, each
    generation the index opens is first mirrored into the collection (:func:`sync_generation`; the MCP
    server, which writes memories, uses it), so a search never sees a generation the collection lacks."""

    def snapshot(generation: Generation) -> Snapshot:
        if sync:
            report = sync_generation(generation, client, collection)
            if report.action != "unchanged":
                logger.info("%s", report.summary())
        return qdrant_snapshot(generation, client, collection)

    return snapshot


BACKENDS = ("local", "qdrant")


def open_backend_index(
    index_dir: str | os.PathLike,
    config: Any = None,
    *,
    backend: str = "local",
    url: str | None = None,
    path: str | os.PathLike | None = None,
    collection: str | None = None,
    sync: bool = True,
) -> Index:
    """An :class:`~hybridlab.search.engine.Index` of `index_dir` searched on `backend`: "local", or
    "qdrant" (a server at `url` or the local mode at `path`; the collection, by default the index
    folder's name, mirrored first when `sync`). The notebooks' `backend` parameters come here."""
    if backend not in BACKENDS:
        raise InvalidValueError(f"unknown backend {backend!r}; choose from {sorted(BACKENDS)}")
    if backend == "local":
        given = [
            name
            for name, value in (("qdrant_url", url), ("qdrant_path", path), ("qdrant_collection", collection))
            if value
        ]
        if given:
            raise InvalidValueError(f"{', '.join(given)} only apply to backend 'qdrant'")
        return Index(index_dir, config)
    if not (url or path):
        raise InvalidValueError("backend 'qdrant' needs a qdrant_url or a qdrant_path")
    return Index(
        index_dir, config, backend=qdrant_backend(connect(url=url, path=path), collection, sync=sync)
    )


FUSIONS = ("dbsf", "rrf")


def server_fusion(
    snapshot: Snapshot,
    query: str,
    vector: np.ndarray,
    model: str,
    *,
    fusion: str = "rrf",
    rrf_k: int = 60,
    depth: int = 100,
    limit: int = 10,
    filters: Filters | None = None,
) -> dict[int, float]:
    """Qdrant's own fusion of BM25 and the dense `model`, equally weighted (alpha 0.5): a prefetch per
    retriever (`depth` each, the filter pushed into both) and a fusion query; `{row: fused score}`
    best first. RRF is `Rrf(k=rrf_k)`: 1/(rrf_k + rank) summed, twice
    :func:`~hybridlab.search.fusion.rrf` with weights 0.5 (Qdrant weights a run by dividing its rank,
    1/(rank/w + k - 1), not by multiplying its score, so other alphas stay client-side). DBSF
    normalises each run by mean ± 3 standard deviations like :func:`~hybridlab.search.fusion.dbsf`.
    Tags, recency, convex combinations, dense feedback and adaptive fusion (whose BM25 weight depends on BM25's
    own top rows) are client-side only (the pipeline)."""
    if fusion not in FUSIONS:
        raise InvalidValueError(f"unknown server-side fusion {fusion!r}; choose from {sorted(FUSIONS)}")
    models = qdrant_models()
    sparse = snapshot.sparse
    if not isinstance(sparse, QdrantSparseRetriever):
        raise TypeError("server-side fusion needs a Qdrant snapshot")
    allowed = snapshot.store.allowed(filters or Filters())
    query_filter = _query_filter(allowed)
    prefetch = [
        models.Prefetch(
            query=np.asarray(vector, dtype=np.float32).reshape(-1).astype(float).tolist(),
            using=model,
            limit=depth,
            filter=query_filter,
        )
    ]
    sparse_vector = sparse.query_vector(query)
    if sparse_vector is not None:
        prefetch.append(models.Prefetch(query=sparse_vector, using=SPARSE, limit=depth, filter=query_filter))
    points = sparse.client.query_points(
        sparse.collection,
        prefetch=prefetch,
        query=models.RrfQuery(rrf=models.Rrf(k=rrf_k))
        if fusion == "rrf"
        else models.FusionQuery(fusion=models.Fusion.DBSF),
        limit=limit,
        with_payload=False,
    ).points
    rows, scores = _ranked(snapshot.generation.chunk_ids, points, limit)
    return dict(zip(rows.tolist(), scores.astype(float).tolist()))
