"""The Qdrant backend (client's local mode) ranks like the local backend on the small memory index."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("qdrant_client")

from test_search import NOW, write_memories

from hybridlab.config import IndexConfig
from hybridlab.index.reader import read_generation
from hybridlab.search import qdrant
from hybridlab.search.engine import Index, open_index
from hybridlab.search.filters import Filters

QUERIES = ["where does the tunnel server run", "cachelib codebase architecture", "release process wheels",
           "axolotl tank heater", "rate limiting per token", "what does the user prefer"]


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory) -> Path:
    from hybridlab.index.build import index_paths

    root = tmp_path_factory.mktemp("qdrant-index")
    source = write_memories(root / "memories.jsonl")
    index_paths([source], root / "index", IndexConfig(models=("wordllama",)), progress=False,
                cache_path=root / "embeddings.duckdb")
    return root / "index"


@pytest.fixture(scope="module")
def client(index_dir):
    client = qdrant.connect()  # in memory
    generation = read_generation(index_dir)
    try:
        qdrant.export_generation(generation, client, "memories")
    finally:
        generation.store.close()
    yield client
    client.close()


@pytest.fixture(scope="module")
def local(index_dir):
    opened = open_index(index_dir)
    yield opened
    opened.close()


@pytest.fixture(scope="module")
def remote(index_dir, client):
    opened = Index(index_dir, backend=qdrant.qdrant_backend(client, "memories"))
    yield opened
    opened.close()


def ranked(index: Index, query: str, **options) -> list[tuple[int, float]]:
    return [(r.chunk_id, pytest.approx(r.score, rel=1e-4, abs=1e-6))
            for r in index.search(query, limit=10, now=NOW, **options)]


def test_sparse_vectors_reproduce_bm25s_scores(index_dir, remote):
    generation = read_generation(index_dir)
    try:
        for query in QUERIES:
            rows, scores = generation.sparse.top(generation.sparse.query_ids(query), 50)
            allowed = remote.snapshot().store.allowed(Filters())
            q_rows, q_scores = remote.snapshot().sparse.search(query, 50, allowed)
            assert q_rows.tolist() == rows.tolist()
            np.testing.assert_allclose(q_scores, scores, rtol=1e-5)
    finally:
        generation.store.close()


@pytest.mark.parametrize("options", [
    {"mode": "bm25"}, {"mode": "vector"}, {},
    {"fusion": "rrf"}, {"fusion": "convex", "normalization": "min-max"},
    {"fusion": "convex", "normalization": "z-score"}, {"fusion": "dbsf"}, {"alpha": 0.3, "tags": []},
    {"staged": True, "candidates": 3, "fallback_threshold": 1, "expand_hops": 2, "expand_seeds": 2},
    {"staged": True, "candidates": 3, "fallback_threshold": 1, "expand_hops": 2, "collection": "cachelib"},
])
def test_same_top_10_as_the_local_backend(local, remote, options):
    for query in QUERIES:
        assert ranked(remote, query, **options) == ranked(local, query, **options), (query, options)


@pytest.mark.parametrize("filters", [
    {"collection": "tunnelx"}, {"tags": ["home"]}, {"tags": ["architecture", "cachelib"]},
    {"tags": ["hosting", "pets"], "tags_any": True}, {"since": "2025-01-01"}, {"until": "2024-03-06"},
    {"embedding_model": "wordllama"},
])
def test_filters_are_pushed_down_and_fill_limit(local, remote, filters):
    mask = local.filter_rows(local.make_filters(**{k: v for k, v in filters.items() if k != "embedding_model"}))
    allowed = local.n_chunks if mask is None else int(mask.sum())
    for query in QUERIES:
        for mode in ("bm25", "vector", "hybrid"):
            results = remote.search(query, limit=3, now=NOW, mode=mode, **filters)
            if mode != "bm25":  # BM25 alone returns only chunks sharing a term with the query
                assert len(results) == min(3, allowed), (query, mode, filters)
            assert ranked(remote, query, mode=mode, **filters) == ranked(local, query, mode=mode, **filters)


def test_explain_has_the_same_keys(local, remote):
    query = "tunnelx project codebase architecture"
    ours = local.search(query, limit=5, now=NOW, explain=True)
    theirs = remote.search(query, limit=5, now=NOW, explain=True)
    assert [r.chunk_id for r in theirs] == [r.chunk_id for r in ours]
    assert [sorted(r.explain) for r in theirs] == [sorted(r.explain) for r in ours]


def test_server_side_fusion_agrees_with_client_side(remote):
    snapshot = remote.snapshot()
    model = snapshot.models[0]
    for query in QUERIES:
        vector = remote.query_vector(model, query)
        for fusion in ("rrf", "dbsf"):
            server = qdrant.server_fusion(snapshot, query, vector, model, fusion=fusion, rrf_k=60, depth=100, limit=10)
            retrieval = remote._retrieve(query, {"fusion": fusion, "recency_weight": 0.0, "limit": 10, "depth": 100,
                                                 "alpha": 0.5, "rrf_k": 60, "staged": False, "adaptive_fusion": False},
                                         Filters(), [],
                                         remote_now())
            assert list(server) == [hit.row for hit in retrieval.hits[:10]], (query, fusion)


def remote_now():
    from hybridlab.search.engine import resolve_now

    return resolve_now(NOW)


def test_upsert_and_delete_by_document(index_dir, tmp_path):
    copy = tmp_path / "index"
    shutil.copytree(index_dir, copy)
    client = qdrant.connect(path=tmp_path / "qdrant")
    try:
        generation = read_generation(copy)
        try:
            qdrant.export_generation(generation, client, "copy")
            target = "m10"  # the only memory about the axolotl tank
            doc_id = target
            qdrant.delete_documents(client, "copy", [doc_id])
            assert len(qdrant.point_ids(client, "copy")) == generation.n_chunks - generation.doc_ids.count(doc_id)
            with pytest.raises(ValueError, match="re-export"):
                qdrant.qdrant_snapshot(generation, client, "copy")
            assert qdrant.upsert_documents(generation, client, "copy", [doc_id]) == generation.doc_ids.count(doc_id)
            snapshot = qdrant.qdrant_snapshot(generation, client, "copy")
            rows, _ = snapshot.sparse.search("axolotl tank", 5, snapshot.store.allowed(Filters()))
            assert generation.doc_ids[rows[0]] == doc_id
        finally:
            generation.store.close()
    finally:
        client.close()


def test_staged_search_walks_the_corpus_graph_like_the_local_backend(local, remote):
    options = {"staged": True, "candidates": 3, "fallback_threshold": 1, "expand_hops": 2, "expand_seeds": 2}
    for query in QUERIES:
        ours = local._retrieve(query, options, Filters(), None, remote_now())
        theirs = remote._retrieve(query, options, Filters(), None, remote_now())
        assert remote.snapshot().dense["wordllama"].has_graph
        assert (theirs.mode, theirs.graph_added) == (ours.mode, ours.graph_added)
        assert [h.row for h in theirs.hits] == [h.row for h in ours.hits]


def test_cli_index_and_search_on_the_qdrant_backend(index_dir, tmp_path, capsys):
    import json

    from hybridlab import cli

    copy = tmp_path / "index"
    shutil.copytree(index_dir, copy)
    backend = ["--backend", "qdrant", "--qdrant-path", str(tmp_path / "qdrant"), "--qdrant-collection", "cli"]
    source = write_memories(tmp_path / "memories.jsonl")
    assert cli.main(["index", str(source), "--index", str(copy), "--model", "wordllama", "-q", *backend]) == 0
    capsys.readouterr()
    query = ["search", "where does the tunnel server run", "--index", str(copy), "--json", "--now", NOW]
    assert cli.main([*query, *backend]) == 0
    theirs = json.loads(capsys.readouterr().out)
    assert cli.main(query) == 0
    ours = json.loads(capsys.readouterr().out)
    assert [r["chunk_id"] for r in theirs] == [r["chunk_id"] for r in ours]
    assert cli.main(["search", "tunnel", "--index", str(copy), "--backend", "qdrant"]) != 0


def test_cli_eval_on_the_qdrant_backend(index_dir, tmp_path, capsys):
    import json

    from hybridlab import cli

    client = qdrant.connect(path=tmp_path / "qdrant")
    try:
        qdrant.export_index(index_dir, client, "eval")
    finally:
        client.close()
    (tmp_path / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": f"q{i}", "text": q}) + "\n" for i, q in enumerate(QUERIES[:3])))
    (tmp_path / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\nq0\tm03\t1\nq1\tm05\t1\nq2\tm08\t1\n")
    command = ["eval", "--index", str(index_dir), "--queries", str(tmp_path / "queries.jsonl"),
               "--qrels", str(tmp_path / "qrels.tsv"), "--json", "--now", NOW]
    assert cli.main(command) == 0
    ours = json.loads(capsys.readouterr().out)
    assert cli.main([*command, "--backend", "qdrant", "--qdrant-path", str(tmp_path / "qdrant"),
                     "--qdrant-collection", "eval"]) == 0
    assert json.loads(capsys.readouterr().out) == ours
