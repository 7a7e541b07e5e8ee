"""Learned fusion (issue 33): features, model files, the engine path, training, the missing extra."""

from __future__ import annotations

import json

import numpy as np
import pytest

from hybridlab.errors import MissingExtraError
from hybridlab.search.evidence import QueryEvidence
from hybridlab.search.features import FEATURE_NAMES, QueryFacts, candidate_rows, features
from hybridlab.search.learned import load_ranker, save_model, squash
from hybridlab.tune.learn import RECIPES, Examples, train

RUNS = {"dense": {3: 0.8, 5: 0.6, 9: 0.1}, "bm25": {5: 12.0, 7: 3.0}, "tags": {}}
EVIDENCE = QueryEvidence(
    lexical=0.7, agreement=0.5, recency_intent=True, rare_term="x", rare_term_df=2, rare_rows=frozenset({7})
)


def matrix_of(runs=RUNS):
    rows = candidate_rows(runs)
    days = np.array([1.0, np.nan, 30.0, 400.0])[: len(rows)]
    docs = ["a", "a", "b", "c"][: len(rows)]
    fused = np.array([0.9, 1.0, 0.2, 0.0])[: len(rows)]
    return rows, features(
        runs,
        EVIDENCE,
        QueryFacts(terms=4, tag_factor=1.0),
        rows,
        fused,
        days,
        docs,
        np.array([True, False, True, True])[: len(rows)],
    )


def test_features_are_finite_named_and_deterministic():
    rows, matrix = matrix_of()
    assert rows.tolist() == [3, 5, 7, 9]
    assert matrix.shape == (4, len(FEATURE_NAMES)) and matrix.dtype == np.float32
    assert np.isfinite(matrix).all()
    assert np.array_equal(matrix, matrix_of()[1])
    col = {name: matrix[:, i] for i, name in enumerate(FEATURE_NAMES)}
    assert col["dense_present"].tolist() == [1, 1, 0, 1]
    assert col["dense_norm"].tolist() == pytest.approx([1.0, (0.6 - 0.1) / 0.7, 0.0, 0.0])
    assert col["bm25_rank"].tolist() == pytest.approx([0, 1 / 61, 1 / 62, 0])
    assert col["bm25_ratio"].tolist() == pytest.approx([0, 1, 0.25, 0])
    assert col["both_top10"].tolist() == [0, 1, 0, 0]
    assert col["rare_row"].tolist() == [0, 0, 1, 0]
    assert col["doc_candidates"].tolist() == [2, 2, 1, 1]
    assert col["newness"].tolist() == pytest.approx([1.0, 0.0, 370 / 399, 0.0]) and col["query_terms"][0] == 4
    assert col["fused"].tolist() == pytest.approx([0.9, 1.0, 0.2, 0.0])


def test_no_candidates_is_an_empty_matrix():
    rows, matrix = matrix_of({"dense": {}, "bm25": {}})
    assert len(rows) == 0 and matrix.shape == (0, len(FEATURE_NAMES))


def synthetic(name: str, queries: int = 30, seed: int = 0) -> Examples:
    """Candidates whose relevance follows the dense and bm25 normalised scores."""
    rng = np.random.default_rng(seed)
    matrix = rng.random((queries * 10, len(FEATURE_NAMES))).astype(np.float32)
    labels = (matrix[:, 1] + matrix[:, 5] > 1.3).astype(np.int32)
    return Examples(name, matrix, labels, np.full(queries, 10))


@pytest.mark.parametrize("kind", ["linear", "lightgbm"])
def test_model_round_trips_and_ranks(tmp_path, kind):
    # every feature, leaves of 200 rows (the transferable recipe's 400-row leaves barely split 600 rows)
    meta, booster = train([synthetic("a"), synthetic("b", seed=1)], kind, rounds=20, recipe=RECIPES["full"])
    folder = save_model(tmp_path / kind, meta, booster)
    ranker = load_ranker(folder)
    probe = synthetic("c", seed=2).matrix
    again = load_ranker(folder).score(probe)
    assert np.array_equal(ranker.score(probe), again)
    assert meta["training_sets"] == ["a", "b"] and meta["feature_names"] == list(FEATURE_NAMES)
    good, bad = probe[:, 1] + probe[:, 5] > 1.3, probe[:, 1] + probe[:, 5] < 0.7
    assert ranker.score(probe[good]).mean() > ranker.score(probe[bad]).mean()
    assert ((squash(again) > 0) & (squash(again) < 1)).all()


def test_feature_name_mismatch_is_refused(tmp_path):
    meta, _ = train([synthetic("a")], "linear")
    meta["feature_names"] = meta["feature_names"][::-1]
    save_model(tmp_path, meta)
    with pytest.raises(ValueError, match="trained on other features"):
        load_ranker(tmp_path)
    (tmp_path / "model.json").write_text(
        json.dumps({**meta, "feature_names": list(FEATURE_NAMES), "kind": "svm"})
    )
    with pytest.raises(ValueError, match="unknown model kind"):
        load_ranker(tmp_path)


def test_missing_lightgbm_names_the_extra(tmp_path, monkeypatch):
    from hybridlab import extras

    meta, booster = train([synthetic("a")], "lightgbm", rounds=5)
    save_model(tmp_path, meta, booster)
    monkeypatch.setattr(extras, "is_available", lambda module: module != "lightgbm")
    with pytest.raises(MissingExtraError, match=r"hybridlab\[learn\]"):
        load_ranker(tmp_path)
    with pytest.raises(MissingExtraError, match=r"hybridlab\[learn\]"):
        train([synthetic("a")], "lightgbm")


def test_learned_fusion_through_the_engine(opened_tiny_index, tmp_path):
    from hybridlab.config import SearchConfig

    meta, _ = train([synthetic("a")], "linear")
    save_model(tmp_path, meta)
    index = opened_tiny_index
    results = index.search(
        "how do I configure the cache",
        fusion="learned",
        learned_model=str(tmp_path),
        explain=True,
        limit=5,
        late_depth=0,  # the learned fusion's own scores (the second stage lifts its head above them)
    )
    assert results and all(0 < r.score < 2 for r in results)
    explained = results[0].explain
    assert explained["fusion"] == "learned" and explained["learned_model"] == str(tmp_path)
    assert list(explained["features"]) == list(FEATURE_NAMES)
    assert index.query_models.learned_ranker(str(tmp_path)) is index.query_models.learned_ranker(
        str(tmp_path)
    )  # loaded once
    assert SearchConfig(fusion="learned").learned_model == ""
    with pytest.raises(FileNotFoundError, match="learn-fusion"):
        index.search("cache", fusion="learned", learned_model=str(tmp_path / "none"))


def test_training_on_examples_of_the_tiny_index(opened_tiny_index, tmp_path):
    from hybridlab.tune.learn import examples

    index = opened_tiny_index
    found = index.run("configure the cache", limit=3)
    qrels = {"q1": {doc: 1 for doc in list(found)[:1]}, "q2": {doc: 1 for doc in list(found)[1:2]}}
    part = examples("tiny", index, {"q1": "configure the cache", "q2": "cache settings"}, qrels, None)
    assert part.matrix.shape[1] == len(FEATURE_NAMES) and part.labels.sum() >= 1
    meta, booster = train([part], "lightgbm", rounds=3)
    assert load_ranker(save_model(tmp_path, meta, booster)).score(part.matrix).shape == (len(part.labels),)


def test_recipe_reads_only_its_features(tmp_path):
    from hybridlab.search.learned import base_logit
    from hybridlab.tune.learn import COLLECTION_SPECIFIC, Recipe, importance

    recipe = Recipe(drop=COLLECTION_SPECIFIC, rounds=10)
    meta, booster = train([synthetic("a"), synthetic("b", seed=1)], recipe=recipe)
    assert meta["used_features"] == recipe.used() and not set(COLLECTION_SPECIFIC) & set(
        meta["used_features"]
    )
    shares = importance(booster)
    assert set(shares) == set(recipe.used()) and sum(shares.values()) == pytest.approx(1.0, abs=1e-3)
    probe = synthetic("c", seed=2).matrix
    ranker = load_ranker(save_model(tmp_path, meta, booster))
    changed = probe.copy()
    changed[:, [FEATURE_NAMES.index(name) for name in COLLECTION_SPECIFIC]] = 7.0  # unread: same score
    assert np.allclose(ranker.score(probe), ranker.score(changed))
    trees = booster.predict(probe[:, [FEATURE_NAMES.index(name) for name in recipe.used()]])
    assert np.allclose(ranker.score(probe), base_logit(probe) + trees)


def test_no_regret_flags_kinds_under_the_floor():
    from hybridlab.tune.learn import no_regret_markdown

    kinds = {
        s: {"a": {"n": 3, "mean": m}, "b": {"n": 2, "mean": 1.0}}
        for s, m in (("default", 0.8), ("bm25", 0.5), ("vector", 0.9), ("learned-lightgbm", 0.84))
    }
    lines = no_regret_markdown({"memories": {"mrr_per_kind": kinds}})
    assert "| memories | a (3) | 0.800 | 0.840 | 0.900 (vector) | 0.93 **< 0.95** |" in lines
    assert "| memories | b (2) | 1.000 | 1.000 | 1.000 (bm25) | 1.00 |" in lines


def test_importance_table_lists_each_models_top_features():
    from hybridlab.tune.learn import importance_markdown

    lines = importance_markdown({"cisi": {"bm25_rank": 0.6, "fused": 0.4}, "med": {"fused": 1.0}}, top=2)
    assert lines[0] == "| # | cisi | med |" and lines[2:] == [
        "| 1 | bm25_rank 0.60 | fused 1.00 |",
        "| 2 | fused 0.40 |  |",
    ]
    assert importance_markdown({}) == []
