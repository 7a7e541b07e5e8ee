"""The dense retriever: one FAISS index per embedding model, ids = chunk_id.

Inner product on L2-normalised vectors (= cosine). Filters are pushed in: a FAISS id selector over
the allowed chunk ids, or, for small allowed sets, exact scoring of just those vectors.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

EXACT_SUBSET_MAX = 20_000
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


class DenseIndex:
    """Vectors of one model: a FAISS index plus the id -> row table for scoring subsets."""

    def __init__(self, index, model: str) -> None:
        import faiss

        self.index = index
        self.model = model
        self.dim = index.d
        self.ids = faiss.vector_to_array(index.id_map).astype(np.int64) if index.ntotal else np.zeros(0, np.int64)
        if len(self.ids) > 1 and not np.all(self.ids[1:] > self.ids[:-1]):
            raise ValueError(f"dense index of {model!r}: ids must be stored in ascending chunk_id order")
        self._vectors: np.ndarray | None = None
        self._selector: tuple[bytes, object] | None = None

    @classmethod
    def build(cls, vectors: np.ndarray, chunk_ids: np.ndarray, model: str, factory: str = "Flat") -> "DenseIndex":
        import faiss

        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        dim = vectors.shape[1]
        inner = faiss.index_factory(dim, factory, faiss.METRIC_INNER_PRODUCT)
        if not inner.is_trained and len(vectors):
            inner.train(vectors)
        index = faiss.IndexIDMap2(inner)
        chunk_ids = np.asarray(chunk_ids, dtype=np.int64)
        order = np.argsort(chunk_ids, kind="stable")
        if len(vectors):
            index.add_with_ids(vectors[order], chunk_ids[order])
        return cls(index, model)

    def save(self, path: Path) -> None:
        import faiss

        faiss.write_index(self.index, str(path))

    @classmethod
    def load(cls, path: Path, model: str) -> "DenseIndex":
        import faiss

        return cls(faiss.read_index(str(path)), model)

    @property
    def size(self) -> int:
        return self.index.ntotal

    @property
    def vectors(self) -> np.ndarray:
        """All stored vectors, row-aligned with `ids` (reconstructed once, then kept)."""
        if self._vectors is None:
            n = self.index.ntotal
            # From the inner index, by row: IndexIDMap2.reconstruct_n(0, n) would look up the *ids*
            # 0..n-1, which after an incremental update (ids with gaps) aborts the process.
            self._vectors = self.index.index.reconstruct_n(0, n) if n else np.zeros((0, self.dim), np.float32)
        return self._vectors

    def score_ids(self, query: np.ndarray, chunk_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Exact scores of the given chunk ids (those this model has vectors for)."""
        vectors = self.vectors
        chunk_ids = np.asarray(chunk_ids, dtype=np.int64)
        rows = np.searchsorted(self.ids, chunk_ids)
        rows = np.minimum(rows, max(len(self.ids) - 1, 0))
        keep = (self.ids[rows] == chunk_ids) if len(self.ids) else np.zeros(len(chunk_ids), bool)
        return chunk_ids[keep], vectors[rows[keep]] @ query.astype(np.float32)

    def _selector_for(self, allowed: np.ndarray):
        """An id selector for `allowed`, kept for the next call with the same ids (a filtered
        workload repeats its filter; building the selector costs more than the search)."""
        import hashlib

        import faiss

        key = hashlib.blake2b(allowed.tobytes(), digest_size=16).digest()
        if self._selector is None or self._selector[0] != key:
            self._selector = (key, faiss.IDSelectorBatch(allowed))
        return self._selector[1]

    def search(self, query: np.ndarray, depth: int, allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(chunk_ids, scores) of the `depth` nearest vectors, restricted to `allowed` chunk ids."""
        import faiss

        query = np.ascontiguousarray(query.reshape(1, -1), dtype=np.float32)
        if allowed is not None:
            if len(allowed) == 0:
                return np.zeros(0, np.int64), np.zeros(0, np.float32)
            if len(allowed) <= EXACT_SUBSET_MAX:
                ids, scores = self.score_ids(query[0], allowed)
                order = np.lexsort((ids, -scores))[:depth]
                return ids[order], scores[order]
            params = faiss.SearchParameters(sel=self._selector_for(np.asarray(allowed, dtype=np.int64)))
            distances, labels = self.index.search(query, min(depth, self.size), params=params)
        else:
            distances, labels = self.index.search(query, min(depth, self.size))
        keep = labels[0] >= 0
        return labels[0][keep].astype(np.int64), distances[0][keep]
