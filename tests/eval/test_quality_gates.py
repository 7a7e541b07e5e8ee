"""Quality gates: real retrieval on real data (`pytest tests/eval`, marked slow).

Indexes come from `ensure_index` (built once into .cache/indexes, then reused). Every threshold
below is written next to the numbers it was set from, measured on this machine with
`.venv/bin/python -m pytest tests/eval -q` (see reports/quality/ for the full tables).
"""
from __future__ import annotations

import pytest

from hybridlab.eval.evaluate import top_overlap
from hybridlab.reports.engine import mean_shares, project_queries

pytestmark = pytest.mark.slow

# --------------------------------------------------------------------------- SciFact (BEIR test, 300 queries)
# Published references (bm25s README / our plain-library runs in shared/ENVIRONMENT.md):
# BM25 Lucene k1=1.5 b=0.75, English stemmer + stopwords, title + text: nDCG@10 0.687 (0.6863 here);
# all-MiniLM-L6-v2 + exact inner product: 0.645 (0.6451 here).
# Measured on our index (2026-11-22): BM25 0.6940 (identifier parts add +0.005: 0.6891 with
# split_identifiers=False), dense 0.6451. Default hybrid (convex min-max, adaptive alpha 0.8, staged
# with 3 corpus-graph hops, fill_dense on above 5000 chunks; 2026-11-23): 0.7141; the same without
# fill_dense 0.6837 (below BM25, this gate failed), staged on the BM25 pool alone 0.7181, the earlier
# RRF default 0.6891 (failed).
SCIFACT_BM25_NDCG = 0.687
SCIFACT_DENSE_NDCG = 0.645
TOLERANCE = 0.01


def test_scifact_bm25_matches_published_lucene_bm25(scifact):
    ndcg = scifact.score(mode="bm25")["ndcg@10"]
    assert ndcg == pytest.approx(SCIFACT_BM25_NDCG, abs=TOLERANCE)


def test_scifact_dense_matches_published_minilm(scifact):
    ndcg = scifact.score(mode="vector")["ndcg@10"]
    assert ndcg == pytest.approx(SCIFACT_DENSE_NDCG, abs=TOLERANCE)


def test_scifact_default_hybrid_beats_bm25_and_dense(scifact):
    hybrid = scifact.score()["ndcg@10"]
    assert hybrid > scifact.score(mode="bm25")["ndcg@10"]
    assert hybrid > scifact.score(mode="vector")["ndcg@10"]


# Issue 3: staged search must agree with the parallel hybrid it stands in for. Measured 2026-11-23
# (defaults, 300 queries): top-10 overlap 0.978, nDCG@10 0.7141 staged vs 0.7107 parallel (+0.5%);
# with the BM25 pool alone (expand_hops=0) the overlap was 0.718 and this gate failed.
STAGED_MIN_OVERLAP = 0.95
STAGED_NDCG_TOLERANCE = 0.01  # relative


def test_scifact_staged_agrees_with_parallel_hybrid(scifact):
    staged, parallel = scifact.run(staged=True), scifact.run(staged=False)
    overlaps = [top_overlap(parallel[qid], staged[qid]) for qid in parallel]
    assert sum(overlaps) / len(overlaps) >= STAGED_MIN_OVERLAP
    staged_ndcg = scifact.score(staged=True)["ndcg@10"]
    parallel_ndcg = scifact.score(staged=False)["ndcg@10"]
    assert abs(staged_ndcg - parallel_ndcg) <= STAGED_NDCG_TOLERANCE * parallel_ndcg
    assert staged_ndcg == pytest.approx(scifact.score()["ndcg@10"])  # the default on SciFact is staged


# --------------------------------------------------------------------------- memories (79 queries, now fixed)
# Required by the project (issue 5), not derived from a measurement: the default configuration must
# find a relevant memory in the top 10 for at least 90% of queries, with MRR at least 0.75.
# Measured 2026-11-22: default (convex min-max, adaptive alpha 0.5) hit rate 0.975, MRR 0.755 (0.760
# before tags were weighted by how many projects wear them, which fixed the rathole query; the
# earlier RRF default: 0.899 / 0.684). Weakest kind: `paraphrase` (hit rate 0.87, MRR 0.26).
MEMORIES_MIN_HIT_RATE = 0.90
MEMORIES_MIN_MRR = 0.75


def test_memories_default_configuration(memories):
    metrics = memories.score()
    assert metrics["hit_rate@10"] >= MEMORIES_MIN_HIT_RATE, metrics
    assert metrics["mrr"] >= MEMORIES_MIN_MRR, metrics


# --------------------------------------------------------------------------- holoviz (77 queries)
# Header chunking exists so that answers buried in long notebooks are found; whole-document vectors
# see only the first 256 tokens of each file. Measured 2026-11-22: chunked default hybrid nDCG@10
# 0.796 (BM25 0.740, dense 0.725); whole-document dense 0.531, whole-document hybrid 0.672.
def test_holoviz_chunked_hybrid_beats_whole_document_dense(holoviz, holoviz_whole):
    hybrid = holoviz.score()["ndcg@10"]
    whole_dense = holoviz_whole.score(mode="vector")["ndcg@10"]
    assert hybrid > whole_dense


# --------------------------------------------------------------------------- the motivating failure (issue 3)
# "rathole project codebase architecture" used to return other projects' memories (cachekit,
# litesearch) that talk about codebases and architecture. With the tag/collection signal the rathole
# memories come first; without it (tags=[]) another project's memory is in the top 3, which is what
# makes this test able to fail. Measured 2026-11-22: the top 5 are all rathole memories.
def test_project_name_query_returns_that_projects_memories_first(memories):
    index, now = memories.opened.index, memories.opened.evalset.now
    query = "rathole project codebase architecture"
    top = index.search(query, now=now, limit=5)
    assert [r.collection for r in top] == ["rathole"] * 5, [(r.doc_id, r.collection) for r in top]
    untagged = index.search(query, now=now, limit=3, tags=[])
    assert any(r.collection != "rathole" for r in untagged)


# Every project-name query of the memories ground truth (kind `project-generic`, 16 queries: "rathole
# project codebase architecture", "ferrox service internals", ...), not only the motivating one.
# Measured 2026-11-25 (reports/engine/2026-11-25/): share of the top 5 from the named project —
# default hybrid 1.0 on all 16; without the tag signal 0.725 on average, pure vector 0.738.
def test_every_project_name_query_returns_only_that_projects_memories(memories):
    projects = project_queries(memories.opened)
    assert len(projects) == 16
    shares = {qid: row["shares"]["hybrid (default)"] for qid, row in projects.items()}
    assert all(row["project"] for row in projects.values()), projects
    assert min(shares.values()) == 1.0, {qid: (projects[qid]["query"], share) for qid, share in shares.items() if share < 1}
    means = mean_shares(projects)
    assert means["hybrid (default)"] > means["hybrid, no tag signal"]
    assert means["hybrid (default)"] > means["vector"]
