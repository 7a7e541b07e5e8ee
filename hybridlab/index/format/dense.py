"""The dense retriever: one FAISS index per embedding model, ids = chunk_id.
See docs/internals/index.md#dense."""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import faiss

# the cost rule these bounds follow, as measured: docs/internals/index.md#dense
GATHER_SHARE = 1 / 32  # at most this share of the vectors allowed: gather them and score exactly
GATHER_MIN = 256  # this many allowed rows or fewer: always gather
FULL_SCAN_SHARE = 0.4  # no flat storage (IVF, PQ): score every vector from this share up, else gather
SUBSET_CACHE_BYTES = 256 << 20  # a reused filter's vectors are kept contiguous up to this size
_THREADS_SET = False


def single_threaded() -> None:
    """One OpenMP thread for FAISS: a single query is far faster without thread spin-up
    (`HYBRIDLAB_FAISS_THREADS` overrides, e.g. for batch workloads)."""
    global _THREADS_SET
    if not _THREADS_SET:
        import os

        import faiss

        threads = int(os.environ.get("HYBRIDLAB_FAISS_THREADS", "1"))
        faiss.omp_set_num_threads(threads)
        try:  # numpy's OpenBLAS too (exact subset scoring): its threads cost 20 ms per query on a busy machine
            from threadpoolctl import threadpool_limits

            threadpool_limits(limits=threads, user_api="blas")
        except ImportError:  # threadpoolctl comes with sentence-transformers (scikit-learn); optional here
            pass
        _THREADS_SET = True


def scan_plan(n_allowed: int, n_total: int, bitmap_ok: bool = True) -> str:
    """How to score a filter's `n_allowed` of `n_total` vectors exactly: "gather" (copy the few
    allowed vectors), "bitmap" (FAISS flat scan with a row bitmap; needs flat storage) or, without
    flat storage, "full" (score all reconstructed vectors, keep the allowed) for a large share."""
    if n_allowed <= GATHER_MIN or n_allowed <= GATHER_SHARE * n_total:
        return "gather"
    if bitmap_ok:
        return "bitmap"
    return "full" if n_allowed >= FULL_SCAN_SHARE * n_total else "gather"


class _Owned:
    """An array interface that keeps the FAISS index owning the memory alive (`np.asarray` of it
    has this object as its base)."""

    def __init__(self, array: np.ndarray, owner: object) -> None:
        self.__array_interface__ = array.__array_interface__
        self.owner = owner


def _flat_view(flat, owner: object) -> np.ndarray:
    """A read-only (n, d) view of a flat index's float32 storage, no copy."""
    import faiss

    raw = faiss.rev_swig_ptr(flat.get_xb(), flat.ntotal * flat.d).reshape(flat.ntotal, flat.d)
    view = np.asarray(_Owned(raw, owner))
    view.flags.writeable = False
    return view


def top_exact(ids: np.ndarray, scores: np.ndarray, depth: int) -> tuple[np.ndarray, np.ndarray]:
    """The `depth` best (id, score) pairs, best first, ties by ascending id (all ties at the cut kept
    in the sort, so the result does not depend on argpartition's order)."""
    if len(scores) > depth > 0:
        cut = np.partition(scores, len(scores) - depth)[len(scores) - depth]
        keep = np.flatnonzero(scores >= cut)
        ids, scores = ids[keep], scores[keep]
    order = np.lexsort((ids, -scores))[:depth]
    return ids[order], scores[order]


@dataclass
class _Subset:
    """One filter's state: allowed rows and ids, the plan, its bitmap selector, and (once the
    filter is reused) the allowed vectors as one contiguous matrix (set once, under the lock; a
    search that read `matrix` as None before simply scores without it)."""

    key: bytes
    rows: np.ndarray
    ids: np.ndarray
    plan: str
    bitmap: np.ndarray | None = None  # kept alive: the selector points into it
    selector: Any = None  # faiss.IDSelectorBitmap over `bitmap`, kept alive for `params`
    params: faiss.SearchParameters | None = None  # faiss.SearchParameters(sel=selector)
    matrix: np.ndarray | None = None
    uses: int = field(default=0)


class _ById:
    """Rows and exact scores by chunk id, for an index with ascending `ids` and `take(rows)`."""

    ids: np.ndarray

    def take(self, rows: np.ndarray) -> np.ndarray:
        """The vectors of the given rows (each subclass has its own)."""
        raise NotImplementedError

    def rows_of(self, chunk_ids: np.ndarray) -> np.ndarray:
        """Rows of the given chunk ids that this model has vectors for (others are dropped)."""
        chunk_ids = np.asarray(chunk_ids, dtype=np.int64)
        if not len(self.ids):
            return np.zeros(0, np.int64)
        rows = np.minimum(np.searchsorted(self.ids, chunk_ids), len(self.ids) - 1)
        return rows[self.ids[rows] == chunk_ids]

    def score_ids(self, query: np.ndarray, chunk_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Exact scores of the given chunk ids (those this model has vectors for)."""
        rows = self.rows_of(chunk_ids)
        return self.ids[rows], self.take(rows) @ np.asarray(query, dtype=np.float32).reshape(-1)


class DenseIndex(_ById):
    """Vectors of one model: a FAISS index plus the id -> row table for scoring subsets."""

    def __init__(self, index, model: str, ef_search: int | None = None) -> None:
        import faiss

        self.index = index
        self.model = model
        self.dim = index.d
        self.ids = (
            faiss.vector_to_array(index.id_map).astype(np.int64) if index.ntotal else np.zeros(0, np.int64)
        )
        if len(self.ids) > 1 and not np.all(self.ids[1:] > self.ids[:-1]):
            raise ValueError(f"dense index of {model!r}: ids must be stored in ascending chunk_id order")
        inner = faiss.downcast_index(index.index)
        self._inner = inner
        self.ef_search: int | None = None
        if ef_search is not None:
            self.set_ef_search(ef_search)
        # exact row-aligned scans with a bitmap: the index itself if flat, an HNSW graph's flat storage
        storage = faiss.downcast_index(inner.storage) if hasattr(inner, "storage") else inner
        self._flat = storage if isinstance(storage, faiss.IndexFlat) else None
        self._vectors: np.ndarray | None = None
        self._subset: _Subset | None = None
        self._lock = threading.Lock()  # guards the lazy `_vectors` and the filter state `_subset`

    def set_ef_search(self, ef_search: int) -> None:
        """The HNSW candidate list of unfiltered searches (FAISS uses at least `depth`); no-op for
        other index types."""
        if hasattr(self._inner, "hnsw"):
            self._inner.hnsw.efSearch = int(ef_search)
            self.ef_search = int(ef_search)

    @classmethod
    def build(
        cls,
        vectors: np.ndarray,
        chunk_ids: np.ndarray,
        model: str,
        factory: str = "Flat",
        ef_search: int | None = None,
    ) -> DenseIndex:
        import faiss

        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        dim = vectors.shape[1]
        inner = faiss.index_factory(dim, factory, faiss.METRIC_INNER_PRODUCT)
        if not inner.is_trained and len(vectors):
            inner.train(vectors)
        index = faiss.IndexIDMap2(inner)
        chunk_ids = np.asarray(chunk_ids, dtype=np.int64)
        if len(chunk_ids) > 1 and not np.all(chunk_ids[1:] > chunk_ids[:-1]):
            order = np.argsort(chunk_ids, kind="stable")
            vectors, chunk_ids = vectors[order], chunk_ids[order]
        if len(vectors):
            index.add_with_ids(vectors, chunk_ids)
        return cls(index, model, ef_search)

    def save(self, path: Path) -> None:
        import faiss

        faiss.write_index(self.index, str(path))

    @classmethod
    def load(cls, path: Path, model: str, ef_search: int | None = None) -> DenseIndex:
        import faiss

        return cls(faiss.read_index(str(path)), model, ef_search)

    @property
    def size(self) -> int:
        return self.index.ntotal

    @property
    def is_flat(self) -> bool:
        """Whether the index is exact flat storage (an unfiltered search scores every vector)."""
        return self._flat is not None and self._flat is self._inner

    @property
    def vectors(self) -> np.ndarray:
        """All stored vectors, row-aligned with `ids` (reconstructed once, then kept; a flat
        index's own storage is used without a copy)."""
        vectors = self._vectors
        if vectors is not None:
            return vectors
        with self._lock:
            return self._vectors_locked()

    def _vectors_locked(self) -> np.ndarray:
        if self._vectors is None:
            n = self.index.ntotal
            if not n:
                self._vectors = np.zeros((0, self.dim), np.float32)
            elif self._flat is not None:
                self._vectors = _flat_view(self._flat, self.index)
            else:
                import faiss

                ivf = faiss.try_extract_index_ivf(self._inner)
                if ivf is not None:
                    ivf.make_direct_map()
                # From the inner index, by row: IndexIDMap2.reconstruct_n(0, n) would look up the *ids*
                # 0..n-1, which after an incremental update (ids with gaps) aborts the process.
                self._vectors = self._inner.reconstruct_n(0, n)
        return self._vectors

    def take(self, rows: np.ndarray) -> np.ndarray:
        """The vectors of the given rows (a copy)."""
        return self.vectors[np.asarray(rows, dtype=np.int64)]

    def _exact_all(self, query: np.ndarray, depth: int) -> tuple[np.ndarray, np.ndarray]:
        """Exact top `depth` over every stored vector (flat storage scan, else reconstructed vectors)."""
        if self._flat is not None:
            distances, rows = self._flat.search(query, depth)
            keep = rows[0] >= 0
            return self.ids[rows[0][keep]], distances[0][keep]
        return top_exact(self.ids, self.vectors @ query[0], depth)

    def _subset_for(self, allowed: np.ndarray) -> _Subset:
        """The filter state for `allowed`, kept for the next call with the same ids (a filtered
        workload repeats its filter); on reuse its vectors are made contiguous if they fit."""
        import faiss

        allowed = np.ascontiguousarray(allowed, dtype=np.int64)
        key = hashlib.blake2b(allowed.tobytes(), digest_size=16).digest()
        with self._lock:
            subset = self._subset
            if subset is None or subset.key != key:
                rows = self.rows_of(allowed)
                subset = _Subset(
                    key, rows, self.ids[rows], scan_plan(len(rows), self.size, self._flat is not None)
                )
                if subset.plan == "bitmap":
                    mask = np.zeros(self.size, dtype=bool)
                    mask[rows] = True
                    subset.bitmap = np.packbits(mask, bitorder="little")
                    subset.selector = faiss.IDSelectorBitmap(
                        len(subset.bitmap), faiss.swig_ptr(subset.bitmap)
                    )
                    # faiss's kwargs constructor (it keeps `sel` referenced); the stubs declare no arguments
                    subset.params = faiss.SearchParameters(sel=subset.selector)  # type: ignore[call-arg]
                self._subset = subset
            elif subset.matrix is None and len(subset.rows) * self.dim * 4 <= SUBSET_CACHE_BYTES:
                subset.matrix = np.ascontiguousarray(self._vectors_locked()[subset.rows])
            subset.uses += 1
        return subset

    def search(
        self, query: np.ndarray, depth: int, allowed: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """(chunk_ids, scores) of the `depth` nearest vectors, restricted to `allowed` chunk ids.
        Filtered searches are exact and return min(depth, allowed vectors) results."""
        query = np.ascontiguousarray(query.reshape(1, -1), dtype=np.float32)
        if allowed is None:
            want = min(depth, self.size)
            if want <= 0:  # an empty index (a memory store before its first memory)
                return np.zeros(0, np.int64), np.zeros(0, np.float32)
            distances, labels = self.index.search(query, want)
            keep = labels[0] >= 0
            if keep.sum() < want:  # an approximate graph walk came back short: answer exactly instead
                return self._exact_all(query, want)
            return labels[0][keep].astype(np.int64), distances[0][keep]
        if len(allowed) == 0 or depth <= 0:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        subset = self._subset_for(allowed)
        if not len(subset.rows):
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        if subset.matrix is not None:
            return top_exact(subset.ids, subset.matrix @ query[0], depth)
        if subset.plan == "gather":
            return top_exact(subset.ids, self.vectors[subset.rows] @ query[0], depth)
        if subset.plan == "full":
            return top_exact(subset.ids, (self.vectors @ query[0])[subset.rows], depth)
        assert self._flat is not None  # the "bitmap" plan is chosen only with flat storage
        distances, rows = self._flat.search(query, min(depth, len(subset.rows)), params=subset.params)
        keep = rows[0] >= 0
        return self.ids[rows[0][keep]], distances[0][keep]


class RowGather:
    """`vectors[rows]` for an index whose vectors are not one matrix (see :class:`SegmentedDense`)."""

    def __init__(self, index: DenseIndex | SegmentedDense) -> None:
        self._index = index

    def __len__(self) -> int:
        return self._index.size

    def __getitem__(self, rows: np.ndarray) -> np.ndarray:
        return self._index.take(rows)


class SegmentedDense(_ById):
    """One model's vectors over several segments, each its own FAISS index, as one DenseIndex.

    Rows run over the live vectors of the segments in order (chunk ids ascending across segments).
    `live[i]` is segment i's boolean row mask (None = all live): tombstoned rows are never returned,
    so a search returns min(depth, live allowed vectors) results. Flat segments (exact storage) are
    searched unfiltered by scoring every live vector in place with FAISS's flat kernel and taking one
    top `depth` (:func:`top_exact`: ties by ascending chunk id), which costs what one merged flat index
    costs, scores bit for bit; other index types, and filtered searches, search each segment (the
    tombstones and the filter as an allowed-id set) and merge by score. Nothing is copied: gathers
    (:meth:`take`) read each segment's own storage."""

    def __init__(self, model: str, parts: list[DenseIndex], live: list[np.ndarray | None]) -> None:
        if not parts:
            raise ValueError(f"no segments for model {model!r}")
        self.model = model
        self.parts = parts
        self.dim = parts[0].dim
        self.ef_search = parts[0].ef_search
        self._live_ids = [None if mask is None else part.ids[mask] for part, mask in zip(parts, live)]
        # per part: its local row of each of its live rows
        self._local_rows = [
            np.arange(part.size, dtype=np.int64) if mask is None else np.flatnonzero(mask)
            for part, mask in zip(parts, live)
        ]
        sizes = [len(rows) for rows in self._local_rows]
        self._offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        ids = np.concatenate([part.ids if ids is None else ids for part, ids in zip(parts, self._live_ids)])
        self.ids = ids.astype(np.int64, copy=False)
        if len(self.ids) > 1 and not np.all(self.ids[1:] > self.ids[:-1]):
            raise ValueError(f"dense segments of {model!r}: chunk ids must ascend across segments")
        # per row: its part and its row there, so a gather finds both with two index operations
        self._part_of = np.repeat(np.arange(len(parts), dtype=np.intp), sizes)
        self._local_of = np.concatenate(self._local_rows) if sizes else np.zeros(0, np.int64)
        self._part_vectors: list[np.ndarray] | None = None
        self._flat = all(part.is_flat for part in parts)
        # every part's rows one after the other (tombstoned ones included): where each live row is
        self._physical_starts = np.concatenate([[0], np.cumsum([part.size for part in parts])]).astype(
            np.int64
        )
        self._physical_live = (
            None
            if all(mask is None for mask in live)
            else np.concatenate(
                [start + rows for start, rows in zip(self._physical_starts[:-1], self._local_rows)]
            )
        )
        self._vectors: np.ndarray | None = None
        self._lock = threading.Lock()

    @property
    def size(self) -> int:
        return len(self.ids)

    def set_ef_search(self, ef_search: int) -> None:
        for part in self.parts:
            part.set_ef_search(ef_search)
        self.ef_search = self.parts[0].ef_search

    def take(self, rows: np.ndarray) -> np.ndarray:
        """The vectors of the given rows (a copy): the rows sorted by part once, then one gather per
        part they fall in."""
        rows = np.asarray(rows, dtype=np.int64)
        which, local = self._part_of[rows], self._local_of[rows]
        out = np.empty((len(rows), self.dim), dtype=np.float32)
        order = np.argsort(which, kind="stable")
        bounds = np.searchsorted(which[order], np.arange(len(self.parts) + 1))
        vectors = self._part_vectors or self._load_part_vectors()
        for i in np.flatnonzero(bounds[1:] > bounds[:-1]).tolist():
            chosen = order[bounds[i] : bounds[i + 1]]
            out[chosen] = vectors[i][local[chosen]]
        return out

    def _score_all(self, query: np.ndarray) -> np.ndarray:
        """The score of every live vector of exact flat parts, in row order: each part's storage
        scored in place by FAISS's own kernel (`fvec_inner_products_ny`, the one a flat search uses,
        so scores are bit-identical to one merged index's), no per-segment search or heap, no
        allowed-id set for a segment with tombstones."""
        import faiss

        query = np.ascontiguousarray(np.asarray(query, dtype=np.float32).reshape(-1))
        vectors = self._part_vectors or self._load_part_vectors()
        out = np.empty(self._physical_starts[-1], dtype=np.float32)
        for part_vectors, start, end in zip(vectors, self._physical_starts[:-1], self._physical_starts[1:]):
            if end > start:
                # in faiss's SWIG module, missing from its stubs
                faiss.fvec_inner_products_ny(  # type: ignore[attr-defined]
                    faiss.swig_ptr(out[start:end]),
                    faiss.swig_ptr(query),
                    faiss.swig_ptr(part_vectors),
                    self.dim,
                    int(end - start),
                )
        return out if self._physical_live is None else out[self._physical_live]

    def _load_part_vectors(self) -> list[np.ndarray]:
        self._part_vectors = [part.vectors for part in self.parts]  # views of flat storage (no copy)
        return self._part_vectors

    @property
    def vectors(self) -> np.ndarray:
        """All live vectors as one matrix (concatenated once, then kept: tools and tests)."""
        with self._lock:
            if self._vectors is None:
                self._vectors = (
                    np.concatenate([part.vectors[rows] for part, rows in zip(self.parts, self._local_rows)])
                    if self.size
                    else np.zeros((0, self.dim), np.float32)
                )
                self._vectors.flags.writeable = False
            return self._vectors

    def search(
        self, query: np.ndarray, depth: int, allowed: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """(chunk_ids, scores) of the `depth` nearest live vectors, restricted to `allowed` chunk ids."""
        if allowed is None and self._flat:
            return top_exact(self.ids, self._score_all(query), depth)
        found_ids, found_scores = [], []
        if allowed is not None:
            allowed = np.asarray(allowed, dtype=np.int64)
        for part, live_ids in zip(self.parts, self._live_ids):
            if not part.size:
                continue
            if allowed is None:
                wanted = live_ids
            else:  # the filter's ids in this segment's range (tombstoned ids are never allowed)
                low, high = np.searchsorted(allowed, [part.ids[0], part.ids[-1] + 1])
                wanted = allowed[low:high]
                if not len(wanted):
                    continue
            ids, scores = part.search(query, depth, wanted)
            found_ids.append(ids)
            found_scores.append(scores)
        if not found_ids:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        return top_exact(np.concatenate(found_ids), np.concatenate(found_scores).astype(np.float32), depth)
