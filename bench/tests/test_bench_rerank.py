"""The rerank benchmark's own pieces: the pair-score cache and the report (no index, no model)."""

from __future__ import annotations

import numpy as np

from bench.rerank import PairCache, condition_name, render


def test_pair_cache_scores_only_unseen_pairs_when_reading():
    calls: list[list[str]] = []

    def score(model, query, passages):
        calls.append(list(passages))
        return np.array([len(p) for p in passages], dtype=float)

    cache = PairCache(score)
    np.testing.assert_array_equal(cache("m", "q", ["a", "bb"]), [1.0, 2.0])
    np.testing.assert_array_equal(cache("m", "q", ["bb", "a"]), [2.0, 1.0])  # not reading: scored again
    cache.reading = True
    np.testing.assert_array_equal(cache("m", "q", ["a", "ccc", "a"]), [1.0, 3.0, 1.0])
    assert calls == [["a", "bb"], ["bb", "a"], ["ccc"]]
    cache("m", "other query", ["a"])
    assert calls[-1] == ["a"]  # the key holds the query


def test_report_lists_every_condition_with_its_command():
    grid = {
        "command": "python -m hybridlab.bench.rerank grid",
        "queries": 3,
        "chunks": 10,
        "model": "m",
        "rerank_model": "ce",
        "conditions": {
            "hybrid": {
                "depth": 0,
                "weight": None,
                "ndcg@10": 0.5,
                "mrr": 0.4,
                "recall@100": 0.9,
                "rerank_ms": None,
            },
            condition_name(20, 1.0): {
                "depth": 20,
                "weight": 1.0,
                "ndcg@10": 0.6,
                "mrr": 0.5,
                "recall@100": 0.9,
                "rerank_ms": {"p50": 1500.0, "p95": 2500.0},
                "ndcg@10_delta": 0.1,
                "p": 0.01,
                "p_holm": 0.02,
            },
        },
    }
    text = render({"date": "2026-11-25T00:00:00+00:00", "machine": "x", "grids": {"scifact-test-m": grid}})
    assert "`python -m hybridlab.bench.rerank grid`" in text
    assert "| rerank-20-w1 | 20 | 1 | 0.6000 | +0.1000 | 0.5000 | 0.9000 | 0.02 | 1500 | 2500 |" in text
    assert "| hybrid | 0 |  | 0.5000 |  | 0.4000 | 0.9000 |  | – | – |" in text


def test_pair_cache_file_resumes(tmp_path):
    calls: list[list[str]] = []

    def score(model, query, passages):
        calls.append(list(passages))
        return np.arange(len(passages), dtype=float)

    path = tmp_path / "pairs.jsonl"
    first = PairCache(score, path)
    first.reading = True
    np.testing.assert_array_equal(first("m", "q", ["a", "b"]), [0.0, 1.0])
    again = PairCache(score, path)  # a new process: the file holds the scores
    again.reading = True
    np.testing.assert_array_equal(again("m", "q", ["b", "a", "c"]), [1.0, 0.0, 0.0])
    assert calls == [["a", "b"], ["c"]]
