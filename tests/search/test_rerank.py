"""The optional rerank step: off by default and then invisible; on, the top `rerank_depth` chunks
re-ordered by a cross-encoder (mixed with the hybrid score by `rerank_weight`); bad values refused.

Runs on the hand-written memory store of `test_search.py` (wordllama vectors)."""

from __future__ import annotations

import dataclasses
import threading

import numpy as np
import pytest
from test_search import NOW, write_memories

from hybridlab.config import IndexConfig, SearchConfig, resolve_search_config
from hybridlab.encoders.cross_encoder import load_reranker
from hybridlab.search.engine import open_index, resolve_now
from hybridlab.search.filters import Filters
from hybridlab.search.pipeline import rerank

QUERY = "where is the public endpoint of the tunnel server"


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    from hybridlab.index.write.build import index_paths

    root = tmp_path_factory.mktemp("rerank-index")
    index_paths(
        [write_memories(root / "memories.jsonl")],
        root / "index",
        IndexConfig(models=("wordllama",)),
        progress=False,
        cache_path=root / "embeddings.duckdb",
    )
    opened = open_index(root / "index")
    yield opened
    opened.close()


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    import os

    for name in list(os.environ):
        if name.startswith("HYBRIDLAB_"):
            monkeypatch.delenv(name)


def ranked(results) -> list[tuple[str, float]]:
    return [(r.doc_id, r.score) for r in results]


def fake_scores(table: dict[str, float]):
    """A stand-in cross-encoder: the score of the first table key a passage contains, else 0."""

    def score(model: str, query: str, passages: list[str]) -> np.ndarray:
        assert model == "ms-marco-MiniLM-L-12-v2"
        return np.array([next((v for k, v in table.items() if k in p), 0.0) for p in passages])

    return score


class FakeModels:
    """The query models the rerank step asks: only the cross-encoder, `fake_scores(table)`."""

    def __init__(self, table: dict[str, float]) -> None:
        self.rerank_scores = fake_scores(table)


# ------------------------------------------------------------------ off = today
def test_rerank_off_is_exactly_todays_search(index):
    plain = index.search_response(QUERY, limit=8, now=NOW, explain=True)
    off = index.search_response(QUERY, limit=8, now=NOW, explain=True, rerank_depth=0, rerank_weight=0.3)
    assert ranked(off.results) == ranked(plain.results)
    assert "rerank_ms" not in plain.timings and "rerank_ms" not in off.timings
    assert plain.results[0].explain["rerank_score"] is None and plain.results[0].explain["rerank_depth"] == 0
    assert index.run(QUERY, now=NOW) == index.run(QUERY, now=NOW, rerank_depth=0)
    retrieval = index._retrieve(QUERY, {}, Filters(), None, resolve_now(NOW))
    assert rerank.rerank(index.snapshot(), retrieval, FakeModels({})) is retrieval


# ------------------------------------------------------------------ the mix, by hand
def test_rerank_mix_formula():
    hybrid, cross = np.array([0.9, 0.5, 0.1]), np.array([-2.0, 6.0, 2.0])
    # cross' = (-2, 6, 2) -> (0, 1, 0.5); hybrid' = (0.9, 0.5, 0.1) -> (1, 0.5, 0)
    np.testing.assert_allclose(rerank.rerank_mix(hybrid, cross, 1.0), [0.0, 1.0, 0.5])
    np.testing.assert_allclose(rerank.rerank_mix(hybrid, cross, 0.0), [1.0, 0.5, 0.0])
    np.testing.assert_allclose(rerank.rerank_mix(hybrid, cross, 0.25), [0.75, 0.625, 0.125])
    np.testing.assert_allclose(rerank.rerank_mix(np.ones(2), np.ones(2), 0.5), [1.0, 1.0])  # flat -> 1
    assert list(hybrid) == [0.9, 0.5, 0.1] and list(cross) == [-2.0, 6.0, 2.0]  # inputs untouched
    with pytest.raises(ValueError, match="2 hybrid scores but 3"):
        rerank.rerank_mix(hybrid[:2], cross, 0.5)


def test_rerank_reorders_the_head_and_keeps_the_tail(index):
    before = index._retrieve(
        QUERY, {"limit": 10, "group_by_document": False}, Filters(), None, resolve_now(NOW)
    )
    head = before.hits[:4]
    table = {"axolotl": 9.0, "Falkenstein": 5.0, "Nuremberg": -1.0}
    snapshot = index.snapshot()
    cross = fake_scores(table)(
        "ms-marco-MiniLM-L-12-v2", QUERY, snapshot.store.passages([h.row for h in head])
    )
    deeper = dataclasses.replace(before, config=dataclasses.replace(before.config, rerank_depth=4))
    after = rerank.rerank(snapshot, deeper, FakeModels(table))
    expected_mix = rerank.rerank_mix(np.array([h.score for h in head]), cross, 1.0)
    lift = 1.0 + max(0.0, before.hits[4].score)
    order = np.lexsort(([h.row for h in head], -expected_mix))
    assert [h.row for h in after.hits[:4]] == [head[i].row for i in order]
    np.testing.assert_allclose([h.score for h in after.hits[:4]], lift + expected_mix[order])
    assert after.hits[4:] == before.hits[4:]  # the tail: same hits, same order, same scores
    assert after.hits[3].score > after.hits[4].score  # the run stays in rank order
    assert after.reranked == dict(zip([h.row for h in head], cross.tolist()))
    assert [(h.fused, h.recency) for h in sorted(after.hits[:4])] == [
        (h.fused, h.recency) for h in sorted(head)
    ]
    assert "rerank_ms" in after.timings and "rerank_ms" not in before.timings


def test_weight_mixes_min_max_normalised_scores(index, monkeypatch):
    table = {"Nuremberg": 3.0, "Falkenstein": 1.0}
    monkeypatch.setattr(index.query_models, "rerank_scores", fake_scores(table))
    base = index.search_response(QUERY, limit=3, now=NOW, explain=True, group_by_document=False).results
    for weight in (1.0, 0.5, 0.0):
        results = index.search(
            QUERY,
            limit=3,
            now=NOW,
            explain=True,
            group_by_document=False,
            rerank_depth=3,
            rerank_weight=weight,
        )
        hybrid = {r.chunk_id: r.score for r in base}
        ce = {r.chunk_id: r.explain["rerank_score"] for r in results}
        assert set(ce) == set(hybrid)
        ids = sorted(hybrid)
        mix = rerank.rerank_mix(np.array([hybrid[i] for i in ids]), np.array([ce[i] for i in ids]), weight)
        expected = sorted(zip(ids, mix), key=lambda pair: -pair[1])
        assert [r.chunk_id for r in results] == [i for i, _ in expected]
        if weight == 0.0:
            assert [r.chunk_id for r in results] == [r.chunk_id for r in base]
        assert (
            results[0].explain["rerank_weight"] == weight
            and results[0].explain["rerank_model"] == "ms-marco-MiniLM-L-12-v2"
        )


# ------------------------------------------------------------------ the real cross-encoder
def test_rerank_orders_by_the_cross_encoder_scores(index):
    depth = 6
    response = index.search_response(
        QUERY, limit=depth, now=NOW, explain=True, group_by_document=False, rerank_depth=depth
    )
    snapshot = index.snapshot()
    plain = index.search(QUERY, limit=depth, now=NOW, group_by_document=False)
    rows = [int(np.searchsorted(snapshot.generation.chunk_ids, r.chunk_id)) for r in plain]
    by_hand = load_reranker().score(QUERY, snapshot.store.passages(rows))
    expected = [plain[i].chunk_id for i in np.lexsort((rows, -by_hand))]
    assert [r.chunk_id for r in response.results] == expected
    scores = {r.chunk_id: r.explain["rerank_score"] for r in response.results}
    np.testing.assert_allclose([scores[r.chunk_id] for r in plain], by_hand)
    assert [r.explain["rerank_rank"] for r in response.results] == list(range(1, depth + 1))
    assert response.results[0].doc_id in {"m03", "m04"}  # a memory naming the endpoint
    assert response.timings["rerank_ms"] > 0
    assert [r.score for r in response.results] == sorted((r.score for r in response.results), reverse=True)


def test_rerank_from_several_threads_matches_one(index):
    options = {"limit": 5, "now": NOW, "rerank_depth": 8}
    queries = [QUERY, "axolotl tank heater", "codebase architecture of searchy", "release wheels"]
    expected = {q: ranked(index.search(q, **options)) for q in queries}
    failures: list[str] = []

    def work():
        for _ in range(3):
            for q in queries:
                if ranked(index.search(q, **options)) != expected[q]:
                    failures.append(q)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []


# ------------------------------------------------------------------ settings
@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("rerank_depth", -1, "rerank_depth must be an integer >= 0 (0 = no rerank), got -1"),
        ("rerank_depth", 2.5, "rerank_depth must be an integer >= 0 (0 = no rerank), got 2.5"),
        ("rerank_depth", True, "rerank_depth must be an integer >= 0 (0 = no rerank), got True"),
        ("rerank_weight", 1.5, "rerank_weight must be in [0, 1], got 1.5"),
        ("rerank_weight", -0.1, "rerank_weight must be in [0, 1], got -0.1"),
        ("rerank_weight", float("nan"), "rerank_weight must be in [0, 1], got nan"),
        ("rerank_model", "", "rerank_model must be a model name, got ''"),
    ],
)
def test_bad_rerank_settings_raise(field, value, message):
    with pytest.raises(ValueError) as error:
        SearchConfig(**{field: value})
    assert str(error.value) == message


def test_unknown_rerank_model_names_the_choices(index):
    with pytest.raises(
        ValueError, match=r"unknown rerank model 'nope'; choose from \['ms-marco-MiniLM-L-12-v2'\]"
    ):
        index.search(QUERY, now=NOW, rerank_depth=3, rerank_model="nope")
    assert index.search(QUERY, now=NOW, rerank_depth=0, rerank_model="nope")  # off: never loaded


def test_rerank_settings_come_from_env_and_config_file():
    config, sources = resolve_search_config(
        {},
        env={"HYBRIDLAB_RERANK_DEPTH": "20", "HYBRIDLAB_RERANK_WEIGHT": "0.5"},
        config_file={"search": {"rerank_model": "ms-marco-MiniLM-L-12-v2"}},
    )
    assert (config.rerank_depth, config.rerank_weight, config.rerank_model) == (
        20,
        0.5,
        "ms-marco-MiniLM-L-12-v2",
    )
    assert (sources["rerank_depth"], sources["rerank_weight"], sources["rerank_model"]) == (
        "env",
        "env",
        "config",
    )
    assert SearchConfig().rerank_depth == 0  # off by default
