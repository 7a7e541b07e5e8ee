"""Features of (query, candidate) pairs for learned fusion: a pure, vectorised function.
See docs/internals/search.md#features."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from hybridlab.search.evidence import EVIDENCE_DEPTH, QueryEvidence

RETRIEVERS = ("dense", "bm25", "tags")
RANK_K = 60  # the constant of the rank feature 1 / (RANK_K + rank)
PER_RETRIEVER = ("score", "norm", "rank", "present")
FEATURE_NAMES: tuple[str, ...] = (
    *(f"{name}_{kind}" for name in RETRIEVERS for kind in PER_RETRIEVER),
    "dense_gap",
    "bm25_ratio",
    "both_top10",
    "n_retrievers",
    "rare_row",
    "lexical_evidence",
    "agreement",
    "recency_intent",
    "rare_term_df",
    "query_terms",
    "tag_factor",
    "dense_top",
    "bm25_top",
    "newness",
    "first_chunk",
    "doc_candidates",
    "fused",
)
FUSED = FEATURE_NAMES.index("fused")  # the base fusion's score in [0, 1] (the model corrects it)


@dataclass(frozen=True)
class QueryFacts:
    """What the features need to know of the query beyond its runs and evidence."""

    terms: int = 0  # words in the query
    tag_factor: float = 1.0  # the tag run's strength (boost x coverage of the query's words)


def candidate_rows(runs: Mapping[str, Mapping[int, float]]) -> np.ndarray:
    """The union of the runs' rows, ascending (int64)."""
    keys = [np.fromiter(run.keys(), np.int64, len(run)) for run in runs.values() if run]
    return np.unique(np.concatenate(keys)) if keys else np.zeros(0, np.int64)


def _columns(run: Mapping[int, float] | None, rows: np.ndarray) -> tuple[np.ndarray, ...]:
    """(raw, min-max, 1/(k+rank), present) of one run over `rows`; zeros where a row is absent."""
    n = len(rows)
    raw, norm, rank, present = np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n)
    if run:
        keys = np.fromiter(run.keys(), np.int64, len(run))
        values = np.fromiter(run.values(), np.float64, len(run))
        order = np.lexsort((keys, -values))  # best first, ties by row
        ranks = np.empty(len(keys))
        ranks[order] = np.arange(1, len(keys) + 1)
        at = np.searchsorted(rows, keys)
        low, high = values.min(), values.max()
        raw[at], present[at], rank[at] = values, 1.0, 1.0 / (RANK_K + ranks)
        norm[at] = 1.0 if high == low else (values - low) / (high - low)
    return raw, norm, rank, present


def _newness(days: np.ndarray) -> np.ndarray:
    """1 for the newest candidate, 0 for the oldest or undated, linear in age between."""
    known = ~np.isnan(days)
    if not known.any() or np.ptp(days[known]) == 0:
        return np.zeros(len(days))
    low, high = days[known].min(), days[known].max()
    return np.where(known, (high - np.nan_to_num(days, nan=high)) / (high - low), 0.0)


def features(
    runs: Mapping[str, Mapping[int, float]],
    evidence: QueryEvidence,
    query: QueryFacts,
    rows: np.ndarray,
    fused: np.ndarray,
    days: np.ndarray,
    doc_ids: Sequence[str],
    first_chunk: np.ndarray,
) -> np.ndarray:
    """The float32 matrix (len(rows) x len(FEATURE_NAMES)) of the candidates `rows`; `fused` = the
    base fusion's score of each row in [0, 1], `days` = each row's age in days (NaN: unknown),
    `doc_ids` / `first_chunk` = each row's document and whether it is that document's first chunk."""
    n = len(rows)
    columns: list[np.ndarray] = []
    per: dict[str, tuple[np.ndarray, ...]] = {}
    for name in RETRIEVERS:
        raw, norm, rank, present = per[name] = _columns(runs.get(name), rows)
        columns += [np.log1p(np.maximum(raw, 0.0)) if name == "bm25" else raw, norm, rank, present]
    dense, bm25 = per["dense"], per["bm25"]
    dense_top = float(dense[0].max()) if dense[3].any() else 0.0
    bm25_top = float(bm25[0].max()) if bm25[3].any() else 0.0
    top = 1.0 / (RANK_K + EVIDENCE_DEPTH)
    counts = Counter(doc_ids)
    query_level = [
        evidence.lexical if evidence.lexical is not None else -1.0,
        evidence.agreement if evidence.agreement is not None else -1.0,
        float(evidence.recency_intent),
        np.log1p(evidence.rare_term_df) if evidence.rare_term_df is not None else -1.0,
        float(query.terms),
        query.tag_factor,
        dense_top,
        np.log1p(max(bm25_top, 0.0)),
    ]
    columns += [
        np.where(dense[3] > 0, dense_top - dense[0], 2.0),
        bm25[0] / bm25_top if bm25_top > 0 else np.zeros(n),
        ((dense[2] >= top) & (bm25[2] >= top)).astype(np.float64),
        dense[3] + bm25[3] + per["tags"][3],
        np.fromiter((row in evidence.rare_rows for row in rows.tolist()), np.float64, n)
        if evidence.rare_rows
        else np.zeros(n),
        *(np.full(n, value, np.float64) for value in query_level),
        _newness(days),
        np.asarray(first_chunk, np.float64),
        np.fromiter((counts[doc] for doc in doc_ids), np.float64, n),
        np.clip(fused, 0.0, 1.0),
    ]
    return np.column_stack(columns).astype(np.float32) if n else np.zeros((0, len(FEATURE_NAMES)), np.float32)
