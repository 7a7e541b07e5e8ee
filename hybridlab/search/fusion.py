"""Score normalisation and rank fusion for ONE query, as pure functions.
See docs/internals/search.md#fusion."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from hybridlab.errors import InvalidValueError

__all__ = [
    "FUSERS",
    "NORMALIZERS",
    "THEORETICAL_MIN",
    "alpha_weights",
    "convex",
    "dbsf",
    "fuse",
    "normalize",
    "rank",
    "rrf",
]


class _Id(Protocol):
    """An item id: hashable (a dict key) and ordered (ties are broken by ascending id)."""

    def __hash__(self) -> int: ...
    def __lt__(self, other: Any, /) -> bool: ...


K = TypeVar("K", bound=_Id)

#: Lowest score each retriever can produce (cosine similarity, BM25, tag overlap); used by
#: theoretical-min-max normalisation (Bruch et al. 2023).
THEORETICAL_MIN: dict[str, float] = {"dense": -1.0, "bm25": 0.0, "tags": 0.0}


# Normalisation ===================================================================================
def _min_max(scores: Mapping[K, float], theoretical_min: float | None = None) -> dict[K, float]:
    """(s - min) / (max - min); if all scores are equal each becomes 1.0 (all share the top rank)."""
    if not scores:
        return {}
    low, high = min(scores.values()), max(scores.values())
    if high == low:
        return dict.fromkeys(scores, 1.0)
    span = high - low
    return {item: (score - low) / span for item, score in scores.items()}


def _std(values: Sequence[float], mean: float, ddof: int = 0) -> float:
    """The standard deviation of `values` around `mean` (`ddof` 1: the sample std). Where the squared
    deviations underflow to 0 (spreads near 1e-160 and below) it is computed on deviations scaled
    by the largest one instead; otherwise exactly as before, so recorded figures do not move."""
    n = len(values) - ddof
    std = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / n)
    if std > 0.0:
        return std
    scale = max(abs(v - mean) for v in values)
    return (
        0.0 if scale == 0.0 else scale * math.sqrt(math.fsum(((v - mean) / scale) ** 2 for v in values) / n)
    )


def _z_score(scores: Mapping[K, float], theoretical_min: float | None = None) -> dict[K, float]:
    """(s - mean) / std with the population std; if all scores are equal each becomes 0.0."""
    if not scores:
        return {}
    values = scores.values()
    if max(values) == min(values):
        return dict.fromkeys(scores, 0.0)
    mean = math.fsum(values) / len(scores)
    std = _std(list(values), mean)
    if std == 0.0:  # distinct values whose spread rounds away around the mean
        return dict.fromkeys(scores, 0.0)
    return {item: (score - mean) / std for item, score in scores.items()}


def _theoretical_min_max(scores: Mapping[K, float], theoretical_min: float | None = None) -> dict[K, float]:
    """(s - theoretical_min) / (max - theoretical_min), Bruch et al. (2023).

    If ``max == theoretical_min`` every score sits at the floor and becomes 0.0. Scores below the
    theoretical minimum are not clipped (they map below 0); a maximum below it raises ValueError.
    """
    if theoretical_min is None or not math.isfinite(theoretical_min):
        raise InvalidValueError(
            f"theoretical-min-max needs a finite theoretical_min, got {theoretical_min!r}"
        )
    if not scores:
        return {}
    span = max(scores.values()) - theoretical_min
    if span < 0:
        raise InvalidValueError(f"all scores are below the theoretical minimum {theoretical_min!r}")
    if span == 0:
        return dict.fromkeys(scores, 0.0)
    return {item: (score - theoretical_min) / span for item, score in scores.items()}


def _identity(scores: Mapping[K, float], theoretical_min: float | None = None) -> dict[K, float]:
    """The scores unchanged (as a new dict)."""
    return dict(scores)


NORMALIZERS: dict[str, Callable[..., dict]] = {
    "min-max": _min_max,
    "z-score": _z_score,
    "theoretical-min-max": _theoretical_min_max,
    "none": _identity,
}


def _normalizer(name: str) -> Callable[..., dict]:
    try:
        return NORMALIZERS[name]
    except (KeyError, TypeError):
        raise InvalidValueError(
            f"unknown normalization {name!r}; choose from {sorted(NORMALIZERS)}", field="normalization"
        ) from None


def _check_finite(scores: Mapping, retriever: str) -> None:
    if not all(map(math.isfinite, scores.values())):
        bad = next(item for item, score in scores.items() if not math.isfinite(score))
        raise InvalidValueError(f"run {retriever!r} has a non-finite score {scores[bad]!r} for item {bad!r}")


def normalize(
    scores: Mapping[K, float], method: str, *, theoretical_min: float | None = None
) -> dict[K, float]:
    """Normalise one run with a method of :data:`NORMALIZERS` (``theoretical_min`` for
    ``"theoretical-min-max"``, Bruch et al. 2023)."""
    normalizer = _normalizer(method)
    _check_finite(scores, "scores")
    return normalizer(scores, theoretical_min)


# Ranking =========================================================================================
def _ranked_ids(scores: Mapping[K, float]) -> list[K]:
    """Ids by descending score, ties by ascending id (a stable sort over id-sorted keys)."""
    return sorted(sorted(scores), key=scores.__getitem__, reverse=True)


def rank(scores: Mapping[K, float], limit: int | None = None) -> list[tuple[K, float]]:
    """The ``limit`` best ``(id, score)`` pairs (all if ``None``): score descending, then id ascending."""
    if limit is not None and limit < 0:
        raise InvalidValueError(f"limit must be >= 0 or None, got {limit!r}", field="limit")
    ids = _ranked_ids(scores)
    if limit is not None:
        ids = ids[:limit]
    return [(item, scores[item]) for item in ids]


def alpha_weights(alpha: float, tag_weight: float = 0.0) -> dict[str, float]:
    """Retriever weights from ``alpha`` (1.0 = pure vector, 0.0 = pure lexical/tag):
    ``{"dense": alpha, "bm25": 1 - alpha, "tags": (1 - alpha) * tag_weight}``."""
    if not (isinstance(alpha, (int, float)) and 0.0 <= alpha <= 1.0):
        raise InvalidValueError(f"alpha must be in [0, 1], got {alpha!r}", field="alpha")
    if not (isinstance(tag_weight, (int, float)) and math.isfinite(tag_weight) and tag_weight >= 0):
        raise InvalidValueError(f"tag_weight must be finite and >= 0, got {tag_weight!r}", field="tag_weight")
    return {"dense": float(alpha), "bm25": 1.0 - alpha, "tags": (1.0 - alpha) * tag_weight}


# Fusion ==========================================================================================
def _active_runs(
    runs: Mapping[str, Mapping[K, float]], weights: Mapping[str, float], rrf_k: int, normalization: str
) -> list[tuple[str, Mapping[K, float], float]]:
    """Validate the arguments shared by all fusers; the ``(name, run, weight)`` with weight > 0."""
    if not (isinstance(rrf_k, (int, float)) and rrf_k > 0 and math.isfinite(rrf_k)):
        raise InvalidValueError(f"rrf_k must be > 0, got {rrf_k!r}", field="rrf_k")
    _normalizer(normalization)
    active = []
    for name, run in runs.items():
        _check_finite(run, name)
        weight = weights.get(name, 0.0)
        if not (isinstance(weight, (int, float)) and math.isfinite(weight) and weight >= 0):
            raise InvalidValueError(f"weight of {name!r} must be finite and >= 0, got {weight!r}")
        if weight > 0:
            active.append((name, run, weight))
    return active


def _weighted_sum(parts: list[tuple[Mapping[K, float], float]]) -> dict[K, float]:
    """Σ_r w_r · s_r(d) over the union of items; an item missing from a run contributes 0."""
    fused: dict[K, float] = {}
    get = fused.get
    for scores, weight in parts:
        for item, score in scores.items():
            fused[item] = get(item, 0.0) + weight * score
    return fused


def rrf(
    runs: Mapping[str, Mapping[K, float]],
    weights: Mapping[str, float],
    *,
    rrf_k: int = 60,
    normalization: str = "min-max",
) -> dict[K, float]:
    """Weighted Reciprocal Rank Fusion (Cormack, Clarke & Büttcher 2009): Σ_r w_r / (rrf_k + rank_r(d)).

    Ranks are 1-based by descending score within each run, ties broken by ascending id. An item
    missing from a run gets nothing from it; runs with weight 0 (or missing) are ignored.
    ``normalization`` is validated but unused (ranks do not depend on it). Equal weights give
    classic RRF.
    """
    active = _active_runs(runs, weights, rrf_k, normalization)
    return _weighted_sum(
        [
            ({item: 1.0 / (rrf_k + position) for position, item in enumerate(_ranked_ids(run), 1)}, weight)
            for _, run, weight in active
        ]
    )


def convex(
    runs: Mapping[str, Mapping[K, float]],
    weights: Mapping[str, float],
    *,
    rrf_k: int = 60,
    normalization: str = "min-max",
) -> dict[K, float]:
    """Convex combination (Bruch, Gai & Ingber 2023): Σ_r w_r · norm_r(s_r(d)).

    Each run is normalised on its own (``theoretical-min-max`` uses ``THEORETICAL_MIN[r]``); an item
    missing from a run contributes 0 for it, as in ranx's ``wsum``. Runs with weight 0 are ignored,
    so their items do not appear. ``rrf_k`` is validated but unused. The engine passes
    :func:`alpha_weights`.
    """
    active = _active_runs(runs, weights, rrf_k, normalization)
    normalizer = NORMALIZERS[normalization]
    parts: list[tuple[Mapping[K, float], float]] = []
    for name, run, weight in active:
        floor = None
        if normalization == "theoretical-min-max":
            if name not in THEORETICAL_MIN:
                raise InvalidValueError(
                    f"no theoretical minimum for retriever {name!r}; choose from {sorted(THEORETICAL_MIN)}"
                )
            floor = THEORETICAL_MIN[name]
        parts.append((normalizer(run, floor), weight))
    return _weighted_sum(parts)


def _distribution_norm(scores: Mapping[K, float]) -> dict[K, float]:
    """Qdrant's DBSF normalisation: (s - (μ - 3σ)) / 6σ with the sample std (n - 1).

    A single item, or all-equal scores, become 0.5. Like Qdrant, values beyond μ ± 3σ are not
    clipped (possible only for runs of 11+ items), which keeps each run's order intact.
    """
    n = len(scores)
    if n == 0:
        return {}
    values = scores.values()
    if n == 1 or max(values) == min(values):
        return dict.fromkeys(scores, 0.5)
    mean = math.fsum(values) / n
    std = _std(list(values), mean, ddof=1)
    low, span = mean - 3.0 * std, 6.0 * std
    if span == 0.0:  # distinct values whose spread rounds away around the mean
        return dict.fromkeys(scores, 0.5)
    return {item: (score - low) / span for item, score in scores.items()}


def dbsf(
    runs: Mapping[str, Mapping[K, float]],
    weights: Mapping[str, float],
    *,
    rrf_k: int = 60,
    normalization: str = "min-max",
) -> dict[K, float]:
    """Distribution-Based Score Fusion (Qdrant v1.11; Mazzeschi 2023): Σ_r w_r · dbsf_norm_r(s_r(d)).

    Each run is mapped from [μ - 3σ, μ + 3σ] onto [0, 1] (sample std, as Qdrant); an item missing
    from a run contributes 0 for it; runs with weight 0 are ignored. ``rrf_k`` and
    ``normalization`` are validated but unused.
    """
    active = _active_runs(runs, weights, rrf_k, normalization)
    return _weighted_sum([(_distribution_norm(run), weight) for _, run, weight in active])


FUSERS: dict[str, Callable[..., dict]] = {"rrf": rrf, "convex": convex, "dbsf": dbsf}


def fuse(
    method: str,
    runs: Mapping[str, Mapping[K, float]],
    weights: Mapping[str, float],
    *,
    rrf_k: int = 60,
    normalization: str = "min-max",
) -> dict[K, float]:
    """Fuse one query's runs with a method of :data:`FUSERS` (``"rrf"``, ``"convex"``, ``"dbsf"``)."""
    try:
        fuser = FUSERS[method]
    except (KeyError, TypeError):
        raise InvalidValueError(f"unknown fusion {method!r}; choose from {sorted(FUSERS)}") from None
    return fuser(runs, weights, rrf_k=rrf_k, normalization=normalization)
