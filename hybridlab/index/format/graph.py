"""The corpus graph: each chunk's nearest neighbours by embedding, for staged search.
See docs/internals/index.md#graph."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from hybridlab.errors import InvalidValueError

#: Above this many vectors the graph is built with an HNSW index (approximate neighbours): the
#: exact all-pairs search costs n² dot products.
EXACT_GRAPH_MAX = 200_000
#: `IndexConfig.graph_k=None` builds a graph of `DEFAULT_GRAPH_K` up to this many vectors only
#: (build times as measured: docs/internals/index.md#graph)
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
        raise InvalidValueError(f"graph_k must be >= 0 or None, got {graph_k}", field="graph_k")
    return graph_k


_BATCH = 4096
_MERGE_CELLS = 1 << 18  # floats of the vectors gathered at a time to score pairs (1 MB)
#: scores of one block (fresh rows x vectors) in an update: 1 MB of float32, 2 MB of int64 positions
_SCORE_CELLS = 1 << 18
#: fresh rows scored together (the vectors are read once per this many)
_QUERY_ROWS = 256
#: an update's products of fewer multiply-adds than this run on one BLAS thread (docs/internals/index.md#graph)
SINGLE_THREAD_WORK = 2e9
_BLAS: list[Any] = []  # a threadpoolctl controller, made on first use (numpy's BLAS is loaded by then)


class SegmentRows:
    """An index's vectors, row after row, as the live rows of per-segment arrays, without copying
    them: each part is an array (float32, one vector a row) and the positions of its live rows in
    it, ascending (None: every row)."""

    def __init__(self, parts: Sequence[tuple[np.ndarray, np.ndarray | None]]) -> None:
        self.parts = [
            (array, None if live is None else np.asarray(live, dtype=np.int64)) for array, live in parts
        ]
        counts = [len(array) if live is None else len(live) for array, live in self.parts]
        self.offsets = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]).astype(np.int64)
        self.dim = int(self.parts[0][0].shape[1]) if self.parts else 0

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def take(self, rows: np.ndarray) -> np.ndarray:
        """The vectors of the given rows (a float32 copy)."""
        rows = np.asarray(rows, dtype=np.int64)
        if len(self.parts) == 1:
            array, live = self.parts[0]
            return np.asarray(array[rows if live is None else live[rows]], dtype=np.float32)
        out = np.empty((len(rows), self.dim), dtype=np.float32)
        part = np.searchsorted(self.offsets, rows, side="right") - 1
        for p in np.unique(part):
            array, live = self.parts[p]
            mine = part == p
            local = rows[mine] - self.offsets[p]
            out[mine] = array[local if live is None else live[local]]
        return out

    def blocks(self, step: int) -> Iterator[tuple[int, np.ndarray, np.ndarray | None]]:
        """(first row, a slice of `step` stored vectors, the positions of its live rows or None)
        covering every row in order."""
        for (array, live), offset in zip(self.parts, self.offsets, strict=False):
            for start in range(0, len(array), step):
                if live is None:
                    yield int(offset) + start, array[start : start + step], None
                    continue
                low, high = np.searchsorted(live, [start, start + step])
                if high > low:
                    yield int(offset + low), array[start : start + step], live[low:high] - start

    def array(self) -> np.ndarray:
        """Every row in one contiguous float32 array (the part itself when it is the only one, whole)."""
        if len(self.parts) == 1 and self.parts[0][1] is None:
            return np.ascontiguousarray(self.parts[0][0], dtype=np.float32)
        out = np.empty((len(self), self.dim), dtype=np.float32)
        for (array, live), start, stop in zip(self.parts, self.offsets[:-1], self.offsets[1:], strict=True):
            out[start:stop] = array if live is None else array[live]
        return out


def _rows_of(vectors: np.ndarray | SegmentRows) -> SegmentRows:
    """`vectors` as a `SegmentRows` (an array is one part, every row live)."""
    return (
        vectors
        if isinstance(vectors, SegmentRows)
        else SegmentRows([(np.ascontiguousarray(vectors, dtype=np.float32), None)])
    )


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


def _neighbour_search(
    vectors: np.ndarray, rows: np.ndarray, k: int, graph: np.ndarray, progress: bool
) -> None:
    """Fill `graph[rows]` with each row's `k` nearest other vectors (exact up to `EXACT_GRAPH_MAX`),
    by score then by row (the lowest first among equal scores)."""
    import faiss

    n = len(vectors)
    index: faiss.Index
    if n <= EXACT_GRAPH_MAX:
        index = faiss.IndexFlatIP(vectors.shape[1])
    else:
        hnsw = faiss.IndexHNSWFlat(vectors.shape[1], 32, faiss.METRIC_INNER_PRODUCT)
        hnsw.hnsw.efSearch = max(64, 2 * k)
        index = hnsw
    index.add(vectors)
    width = min(k + 1, n)
    from tqdm.auto import tqdm

    for start in tqdm(
        range(0, len(rows), _BATCH), desc="corpus graph", unit="batch", disable=not progress, leave=False
    ):
        block = rows[start : start + _BATCH]
        distances, labels = index.search(vectors[block], width)
        labels = labels.astype(np.int64)
        valid = (labels >= 0) & (labels != block[:, None])
        order = np.lexsort((np.where(valid, labels, n), -np.where(valid, distances, -np.inf)))  # per row
        labels, valid = np.take_along_axis(labels, order, axis=1), np.take_along_axis(valid, order, axis=1)
        top = min(k, width)
        graph[block, :top] = np.where(valid[:, :top], labels[:, :top], -1)


def _merge_added(vectors: SegmentRows, graph: np.ndarray, rows: np.ndarray, added: np.ndarray) -> None:
    """Merge the `added` rows into the neighbour lists `graph[rows]` (exact, best first). A list
    holds its known nearest neighbours then -1 (complete: no other vector exists) or `UNKNOWN`
    padding, or is full. A complete list takes any added row (up to its width); any other keeps its
    length, the top of its known neighbours and the added rows (exact: every vector it does not
    list scores at most its last). Used above `EXACT_GRAPH_MAX` (`_search_and_merge` otherwise)."""
    bar = _merge_thresholds(vectors, graph, rows) - _rounding_margin(vectors)
    added_vectors = vectors.take(added)
    batch = max(1, _SCORE_CELLS // max(1, len(added)))
    for start in range(0, len(rows), batch):
        block = rows[start : start + batch]
        with _blas_threads(float(len(rows)) * len(added) * vectors.dim):
            scores = vectors.take(block) @ added_vectors.T
        hit_row, hit_col = np.nonzero(scores >= bar[block][:, None])
        _insert(vectors, graph, block[hit_row], added[hit_col])


def _merge_thresholds(vectors: SegmentRows, graph: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Per vector of the index, the score an added vector must beat to enter its list: for `rows`,
    its last known neighbour's score (-inf when the list is complete: it takes any vector; +inf when
    it knows none); +inf for every other row (not merged into). Any float32 computation of the
    scores will do: the pairs near a threshold are scored again (`_rounding_margin`)."""
    threshold = np.full(len(vectors), np.inf, dtype=np.float32)
    if not len(rows):
        return threshold
    length = (graph >= 0).sum(axis=1)
    last = np.take_along_axis(graph, np.maximum(length - 1, 0)[:, None], axis=1)[:, 0].astype(np.int64)
    last = np.maximum(last, 0)  # a list that knows none (a fresh row's): any row, its score unused
    scores = np.empty(len(vectors), dtype=np.float32)
    for first, block, live in vectors.blocks(max(1, _MERGE_CELLS // max(1, vectors.dim))):  # every row
        own = block if live is None else block[live]
        stop = first + len(own)
        scores[first:stop] = np.einsum("bd,bd->b", own, vectors.take(last[first:stop]))
    selected = np.zeros(len(vectors), dtype=bool)
    selected[rows] = True
    complete = selected & (graph == -1).any(axis=1)
    scored = selected & ~complete & (length > 0)
    threshold[complete] = -np.inf
    threshold[scored] = scores[scored]
    return threshold


def _rounding_margin(vectors: SegmentRows) -> float:
    """A bound on how far two float32 computations of one dot product of `vectors` can differ
    (a matrix product's blocking vs `_pair_scores`): pairs that a matrix product puts this close
    below a threshold are scored again before being dropped."""
    largest = max(
        (float(np.einsum("nd,nd->n", array, array).max()) for array, _ in vectors.parts if len(array)),
        default=0.0,
    )  # over every stored vector, live or not: still a bound
    return vectors.dim * 2.0**-22 * largest


def _pair_scores(vectors: SegmentRows, left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """`vectors[left[i]] . vectors[right[i]]` for each i (float32), `_MERGE_CELLS` floats at a time."""
    out = np.empty(len(left), dtype=np.float32)
    step = max(1, _MERGE_CELLS // max(1, vectors.dim))
    for start in range(0, len(left), step):
        stop = start + step
        out[start:stop] = np.einsum(
            "bd,bd->b", vectors.take(left[start:stop]), vectors.take(right[start:stop])
        )
    return out


def _insert(vectors: SegmentRows, graph: np.ndarray, rows: np.ndarray, candidates: np.ndarray) -> None:
    """Insert each `candidates[i]` (a vector no list holds yet) into `graph[rows[i]]` by score then
    row (lowest first on ties). A complete list grows up to its width; any other keeps its length
    (a candidate that does not beat its last known neighbour is dropped). Each candidate's place is
    found by a binary search over its row's list (sorted best first), scoring ~log2(width)
    neighbours per pair; every score compared is computed alike (`_pair_scores`), so equal vectors
    tie exactly."""
    if not len(rows):
        return
    width = graph.shape[1]
    scores = _pair_scores(vectors, rows, candidates)
    order = np.lexsort((candidates, -scores, rows))
    rows, candidates, scores = rows[order], candidates[order], scores[order]
    changed, which = np.unique(rows, return_inverse=True)
    lists = graph[changed].astype(np.int64)
    length = (lists >= 0).sum(axis=1)
    limit = np.where((lists == -1).any(axis=1), width, length)  # complete lists grow, others keep length
    low, high = np.zeros(len(rows), np.int64), length[which]
    while True:  # place = number of known neighbours ahead of the candidate
        active = np.flatnonzero(low < high)
        if not len(active):
            break
        middle = (low[active] + high[active]) // 2
        probe = _pair_scores(vectors, rows[active], lists[which[active], middle])
        neighbour = lists[which[active], middle]
        ahead = (probe > scores[active]) | ((probe == scores[active]) & (neighbour < candidates[active]))
        low[active] = np.where(ahead, middle + 1, low[active])
        high[active] = np.where(ahead, high[active], middle)
    # candidates of a row come best first, so their places must not decrease (they cannot, unless
    # rounding makes the recomputed neighbour scores non-monotone): enforce it, then merge
    place = np.maximum.accumulate(low + which * (width + 1)) - which * (width + 1)
    first = np.searchsorted(which, np.arange(len(changed)))
    rank = np.arange(len(rows)) - first[which]
    before = np.zeros((len(changed), width + 1), np.int64)  # candidates placed at or before each slot
    np.add.at(before, (which, place), 1)
    before = np.cumsum(before, axis=1)
    out = graph[changed].copy()
    slot = np.arange(width)[None, :]
    new_slot = slot + before[:, :width]
    keep = (slot < length[:, None]) & (new_slot < limit[:, None])
    out[np.nonzero(keep)[0], new_slot[keep]] = lists[keep]
    new_slot = place + rank
    keep = new_slot < limit[which]
    out[which[keep], new_slot[keep]] = candidates[keep]
    graph[changed] = out


def _blas_threads(work: float) -> Any:
    """A context running BLAS on one thread for a product of `work` multiply-adds below
    `SINGLE_THREAD_WORK` (the previous limits are restored on exit), else changing nothing."""
    if work >= SINGLE_THREAD_WORK:
        return nullcontext()
    if not _BLAS:
        try:
            from threadpoolctl import ThreadpoolController
        except ImportError:  # optional (it comes with scikit-learn): then BLAS keeps its threads
            _BLAS.append(None)
        else:
            _BLAS.append(ThreadpoolController())
    return _BLAS[0].limit(limits=1, user_api="blas") if _BLAS[0] is not None else nullcontext()


def _search_and_merge(
    vectors: SegmentRows, graph: np.ndarray, fresh: np.ndarray, added: np.ndarray, rows: np.ndarray
) -> None:
    """Exact lists of the `fresh` rows (their `graph.shape[1]` nearest other vectors, by score then
    row) and the `added` rows (a subset of `fresh`) merged into the lists of `rows`, from one pass of
    matrix products of the fresh vectors with every vector: an added row's scores against all rows
    are both its own search and what the other lists need to take it in. Only the pairs of an added
    row and a list whose last known neighbour it may beat are scored again and placed (`_insert`).
    The products go by blocks of at most `_QUERY_ROWS` fresh rows x `_SCORE_CELLS` scores, each
    block's best kept per row: every temporary array stays small (under numpy's 4 MB huge-page
    threshold; on this VM a fresh huge page costs ~4 ms of kernel time) and the vectors are read
    once per `_QUERY_ROWS` fresh rows."""
    n, width = len(vectors), graph.shape[1]
    bar = _merge_thresholds(vectors, graph, rows) - _rounding_margin(vectors)
    is_added = np.zeros(n, dtype=bool)
    is_added[added] = True
    queries = np.concatenate([fresh[is_added[fresh]], fresh[~is_added[fresh]]])  # added first
    top = min(width, n - 1)
    row_step = max(1, min(len(queries), _QUERY_ROWS))
    col_step = max(top + 1, _SCORE_CELLS // row_step)
    pair_rows: list[np.ndarray] = []
    pair_candidates: list[np.ndarray] = []
    with _blas_threads(float(len(queries)) * n * vectors.dim):
        for start in range(0, len(queries), row_step):
            block = queries[start : start + row_step]
            own = vectors.take(block)
            merging = int(is_added[block].sum())
            best = np.zeros((len(block), 0), np.int64)
            best_scores = np.zeros((len(block), 0), np.float32)
            for first, stored, live in vectors.blocks(col_step):
                scores = own @ stored.T
                if live is not None:  # a segment's live rows only
                    scores = scores[:, live]
                last = first + scores.shape[1]
                if merging:
                    hit_query, hit_row = np.nonzero(scores[:merging] >= bar[None, first:last])
                    pair_rows.append(hit_row + first)
                    pair_candidates.append(block[hit_query])
                inside = np.flatnonzero((block >= first) & (block < last))
                scores[inside, block[inside] - first] = -np.inf  # not its own neighbour
                columns, values = _top_by_score(scores, min(top, last - first))
                best, best_scores = _best_of(
                    np.concatenate([best, columns + first], axis=1),
                    np.concatenate([best_scores, values], axis=1),
                    top,
                )
            graph[block] = -1
            graph[block, :top] = best
    if pair_rows:  # the fresh lists are written; a fresh row is never merged into (its bar is +inf)
        _insert(vectors, graph, np.concatenate(pair_rows), np.concatenate(pair_candidates))


def _top_by_score(scores: np.ndarray, top: int) -> tuple[np.ndarray, np.ndarray]:
    """Each row's `top` best columns by score, then by column (lowest first on ties, at the cut
    too), with their scores."""
    n = scores.shape[1]
    best = np.argpartition(scores, n - top, axis=1)[:, n - top :]
    best_scores = np.take_along_axis(scores, best, axis=1)
    cut = best_scores.min(axis=1)
    tied = np.flatnonzero((scores >= cut[:, None]).sum(axis=1) > top)  # ties at the cut: lowest columns
    for i in tied:
        above = np.flatnonzero(scores[i] > cut[i])
        at = np.flatnonzero(scores[i] == cut[i])[: top - len(above)]
        best[i] = np.concatenate([above, at])
        best_scores[i] = scores[i, best[i]]
    return _best_of(best, best_scores, top)


def _best_of(columns: np.ndarray, scores: np.ndarray, top: int) -> tuple[np.ndarray, np.ndarray]:
    """Each row's first `top` of `columns` by score, then by column (lowest first), with scores."""
    order = np.lexsort((columns, -scores))[:, :top]  # along each row
    return np.take_along_axis(columns, order, axis=1), np.take_along_axis(scores, order, axis=1)


def update_corpus_graph(
    vectors: np.ndarray | SegmentRows,
    old_graph: np.ndarray,
    old_to_new: np.ndarray,
    k: int,
    progress: bool = False,
    reserve: int = 0,
) -> tuple[np.ndarray, str]:
    """The graph of `vectors` from the previous generation's graph, without the n² rebuild.

    `vectors`: an array, or a `SegmentRows` (the segments' vectors used where they are, not copied).
    `old_graph`: the previous rows, each its `k` nearest neighbours optionally followed by reserve
    columns (the next nearest, then -1 / `UNKNOWN` padding, as this function returns them);
    `old_to_new[p]` is the new row of old row `p` (same chunk, same vector) or -1 (deleted or
    changed). A kept row keeps its surviving known neighbours, in order: still its exact nearest,
    as none closer can have been lost; merged with the new rows by exact score. A kept row left with
    fewer than `k` known neighbours (and not knowing every vector), and each new row, is searched
    afresh. Returns the (n, k + reserve) rows (the graph is the first `k` columns) and "updated", or
    a full build and "built" when more than half the rows would need a fresh search anyway.
    """
    vectors = _rows_of(vectors)
    old_graph = np.asarray(old_graph)
    old_to_new = np.asarray(old_to_new, dtype=np.int64)
    n, width = len(vectors), k + reserve
    if (
        old_graph.ndim != 2
        or old_graph.shape[0] != len(old_to_new)
        or old_graph.shape[1] < k
        or n < 2
        or k < 1
    ):
        return build_corpus_graph(vectors.array(), k, progress=progress, reserve=reserve), "built"
    if len(old_to_new) <= n and np.array_equal(old_to_new, np.arange(len(old_to_new))):
        return _update_appended(vectors, old_graph, k, progress, reserve)
    kept = old_to_new >= 0
    is_new = np.ones(n, dtype=bool)
    is_new[old_to_new[kept]] = False
    added = np.flatnonzero(is_new)
    present = old_graph >= 0
    # old rows -> new rows; -1 and UNKNOWN (-1, -2) index the two -1 appended at the end
    translated = np.concatenate([old_to_new, [-1, -1]]).astype(np.int32)[old_graph]
    alive = translated >= 0
    length = alive.sum(axis=1)
    complete = (old_graph == -1).any(axis=1)  # the row knew every other vector
    lost = (present & ~alive).any(axis=1)
    dirty = kept & lost & ~complete & (length < k)
    clean = np.flatnonzero(kept & ~dirty)
    fresh = np.sort(np.concatenate([added, old_to_new[dirty]]))
    if len(fresh) > n // 2:
        return build_corpus_graph(vectors.array(), k, progress=progress, reserve=reserve), "built"
    # each clean row: its surviving neighbours moved to the front (order kept), then its padding
    rows = translated[clean]
    moved = np.flatnonzero(lost[clean])  # only lists that lost a neighbour need compacting
    if len(moved):
        order = np.argsort(~alive[clean[moved]], axis=1, kind="stable")
        rows[moved] = np.take_along_axis(rows[moved], order, axis=1)
    padding = np.where(complete[clean], -1, UNKNOWN)[:, None]
    rows = np.where(np.arange(rows.shape[1])[None, :] < length[clean][:, None], rows, padding)
    if rows.shape[1] < width:  # an old graph with a smaller (or no) reserve
        rows = np.concatenate([rows, np.broadcast_to(padding, (len(rows), width - rows.shape[1]))], axis=1)
    graph = np.full((n, width), -1, dtype=np.int32)
    graph[old_to_new[clean]] = rows[:, :width]
    _add_rows(vectors, graph, fresh, added, old_to_new[clean], progress)
    return graph, "updated"


def _update_appended(
    vectors: SegmentRows, old_graph: np.ndarray, k: int, progress: bool, reserve: int
) -> tuple[np.ndarray, str]:
    """`update_corpus_graph` when the old rows are the first rows, unchanged, and the rest are new
    (only additions, e.g. a stored memory): every old list holds as it is, before the merge."""
    n, width, m = len(vectors), k + reserve, len(old_graph)
    if n - m > n // 2:
        return build_corpus_graph(vectors.array(), k, progress=progress, reserve=reserve), "built"
    graph = np.full((n, width), -1, dtype=np.int32)
    graph[:m, : min(width, old_graph.shape[1])] = old_graph[:, :width]
    if old_graph.shape[1] < width:  # an old graph with a smaller (or no) reserve
        graph[:m, old_graph.shape[1] :] = np.where((old_graph == -1).any(axis=1), -1, UNKNOWN)[:, None]
    added = np.arange(m, n)
    _add_rows(vectors, graph, added, added, np.arange(m), progress)
    return graph, "updated"


def _add_rows(
    vectors: SegmentRows,
    graph: np.ndarray,
    fresh: np.ndarray,
    added: np.ndarray,
    rows: np.ndarray,
    progress: bool,
) -> None:
    """Search the `fresh` rows' lists and merge the `added` rows into the lists of `rows`."""
    if len(vectors) > EXACT_GRAPH_MAX:  # fresh rows by the approximate search of a full build
        whole = vectors.array()
        if len(added):
            _merge_added(_rows_of(whole), graph, rows, added)
        if len(fresh):
            _neighbour_search(whole, fresh, graph.shape[1], graph, progress)
    elif len(fresh):
        _search_and_merge(vectors, graph, fresh, added, rows)


def _load_rows(path: Path, n_vectors: int, what: str, lowest: int) -> np.ndarray:
    """Read (n_vectors, width) int32 rows written by `save_graph`: entries below `n_vectors`, >= `lowest`."""
    rows = np.load(path, allow_pickle=False)
    if rows.ndim != 2 or rows.shape[0] != n_vectors or rows.dtype != np.int32:
        raise ValueError(
            f"{path}: {what} of shape {rows.shape} ({rows.dtype}) does not fit {n_vectors} vectors"
        )
    if rows.size and (rows.max() >= n_vectors or rows.min() < lowest):
        raise ValueError(f"{path}: {what} points outside the index's {n_vectors} vectors")
    return rows


def load_reserve(path: Path, n_vectors: int) -> np.ndarray:
    """Read reserve columns written by `save_graph`, checking they fit an index of `n_vectors`."""
    return _load_rows(path, n_vectors, "graph reserve", UNKNOWN)


def save_graph(graph: np.ndarray, path: Path) -> None:
    """Write the graph as a plain .npy (no pickle)."""
    with open(path, "wb") as handle:
        np.save(handle, graph, allow_pickle=False)


def load_graph(path: Path, n_vectors: int) -> np.ndarray:
    """Read a graph written by `save_graph`, checking it fits an index of `n_vectors`."""
    return _load_rows(path, n_vectors, "corpus graph", -1)


class RowVectors(Protocol):
    """Anything that gives the vectors of rows as `vectors[rows]` (a matrix, or a lookup by row)."""

    def __getitem__(self, rows: np.ndarray, /) -> np.ndarray: ...


def expand_by_graph(
    vectors: np.ndarray | RowVectors,
    graph: np.ndarray,
    query: np.ndarray,
    rows: np.ndarray,
    scores: np.ndarray,
    *,
    hops: int,
    seeds: int,
    keep: Callable[[np.ndarray], np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
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
