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
#: neighbours kept beyond `k` per vector (the next nearest, in the index's `graph-*.reserve.npy`): a
#: row that loses neighbours to deleted or changed chunks takes the next ones from there instead of
#: a search over every vector, until fewer than `k` known neighbours are left
GRAPH_RESERVE = 8
#: reserve entries past a row's known neighbours: -1 = no other vector exists (the row's list is
#: complete), -2 = unknown (neighbours were lost; the next nearest are not known)
UNKNOWN = -2


def graph_size(graph_k: int | None, n_vectors: int) -> int:
    """Neighbours per vector to build for an index of `n_vectors` (0 = no graph)."""
    if graph_k is None:
        return DEFAULT_GRAPH_K if 1 < n_vectors <= AUTO_GRAPH_MAX else 0
    if graph_k < 0:
        raise ValueError(f"graph_k must be >= 0 or None, got {graph_k}")
    return graph_k
_BATCH = 4096
_MERGE_CELLS = 1 << 22


def build_corpus_graph(vectors: np.ndarray, k: int, progress: bool = False, reserve: int = 0) -> np.ndarray:
    """(n, k + reserve) int32 rows of each vector's `k + reserve` nearest other vectors by inner
    product, best first; -1 pads rows of tiny indexes (n <= k + reserve). The graph searched is the
    first `k` columns; the rest is the reserve `update_corpus_graph` draws on."""
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    n = len(vectors)
    graph = np.full((n, k + reserve), -1, dtype=np.int32)
    if n < 2 or k < 1:
        return graph
    _neighbour_search(vectors, np.arange(n), k + reserve, graph, progress)
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
    """Merge the `added` rows into the neighbour lists `graph[rows]` (exact, best first). A list
    holds its known nearest neighbours then -1 (complete: no other vector exists) or `UNKNOWN`
    padding, or is full. A complete list takes any added row (up to its width); any other keeps its
    length, the top of its known neighbours and the added rows (exact: every vector it does not
    list scores at most its last). Only rows where an added vector beats the current last known
    neighbour (or fills a complete list) are re-sorted."""
    width = graph.shape[1]
    added_vectors = vectors[added]
    batch = max(1, min(_BATCH, _MERGE_CELLS // (width + len(added))))  # bounds the (rows, candidates) blocks
    for start in range(0, len(rows), batch):
        block = rows[start:start + batch]
        own = vectors[block]
        neighbours = graph[block].astype(np.int64)
        known = neighbours >= 0
        length = known.sum(axis=1)
        complete = (neighbours == -1).any(axis=1)
        added_scores = own @ added_vectors.T
        last = neighbours[np.arange(len(block)), np.maximum(length - 1, 0)]
        last_scores = np.where(length > 0, np.einsum("bd,bd->b", own, vectors[np.maximum(last, 0)]), -np.inf)
        change = complete | (added_scores.max(axis=1) > last_scores)
        if not change.any():
            continue
        block, own, added_scores = block[change], own[change], added_scores[change]
        neighbours, known, length, complete = neighbours[change], known[change], length[change], complete[change]
        old_scores = np.einsum("bd,bkd->bk", own, vectors[np.maximum(neighbours, 0)])
        old_scores[~known] = -np.inf
        candidates = np.concatenate([neighbours, np.broadcast_to(added, (len(block), len(added)))], axis=1)
        scores = np.concatenate([old_scores, added_scores], axis=1)
        top = np.argpartition(-scores, width - 1, axis=1)[:, :width]
        order = np.take_along_axis(top, np.argsort(-np.take_along_axis(scores, top, axis=1), axis=1,
                                                   kind="stable"), axis=1)
        best = np.take_along_axis(candidates, order, axis=1)
        best[np.take_along_axis(scores, order, axis=1) == -np.inf] = -1
        cut = ~complete[:, None] & (np.arange(width)[None, :] >= length[:, None])
        best[cut] = UNKNOWN  # a list that is not complete knows only its top `length`
        graph[block] = best


def update_corpus_graph(vectors: np.ndarray, old_graph: np.ndarray, old_to_new: np.ndarray, k: int,
                        progress: bool = False, reserve: int = 0) -> tuple[np.ndarray, str]:
    """The graph of `vectors` from the previous generation's graph, without the n² rebuild.

    `old_graph`: the previous rows, each its `k` nearest neighbours optionally followed by reserve
    columns (the next nearest, then -1 / `UNKNOWN` padding, as this function returns them);
    `old_to_new[p]` is the new row of old row `p` (same chunk, same vector) or -1 (deleted or
    changed). A kept row keeps its surviving known neighbours, in order: still its exact nearest,
    as none closer can have been lost; merged with the new rows by exact score. A kept row left with
    fewer than `k` known neighbours (and not knowing every vector), and each new row, is searched
    afresh. Returns the (n, k + reserve) rows (the graph is the first `k` columns) and "updated", or
    a full build and "built" when more than half the rows would need a fresh search anyway.
    """
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    old_graph = np.asarray(old_graph)
    old_to_new = np.asarray(old_to_new, dtype=np.int64)
    n, width = len(vectors), k + reserve
    if old_graph.ndim != 2 or old_graph.shape[0] != len(old_to_new) or old_graph.shape[1] < k or n < 2 or k < 1:
        return build_corpus_graph(vectors, k, progress=progress, reserve=reserve), "built"
    kept = old_to_new >= 0
    is_new = np.ones(n, dtype=bool)
    is_new[old_to_new[kept]] = False
    added = np.flatnonzero(is_new)
    present = old_graph >= 0
    translated = np.where(present, old_to_new[np.where(present, old_graph, 0)], -1)
    alive = translated >= 0
    length = alive.sum(axis=1)
    complete = (old_graph == -1).any(axis=1)  # the row knew every other vector
    lost = (present & ~alive).any(axis=1)
    dirty = kept & lost & ~complete & (length < k)
    clean = np.flatnonzero(kept & ~dirty)
    fresh = np.sort(np.concatenate([added, old_to_new[dirty]]))
    if len(fresh) > n // 2:
        return build_corpus_graph(vectors, k, progress=progress, reserve=reserve), "built"
    # each clean row: its surviving neighbours moved to the front (order kept), then its padding
    order = np.argsort(~alive[clean], axis=1, kind="stable")
    rows = np.take_along_axis(translated[clean], order, axis=1)
    padding = np.where(complete[clean], -1, UNKNOWN)[:, None]
    rows = np.where(np.arange(rows.shape[1])[None, :] < length[clean][:, None], rows, padding)
    if rows.shape[1] < width:  # an old graph with a smaller (or no) reserve
        rows = np.concatenate([rows, np.broadcast_to(padding, (len(rows), width - rows.shape[1]))], axis=1)
    graph = np.full((n, width), -1, dtype=np.int32)
    graph[old_to_new[clean]] = rows[:, :width]
    if len(added):
        _merge_added(vectors, graph, old_to_new[clean], added)
    if len(fresh):
        _neighbour_search(vectors, fresh, width, graph, progress)
    return graph, "updated"


def load_reserve(path: Path, n_vectors: int) -> np.ndarray:
    """Read reserve columns written by `save_graph`, checking they fit an index of `n_vectors`."""
    reserve = np.load(path, allow_pickle=False)
    if reserve.ndim != 2 or reserve.shape[0] != n_vectors or reserve.dtype != np.int32:
        raise ValueError(f"{path}: graph reserve of shape {reserve.shape} ({reserve.dtype}) does not fit "
                         f"{n_vectors} vectors")
    if reserve.size and (reserve.max() >= n_vectors or reserve.min() < UNKNOWN):
        raise ValueError(f"{path}: graph reserve points outside the index's {n_vectors} vectors")
    return reserve


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
