"""Quality gates: real retrieval on real data (`pytest tests/eval`, marked slow).

Issue 18: a gate asserts an out-of-sample figure with a stated margin, or a comparison against the
baselines with a paired significance test — never a threshold at an in-sample measurement. The
shipped defaults were fitted on the memories queries (2026-11-22) and some SciFact choices (the
5,000-chunk `fill_dense` switch, the staged graph hops) were made looking at its test queries, so no
gate below pins an absolute figure of the defaults on those sets; `repro/conditions.yaml` records the
figures themselves (`hybridlab repro`). Indexes come from `ensure_index` (built once into
.cache/indexes, then reused). Measured numbers are written next to each gate, from
`.venv/bin/python -m pytest tests/eval -q` on this machine (reports/quality/ has the full tables).
"""

from __future__ import annotations

import pytest

from bench.common import top_overlap
from bench.engine_report import PROJECT_SYSTEMS, mean_shares, project_queries
from hybridlab.eval.significance import PairedTest, holm, paired_test

pytestmark = pytest.mark.slow

MAX_P = 0.05  # significance level of every comparison, after Holm's correction within a gate
TEST = "randomization"  # paired sign-flip test, 10,000 seeded permutations (hybridlab.eval.significance)


def _line(name: str, result: PairedTest, p: float) -> str:
    return f"{name}: {result.mean_a:.4f} vs {result.mean_b:.4f} (Δ {result.difference:+.4f}, p = {p:.4g})"


def assert_better(gate, metrics: dict[str, tuple[str, ...]], baselines: dict[str, dict]) -> None:
    """The default hybrid beats each baseline on the listed metrics: a higher mean with p < MAX_P
    (paired randomisation test, Holm-corrected over every comparison of the call)."""
    ours = gate.per_query()
    results = {
        f"{metric}, default hybrid vs {name}": paired_test(
            ours[metric], gate.per_query(**baselines[name])[metric], TEST
        )
        for name, names in metrics.items()
        for metric in names
    }
    adjusted = dict(zip(results, holm([r.p_value for r in results.values()])))
    failed = [
        _line(k, r, adjusted[k]) for k, r in results.items() if not (r.difference > 0 and adjusted[k] < MAX_P)
    ]
    assert not failed, (
        f"not significantly better (need a higher mean at Holm-corrected p < {MAX_P}): {failed}"
    )


def assert_not_worse(gate, metrics: tuple[str, ...], baselines: dict[str, dict]) -> None:
    """The default hybrid is not significantly worse than each baseline: a lower mean is allowed only
    where the paired test cannot tell them apart (p ≥ MAX_P, uncorrected: the stricter side here)."""
    ours = gate.per_query()
    failed = []
    for name, options in baselines.items():
        theirs = gate.per_query(**options)
        for metric in metrics:
            result = paired_test(ours[metric], theirs[metric], TEST)
            if result.difference < 0 and result.p_value < MAX_P:
                failed.append(_line(f"{metric}, default hybrid vs {name}", result, result.p_value))
    assert not failed, f"significantly worse than a component (p < {MAX_P}): {failed}"


BM25, VECTOR = {"mode": "bm25"}, {"mode": "vector"}
ALL_METRICS = ("hit_rate@10", "mrr", "ndcg@10")

# --------------------------------------------------------------------------- SciFact (BEIR test, 300 queries)
# Published references (bm25s README / our plain-library runs in shared/ENVIRONMENT.md), an external
# figure for an untuned component, margin ±0.01: BM25 Lucene k1=1.5 b=0.75, English stemmer +
# stopwords, title + text: nDCG@10 0.687 (0.6940 here: identifier parts add +0.005; 0.6891 with
# split_identifiers=False); all-MiniLM-L6-v2 + exact inner product: 0.645 (0.6451 here).
SCIFACT_BM25_NDCG = 0.687
SCIFACT_DENSE_NDCG = 0.645
TOLERANCE = 0.01


def test_scifact_bm25_matches_published_lucene_bm25(scifact):
    ndcg = scifact.score(mode="bm25")["ndcg@10"]
    assert ndcg == pytest.approx(SCIFACT_BM25_NDCG, abs=TOLERANCE), (
        f"BM25 nDCG@10 {ndcg:.4f}, published {SCIFACT_BM25_NDCG} ± {TOLERANCE}"
    )


def test_scifact_dense_matches_published_minilm(scifact):
    ndcg = scifact.score(mode="vector")["ndcg@10"]
    assert ndcg == pytest.approx(SCIFACT_DENSE_NDCG, abs=TOLERANCE), (
        f"dense nDCG@10 {ndcg:.4f}, published {SCIFACT_DENSE_NDCG} ± {TOLERANCE}"
    )


# The default hybrid against its two components on the 300 test queries. Measured 2026-11-25
# (randomisation p, uncorrected): vs dense Hit@10 0.850 vs 0.793 (p 0.0005), MRR 0.683 vs 0.611
# (0.0001), nDCG@10 0.714 vs 0.645 (0.0001); vs BM25 nDCG@10 0.714 vs 0.694 (p 0.11: better, not
# significantly), MRR 0.683 vs 0.661 (0.12), Hit@10 0.850 vs 0.847 (1.0).
def test_scifact_default_hybrid_beats_dense_and_is_not_worse_than_bm25(scifact):
    assert_better(scifact, {"dense": ALL_METRICS}, {"dense": VECTOR})
    assert_not_worse(scifact, ALL_METRICS, {"bm25": BM25})


# Issue 3: staged search must agree with the parallel hybrid it stands in for (an approximation
# check, not a quality figure). Measured 2026-11-23 (defaults, 300 queries): top-10 overlap 0.978
# (margin 0.028 over the 0.95 floor), nDCG@10 0.7141 staged vs 0.7107 parallel (+0.5%, allowed ±1%);
# with the BM25 pool alone (expand_hops=0) the overlap was 0.718 and this gate failed.
STAGED_MIN_OVERLAP = 0.95
STAGED_NDCG_TOLERANCE = 0.01  # relative


def test_scifact_staged_agrees_with_parallel_hybrid(scifact):
    staged, parallel = scifact.run(staged=True), scifact.run(staged=False)
    overlaps = [top_overlap(parallel[qid], staged[qid]) for qid in parallel]
    overlap = sum(overlaps) / len(overlaps)
    assert overlap >= STAGED_MIN_OVERLAP, f"mean top-10 overlap {overlap:.3f} < {STAGED_MIN_OVERLAP}"
    staged_ndcg = scifact.score(staged=True)["ndcg@10"]
    parallel_ndcg = scifact.score(staged=False)["ndcg@10"]
    assert abs(staged_ndcg - parallel_ndcg) <= STAGED_NDCG_TOLERANCE * parallel_ndcg, (
        f"staged nDCG@10 {staged_ndcg:.4f} vs parallel {parallel_ndcg:.4f}: more than {STAGED_NDCG_TOLERANCE:.0%} apart"
    )
    assert staged_ndcg == pytest.approx(scifact.score()["ndcg@10"])  # the default on SciFact is staged


# --------------------------------------------------------------------------- memories (79 queries, now fixed)
# The defaults were fitted on these queries, so only comparisons with the untuned components hold
# (issue 5's floors, hit rate 0.90 / MRR 0.75, sat at the in-sample 0.975 / 0.755 and are gone).
# Measured 2026-11-25 (randomisation p, uncorrected): vs BM25 Hit@10 0.975 vs 0.772 (p 0.0002),
# MRR 0.755 vs 0.617 (0.0001), nDCG@10 0.762 vs 0.577 (0.0001); vs vector nDCG@10 0.762 vs 0.672
# (0.0021), MRR 0.755 vs 0.714 (0.28: not significant), Hit@10 0.975 vs 0.962 (1.0).
def test_memories_default_hybrid_beats_bm25_and_vector(memories):
    assert_better(memories, {"bm25": ALL_METRICS, "vector": ("ndcg@10",)}, {"bm25": BM25, "vector": VECTOR})
    assert_not_worse(memories, ALL_METRICS, {"vector": VECTOR})


# --------------------------------------------------------------------------- holoviz (77 queries)
# Header chunking exists so that answers buried in long notebooks are found; whole-document vectors
# see only the first 256 tokens of each file. Measured 2026-11-25 (randomisation p, uncorrected):
# chunked default hybrid nDCG@10 0.796 vs whole-document dense 0.530 (p 0.0001); vs chunked dense
# 0.721 (0.0001), MRR 0.878 vs 0.799 (0.0042); vs BM25 0.796 vs 0.746 (p 0.055: better, not
# significantly), MRR 0.878 vs 0.843 (0.33).
def test_holoviz_chunked_hybrid_beats_whole_document_dense(holoviz, holoviz_whole):
    ours, theirs = holoviz.per_query()["ndcg@10"], holoviz_whole.per_query(mode="vector")["ndcg@10"]
    result = paired_test(ours, theirs, TEST)
    assert result.difference > 0 and result.p_value < MAX_P, _line(
        "chunked hybrid vs whole-document dense", result, result.p_value
    )


def test_holoviz_default_hybrid_beats_dense_and_is_not_worse_than_bm25(holoviz):
    assert_better(holoviz, {"dense": ("mrr", "ndcg@10")}, {"dense": VECTOR})
    assert_not_worse(holoviz, ALL_METRICS, {"bm25": BM25})


# --------------------------------------------------------------------------- the motivating failure (issue 3)
# "rathole project codebase architecture" used to return other projects' memories (cachekit,
# litesearch) that talk about codebases and architecture. The requirement: the project's memories
# come first, and the tag/collection signal is what brings them (without it, tags=[], another
# project's memory is in the top 3, which is what makes this test able to fail). Measured
# 2026-11-22: the top 5 are all rathole memories with the signal.
def test_project_name_query_returns_that_projects_memories_first(memories):
    index, now = memories.opened.index, memories.opened.evalset.now
    query = "rathole project codebase architecture"
    top = index.search(query, now=now, limit=5)
    untagged = index.search(query, now=now, limit=5, tags=[])
    assert top[0].collection == "rathole", [(r.doc_id, r.collection) for r in top]
    share = sum(r.collection == "rathole" for r in top) / 5
    assert share > sum(r.collection == "rathole" for r in untagged) / 5, (
        [(r.doc_id, r.collection) for r in top],
        [(r.doc_id, r.collection) for r in untagged],
    )
    assert any(r.collection != "rathole" for r in untagged[:3])


# Every project-name query of the memories ground truth (kind `project-generic`, 16 queries: "rathole
# project codebase architecture", "ferrox service internals", ...): the share of the top 5 from the
# named project. Tag information reaches the default hybrid twice: the tag signal and, since
# `index_tags`, a `Tags:` line in every memory's indexed text. So the default hybrid must beat the
# tag-blind systems (no tag signal, on an index without tags in its text: the seed-001 rathole
# failure) significantly, and must not fall below the other systems of its own index.
# Measured 2026-11-25: default 1.000; on the tag-blind index the tag-less hybrid 0.738 and pure vector
# 0.738; on the default index the tag-less hybrid 0.875 and pure vector 1.000 (the Tags: line alone
# puts the project first for the embedding).
def test_project_name_queries_favour_the_named_project(memories, memories_tag_blind):
    projects = project_queries(memories.opened)
    blind = project_queries(memories_tag_blind.opened)
    assert len(projects) == 16 and set(blind) == set(projects)  # the ground truth's project-generic queries
    assert all(row["project"] for row in projects.values()), projects
    ours = {qid: row["shares"]["hybrid (default)"] for qid, row in projects.items()}
    others = [name for name in PROJECT_SYSTEMS if name != "hybrid (default)"]
    results = {
        f"{name}, tags not in the text": paired_test(
            ours, {qid: row["shares"][name] for qid, row in blind.items()}, TEST
        )
        for name in others
    }
    adjusted = dict(zip(results, holm([r.p_value for r in results.values()])))
    failed = [
        _line(name, r, adjusted[name])
        for name, r in results.items()
        if not (r.difference > 0 and adjusted[name] < MAX_P)
    ]
    assert not failed, (
        f"project share of the top 5 not significantly higher (Holm p < {MAX_P}): {failed}",
        {qid: (projects[qid]["query"], share) for qid, share in ours.items() if share < 1},
    )
    means = mean_shares(projects)
    assert all(means["hybrid (default)"] >= means[name] for name in others), means


# --------------------------------------------------------------------------- adaptive fusion (issue 19)
# BM25's weight follows the query's lexical evidence (hybridlab.search.evidence). The ramp (0.2 -> 0.4
# of the query's IDF mass) was set before measuring and not swept; the memories figures are still
# in sample for the rest of the defaults, so these gates compare, they do not pin. Measured
# 2026-11-25 (repro/conditions.yaml): memories MRR 0.830 adaptive vs 0.755 fixed; paraphrase
# queries MRR 0.519 vs 0.259 fixed (vector 0.508, BM25 0.025); "current" queries 1.000 vs 0.917.
NO_REGRET = 0.95  # the hybrid keeps >= 95% of the best single retriever's MRR on every query kind


def test_memories_adaptive_fusion_is_no_regret_on_every_query_kind(memories):
    from hybridlab.eval.datasets import load_query_metadata

    kinds = {
        q: (m or {}).get("kind") for q, m in load_query_metadata(memories.opened.evalset.judgements).items()
    }
    runs = {
        name: memories.per_query(**options)["mrr"]
        # the fusion's promise, so the first stage's hybrid: the second stage's verdict per kind is in
        # docs/internals/search.md#late-interaction (it lowers the paraphrase kind's MRR here)
        for name, options in {"hybrid": {"late_depth": 0}, "bm25": BM25, "vector": VECTOR}.items()
    }
    failed = []
    for kind in sorted({k for k in kinds.values() if k}):
        ids = [q for q, k in kinds.items() if k == kind and q in runs["hybrid"]]
        means = {name: sum(run[q] for q in ids) / len(ids) for name, run in runs.items()}
        best = max(means["bm25"], means["vector"])
        if means["hybrid"] < NO_REGRET * best:
            failed.append(f"{kind}: hybrid MRR {means['hybrid']:.3f} < {NO_REGRET} x {best:.3f}")
    assert not failed, failed


def test_memories_adaptive_fusion_beats_fixed_weights_on_paraphrases(memories):
    from hybridlab.eval.datasets import load_query_metadata

    kinds = load_query_metadata(memories.opened.evalset.judgements)
    ids = [q for q, m in kinds.items() if (m or {}).get("kind") == "paraphrase"]
    ours = {q: v for q, v in memories.per_query()["mrr"].items() if q in ids}
    fixed = {q: v for q, v in memories.per_query(adaptive_fusion=False)["mrr"].items() if q in ids}
    result = paired_test(ours, fixed, TEST)
    assert result.difference > 0 and result.p_value < MAX_P, _line(
        "paraphrase MRR, adaptive vs fixed", result, result.p_value
    )


# --------------------------------------------------------------------------- CISI, Cranfield, MED (never tuned on)
# The out-of-domain check of every default: the default hybrid is not significantly worse than
# BM25, dense, an untuned RRF (k=60) of the same runs, or the same hybrid with fixed weights.
def test_out_of_domain_default_hybrid_is_not_worse_than_its_parts_or_rrf(out_of_domain):
    assert_not_worse(
        out_of_domain,
        ALL_METRICS,
        {
            "bm25": BM25,
            "vector": VECTOR,
            "rrf k=60": {"fusion": "rrf", "rrf_k": 60, "adaptive_fusion": False},
            "fixed weights": {"adaptive_fusion": False},
        },
    )
