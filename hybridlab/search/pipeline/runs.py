"""The retrievers' runs at one depth: BM25, dense (parallel, or staged over BM25's candidates and the
corpus graph) and the tag run, each `{row: score}` over the rows the filters allow."""

from __future__ import annotations

import logging

import numpy as np

from hybridlab.search.pipeline.records import Request, Run, dense_query
from hybridlab.search.snapshot import Snapshot

# the engine's log name, kept for the fallback messages: it is what users filter on
logger = logging.getLogger("hybridlab.search.engine")


TAG_TIEBREAK = 1e-3


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
    model, vector = dense_query(request)
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
    model, vector = dense_query(request)
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
        model, vector = dense_query(request)
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
