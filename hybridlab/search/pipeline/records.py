"""What flows through the pipeline: the search asked for, the resolved request, the scored hits and
the Retrieval every step returns (a new one: never mutated)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from itertools import pairwise
from typing import Any, NamedTuple

import numpy as np

from hybridlab.config import SearchConfig
from hybridlab.errors import InvalidValueError
from hybridlab.search.evidence import QueryEvidence
from hybridlab.search.features import QueryFacts
from hybridlab.search.filters import Filters
from hybridlab.search.query_dates import QueryDates
from hybridlab.search.retrievers import RowFilter

MAX_QUERY_CHARS = 10_000
#: what a result carries besides its snippet: nothing, its chunk's text, or its document's whole text
CONTENTS = ("snippet", "chunk", "full")


@dataclass(frozen=True, eq=False)
class Search:
    """What one search asks for, before anything is resolved: the query as given, search options
    (any SearchConfig field, plus `embedding_model` and `language`), the filters, explicit tags
    (None: those the query names), the reference time of recency, the index's config file and the
    text each result carries besides its snippet (:data:`CONTENTS`)."""

    query: str
    options: Mapping[str, Any]
    filters: Filters
    boost_tags: Sequence[str] | None
    now: datetime
    config_file: Mapping[str, Any]
    content: str = "snippet"

    def __post_init__(self) -> None:
        if self.content not in CONTENTS:
            raise InvalidValueError(
                f"unknown content {self.content!r}; choose from {list(CONTENTS)}", field="content"
            )


Run = dict[int, float]  # row -> score of one retriever


class Hit(NamedTuple):
    """A scored row: final score, fused score before recency, recency factor, what the rare-term
    lift added (a tuple: one is built per fused row, so it must be cheap)."""

    row: int
    score: float
    fused: float
    recency: float
    lift: float = 0.0


@dataclass(frozen=True)
class QueryTags:
    """The index's tags and collections a query names (or explicit tags), with the tag weight's
    `boost` (enough matched words) and `coverage` (share of the query's words they cover)."""

    tags: tuple[str, ...] = ()
    collections: tuple[str, ...] = ()
    boost: float = 1.0
    coverage: float = 1.0
    information: float = 1.0  # :func:`tag_information` of the most telling tag the query names

    @property
    def factor(self) -> float:
        """What the tag weight is multiplied by for this query."""
        return self.boost * self.coverage * self.information


@dataclass(frozen=True, eq=False)
class Request:
    """A query with everything resolved that does not depend on how deep the retrievers look."""

    query: str
    config: SearchConfig
    alpha_source: str
    allowed: RowFilter
    model: str | None  # the dense model; None without a dense signal
    vector: np.ndarray | None
    tags: QueryTags
    dates: QueryDates | None = None  # the time the query's words name (search/query_dates.py)


def dense_query(request: Request) -> tuple[str, np.ndarray]:
    """The dense model and query vector of a request with a dense signal (set together)."""
    assert request.model is not None and request.vector is not None
    return request.model, request.vector


@dataclass(frozen=True, eq=False)
class Retrieval:
    """Ranked hits (cut to `limit` documents by the group step, to `limit` results by hydrate), each
    retriever's run, what each re-scoring step found, and how."""

    query: str  # checked by :func:`clean_query`
    hits: list[Hit]
    runs: dict[str, Run]
    mode: str  # parallel / staged / fallback (hybrid) or vector / bm25 / tags
    alpha: float
    alpha_source: str
    config: SearchConfig
    model: str | None
    tags: QueryTags  # what the query names, and the tag weight's boost and coverage
    timings: dict[str, float]
    graph_added: int = 0  # staged: candidates the corpus graph added to the BM25 pool
    reranked: Mapping[int, float] = field(default_factory=dict)  # row -> cross-encoder score (rerank step)
    evidence: QueryEvidence = field(default_factory=QueryEvidence)  # the query's signals (adaptive fusion)
    feedback_rows: tuple[int, ...] = ()  # dense feedback: the rows whose vectors moved the query
    query_dense: Run = field(default_factory=dict)  # dense feedback: the dense run of the query itself
    facts: QueryFacts = field(
        default_factory=QueryFacts
    )  # what the learned fusion's features know of the query
    now: datetime | None = None  # the reference time of recency
    late_scores: Mapping[int, float] = field(default_factory=dict)  # row -> MaxSim (second stage)


def clean_query(query: str) -> str:
    """The query, checked (non-empty, at most MAX_QUERY_CHARS) and safe for the encoders."""
    if not isinstance(query, str) or not query.strip():
        raise InvalidValueError("empty query: give some words to search for", field="query")
    if len(query) > MAX_QUERY_CHARS:
        raise InvalidValueError(
            f"query too long: {len(query)} characters (at most {MAX_QUERY_CHARS})", field="query"
        )
    if not query.isascii():  # lone surrogates (possible from JSON "\ud800") break the encoders
        query = query.encode("utf-8", "replace").decode("utf-8")
    return query


def in_rank_order(hits: Sequence[Hit]) -> bool:
    """The pipeline's invariant on hits: best first (scores never rise down the list)."""
    return all(a.score >= b.score for a, b in pairwise(hits))


def on_top(head: Sequence[Hit], tail: list[Hit], order: np.ndarray, scores: np.ndarray) -> list[Hit]:
    """A re-scoring step's result: the `head` hits in `order` with their new `scores` (in that
    order), each lifted by `1 + max(0, best score of the tail)` so they stay above the `tail`, which
    follows unchanged: the run stays in rank order."""
    lift = 1.0 + max(0.0, max((hit.score for hit in tail), default=0.0))
    return [head[i]._replace(score=float(lift + s)) for i, s in zip(order.tolist(), scores.tolist())] + tail
