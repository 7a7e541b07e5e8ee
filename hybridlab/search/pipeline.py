"""One search over one snapshot, as a pipeline of small steps.
See docs/internals/search.md#pipeline.

The steps, in order (:func:`ranked` runs them; :func:`hydrate` turns the hits into results):

| step | function | reads | adds to the Retrieval |
|---|---|---|---|
| settings | :func:`settings` | options, config file, the index's size | the resolved SearchConfig |
| encode | :func:`retrieve` | QueryModels.query_vector | the dense query vector |
| retrieve + fuse | :func:`widen` | the retrievers of the snapshot | runs, fused hits |
| dense feedback | :func:`with_feedback` | the dense retriever | moved query's run |
| second stage | :func:`late_stage` | QueryModels.late_scorer, token store | MaxSim of the head |
| rerank | :func:`rerank` | QueryModels.rerank_scores, chunk texts | cross-encoder scores |
| group | :func:`group` | doc ids | one hit per document |
| hydrate | :func:`hydrate` | the store | SearchResults |

Invariant: every step reads one snapshot and the QueryModels it is given, and returns a new
Retrieval (never mutated); no step calls back into the `Index`. A re-scoring step (second stage,
rerank) keeps the hits it re-scored above the rest, so the ranking stays in score order."""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

import numpy as np

from hybridlab.config import SearchConfig, resolve_auto, resolve_search_config
from hybridlab.encoders.late import canonical_late_name
from hybridlab.encoders.registry import canonical_name
from hybridlab.errors import InvalidValueError
from hybridlab.search import late
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
from hybridlab.search.features import FEATURE_NAMES, QueryFacts, candidate_rows, features
from hybridlab.search.feedback import best_documents, rocchio
from hybridlab.search.filters import Filters
from hybridlab.search.fusion import alpha_weights, fuse
from hybridlab.search.learned import Ranker, load_ranker, model_path, squash
from hybridlab.search.models import QueryModels
from hybridlab.search.query_dates import QueryDates, date_factors, dates_in_query
from hybridlab.search.results import SearchResult, iso_utc, make_snippet
from hybridlab.search.retrievers import RowFilter
from hybridlab.search.snapshot import Snapshot
from hybridlab.search.tags import resolve_tags

# the engine's log name, kept for the fallback messages: it is what users filter on
logger = logging.getLogger("hybridlab.search.engine")

MAX_QUERY_CHARS = 10_000
TAG_TIEBREAK = 1e-3
FULL_MATCH = 1.0 - 1e-9  # lexical evidence of a row holding every query term (a sum of IDF shares)

Encode = Callable[[str, str], np.ndarray]  # (model, query) -> query vector
Rerank = Callable[[str, str, list[str]], np.ndarray]  # (rerank model, query, passages) -> one score each
Run = dict[int, float]  # row -> score of one retriever
Rankers = Callable[[str], Ranker]  # learned_model setting -> the loaded model (owned by the Index)


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


def _dense_query(request: Request) -> tuple[str, np.ndarray]:
    """The dense model and query vector of a request with a dense signal (set together)."""
    assert request.model is not None and request.vector is not None
    return request.model, request.vector


@dataclass(frozen=True, eq=False)
class Retrieval:
    """Ranked hits (not yet grouped or cut to `limit`), each retriever's run, and how they were found."""

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


# ------------------------------------------------------------------------------------ settings
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


def choose_model(
    snapshot: Snapshot, config_file: Mapping[str, Any], embedding_model: str | None, language: str | None
) -> str:
    """embedding_model > language (via the index's language table) > the index's single model."""
    if embedding_model:
        name = canonical_name(embedding_model)
        if name not in snapshot.dense:
            raise InvalidValueError(
                f"the index has no vectors of {name!r}; it has {snapshot.models}", field="embedding_model"
            )
        return name
    if language:
        table = dict(snapshot.generation.manifest.index_config.model_by_language)
        table.update(config_file.get("language_models", {}))
        if language not in table:
            raise InvalidValueError(
                f"no embedding model configured for language {language!r}; "
                f"known languages: {sorted(table)}; or pass embedding_model",
                field="language",
            )
        return choose_model(snapshot, config_file, table[language], None)
    if len(snapshot.dense) == 1:
        return next(iter(snapshot.dense))
    if not snapshot.dense:
        raise InvalidValueError("the index has no embedding vectors; use mode='bm25'")
    raise InvalidValueError(
        f"the index holds vectors of several models {snapshot.models}; choose one with "
        f"embedding_model=... (CLI --embedding-model) or language=... (CLI --language)"
    )


def stores_late(snapshot: Snapshot, model: str) -> bool:
    """Whether the index records token vectors of late-interaction model `model`."""
    return canonical_late_name(model) in snapshot.generation.manifest.late


def settings(
    snapshot: Snapshot, options: Mapping[str, Any], filters: Filters, config_file: Mapping[str, Any]
) -> tuple[SearchConfig, str, RowFilter, str | None]:
    """The search settings (auto values resolved) and where alpha came from, the rows the filters
    allow, and the dense model (None when no dense signal is asked for)."""
    options = dict(options)
    embedding_model = options.pop("embedding_model", None)
    language = options.pop("language", None)
    config, sources = resolve_search_config(
        options,
        config_file=config_file,
        n_chunks=snapshot.n_chunks,
        memory_share=snapshot.generation.memory_share,
    )
    config = resolve_auto(config, snapshot.n_chunks)
    if sources["late_depth"] == "default" and (
        config.mode != "hybrid" or not stores_late(snapshot, config.late_model)
    ):
        # the default second stage re-scores hybrid searches (where it was measured) on an index
        # that stores its token vectors; asked for explicitly, it re-scores any mode and encodes
        # the candidates that have no stored vectors (slower, same scores)
        config = dataclasses.replace(config, late_depth=0)
    assert config.alpha is not None  # `resolve_search_config` fills an unset alpha (adaptive)
    allowed = snapshot.store.allowed(filters)
    needs_dense = config.mode == "vector" or (config.mode == "hybrid" and config.alpha > 0)
    model = choose_model(snapshot, config_file, embedding_model, language) if needs_dense else None
    return config, sources["alpha"], allowed, model


#: a tag worn by at most this share of the rows tells fully which rows a query means; one worn by
#: at least the other share tells nothing (it splits the rows no better than a coin)
TELLING_TAG_SHARE, UNTELLING_TAG_SHARE = 0.1, 0.5


def tag_information(share: float) -> float:
    """How much naming a tag worn by `share` of the rows says about which row is meant, in [0, 1]:
    1.0 up to :data:`TELLING_TAG_SHARE`, 0.0 from :data:`UNTELLING_TAG_SHARE`, log-linear in the
    tag's IDF between (`log(0.5 / share) / log(0.5 / 0.1)`: 0.57 at 20%, 0.32 at 30%). A speaker's
    name on half of a two-person conversation's turns, or a tag on most memories, must not outvote
    the text signals (LoCoMo: questions that name the wrong speaker, docs/evaluation.md#memory-benchmarks);
    a project tag on 9% of the memories keeps its full weight."""
    if share <= TELLING_TAG_SHARE:
        return 1.0
    if share >= UNTELLING_TAG_SHARE:
        return 0.0
    return math.log(UNTELLING_TAG_SHARE / share) / math.log(UNTELLING_TAG_SHARE / TELLING_TAG_SHARE)


def query_tags(
    snapshot: Snapshot, query: str, config: SearchConfig, boost_tags: Sequence[str] | None
) -> QueryTags:
    """The tags (and collections) the query names, or the explicit `boost_tags` as given."""
    if boost_tags is None:
        match = snapshot.tag_vocabulary.extract(query)
        tags, matched_terms, coverage = match.tags, match.matched_terms, match.coverage
        collections = tuple(snapshot.collection_vocabulary.extract(query).tags)
    else:
        tags, matched_terms, coverage = (
            resolve_tags(boost_tags, snapshot.tag_vocabulary),
            len(boost_tags),
            1.0,
        )
        collections = ()
    boost = config.tag_boost if matched_terms >= config.tag_boost_min_terms else 1.0
    information = 1.0
    if boost_tags is None and tags and not collections:  # named by the query, not given: how telling
        rows = snapshot.generation.tag_rows
        information = max(
            tag_information(len(rows[tag]) / max(snapshot.n_chunks, 1)) if tag in rows else 1.0
            for tag in tags
        )
    return QueryTags(tuple(tags), collections, boost, coverage, information)


# ------------------------------------------------------------------------------------ retrievers
def tag_counts(snapshot: Snapshot, request: Request) -> np.ndarray | None:
    """Per row, the tag score of :func:`tag_run` (0 = no query tag, or filtered out); None when the
    query names no tag or collection."""
    named = request.tags
    if not named.tags and not named.collections:
        return None
    counts = np.zeros(snapshot.n_chunks, dtype=np.float64)
    for tag in named.tags:
        rows = snapshot.generation.tag_rows.get(tag)
        if rows is not None:
            counts[rows] += snapshot.tag_specificity[tag]
    for name in named.collections:
        counts[snapshot.collection_rows[name]] += 1.0
    mask = request.allowed.mask
    if mask is not None:
        counts[~mask] = 0.0
    return counts


def tag_run(snapshot: Snapshot, request: Request, depth: int, counts: np.ndarray | None) -> Run:
    """Rows carrying the query's tags (or in a collection the query names), scored by how many of
    them match: + the tag's specificity (1 / sqrt(number of collections wearing it)) per matching
    tag, +1 when the chunk's collection is named. Under rank fusion (RRF) equal counts are ordered
    by the chunk's cosine similarity to the query (added as `0.001 * (1 + cos) / 2`, which never
    outweighs one more matching tag), so RRF does not rank them by row id; score fusions see the
    plain counts (`counts`: :func:`tag_counts`)."""
    if counts is None:
        return {}
    rows = np.flatnonzero(counts)
    if not len(rows):
        return {}
    scores = counts[rows]
    if request.model is not None and request.vector is not None and request.config.fusion == "rrf":
        scored, cosine = snapshot.dense[request.model].score(request.vector, rows)
        similarity = np.zeros(len(rows))
        similarity[np.isin(rows, scored)] = (1.0 + cosine) / 2.0
        scores = scores + TAG_TIEBREAK * np.clip(similarity, 0.0, 1.0)
    if len(rows) > depth:
        keep = np.lexsort((rows, -scores))[:depth]
        rows, scores = rows[keep], scores[keep]
    return dict(zip(rows.tolist(), scores.tolist()))


def staged_dense_run(
    snapshot: Snapshot, request: Request, candidate_rows: np.ndarray, depth: int
) -> tuple[Run, int]:
    """Exact dense scores of the staged candidates, grown along the corpus graph by `expand_hops`
    hops from the `expand_seeds` best; the top `depth` and how many rows the graph added."""
    config = request.config
    model, vector = _dense_query(request)
    rows, scores, added = snapshot.dense[model].score_pool(
        vector,
        candidate_rows,
        hops=config.expand_hops,
        seeds=config.expand_seeds,
        allowed=request.allowed,
    )
    order = np.lexsort((rows, -scores))[:depth]
    return dict(zip(rows[order].tolist(), scores[order].tolist())), added


def fill_dense(snapshot: Snapshot, request: Request, dense_run: Run, bm25_run: Run) -> Run:
    """The dense run plus the exact cosine of every BM25 candidate it lacks (from stored
    vectors): such a chunk then counts with what it really scores instead of as missing."""
    missing = np.fromiter((row for row in bm25_run if row not in dense_run), np.int64)
    if not len(missing):
        return dense_run
    model, vector = _dense_query(request)
    rows, cosine = snapshot.dense[model].score(vector, missing)
    return {**dense_run, **dict(zip(rows.tolist(), cosine.tolist()))}


def attempt(
    snapshot: Snapshot, request: Request, stage: str, depth: int, candidates: int
) -> tuple[dict[str, Run], str, int, bool]:
    """Every retriever's run at this `depth` (`candidates` for staged BM25): (runs, stage, rows
    the graph added, whether BM25 ran out of hits). Staged turns into "fallback" here when BM25
    finds fewer than `fallback_threshold` hits."""
    config, allowed = request.config, request.allowed
    mode = config.mode
    runs: dict[str, Run] = {}
    bm25_exhausted = False
    if mode in {"hybrid", "bm25"}:
        width = candidates if stage == "staged" else depth
        rows, scores = snapshot.sparse.search(request.query, width, allowed)
        runs["bm25"] = dict(zip(rows.tolist(), scores.tolist()))
        bm25_exhausted = len(rows) < width
    counts = tag_counts(snapshot, request) if mode in {"hybrid", "tags"} else None
    if mode in {"hybrid", "tags"}:
        runs["tags"] = tag_run(snapshot, request, depth, counts)
    if stage == "staged" and len(runs["bm25"]) < config.fallback_threshold:
        stage = "fallback"
        logger.info(
            "staged search fell back to parallel hybrid: BM25 found %d < %d hits (query %r)",
            len(runs["bm25"]),
            config.fallback_threshold,
            request.query[:80],
        )
    added = 0
    if stage == "staged":
        pool = np.union1d(
            np.fromiter(runs["bm25"], np.int64, len(runs["bm25"])),
            np.fromiter(runs["tags"], np.int64, len(runs["tags"])),
        )
        runs["dense"], added = staged_dense_run(snapshot, request, pool, depth)
        if len(runs["bm25"]) > depth:
            runs["bm25"] = dict(list(runs["bm25"].items())[:depth])
    elif request.model is not None:
        model, vector = _dense_query(request)
        rows, scores = snapshot.dense[model].search(vector, depth, allowed)
        runs["dense"] = dict(zip(rows.tolist(), scores.tolist()))
    if config.fill_dense and mode == "hybrid" and request.model is not None and runs.get("bm25"):
        runs["dense"] = fill_dense(snapshot, request, runs["dense"], runs["bm25"])
    if mode == "hybrid" and config.fusion != "rrf" and len(runs.get("tags") or ()) >= depth:
        assert counts is not None  # counted for every hybrid search
        runs["tags"] = with_candidate_tags(runs, counts)
    return runs, stage, added, bm25_exhausted


def with_candidate_tags(runs: dict[str, Run], counts: np.ndarray) -> Run:
    """The tag run cut at `depth` plus every BM25 or dense candidate with a tag score outside it
    (more rows wear the query's tags than that; the cut keeps the first rows of equal count): under
    a score fusion the tag signal is a per-row bonus, and a candidate must not lose it to its row
    number (a store's newest memories would, behind its oldest)."""
    tags = runs["tags"]
    rows = np.fromiter(
        {row for name in ("bm25", "dense") for row in runs.get(name) or () if row not in tags}, np.int64
    )
    scores = counts[rows]
    keep = np.flatnonzero(scores)
    return {**tags, **dict(zip(rows[keep].tolist(), scores[keep].tolist()))} if len(keep) else tags


# ------------------------------------------------------------------------------------ evidence
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


# ------------------------------------------------------------------------------------ feedback
def dense_feedback(
    snapshot: Snapshot, request: Request, runs: dict[str, Run], hits: list[Hit], stage: str, depth: int
) -> tuple[dict[str, Run], tuple[int, ...]]:
    """The runs with the dense run of the query moved toward the vectors of the best
    `feedback_docs` documents of `hits` (:func:`~hybridlab.search.feedback.rocchio`), and those
    rows. Staged: the same candidates (BM25, tags, the first dense run) scored and grown along the
    graph again; parallel: a new top `depth`. Unchanged when no hit has a vector."""
    config = request.config
    model, vector = _dense_query(request)
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


# ------------------------------------------------------------------------------------ fusion
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


# ------------------------------------------------------------------------------------ the loop
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


def retrieve(
    snapshot: Snapshot,
    query: str,
    options: Mapping[str, Any],
    filters: Filters,
    boost_tags: Sequence[str] | None,
    now: datetime,
    config_file: Mapping[str, Any],
    encode: Encode,
    rankers: Rankers | None = None,
) -> Retrieval:
    """The query checked, its settings resolved and encoded, the retrievers run and fused
    (:func:`widen`), then dense feedback (:func:`with_feedback`); the timings of both steps."""
    query = clean_query(query)
    config, alpha_source, allowed, model = settings(snapshot, options, filters, config_file)
    timings: dict[str, float] = {}
    vector = None
    if model is not None:
        started = time.perf_counter()
        vector = encode(model, query)
        timings["encode_ms"] = (time.perf_counter() - started) * 1000
    started = time.perf_counter()
    request = Request(
        query,
        config,
        alpha_source,
        allowed,
        model,
        vector,
        query_tags(snapshot, query, config, boost_tags),
        dates_in_query(query, now),
    )
    facts = QueryFacts(len(query.split()), request.tags.factor)
    found = widen(snapshot, request, now, facts, rankers)
    runs, hits, feedback_rows = with_feedback(snapshot, request, found, now, facts, rankers)
    timings["search_ms"] = (time.perf_counter() - started) * 1000
    assert config.alpha is not None  # resolved by `settings`
    return Retrieval(
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


# ------------------------------------------------------------------------------------ rerank
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


def on_top(head: Sequence[Hit], tail: list[Hit], order: np.ndarray, scores: np.ndarray) -> list[Hit]:
    """A re-scoring step's result: the `head` hits in `order` with their new `scores` (in that
    order), each lifted by `1 + max(0, best score of the tail)` so they stay above the `tail`, which
    follows unchanged: the run stays in rank order."""
    lift = 1.0 + max(0.0, max((hit.score for hit in tail), default=0.0))
    return [head[i]._replace(score=float(lift + s)) for i, s in zip(order.tolist(), scores.tolist())] + tail


def rerank(snapshot: Snapshot, retrieval: Retrieval, query: str, score: Rerank) -> Retrieval:
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
        score(config.rerank_model, clean_query(query), snapshot.store.passages(rows)), dtype=np.float64
    )
    mix = rerank_mix(np.array([hit.score for hit in head]), cross, config.rerank_weight)
    order = np.lexsort((np.asarray(rows), -mix))
    hits = on_top(head, tail, order, mix[order])
    timings = {**retrieval.timings, "rerank_ms": (time.perf_counter() - started) * 1000}
    return dataclasses.replace(
        retrieval, hits=hits, timings=timings, reranked=dict(zip(rows, cross.tolist()))
    )


# ------------------------------------------------------------------------------------ second stage
def late_stage(snapshot: Snapshot, retrieval: Retrieval, query: str, models: QueryModels) -> Retrieval:
    """The retrieval with its top `late_depth` hits re-scored by late interaction (MaxSim of the
    query's and each chunk's stored token vectors, `late_model`) and re-ordered by
    :func:`hybridlab.search.late.reorder`. They keep the top places, as the rerank step's do; the
    other hits follow unchanged. Off (the same object back) when `late_depth` is 0."""
    config = retrieval.config
    if config.late_depth <= 0 or not retrieval.hits:
        return retrieval
    started = time.perf_counter()
    head, tail = retrieval.hits[: config.late_depth], retrieval.hits[config.late_depth :]
    rows = [hit.row for hit in head]
    scorer = models.late_scorer(snapshot, config.late_model)
    maxsim = scorer.scores(models.late_query(scorer, clean_query(query)), snapshot.store.embedded(rows))
    order, mixed = late.reorder(
        rows, [hit.score for hit in head], maxsim, config.late_weight, config.late_combination
    )
    hits = on_top(head, tail, order, mixed)
    timings = {**retrieval.timings, "late_ms": (time.perf_counter() - started) * 1000}
    return dataclasses.replace(
        retrieval, hits=hits, timings=timings, late_scores=dict(zip(rows, maxsim.tolist()))
    )


def ranked(
    snapshot: Snapshot,
    query: str,
    options: Mapping[str, Any],
    filters: Filters,
    boost_tags: Sequence[str] | None,
    now: datetime,
    config_file: Mapping[str, Any],
    models: QueryModels,
) -> tuple[Retrieval, list[Hit]]:
    """One search's ranking on one snapshot, every step in order (the table in this module's
    docstring): retrieve, second stage, rerank, group. The retrieval keeps what each step found."""
    retrieval = retrieve(
        snapshot,
        query,
        options,
        filters,
        boost_tags,
        now,
        config_file,
        lambda model, text: models.query_vector(snapshot, model, text),
        models.learned_ranker,
    )
    retrieval = late_stage(snapshot, retrieval, query, models)
    retrieval = rerank(snapshot, retrieval, query, models.rerank_scores)
    config = retrieval.config
    return retrieval, group(snapshot, retrieval.hits, config) if config.group_by_document else retrieval.hits


# ------------------------------------------------------------------------------------ results
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


def hydrate(
    snapshot: Snapshot, hits: list[Hit], retrieval: Retrieval, query: str, with_explain: bool
) -> list[SearchResult]:
    """SearchResults of the hits, ranked from 1: texts, tags and dates from the store, snippets."""
    if not hits:
        return []
    generation = snapshot.generation
    details = snapshot.store.details([hit.row for hit in hits])
    table = feature_table(snapshot, retrieval) if with_explain else None  # once, not per hit
    results = []
    for rank, (hit, (text, doc_tags, when)) in enumerate(zip(hits, details), start=1):
        row = hit.row
        results.append(
            SearchResult(
                rank=rank,
                doc_id=generation.doc_ids[row],
                chunk_id=int(generation.chunk_ids[row]),
                title=generation.titles[row],
                section=generation.sections[row],
                score=round(hit.score, 6),
                snippet=make_snippet(text, query, retrieval.config.snippet_chars),
                collection=generation.collections[row],
                chunk_type=generation.chunk_types[row],
                tags=tuple(doc_tags or ()),
                updated_at=iso_utc(when),
                explain=explain(snapshot, hit, retrieval, table) if with_explain else None,
            )
        )
    return results
