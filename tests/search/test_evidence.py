"""Query-adaptive fusion: the signals (pure functions), the sparse side's lexical evidence, and the
pipeline using them (BM25's weight, recency intent, explain)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hybridlab.config import Bm25Config, SearchConfig
from hybridlab.index.format.sparse import SparseIndex, lucene_idf
from hybridlab.search.evidence import (
    asks_for_latest,
    best_rows,
    lexical_factor,
    top_agreement,
    weights_with_evidence,
)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("what is the current deploy target", True),
        ("do we still use postgres", True),
        ("latest release notes", True),
        ("which editor now", True),
        ("not anymore?", True),
        ("currency conversion", False),
        ("known issues", False),
        ("stillwater project", False),
        ("", False),
    ],
)
def test_recency_intent_is_read_from_whole_words(query, expected):
    assert asks_for_latest(query) is expected


def test_lexical_factor_ramps_from_floor_to_ceiling():
    assert lexical_factor(0.1, 0.2, 0.4) == 0.0
    assert lexical_factor(0.2, 0.2, 0.4) == 0.0
    assert lexical_factor(0.3, 0.2, 0.4) == pytest.approx(0.5)
    assert lexical_factor(0.4, 0.2, 0.4) == 1.0
    assert lexical_factor(0.9, 0.2, 0.4) == 1.0
    assert lexical_factor(None, 0.2, 0.4) == 1.0  # no BM25 run: nothing to scale
    assert lexical_factor(0.0, 0.0, 0.0) == 1.0  # ceiling 0 = ramp off
    with pytest.raises(ValueError, match="lexical_floor"):
        lexical_factor(0.3, 0.5, 0.4)


def test_agreement_and_best_rows_break_ties_by_row():
    a = {1: 3.0, 2: 2.0, 3: 2.0, 4: 1.0}
    b = {3: 0.9, 9: 0.8}
    assert best_rows(a, 3) == [1, 2, 3]
    assert top_agreement(a, b, depth=3) == pytest.approx(1 / 2)  # {1,2,3} & {3,9}, over min(3, 4, 2)
    assert top_agreement(a, {}, depth=3) is None


def test_only_bm25s_weight_is_scaled():
    weights = {"dense": 0.6, "bm25": 0.4, "tags": 1.6}
    assert weights_with_evidence(weights, 0.25) == {"dense": 0.6, "bm25": 0.1, "tags": 1.6}


def test_search_config_checks_the_ramp():
    with pytest.raises(ValueError, match="lexical_floor"):
        SearchConfig(lexical_floor=0.5, lexical_ceiling=0.4)
    with pytest.raises(ValueError, match="recency_intent_weight"):
        SearchConfig(recency_intent_weight=1.5)


def _sparse(texts: list[str]) -> SparseIndex:
    return SparseIndex.build(texts, np.arange(len(texts)), Bm25Config())


def test_matched_idf_share_counts_unseen_terms_at_the_highest_idf():
    index = _sparse(["postgres runs the cache", "redis runs the queue", "a note about gardening"])
    rows = np.array([0, 1, 2])
    idf = {term: float(index.idf([index.vocab[term]])[0]) for term in ("postgr", "run")}
    unseen = float(lucene_idf(np.zeros(1), 3)[0])
    share = index.matched_idf_share("postgres runs", rows)
    total = idf["postgr"] + idf["run"]
    assert share == pytest.approx([1.0, idf["run"] / total, 0.0])
    share = index.matched_idf_share("postgres zebra", rows)  # "zebra" is not in the index
    assert share[0] == pytest.approx(idf["postgr"] / (idf["postgr"] + unseen))
    assert index.matched_idf_share("the a", rows).tolist() == [0.0, 0.0, 0.0]  # stop words only
    assert math.isclose(idf["postgr"], math.log(1 + (3 - 1 + 0.5) / (1 + 0.5)))


def test_idf_agrees_with_bm25s_scores():
    index = _sparse(["alpha beta", "alpha gamma", "delta"])
    term = index.vocab["gamma"]
    score = float(index.scores([term])[1])
    k1, b = 1.5, 0.75
    lengths = np.array([2, 2, 1])
    tf_part = 1 / (1 + k1 * (1 - b + b * 2 / lengths.mean()))
    assert score == pytest.approx(float(index.idf([term])[0]) * tf_part, rel=1e-5)


def test_recency_cues_do_not_count_against_lexical_evidence():
    from hybridlab.search.evidence import without_recency_cues

    assert without_recency_cues("what is the current deploy target").split() == [
        "what",
        "is",
        "the",
        "deploy",
        "target",
    ]
    assert without_recency_cues("currency rates") == "currency rates"


def test_contains_agrees_with_isin_sorted_or_not():
    from hybridlab.index.format.sparse import contains

    rng = np.random.default_rng(0)
    for _ in range(200):
        postings = rng.choice(50, size=rng.integers(0, 20), replace=False)
        rows = rng.integers(0, 50, size=10)
        assert contains(postings, rows).tolist() == np.isin(rows, postings).tolist()
        assert contains(np.sort(postings), rows).tolist() == np.isin(rows, postings).tolist()
