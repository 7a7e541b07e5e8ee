"""The rerank step: the top `rerank_depth` hits re-scored by a cross-encoder on (query, chunk text),
mixed with their score so far."""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from hybridlab.search.models import QueryModels
from hybridlab.search.pipeline.records import Retrieval, on_top
from hybridlab.search.snapshot import Snapshot


def _min_max(values: np.ndarray) -> np.ndarray:
    """(v - min) / (max - min); all equal -> all 1.0 (as :func:`hybridlab.search.fusion.normalize`)."""
    low, high = float(values.min()), float(values.max())
    return np.ones_like(values) if high == low else (values - low) / (high - low)


def rerank_mix(hybrid: np.ndarray, cross: np.ndarray, weight: float) -> np.ndarray:
    """`weight * cross' + (1 - weight) * hybrid'`, primes = min-max over the reranked hits: the
    convex combination of Bruch et al. (2023) over one list; weight 1.0 = the cross-encoder alone."""
    hybrid, cross = np.asarray(hybrid, dtype=np.float64), np.asarray(cross, dtype=np.float64)
    if hybrid.shape != cross.shape:
        raise ValueError(f"{len(hybrid)} hybrid scores but {len(cross)} cross-encoder scores")
    if not len(hybrid):
        return hybrid
    if weight == 1.0:
        return _min_max(cross)
    return weight * _min_max(cross) + (1.0 - weight) * _min_max(hybrid)


def rerank(snapshot: Snapshot, retrieval: Retrieval, models: QueryModels) -> Retrieval:
    """The retrieval with its top `rerank_depth` hits (chunks) re-scored by the cross-encoder
    `rerank_model` on (query, the chunk's embedded text) and re-ordered by :func:`rerank_mix`.
    They keep the top places: their score becomes `1 + mix + max(0, best score below them)`, so a
    run stays in rank order; the other hits follow unchanged. Off (the same object back) when
    `rerank_depth` is 0."""
    config = retrieval.config
    if config.rerank_depth <= 0 or not retrieval.hits:
        return retrieval
    started = time.perf_counter()
    head, tail = retrieval.hits[: config.rerank_depth], retrieval.hits[config.rerank_depth :]
    rows = [hit.row for hit in head]
    cross = np.asarray(
        models.rerank_scores(config.rerank_model, retrieval.query, snapshot.store.passages(rows)),
        dtype=np.float64,
    )
    mix = rerank_mix(np.array([hit.score for hit in head]), cross, config.rerank_weight)
    order = np.lexsort((np.asarray(rows), -mix))
    hits = on_top(head, tail, order, mix[order])
    timings = {**retrieval.timings, "rerank_ms": (time.perf_counter() - started) * 1000}
    return dataclasses.replace(
        retrieval, hits=hits, timings=timings, reranked=dict(zip(rows, cross.tolist()))
    )
