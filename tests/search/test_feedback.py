"""Dense pseudo-relevance feedback: the Rocchio update (pure), and the pipeline step that moves the
query toward the fused list's best documents, searches again and fuses again; and document scores
from all of a document's chunks (`chunk_decay`)."""

from __future__ import annotations

import numpy as np
import pytest
from test_search import NOW, ids, index, memory_index_dir  # noqa: F401 - fixtures

from hybridlab.config import SearchConfig, resolve_search_config
from hybridlab.search.feedback import best_documents, rocchio


def test_rocchio_moves_the_query_toward_the_mean_of_the_feedback_and_normalises():
    query = np.array([1.0, 0.0, 0.0], np.float32)
    feedback = np.array([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]], np.float32)
    moved = rocchio(query, feedback, 1.0)
    expected = np.array([1.0, 0.5, 0.5]) / np.linalg.norm([1.0, 0.5, 0.5])
    assert moved.dtype == np.float32 and np.allclose(moved, expected)
    assert np.linalg.norm(moved) == pytest.approx(1.0)


def test_rocchio_without_feedback_or_weight_is_the_query():
    query = np.array([0.6, 0.8], np.float32)
    assert np.array_equal(rocchio(query, np.zeros((0, 2), np.float32), 0.5), query)
    assert np.array_equal(rocchio(query, np.array([[1.0, 0.0]], np.float32), 0.0), query)


def test_best_documents_takes_the_first_row_of_each_distinct_document():
    doc_ids = ["a", "a", "b", "c", "b"]
    assert best_documents([1, 0, 4, 2, 3], doc_ids, 2) == [1, 4]
    assert best_documents([1, 0, 4, 2, 3], doc_ids, 5) == [1, 4, 3]
    assert best_documents([], doc_ids, 2) == []


def test_settings_are_checked_and_old_exports_keep_feedback_off():
    with pytest.raises(ValueError, match="feedback_weight"):
        SearchConfig(feedback_weight=-0.1)
    with pytest.raises(ValueError, match="feedback_docs"):
        SearchConfig(feedback_docs=0)
    assert SearchConfig().feedback_weight == 0.0  # off by default: it did not hold on every set
    config, sources = resolve_search_config(
        {}, env={"HYBRIDLAB_FEEDBACK_WEIGHT": "0.5", "HYBRIDLAB_FEEDBACK_DOCS": "2"}
    )
    assert (config.feedback_weight, config.feedback_docs) == (0.5, 2) and sources["feedback_weight"] == "env"


def _retrieve(opened, query, **options):
    from hybridlab.search.engine import resolve_now
    from hybridlab.search.filters import Filters

    return opened._retrieve(query, {"limit": 3, **options}, Filters(), [], resolve_now(NOW))


@pytest.mark.parametrize("staged", [False, True])
def test_feedback_scores_the_dense_run_with_the_moved_query(index, staged):  # noqa: F811
    query = "which machine relays my inbound connections"
    options = {"staged": staged, "candidates": 6, "fallback_threshold": 1}
    plain = _retrieve(index, query, **options)
    moved = _retrieve(index, query, feedback_weight=0.5, feedback_docs=2, **options)
    assert plain.feedback_rows == () and plain.query_dense == {}
    doc_ids = index._snapshot.generation.doc_ids
    # the seeds are the best rows of the first fused list, one per document
    assert list(moved.feedback_rows) == best_documents((hit.row for hit in plain.hits), doc_ids, 2)
    assert moved.query_dense == plain.runs["dense"]  # the query's own dense run is kept for explain
    model = moved.model
    vectors = index._snapshot.dense[model]
    _, seed_vectors = vectors.vectors(np.asarray(moved.feedback_rows))
    expected = rocchio(index.query_models.query_vector(index.snapshot(), model, query), seed_vectors, 0.5)
    rows, scores = vectors.score(expected, np.fromiter(moved.runs["dense"], np.int64))
    assert np.allclose(scores, [moved.runs["dense"][row] for row in rows.tolist()], atol=1e-5)
    assert moved.runs["bm25"] == plain.runs["bm25"]
    if not staged:  # parallel: a new exact top `depth` with the moved query
        order = np.argsort(-(vectors.vectors(np.arange(index.n_chunks))[1] @ expected))
        assert set(moved.runs["dense"]) == set(order[: len(moved.runs["dense"])].tolist())


def test_feedback_is_explained_and_off_outside_hybrid_mode(index):  # noqa: F811
    query = "which machine relays my inbound connections"
    [top] = index.search(query, limit=1, now=NOW, explain=True, feedback_weight=0.5)
    explained = top.explain
    assert explained["feedback_weight"] == 0.5 and len(explained["feedback_documents"]) == 1
    assert explained["query_dense_rank"] is not None and explained["dense_rank"] is not None
    [plain] = index.search(query, limit=1, now=NOW, explain=True)
    assert plain.explain["feedback_documents"] == [] and plain.explain["query_dense_rank"] is None
    for mode in ("vector", "bm25"):
        assert ids(index.search(query, mode=mode, now=NOW, feedback_weight=1.0)) == ids(
            index.search(query, mode=mode, now=NOW)
        )


def test_cli_takes_the_feedback_flags(capsys, memory_index_dir):  # noqa: F811
    import json

    from hybridlab.cli import main

    code = main(
        [
            "search",
            "inbound connections relay",
            "--index",
            str(memory_index_dir),
            "--feedback-weight",
            "0.5",
            "--feedback-docs",
            "2",
            "--explain",
            "--json",
            "--now",
            NOW,
        ]
    )
    first = json.loads(capsys.readouterr().out)[0]
    assert code == 0
    assert first["explain"]["feedback_weight"] == 0.5 and len(first["explain"]["feedback_documents"]) == 2


# ------------------------------------------------------------------ document scores from all chunks
def test_document_scores_sum_a_documents_chunks_with_decay():
    from hybridlab.search.pipeline.group import document_scores
    from hybridlab.search.pipeline.records import Hit

    doc_ids = ["a", "a", "b", "a", "c"]
    hits = [
        Hit(2, 1.0, 1.0, 1.0),
        Hit(0, 0.9, 0.9, 1.0),
        Hit(1, 0.8, 0.8, 1.0),
        Hit(4, 0.5, 0.5, 1.0),
        Hit(3, -0.2, -0.2, 1.0),
    ]
    scored = document_scores(hits, doc_ids, 0.5)
    assert [doc_ids[hit.row] for hit in scored] == ["a", "b", "c"]  # a: 0.9 + 0.5 * 0.8 + 0 (negative)
    assert scored[0].row == 0 and scored[0].score == pytest.approx(1.3) and scored[0].fused == 0.9
    assert scored[1].score == 1.0 and scored[2].score == 0.5
    assert [hit.row for hit in document_scores(hits, doc_ids, 0.0)] == [2, 0, 4]  # MaxP


def test_chunk_decay_ranks_documents_by_all_their_chunks(opened_tiny_index):
    tiny = opened_tiny_index
    query = "tabulator filter editor page size"
    options = {"limit": 5, "adaptive_fusion": False}
    maxp = tiny.search_response(query, chunk_decay=0.0, explain=True, **options).results
    summed = tiny.search_response(query, chunk_decay=0.5, explain=True, **options).results
    assert summed[0].explain["chunk_decay"] == 0.5 and maxp[0].explain["chunk_decay"] == 0.0
    # a document's score is its chunks' final scores, best first, decayed
    chunks = tiny.search_response(query, group_by_document=False, **{**options, "limit": 100}).results
    assert any(
        sum(c.doc_id == r.doc_id for c in chunks) > 1 for r in summed
    )  # a document with several chunks
    for result in summed:
        own = sorted((c.score for c in chunks if c.doc_id == result.doc_id), reverse=True)
        expected = sum(max(score, 0.0) * 0.5**i if i else score for i, score in enumerate(own))
        assert result.score == pytest.approx(expected, abs=1e-5)
    assert len({r.doc_id for r in summed}) == len(summed)
    # bm25 and vector modes stay the best chunk alone
    for mode in ("bm25", "vector"):
        assert ids(tiny.search(query, mode=mode, chunk_decay=0.5)) == ids(
            tiny.search(query, mode=mode, chunk_decay=0.0)
        )
