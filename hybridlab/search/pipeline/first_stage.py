"""The first stage: the query checked, its settings resolved and encoded, the retrievers run and
fused, widening until `limit` results come back; then dense pseudo-relevance feedback."""

from __future__ import annotations

import dataclasses
import logging
import time
from datetime import datetime
from typing import NamedTuple

import numpy as np

from hybridlab.search.evidence import QueryEvidence
from hybridlab.search.features import QueryFacts
from hybridlab.search.feedback import best_documents, rocchio
from hybridlab.search.models import QueryModels
from hybridlab.search.pipeline.group import best_chunks
from hybridlab.search.pipeline.records import Hit, Request, Retrieval, Run, Search, clean_query, dense_query
from hybridlab.search.pipeline.runs import attempt, fill_dense, staged_dense_run
from hybridlab.search.pipeline.scoring import Rankers, combine, query_evidence
from hybridlab.search.pipeline.settings import query_tags, settings
from hybridlab.search.query_dates import dates_in_query
from hybridlab.search.snapshot import Snapshot

# the engine's log name, kept for the fallback messages: it is what users filter on
logger = logging.getLogger("hybridlab.search.engine")


class Widened(NamedTuple):
    """The last pass of :func:`widen`: every retriever's run, the stage it ended in, its depth, the
    rows the corpus graph added (staged), the query's evidence and the ranked hits."""

    runs: dict[str, Run]
    stage: str
    depth: int
    added: int
    evidence: QueryEvidence
    hits: list[Hit]


def widen(
    snapshot: Snapshot, request: Request, now: datetime, facts: QueryFacts, rankers: Rankers | None
) -> Widened:
    """Run the retrievers and fuse, widening until `limit` results come back or nothing more is
    allowed: staged falls back to parallel, otherwise `depth` (and `candidates`) grow 4x."""
    config = request.config
    n_allowed = request.allowed.count
    staged = config.staged and config.mode == "hybrid" and request.model is not None
    stage = "staged" if staged else "parallel"
    depth = min(max(config.depth, config.limit), max(n_allowed, 1))
    candidates = max(config.candidates, config.limit)  # staged: BM25 rows whose vectors are scored
    while True:
        runs, stage, added, bm25_exhausted = attempt(snapshot, request, stage, depth, candidates)
        evidence = query_evidence(snapshot, request, runs)
        hits, n_scored = combine(snapshot, runs, config, now, evidence, facts, rankers)
        # documents found: the count only, so no document scores here (group computes them once)
        found = (
            len(best_chunks(hits, snapshot.generation.doc_ids, config.limit))
            if config.group_by_document
            else len(hits)
        )
        if found >= config.limit or (n_scored >= config.limit and config.min_score is not None):
            break
        if stage == "staged" and bm25_exhausted:
            # BM25 has no more candidates to offer: only a parallel search can fill `limit`
            stage = "fallback"
            logger.info(
                "staged search fell back to parallel hybrid: %d results < limit %d (query %r)",
                found,
                config.limit,
                request.query[:80],
            )
            continue
        if depth >= n_allowed and (stage != "staged" or candidates >= n_allowed):
            break
        depth, candidates = min(depth * 4, n_allowed), min(candidates * 4, n_allowed)
    return Widened(runs, stage, depth, added, evidence, hits)


def dense_feedback(
    snapshot: Snapshot, request: Request, runs: dict[str, Run], hits: list[Hit], stage: str, depth: int
) -> tuple[dict[str, Run], tuple[int, ...]]:
    """The runs with the dense run of the query moved toward the vectors of the best
    `feedback_docs` documents of `hits` (:func:`~hybridlab.search.feedback.rocchio`), and those
    rows. Staged: the same candidates (BM25, tags, the first dense run) scored and grown along the
    graph again; parallel: a new top `depth`. Unchanged when no hit has a vector."""
    config = request.config
    model, vector = dense_query(request)
    dense = snapshot.dense[model]
    seeds = best_documents((hit.row for hit in hits), snapshot.generation.doc_ids, config.feedback_docs)
    rows, vectors = dense.vectors(np.asarray(seeds, dtype=np.int64))
    if not len(rows):
        return runs, ()
    moved_vector = rocchio(vector, vectors, config.feedback_weight)
    moved = dataclasses.replace(request, vector=moved_vector)
    if stage == "staged":
        pool = np.fromiter(
            {row for name in ("bm25", "tags", "dense") for row in runs.get(name) or ()}, np.int64
        )
        moved_run, _ = staged_dense_run(snapshot, moved, pool, depth)
    else:
        found, scores = dense.search(moved_vector, depth, request.allowed)
        moved_run = dict(zip(found.tolist(), scores.tolist()))
    if config.fill_dense and runs.get("bm25"):
        moved_run = fill_dense(snapshot, moved, moved_run, runs["bm25"])
    return {**runs, "dense": moved_run}, tuple(rows.tolist())


def with_feedback(
    snapshot: Snapshot,
    request: Request,
    found: Widened,
    now: datetime,
    facts: QueryFacts,
    rankers: Rankers | None,
) -> tuple[dict[str, Run], list[Hit], tuple[int, ...]]:
    """(runs, hits, feedback rows) after dense feedback (:func:`dense_feedback`: `feedback_weight`
    > 0, hybrid mode with a dense model); the pass's own runs and hits, and no rows, without it."""
    config = request.config
    if not (
        config.feedback_weight > 0 and config.mode == "hybrid" and request.model is not None and found.hits
    ):
        return found.runs, found.hits, ()
    runs, feedback_rows = dense_feedback(snapshot, request, found.runs, found.hits, found.stage, found.depth)
    if not feedback_rows:
        return runs, found.hits, ()
    hits, _ = combine(snapshot, runs, config, now, found.evidence, facts, rankers)
    return runs, hits, feedback_rows


def retrieve(snapshot: Snapshot, search: Search, models: QueryModels) -> Retrieval:
    """The query checked, its settings resolved and encoded (`models`' query encoder), the
    retrievers run and fused (:func:`widen`), then dense feedback (:func:`with_feedback`); the
    timings of both steps."""
    query, now = clean_query(search.query), search.now
    config, alpha_source, allowed, model = settings(
        snapshot, search.options, search.filters, search.config_file
    )
    rankers: Rankers = models.learned_ranker
    timings: dict[str, float] = {}
    vector = None
    if model is not None:
        started = time.perf_counter()
        vector = models.query_vector(snapshot, model, query)
        timings["encode_ms"] = (time.perf_counter() - started) * 1000
    started = time.perf_counter()
    request = Request(
        query,
        config,
        alpha_source,
        allowed,
        model,
        vector,
        query_tags(snapshot, query, config, search.boost_tags),
        dates_in_query(query, now),
    )
    facts = QueryFacts(len(query.split()), request.tags.factor)
    found = widen(snapshot, request, now, facts, rankers)
    runs, hits, feedback_rows = with_feedback(snapshot, request, found, now, facts, rankers)
    timings["search_ms"] = (time.perf_counter() - started) * 1000
    assert config.alpha is not None  # resolved by `settings`
    return Retrieval(
        query,
        hits,
        runs,
        found.stage if config.mode == "hybrid" else config.mode,
        config.alpha,
        alpha_source,
        config,
        model,
        request.tags,
        timings,
        found.added if found.stage == "staged" else 0,
        evidence=found.evidence,
        feedback_rows=feedback_rows,
        query_dense=(found.runs.get("dense") or {}) if feedback_rows else {},
        facts=facts,
        now=now,
    )
