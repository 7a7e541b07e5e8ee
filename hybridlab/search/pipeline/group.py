"""The group step: one hit per document (its best chunk, or all its chunks' scores decayed), at most
`limit` documents; off when `group_by_document` is false."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from hybridlab.config import SearchConfig
from hybridlab.search.pipeline.records import Hit, Retrieval
from hybridlab.search.snapshot import Snapshot


def by_document(snapshot: Snapshot, retrieval: Retrieval) -> Retrieval:
    """The retrieval with its hits grouped by document (:func:`group`) when `group_by_document`;
    the same object back otherwise."""
    config = retrieval.config
    if not config.group_by_document:
        return retrieval
    return dataclasses.replace(retrieval, hits=group(snapshot, retrieval.hits, config))


def group(snapshot: Snapshot, hits: list[Hit], config: SearchConfig) -> list[Hit]:
    """Best chunk per document, in score order, at most `limit`. With `chunk_decay` > 0 (hybrid
    mode) a document scores by all its chunks (:func:`document_scores`); when no two hits share a
    document (one chunk per document: memories, abstracts) that is the same, and skipped."""
    doc_ids = snapshot.generation.doc_ids
    if (
        config.chunk_decay > 0
        and config.mode == "hybrid"
        and len({doc_ids[hit.row] for hit in hits}) < len(hits)
    ):
        return document_scores(hits, doc_ids, config.chunk_decay)[: config.limit]
    return best_chunks(hits, doc_ids, config.limit)


def best_chunks(hits: Sequence[Hit], doc_ids: Sequence[str], limit: int) -> list[Hit]:
    """The first hit of each document, in the given order, at most `limit` (as many documents as
    :func:`group` returns, whatever `chunk_decay`)."""
    first: dict[str, Hit] = {}
    for hit in hits:
        first.setdefault(doc_ids[hit.row], hit)
        if len(first) >= limit:
            break
    return list(first.values())


def document_scores(hits: Sequence[Hit], doc_ids: Sequence[str], decay: float) -> list[Hit]:
    """One hit per document, its best chunk, scored `s_1 + decay * s_2 + decay^2 * s_3 + ...` over
    its chunks' scores best first (negative ones count 0), documents best first (ties by row):
    a document with several matching sections beats one with a single equally good one, and
    `decay` 0 is the best chunk alone (MaxP; Dai & Callan 2019 compare MaxP and SumP)."""
    best: dict[str, Hit] = {}
    total: dict[str, float] = {}
    weight: dict[str, float] = {}
    for hit in hits:  # best first
        doc_id = doc_ids[hit.row]
        if doc_id not in best:
            best[doc_id], total[doc_id], weight[doc_id] = hit, hit.score, decay
        else:
            total[doc_id] += weight[doc_id] * max(hit.score, 0.0)
            weight[doc_id] *= decay
    order = sorted(best, key=lambda doc_id: (-total[doc_id], best[doc_id].row))
    return [best[doc_id]._replace(score=total[doc_id]) for doc_id in order]
