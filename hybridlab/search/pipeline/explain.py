"""`explain`: where a hit's score came from (each retriever's rank and score, tags, recency, dates,
evidence, feedback, the second stage, the rerank step) and the settings it ran with."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from hybridlab.search.features import FEATURE_NAMES
from hybridlab.search.learned import model_path
from hybridlab.search.pipeline.records import Hit, Retrieval
from hybridlab.search.pipeline.scoring import candidate_features
from hybridlab.search.query_dates import date_factors
from hybridlab.search.snapshot import Snapshot


def feature_table(snapshot: Snapshot, retrieval: Retrieval) -> tuple[np.ndarray, np.ndarray] | None:
    """The learned fusion's candidates and feature matrix of a hybrid retrieval (for `explain`), else None."""
    if retrieval.now is None or retrieval.config.mode != "hybrid":
        return None
    return candidate_features(
        snapshot, retrieval.runs, retrieval.evidence, retrieval.facts, retrieval.now, retrieval.config
    )


def rank_in(run: Mapping[int, float], row: int) -> tuple[int | None, float | None]:
    """(rank from 1, score) of `row` in a run (ties by row), (None, None) when it is not there."""
    if row not in run:
        return None, None
    score = run[row]
    return 1 + sum(1 for other, s in run.items() if s > score or (s == score and other < row)), score


def hit_features(
    snapshot: Snapshot, hit: Hit, retrieval: Retrieval, table: tuple[np.ndarray, np.ndarray] | None
) -> dict[str, float] | None:
    """The learned fusion's features of a hit, by name (`table`: the retrieval's `feature_table`,
    else computed here); None when it has none (not hybrid, or not a candidate)."""
    table = table if table is not None else feature_table(snapshot, retrieval)
    if table is None:
        return None
    rows, matrix = table
    at = np.searchsorted(rows, hit.row)
    if at < len(rows) and rows[at] == hit.row:
        return dict(zip(FEATURE_NAMES, matrix[at].tolist()))
    return None


def fusion_settings(retrieval: Retrieval) -> dict[str, Any]:
    """The fusion settings a retrieval ran with, as `explain` reports them (the same for every hit)."""
    config = retrieval.config
    return {
        "fusion": config.fusion,
        "rrf_k": config.rrf_k,
        "normalization": config.normalization,
        "alpha": retrieval.alpha,
        "alpha_source": retrieval.alpha_source,
        "mode": retrieval.mode,
        "embedding_model": retrieval.model,
        "fill_dense": config.fill_dense,
        "decay": config.decay,
        "recency_weight": config.recency_weight,
        "adaptive_fusion": config.adaptive_fusion,
        "rare_term_max_df": config.rare_term_max_df,
    }


def staged_pool(snapshot: Snapshot, retrieval: Retrieval) -> dict[str, Any] | None:
    """A staged retrieval's candidate pool (its size, the rows the corpus graph added and how); None otherwise."""
    if retrieval.mode != "staged" or retrieval.model is None:
        return None
    config = retrieval.config
    return {
        "candidates": config.candidates,
        "graph_added": retrieval.graph_added,
        "expand_hops": config.expand_hops,
        "expand_seeds": config.expand_seeds,
        "graph": snapshot.dense[retrieval.model].has_graph,
    }


def explain(
    snapshot: Snapshot, hit: Hit, retrieval: Retrieval, table: tuple[np.ndarray, np.ndarray] | None = None
) -> dict[str, Any]:
    """Where a hit's score came from: each retriever's rank and score, tags, recency, settings.
    `table`: the retrieval's `feature_table`, computed once for all its hits (else here)."""
    dense_rank, dense_score = rank_in(retrieval.runs.get("dense") or {}, hit.row)
    bm25_rank, bm25_score = rank_in(retrieval.runs.get("bm25") or {}, hit.row)
    # with dense feedback, dense_* is the moved query's run and query_dense_* the query's own
    query_dense_rank, query_dense_score = rank_in(retrieval.query_dense, hit.row)
    rerank_rank, rerank_score = rank_in(retrieval.reranked, hit.row)
    chunk_tags = set(snapshot.generation.row_tags.get(hit.row, ()))
    config, named, evidence = retrieval.config, retrieval.tags, retrieval.evidence
    times = snapshot.generation.times[[hit.row]]
    return {
        "dense_score": dense_score,
        "dense_rank": dense_rank,
        "bm25_score": bm25_score,
        "bm25_rank": bm25_rank,
        "matched_tags": sorted(chunk_tags & set(named.tags)),
        "query_tags": list(named.tags),
        "query_collections": list(named.collections),
        "matched_collection": snapshot.generation.collections[hit.row] in named.collections,
        "tag_score": (retrieval.runs.get("tags") or {}).get(hit.row),
        "tag_boost": named.boost,
        "tag_coverage": named.coverage,
        "tag_information": named.information,
        "recency_factor": hit.recency,
        "fused_score": hit.fused,
        "final_score": hit.score,
        "rare_term_lift": hit.lift,
        "date_factor": float(
            date_factors(times, evidence.dates, evidence.date_weight, config.date_grace_days)[0]
        ),
        "date_grace_days": config.date_grace_days,
        **fusion_settings(retrieval),
        **evidence.to_dict(),
        "feedback_weight": config.feedback_weight,
        "chunk_decay": config.chunk_decay,
        "learned_model": str(model_path(config.learned_model)) if config.fusion == "learned" else None,
        "features": hit_features(snapshot, hit, retrieval, table),
        "feedback_documents": [snapshot.generation.doc_ids[row] for row in retrieval.feedback_rows],
        "query_dense_score": query_dense_score,
        "query_dense_rank": query_dense_rank,
        "rerank_score": rerank_score,
        "rerank_rank": rerank_rank,
        "rerank_depth": config.rerank_depth,
        "rerank_weight": config.rerank_weight if config.rerank_depth else None,
        "rerank_model": config.rerank_model if config.rerank_depth else None,
        "staged_pool": staged_pool(snapshot, retrieval),
        **late_explain(hit, retrieval),
    }


def late_explain(hit: Hit, retrieval: Retrieval) -> dict[str, Any]:
    """The second stage's part of `explain`: the hit's MaxSim score and rank among the re-scored
    hits (None when it was not among them, or the stage is off) and the stage's settings."""
    config = retrieval.config
    late_rank, late_score = rank_in(retrieval.late_scores, hit.row)
    on = config.late_depth > 0
    return {
        "late_score": late_score,
        "late_rank": late_rank,
        "late_depth": config.late_depth,
        "late_weight": config.late_weight if on else None,
        "late_combination": config.late_combination if on else None,
        "late_model": config.late_model if on else None,
    }
