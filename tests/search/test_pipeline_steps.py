"""The pipeline's step table and the invariant every step keeps (search/pipeline/steps.py), checked
step by step on the hand-written memory store of `test_search.py`, under settings that walk every
step; and a whole search run on a bare snapshot, with no `Index` in reach."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
from test_search import NOW, write_memories

from hybridlab.config import IndexConfig
from hybridlab.search.engine import open_index, resolve_now
from hybridlab.search.filters import Filters
from hybridlab.search.models import QueryModels
from hybridlab.search.pipeline import first_stage, group, hydrate, rerank, second_stage, steps
from hybridlab.search.pipeline.records import Retrieval, Search, in_rank_order
from hybridlab.search.snapshot import open_snapshot

QUERIES = ("where is the public endpoint of the tunnel server", "backup schedule of the NAS", "wireguard")
SETTINGS = {
    "defaults": {},
    "rrf": {"fusion": "rrf"},
    "vector": {"mode": "vector"},
    "bm25": {"mode": "bm25"},
    "staged": {"staged": True, "candidates": 3},
    "feedback": {"feedback_weight": 0.5, "feedback_docs": 2},
    "chunks": {"group_by_document": False},
    "recency": {"recency_weight": 0.3, "decay": 0.05},
    "late + rerank": {"late_depth": 5, "rerank_depth": 3},
    "late rrf": {"late_depth": 4, "late_combination": "rrf"},
}


class Models(QueryModels):
    """The real query models, with a stand-in cross-encoder (word overlap) so the rerank step runs
    without loading one."""

    def rerank_scores(self, model: str, query: str, passages: list[str]) -> np.ndarray:
        words = set(query.lower().split())
        return np.array([len(words & set(p.lower().split())) for p in passages], dtype=np.float64)


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory) -> Path:
    from hybridlab.index.write.build import index_paths

    root = tmp_path_factory.mktemp("steps-index")
    index_paths(
        [write_memories(root / "memories.jsonl")],
        root / "index",
        IndexConfig(models=("wordllama",)),
        progress=False,
        cache_path=root / "embeddings.duckdb",
    )
    return root / "index"


def test_the_docs_print_the_step_table():
    docs = (Path(__file__).resolve().parents[2] / "docs" / "internals" / "search.md").read_text()
    assert steps.step_table() in docs, "docs/internals/search.md#pipeline: paste steps.step_table()"


def test_the_table_names_the_functions_the_pipeline_runs():
    assert [step.name for step in steps.STEPS][-4:] == ["second stage", "rerank", "group", "hydrate"]
    assert {step.function for step in steps.STEPS} >= {
        second_stage.late_stage,
        rerank.rerank,
        group.by_document,
        hydrate.hydrate,
        first_stage.widen,
        first_stage.with_feedback,
    }


def snapshot_of(retrieval: Retrieval) -> tuple:
    """What a step must not change of the Retrieval it is given."""
    return (list(retrieval.hits), copy.deepcopy(retrieval.runs), dict(retrieval.timings))


@pytest.mark.parametrize("name", list(SETTINGS))
def test_every_step_keeps_the_invariant(index_dir, name):
    snapshot = open_snapshot(index_dir)
    models = Models()
    try:
        for query in QUERIES:
            asked = Search(query, SETTINGS[name], Filters(), None, resolve_now(NOW), {})
            retrieval = first_stage.retrieve(snapshot, asked, models)
            assert in_rank_order(retrieval.hits), (name, "first stage")
            for step in (second_stage.late_stage, rerank.rerank):
                before = snapshot_of(retrieval)
                after = step(snapshot, retrieval, models)
                assert snapshot_of(retrieval) == before, (name, step.__name__, "mutated its input")
                assert after is retrieval or isinstance(after, Retrieval)
                assert in_rank_order(after.hits), (name, step.__name__)
                assert sorted(h.row for h in after.hits) == sorted(h.row for h in retrieval.hits)
                retrieval = after
            before = snapshot_of(retrieval)
            grouped = group.by_document(snapshot, retrieval)
            assert snapshot_of(retrieval) == before and in_rank_order(grouped.hits)
            assert len(grouped.hits) <= (
                grouped.config.limit if grouped.config.group_by_document else len(retrieval.hits)
            )
            results = hydrate.hydrate(snapshot, grouped, False)
            assert [r.rank for r in results] == list(range(1, len(results) + 1))
            assert [r.score for r in results] == sorted((r.score for r in results), reverse=True)
    finally:
        snapshot.close()


def test_a_search_needs_a_snapshot_and_query_models_only(index_dir):
    """The one call runs every step on a bare snapshot (no Index exists here), and gives what the
    Index's search gives for the same settings."""
    snapshot = open_snapshot(index_dir)
    try:
        options = {"late_depth": 5, "rerank_depth": 3, "limit": 4}
        asked = Search(QUERIES[0], options, Filters(), None, resolve_now(NOW), {})
        response = steps.search(snapshot, asked, Models(), explain=True)
        assert response.results and {"late_ms", "rerank_ms"} <= set(response.timings)
        with open_index(index_dir) as index:
            index.query_models = Models()  # the same stand-in cross-encoder
            again = index.search_response(QUERIES[0], now=NOW, explain=True, **options)
        assert [r.to_dict() for r in again.results] == [r.to_dict() for r in response.results]
    finally:
        snapshot.close()
