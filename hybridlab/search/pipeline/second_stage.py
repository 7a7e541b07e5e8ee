"""The second stage: the first stage's top `late_depth` hits re-scored by late interaction (MaxSim of
the query's and each chunk's stored token vectors) and combined with their first-stage scores
(:mod:`hybridlab.search.late`)."""

from __future__ import annotations

import dataclasses
import time

from hybridlab.search import late
from hybridlab.search.models import QueryModels
from hybridlab.search.pipeline.records import Retrieval, on_top
from hybridlab.search.snapshot import Snapshot


def late_stage(snapshot: Snapshot, retrieval: Retrieval, models: QueryModels) -> Retrieval:
    """The retrieval with its top `late_depth` hits re-scored by late interaction (`late_model`)
    and re-ordered by :func:`hybridlab.search.late.reorder`. They keep the top places, as the
    rerank step's do; the other hits follow unchanged. Off (the same object back) when `late_depth`
    is 0."""
    config = retrieval.config
    if config.late_depth <= 0 or not retrieval.hits:
        return retrieval
    started = time.perf_counter()
    head, tail = retrieval.hits[: config.late_depth], retrieval.hits[config.late_depth :]
    rows = [hit.row for hit in head]
    scorer = models.late_scorer(snapshot, config.late_model)
    maxsim = scorer.scores(models.late_query(scorer, retrieval.query), snapshot.store.embedded(rows))
    order, mixed = late.reorder(
        rows, [hit.score for hit in head], maxsim, config.late_weight, config.late_combination
    )
    hits = on_top(head, tail, order, mixed)
    timings = {**retrieval.timings, "late_ms": (time.perf_counter() - started) * 1000}
    return dataclasses.replace(
        retrieval, hits=hits, timings=timings, late_scores=dict(zip(rows, maxsim.tolist()))
    )
