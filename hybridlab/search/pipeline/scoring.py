"""Scoring the runs: the query's evidence (lexical, rare term, recency intent, named dates), then one
score per row by the configured fusion (or the learned model), scaled by recency and dates, lifted
for a rare term, best first."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from datetime import datetime

import numpy as np

from hybridlab.config import SearchConfig
from hybridlab.search.evidence import (
    EVIDENCE_DEPTH,
    QueryEvidence,
    asks_for_latest,
    best_rows,
    lexical_factor,
    rare_term_lift,
    rarest_term,
    top_agreement,
    weights_with_evidence,
    without_recency_cues,
)
from hybridlab.search.features import QueryFacts, candidate_rows, features
from hybridlab.search.fusion import alpha_weights, fuse
from hybridlab.search.learned import Ranker, load_ranker, model_path, squash
from hybridlab.search.pipeline.records import Hit, Request, Run
from hybridlab.search.query_dates import date_factors
from hybridlab.search.snapshot import Snapshot

Rankers = Callable[[str], Ranker]  # learned_model setting -> the loaded model (QueryModels.learned_ranker)


FULL_MATCH = 1.0 - 1e-9  # lexical evidence of a row holding every query term (a sum of IDF shares)


def query_evidence(snapshot: Snapshot, request: Request, runs: dict[str, Run]) -> QueryEvidence:
    """The query's signals (:mod:`hybridlab.search.evidence`): lexical evidence from BM25's best
    rows, the rarest query term, top-row agreement of BM25 and dense, recency intent; and the BM25
    weight factor, the rows a rare term lifts and the recency weight they give.
    `adaptive_fusion=False` records the signals but changes nothing."""
    config = request.config
    bm25, dense = runs.get("bm25") or {}, runs.get("dense") or {}
    lexical, term, df = None, None, None
    dates = request.dates
    # a query that names its time asks for that time, not the latest ("recently, on 4 May 2023")
    intent = asks_for_latest(request.query) and dates is None
    content = without_recency_cues(request.query) if intent else request.query
    date_weight = config.date_weight if dates is not None and config.mode == "hybrid" else 0.0
    if "bm25" in runs:
        rows = np.asarray(best_rows(bm25, EVIDENCE_DEPTH), dtype=np.int64)
        lexical = float(snapshot.sparse.lexical_evidence(content, rows).max()) if len(rows) else 0.0
        term, df = rarest_term(snapshot.sparse.document_frequencies(content))
    if not config.adaptive_fusion or config.mode != "hybrid":
        return QueryEvidence(
            lexical,
            top_agreement(bm25, dense),
            intent,
            1.0,
            config.recency_weight,
            term,
            df,
            dates=dates,
            date_weight=date_weight,
        )
    factor = lexical_factor(lexical, config.lexical_floor, config.lexical_ceiling)
    recency = max(config.recency_weight, config.recency_intent_weight) if intent else config.recency_weight
    return QueryEvidence(
        lexical,
        top_agreement(bm25, dense),
        intent,
        factor,
        recency,
        term,
        df,
        rare_rows(snapshot, request, content, term, df),
        dates,
        date_weight,
    )


def rare_rows(
    snapshot: Snapshot, request: Request, content: str, term: str | None, df: int | None
) -> frozenset[int]:
    """The rows the rare-term lift raises: when the query's rarest term is held by at most
    `rare_term_max_df` rows, the allowed ones holding it that match the query fully (lexical
    evidence 1: every query term, so no term the index never saw either)."""
    limit = request.config.rare_term_max_df
    if term is None or df is None or df > limit:
        return frozenset()
    rows = snapshot.sparse.term_rows(term, limit, request.allowed)
    if not len(rows):
        return frozenset()
    evidence = snapshot.sparse.lexical_evidence(content, rows)
    return frozenset(rows[evidence >= FULL_MATCH].tolist())


BASE_FUSION = "convex"  # the formula whose score the learned model corrects (today's default)


def fixed_fusion(
    runs: Mapping[str, Run], config: SearchConfig, tag_factor: float, evidence: QueryEvidence
) -> Run:
    """Fused (hybrid) or single-run scores by the configured formula, weights from alpha, the tag
    factor and the evidence. `fusion="learned"`: its base, the convex combination of every active
    run divided by the sum of their weights, in [0, 1]."""
    mode = config.mode
    weights: dict[str, float] = {}
    if mode == "hybrid":
        assert config.alpha is not None  # resolved by `settings`
        weights = alpha_weights(config.alpha, config.tag_weight * tag_factor)
    weights = weights_with_evidence(weights, evidence.lexical_factor)
    active = [name for name, run in runs.items() if run and weights.get(name, 0.0) > 0]
    if config.fusion == "learned" and active:
        total = sum(weights[name] for name in active)
        fused = fuse(
            BASE_FUSION, {name: runs[name] for name in active}, weights, normalization=config.normalization
        )
        return {row: score / total for row, score in fused.items()}
    if len(active) > 1:
        return fuse(config.fusion, runs, weights, rrf_k=config.rrf_k, normalization=config.normalization)
    if mode == "hybrid":
        # one signal left (alpha 1.0 = dense only; alpha 0.0 without tags = BM25 only): its raw
        # scores, so the ranking and scores are exactly those of mode="vector" / mode="bm25"
        return dict(runs[active[0]]) if active else {}
    return dict(next(iter(runs.values()), {}))


def candidate_features(
    snapshot: Snapshot,
    runs: Mapping[str, Run],
    evidence: QueryEvidence,
    facts: QueryFacts,
    now: datetime,
    config: SearchConfig,
) -> tuple[np.ndarray, np.ndarray]:
    """The candidates (the union of the runs) and their feature matrix (search/features.py)."""
    rows = candidate_rows(runs)
    base = fixed_fusion(runs, dataclasses.replace(config, fusion="learned"), facts.tag_factor, evidence)
    generation = snapshot.generation
    doc_ids = [generation.doc_ids[row] for row in rows.tolist()]
    first = np.fromiter(
        (row == 0 or generation.doc_ids[row - 1] != doc for row, doc in zip(rows.tolist(), doc_ids)),
        bool,
        len(rows),
    )
    days = (now.timestamp() - generation.times[rows]) / 86400.0
    fused = np.fromiter((base.get(row, 0.0) for row in rows.tolist()), np.float64, len(rows))
    return rows, features(runs, evidence, facts, rows, fused, days, doc_ids, first)


def combine(
    snapshot: Snapshot,
    runs: dict[str, Run],
    config: SearchConfig,
    now: datetime,
    evidence: QueryEvidence,
    facts: QueryFacts,
    rankers: Rankers | None,
) -> tuple[list[Hit], int]:
    """Fused (hybrid) or single-run scores, scaled by recency, best first (ties by row), cut at
    `min_score`; and how many rows were scored before that cut. `evidence` scales BM25's weight
    and sets the recency weight (adaptive fusion). `fusion="learned"` (hybrid mode): the model
    `rankers` gives for `learned_model` scores the union of the candidates, squashed to (0, 1)."""
    if config.mode == "hybrid" and config.fusion == "learned" and any(runs.values()):
        ranker = (rankers or (lambda setting: load_ranker(model_path(setting))))(config.learned_model)
        rows, matrix = candidate_features(snapshot, runs, evidence, facts, now, config)
        fused = dict(zip(rows.tolist(), squash(ranker.score(matrix)).tolist()))
    else:
        fused = fixed_fusion(runs, config, facts.tag_factor, evidence)
    if not fused:
        return [], 0
    rows = np.fromiter(fused.keys(), dtype=np.int64, count=len(fused))
    scores = np.fromiter(fused.values(), dtype=np.float64, count=len(fused))
    factors = np.ones(len(rows))
    final = scores  # recency off (the default, `recency_weight` 0): the fused scores as they are
    recency_weight = evidence.recency_weight
    if config.decay > 0 and recency_weight > 0:
        days = (now.timestamp() - snapshot.generation.times[rows]) / 86400.0
        decayed = np.exp(-config.decay * np.clip(days, 0.0, None))
        factors = np.where(np.isnan(decayed), 1.0, decayed)
        final = scores * (1.0 - recency_weight + recency_weight * factors)
    if evidence.date_weight > 0:  # rows created outside the time the query names lose date_weight
        final = final * date_factors(
            snapshot.generation.times[rows], evidence.dates, evidence.date_weight, config.date_grace_days
        )
    lifts = np.zeros(len(rows))
    if evidence.rare_rows:
        # rows holding a rare query term above every row BM25 did not return (dense-only hits)
        rare = np.fromiter((row in evidence.rare_rows for row in rows.tolist()), bool, len(rows))
        bm25 = runs.get("bm25") or {}
        lexical = np.fromiter((row in bm25 for row in rows.tolist()), bool, len(rows))
        lifts[rare] = rare_term_lift(final, rare, lexical)
        final = final + lifts
    order = np.lexsort((rows, -final))
    hits = list(
        map(
            Hit._make,
            zip(
                rows[order].tolist(),
                final[order].tolist(),
                scores[order].tolist(),
                factors[order].tolist(),
                lifts[order].tolist(),
            ),
        )
    )
    n_scored = len(hits)
    if config.min_score is not None:
        hits = [hit for hit in hits if hit.score >= config.min_score]
    return hits, n_scored
