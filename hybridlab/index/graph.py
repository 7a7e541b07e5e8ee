"""The corpus graph: each chunk's nearest neighbours by embedding, for staged search.

Staged search scores only the BM25 candidates with their stored vectors. A chunk that the dense
retriever ranks high but BM25 does not rank at all (different words, same meaning) can never
reach that pool. Following the corpus graph from the best-scoring candidates to their nearest
neighbours brings such chunks in at the price of a few hundred dot products, with no scan of the
index (adaptive re-ranking with a corpus graph, MacAvaney et al., CIKM 2022).

Rows are positions in the dense index of one model (its vectors in ascending chunk-id order).
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

#: Above this many vectors the graph is built with an HNSW index (approximate neighbours): the
#: exact all-pairs search costs n² dot products.
EXACT_GRAPH_MAX = 200_000
#: `IndexConfig.graph_k=None` builds a graph of `DEFAULT_GRAPH_K` up to this many vectors only:
#: the first build grows as n² (measured here 0.8 s at 5k, 6.8 s at 20k, ~3 min at 100k); later
#: generations update the previous graph (`update_corpus_graph`) in a fraction of that. An
#: HNSW-built graph of 1M vectors would take 40-50 minutes.
AUTO_GRAPH_MAX = 100_000
DEFAULT_GRAPH_K = 16


def graph_size(graph_k: int | None, n_vectors: int) -> int:
    """Neighbours per vector to build for an index of `n_vectors` (0 = no graph)."""
    if graph_k is None:
        return DEFAULT_GRAPH_K if 1 < n_vectors <= AUTO_GRAPH_MAX else 0
    if graph_k < 0:
        raise ValueError(f"graph_k must be >= 0 or None, got {graph_k}")
    return graph_k
_BATCH = 4096
_MERGE_CELLS = 1 << 22


def build_corpus_graph(vectors: np.ndarray, k: int, progress: bool = False) -> np.ndarray:
    """(n, k) int32 rows of each vector's `k` nearest other vectors by inner product, best first;
    -1 pads rows of tiny indexes (n <= k)."""
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    n = len(vectors)
    graph = np.full((n, k), -1, dtype=np.int32)
    if n < 2 or k < 1:
        return graph
    _neighbour_search(vectors, np.arange(n), k, graph, progress)
    return graph


def _neighbour_search(vectors: np.ndarray, rows: np.ndarray, k: int, graph: np.ndarray, progress: bool) -> None:
    """Fill `graph[rows]` with each row's `k` nearest other vectors (exact up to `EXACT_GRAPH_MAX`)."""
    import faiss

    n = len(vectors)
    if n <= EXACT_GRAPH_MAX:
        index = faiss.IndexFlatIP(vectors.shape[1])
    else:
        index = faiss.IndexHNSWFlat(vectors.shape[1], 32, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efSearch = max(64, 2 * k)
    index.add(vectors)
    width = min(k + 1, n)
    from tqdm.auto import tqdm

    for start in tqdm(range(0, len(rows), _BATCH), desc="corpus graph", unit="batch", disable=not progress,
                      leave=False):
        block = rows[start:start + _BATCH]
        _, labels = index.search(vectors[block], width)
        for own, row in zip(block, labels, strict=True):
            others = row[(row != own) & (row >= 0)][:k]
            graph[own, :len(others)] = others


def _merge_added(vectors: np.ndarray, graph: np.ndarray, rows: np.ndarray, added: np.ndarray) -> None:
    """Merge the `added` rows into the neighbour lists `graph[rows]` (exact, best first). Only rows
    where an added vector beats the current last neighbour (or fills a free slot) are re-sorted."""
    k = graph.shape[1]
    added_vectors = vectors[added]
    batch = max(1, min(_BATCH, _MERGE_CELLS // (k + len(added))))  # bounds the (rows, candidates) blocks
    for start in range(0, len(rows), batch):
        block = rows[start:start + batch]
        own = vectors[block]
        added_scores = own @ added_vectors.T
        last = graph[block, -1]
        last_scores = np.where(last >= 0, np.einsum("bd,bd->b", own, vectors[np.maximum(last, 0)]), -np.inf)
        beaten = added_scores.max(axis=1) > last_scores
        if not beaten.any():
            continue
        block, own, added_scores = block[beaten], own[beaten], added_scores[beaten]
        neighbours = graph[block].astype(np.int64)
        old_scores = np.einsum("bd,bkd->bk", own, vectors[np.maximum(neighbours, 0)])
        old_scores[neighbours < 0] = -np.inf
        candidates = np.concatenate([neighbours, np.broadcast_to(added, (len(block), len(added)))], axis=1)
        scores = np.concatenate([old_scores, added_scores], axis=1)
        top = np.argpartition(-scores, k - 1, axis=1)[:, :k]
        order = np.take_along_axis(top, np.argsort(-np.take_along_axis(scores, top, axis=1), axis=1,
                                                   kind="stable"), axis=1)
        best = np.take_along_axis(candidates, order, axis=1)
        best[np.take_along_axis(scores, order, axis=1) == -np.inf] = -1
        graph[block] = best


def update_corpus_graph(vectors: np.ndarray, old_graph: np.ndarray, old_to_new: np.ndarray, k: int,
                        progress: bool = False) -> tuple[np.ndarray, str]:
    """The graph of `vectors` from the previous generation's graph, without the n² rebuild.

    `old_to_new[p]` is the new row of old row `p` (same chunk, same vector) or -1 (deleted or
    changed). A kept row whose old neighbours all survive keeps them, merged with the new rows by
    exact score: still its exact `k` nearest, as none closer can have been lost. New rows, and kept
    rows that lost a neighbour, are searched afresh. Returns the graph and "updated", or a full
    build and "built" when more than half the rows would need a fresh search anyway.
    """
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    old_graph = np.asarray(old_graph)
    old_to_new = np.asarray(old_to_new, dtype=np.int64)
    n = len(vectors)
    if old_graph.shape != (len(old_to_new), k) or n < 2 or k < 1:
        return build_corpus_graph(vectors, k, progress=progress), "built"
    kept = old_to_new >= 0
    is_new = np.ones(n, dtype=bool)
    is_new[old_to_new[kept]] = False
    added = np.flatnonzero(is_new)
    present = old_graph >= 0
    translated = np.where(present, old_to_new[np.where(present, old_graph, 0)], -2)  # -2: padding
    dirty = kept & (translated == -1).any(axis=1)
    clean = np.flatnonzero(kept & ~dirty)
    fresh = np.sort(np.concatenate([added, old_to_new[dirty]]))
    if len(fresh) > n // 2:
        return build_corpus_graph(vectors, k, progress=progress), "built"
    graph = np.full((n, k), -1, dtype=np.int32)
    graph[old_to_new[clean]] = np.where(translated[clean] >= 0, translated[clean], -1)
    if len(added):
        _merge_added(vectors, graph, old_to_new[clean], added)
    if len(fresh):
        _neighbour_search(vectors, fresh, k, graph, progress)
    return graph, "updated"


def save_graph(graph: np.ndarray, path: Path) -> None:
    """Write the graph as a plain .npy (no pickle)."""
    with open(path, "wb") as handle:
        np.save(handle, graph, allow_pickle=False)


def load_graph(path: Path, n_vectors: int) -> np.ndarray:
    """Read a graph written by `save_graph`, checking it fits an index of `n_vectors`."""
    graph = np.load(path, allow_pickle=False)
    if graph.ndim != 2 or graph.shape[0] != n_vectors or graph.dtype != np.int32:
        raise ValueError(f"{path}: corpus graph of shape {graph.shape} ({graph.dtype}) does not fit "
                         f"{n_vectors} vectors")
    if graph.size and (graph.max() >= n_vectors or graph.min() < -1):
        raise ValueError(f"{path}: corpus graph points outside the index's {n_vectors} vectors")
    return graph


def expand_by_graph(vectors: np.ndarray, graph: np.ndarray, query: np.ndarray, rows: np.ndarray,
                    scores: np.ndarray, *, hops: int, seeds: int,
                    keep: Callable[[np.ndarray], np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Grow a scored candidate pool along the corpus graph.

    Each hop takes the `seeds` best-scoring rows not yet expanded, adds their neighbours that are
    not scored yet (and pass `keep`, which maps rows to a boolean mask: the search's filters), and scores those
    exactly against `query`. Returns every scored row with its score (the input ones first).
    """
    rows = np.asarray(rows, dtype=np.int64)
    scores = np.asarray(scores, dtype=np.float32)
    if hops < 1 or seeds < 1 or not len(rows) or not graph.size:
        return rows, scores
    # two flags per index row: np.zeros is a lazily zeroed calloc, so only the pages touched cost
    scored = np.zeros(len(graph), dtype=bool)
    expanded = np.zeros(len(graph), dtype=bool)
    scored[rows] = True
    all_rows, all_scores = [rows], [scores]
    pool_rows, pool_scores = rows, scores
    for _ in range(hops):
        open_ = ~expanded[pool_rows]
        if not open_.any():
            break
        candidates, candidate_scores = pool_rows[open_], pool_scores[open_]
        if len(candidates) > seeds:
            best = candidates[np.argpartition(-candidate_scores, seeds - 1)[:seeds]]
        else:
            best = candidates
        expanded[best] = True
        neighbours = graph[best].ravel()
        neighbours = neighbours[neighbours >= 0]
        neighbours = neighbours[~scored[neighbours]]
        if keep is not None and len(neighbours):
            neighbours = neighbours[keep(neighbours)]
        if not len(neighbours):
            continue
        neighbours = np.unique(neighbours).astype(np.int64)  # a row can neighbour several seeds
        scored[neighbours] = True
        all_rows.append(neighbours)
        all_scores.append((vectors[neighbours] @ query.astype(np.float32)).astype(np.float32))
        pool_rows = np.concatenate(all_rows)
        pool_scores = np.concatenate(all_scores)
    return pool_rows, pool_scores
