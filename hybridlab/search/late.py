"""The second stage: late interaction (MaxSim over token vectors stored at index time).
See docs/internals/search.md#late-interaction.

The first stage's top `late_depth` hits are scored by MaxSim (Khattab & Zaharia 2020) between the
query's token vectors and each chunk's stored ones, and re-ordered by a combination of that score
with the first stage's: a convex combination of min-max normalised scores (Bruch et al. 2023), or
weighted reciprocal ranks (Cormack et al. 2009). The hits below the depth keep their order under the
re-scored ones, as with the cross-encoder (`hybridlab.search.pipeline.rerank`, the rerank step).

The fused hit list holds every retriever's candidates (dense and BM25 to their depth), so a deep
stage also finds the chunks only the dense retriever ranked, where BM25 has nothing to say.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

import numpy as np

from hybridlab.encoders.late import LateEncoder, LateSpec, maxsim
from hybridlab.errors import InvalidValueError
from hybridlab.index.format.dense import single_threaded
from hybridlab.index.format.tokens import TokenStore

logger = logging.getLogger(__name__)

#: RRF's constant of the `rrf` combination (Cormack et al. 2009)
LATE_RRF_K = 60


def _min_max(values: np.ndarray) -> np.ndarray:
    low, high = float(values.min()), float(values.max())
    return np.ones_like(values) if high == low else (values - low) / (high - low)


def _ranks(values: np.ndarray) -> np.ndarray:
    """Rank from 1 of each value (higher first; ties by position)."""
    order = np.lexsort((np.arange(len(values)), -values))
    ranks = np.empty(len(values), dtype=np.float64)
    ranks[order] = np.arange(1, len(values) + 1)
    return ranks


def convex(first: np.ndarray, late: np.ndarray, weight: float) -> np.ndarray:
    """`weight * late' + (1 - weight) * first'`, primes = min-max over the re-scored hits."""
    return weight * _min_max(late) + (1.0 - weight) * _min_max(first)


def weighted_rrf(first: np.ndarray, late: np.ndarray, weight: float) -> np.ndarray:
    """`weight / (k + rank_late) + (1 - weight) / (k + rank_first)`, k = :data:`LATE_RRF_K`."""
    return weight / (LATE_RRF_K + _ranks(late)) + (1.0 - weight) / (LATE_RRF_K + _ranks(first))


#: how the MaxSim score is combined with the first stage's (the `late_combination` setting)
COMBINATIONS: dict[str, Callable[[np.ndarray, np.ndarray, float], np.ndarray]] = {
    "convex": convex,
    "rrf": weighted_rrf,
}


def combine(
    first: Sequence[float] | np.ndarray, late: Sequence[float] | np.ndarray, weight: float, combination: str
) -> np.ndarray:
    """The re-scored hits' new scores (higher first); `weight` 1.0 = MaxSim alone, 0.0 = first stage."""
    if combination not in COMBINATIONS:
        raise InvalidValueError(
            f"unknown late_combination {combination!r}; choose from {sorted(COMBINATIONS)}",
            field="late_combination",
        )
    first_array, late_array = np.asarray(first, dtype=np.float64), np.asarray(late, dtype=np.float64)
    if first_array.shape != late_array.shape:
        raise ValueError(f"{len(first_array)} first-stage scores but {len(late_array)} MaxSim scores")
    if not len(first_array):
        return first_array
    return COMBINATIONS[combination](first_array, late_array, weight)


def reorder(
    rows: Sequence[int],
    first: Sequence[float] | np.ndarray,
    late: Sequence[float] | np.ndarray,
    weight: float,
    combination: str,
) -> tuple[np.ndarray, np.ndarray]:
    """(positions of the re-scored hits in their new order, their combined scores in that order);
    ties by row, so the order does not depend on the first stage's tie-breaking."""
    mixed = combine(first, late, weight, combination)
    order = np.lexsort((np.asarray(rows, dtype=np.int64), -mixed))
    return order, mixed[order]


class LateScorer:
    """MaxSim scores of a query against chunks, for one late-interaction spec: token vectors from the
    index's store, a chunk without stored vectors (written before the model was added, or by a write
    interrupted before its vectors) encoded now and counted in `encoded_now`."""

    def __init__(self, spec: LateSpec, store: TokenStore, encoder: Callable[[], LateEncoder]) -> None:
        self.spec = spec
        self.store = store
        self._encoder = encoder
        self._lock = threading.Lock()
        self.encoded_now = 0
        single_threaded()  # numpy's BLAS on one thread: MaxSim 0.3 ms instead of 8 with two

    @property
    def encoder(self) -> LateEncoder:
        return self._encoder()

    def query_vectors(self, query: str) -> np.ndarray:
        return self.encoder.encode_query(query)

    def documents(self, embedded: Sequence[tuple[str, str]]) -> list[np.ndarray]:
        """Token vectors of (sha256, text) pairs: stored ones, else encoded now."""
        found = self.store.get([sha for sha, _ in embedded])
        missing = [i for i, vectors in enumerate(found) if vectors is None]
        if missing:
            encoded = self.encoder.encode_documents([embedded[i][1] for i in missing])
            with self._lock:
                if not self.encoded_now:
                    logger.warning(
                        "late interaction: %d candidate chunks have no stored token vectors; encoding them "
                        "now (`hybridlab verify --repair` stores them)",
                        len(missing),
                    )
                self.encoded_now += len(missing)
            for i, vectors in zip(missing, encoded):
                found[i] = vectors.astype(np.float16).astype(np.float32)  # as stored
        return [vectors for vectors in found if vectors is not None]

    def scores(self, query: np.ndarray, embedded: Sequence[tuple[str, str]]) -> np.ndarray:
        return maxsim(query, self.documents(embedded))
