"""The Qdrant backend (client's local mode) ranks like the local backend on the small memory index."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("qdrant_client")

from test_search import NOW, write_memories

from hybridlab.config import IndexConfig
from hybridlab.index.admin import qdrant as qdrant_mirror
from hybridlab.index.reader import read_generation
from hybridlab.search import qdrant
from hybridlab.search.engine import Index, open_index
from hybridlab.search.filters import Filters
from hybridlab.search.retrievers import RowFilter

QUERIES = [
    "where does the tunnel server run",
    "cachelib codebase architecture",
    "release process wheels",
    "axolotl tank heater",
    "rate limiting per token",
    "what does the user prefer",
]


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory) -> Path:
    from hybridlab.index.write.build import index_paths

    root = tmp_path_factory.mktemp("qdrant-index")
    source = write_memories(root / "memories.jsonl")
    index_paths(
        [source],
        root / "index",
        IndexConfig(models=("wordllama",)),
        progress=False,
        cache_path=root / "embeddings.duckdb",
    )
    return root / "index"


@pytest.fixture(scope="module")
def client(index_dir):
    client = qdrant_mirror.connect()  # in memory
    generation = read_generation(index_dir)
    try:
        qdrant_mirror.export_generation(generation, client, "memories")
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
    return [
        (r.chunk_id, pytest.approx(r.score, rel=1e-4, abs=1e-6))
        for r in index.search(query, limit=10, now=NOW, **options)
    ]


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


@pytest.mark.parametrize(
    "options",
    [
        {"mode": "bm25"},
        {"mode": "vector"},
        {},
        {"fusion": "rrf"},
        {"fusion": "convex", "normalization": "min-max"},
        {"fusion": "convex", "normalization": "z-score"},
        {"fusion": "dbsf"},
        {"alpha": 0.3, "tags": []},
        {"staged": True, "candidates": 3, "fallback_threshold": 1, "expand_hops": 2, "expand_seeds": 2},
        {
            "staged": True,
            "candidates": 3,
            "fallback_threshold": 1,
            "expand_hops": 2,
            "collection": "cachelib",
        },
    ],
)
def test_same_top_10_as_the_local_backend(local, remote, options):
    for query in QUERIES:
        assert ranked(remote, query, **options) == ranked(local, query, **options), (query, options)


@pytest.mark.parametrize(
    "filters",
    [
        {"collection": "tunnelx"},
        {"tags": ["home"]},
        {"tags": ["architecture", "cachelib"]},
        {"tags": ["hosting", "pets"], "tags_any": True},
        {"since": "2025-01-01"},
        {"until": "2024-03-06"},
        {"embedding_model": "wordllama"},
    ],
)
def test_filters_are_pushed_down_and_fill_limit(local, remote, filters):
    mask = (
        local.snapshot()
        .store.allowed(local.make_filters(**{k: v for k, v in filters.items() if k != "embedding_model"}))
        .mask
    )
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
        vector = remote.query_models.query_vector(remote.snapshot(), model, query)
        for fusion in ("rrf", "dbsf"):
            server = qdrant.server_fusion(
                snapshot, query, vector, model, fusion=fusion, rrf_k=60, depth=100, limit=10
            )
            retrieval = remote._retrieve(
                query,
                {
                    "fusion": fusion,
                    "recency_weight": 0.0,
                    "limit": 10,
                    "depth": 100,
                    "alpha": 0.5,
                    "rrf_k": 60,
                    "staged": False,
                    "adaptive_fusion": False,
                },
                Filters(),
                [],
                remote_now(),
            )
            assert list(server) == [hit.row for hit in retrieval.hits[:10]], (query, fusion)


def remote_now():
    from hybridlab.search.engine import resolve_now

    return resolve_now(NOW)


def test_upsert_and_delete_by_document(index_dir, tmp_path):
    copy = tmp_path / "index"
    shutil.copytree(index_dir, copy)
    client = qdrant_mirror.connect(path=tmp_path / "qdrant")
    try:
        generation = read_generation(copy)
        try:
            qdrant_mirror.export_generation(generation, client, "copy")
            target = "m10"  # the only memory about the axolotl tank
            doc_id = target
            qdrant_mirror.delete_documents(client, "copy", [doc_id])
            assert len(
                qdrant_mirror.point_ids(client, "copy")
            ) == generation.n_chunks - generation.doc_ids.count(doc_id)
            with pytest.raises(ValueError, match="re-export"):
                qdrant.qdrant_snapshot(generation, client, "copy")
            assert qdrant_mirror.upsert_documents(
                generation, client, "copy", [doc_id]
            ) == generation.doc_ids.count(doc_id)
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

    client = qdrant_mirror.connect(path=tmp_path / "qdrant")
    try:
        qdrant_mirror.export_index(index_dir, client, "eval")
    finally:
        client.close()
    (tmp_path / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": f"q{i}", "text": q}) + "\n" for i, q in enumerate(QUERIES[:3]))
    )
    (tmp_path / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\nq0\tm03\t1\nq1\tm05\t1\nq2\tm08\t1\n")
    command = [
        "eval",
        "--index",
        str(index_dir),
        "--queries",
        str(tmp_path / "queries.jsonl"),
        "--qrels",
        str(tmp_path / "qrels.tsv"),
        "--json",
        "--now",
        NOW,
    ]
    assert cli.main(command) == 0
    ours = json.loads(capsys.readouterr().out)
    assert (
        cli.main(
            [
                *command,
                "--backend",
                "qdrant",
                "--qdrant-path",
                str(tmp_path / "qdrant"),
                "--qdrant-collection",
                "eval",
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out) == ours


def bm25_matches(generation, client, collection: str) -> None:
    """BM25 served by the collection equals bm25s over `generation` (rows and scores, top 20)."""
    retriever = qdrant.QdrantSparseRetriever(client, collection, generation)
    everything = RowFilter(Filters(), None, generation.n_chunks)
    for query in [*QUERIES, "tunnel heater wheels", "editor"]:
        rows, scores = generation.sparse.top(generation.sparse.query_ids(query), 20)
        q_rows, q_scores = retriever.search(query, 20, everything)
        assert q_rows.tolist() == rows.tolist(), query
        np.testing.assert_allclose(q_scores, scores, rtol=1e-5)


def edit_memories(path: Path) -> None:
    """Change m10, remove m03, add a new memory (m99) that brings new terms into the vocabulary."""
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows = [row for row in rows if row["id"] != "m03"]
    for row in rows:
        if row["id"] == "m10":
            row["content"] += " The heater thermostat was replaced in November."
    rows.append(
        {
            "id": "m99",
            "content": "Zymurgy notes: the sourdough starter lives in the garage fridge.",
            "tags": ["home"],
            "created_at": "2026-10-30T12:00:00Z",
        }
    )
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def test_sync_upserts_only_what_changed_and_stays_exact(tmp_path):
    from hybridlab.index.write.build import index_paths

    source = write_memories(tmp_path / "memories.jsonl")
    config = IndexConfig(models=("wordllama",))
    cache = tmp_path / "embeddings.duckdb"
    index_paths([source], tmp_path / "index", config, progress=False, cache_path=cache)
    client = qdrant_mirror.connect(path=tmp_path / "qdrant")
    try:
        first = qdrant_mirror.sync_index(tmp_path / "index", client, "mem")
        assert (first.action, first.reason) == ("full", "new collection")
        assert qdrant_mirror.sync_index(tmp_path / "index", client, "mem").action == "unchanged"
        edit_memories(source)
        index_paths([source], tmp_path / "index", config, progress=False, cache_path=cache)
        generation = read_generation(tmp_path / "index")
        try:
            report = qdrant_mirror.sync_generation(generation, client, "mem")
            assert report.action == "incremental", report
            assert (report.upserted_documents, report.deleted_documents) == (2, 1)
            changed_rows = sum(generation.doc_ids.count(doc_id) for doc_id in ("m10", "m99"))
            assert report.points_upserted == changed_rows
            assert report.points_reweighted == generation.n_chunks - changed_rows
            assert qdrant_mirror.mirror_marker(client, "mem")["generation"] == generation.number
            assert np.array_equal(qdrant_mirror.point_ids(client, "mem"), generation.chunk_ids)
            bm25_matches(generation, client, "mem")  # new terms, shifted vocabulary ids, new IDF: exact
            snapshot = qdrant.qdrant_snapshot(generation, client, "mem")
            rows, _ = snapshot.sparse.search("sourdough starter garage", 3, snapshot.store.allowed(Filters()))
            assert generation.doc_ids[rows[0]] == "m99"
            # another sparse scheme cannot be synced in place: a full export, said why
            other = qdrant_mirror.sync_generation(generation, client, "mem", idf_modifier=True)
            assert other.action == "full" and "sparse vectors are 'folded'" in other.reason
            bm25_matches(generation, client, "mem")
        finally:
            generation.store.close()
    finally:
        client.close()


def test_sync_without_reweighting_drifts_from_bm25s(tmp_path):
    """The reason the sync re-weights: with folded IDF the unchanged points keep the old statistics."""
    from hybridlab.index.write.build import index_paths

    source = write_memories(tmp_path / "memories.jsonl")
    config = IndexConfig(models=("wordllama",))
    index_paths([source], tmp_path / "index", config, progress=False, cache_path=tmp_path / "e.duckdb")
    client = qdrant_mirror.connect()
    try:
        qdrant_mirror.sync_index(tmp_path / "index", client, "mem")
        edit_memories(source)
        index_paths([source], tmp_path / "index", config, progress=False, cache_path=tmp_path / "e.duckdb")
        generation = read_generation(tmp_path / "index")
        try:
            assert (
                qdrant_mirror.sync_generation(generation, client, "mem", reweight=False).points_reweighted
                == 0
            )
            with pytest.raises(AssertionError):
                bm25_matches(generation, client, "mem")
        finally:
            generation.store.close()
    finally:
        client.close()


def test_sparse_indices_are_term_hashes_shared_by_generations(index_dir):
    generation = read_generation(index_dir)
    try:
        assert (
            qdrant_mirror.term_index("tunnel")
            == qdrant_mirror.term_index("tunnel")
            != qdrant_mirror.term_index("tunnels")
        )
        assert 0 <= qdrant_mirror.term_index("tunnel") < 2**32
        assert qdrant_mirror.term_collisions(generation.sparse) == 0
        weights = qdrant_mirror.sparse_weights(generation)
        indices = qdrant_mirror.term_indices(generation.sparse)
        assert set(np.concatenate([w[0] for w in weights.values()]).tolist()) <= set(indices.tolist())
        assert qdrant_mirror.sparse_weights(generation, rows=[3])[3][0].tolist() == weights[3][0].tolist()
    finally:
        generation.store.close()


def test_cli_index_twice_upserts_only_the_changes(tmp_path, capsys):
    from hybridlab import cli

    source = write_memories(tmp_path / "memories.jsonl")
    backend = ["--backend", "qdrant", "--qdrant-path", str(tmp_path / "qdrant"), "--qdrant-collection", "cli"]
    command = [
        "index",
        str(source),
        "--index",
        str(tmp_path / "index"),
        "--model",
        "wordllama",
        "-q",
        *backend,
    ]
    assert cli.main(command) == 0
    assert "full export of generation 1" in capsys.readouterr().err
    edit_memories(source)
    assert cli.main(command) == 0
    err = capsys.readouterr().err
    assert "-> generation 2: 2 documents upserted" in err and "1 deleted" in err, err
    query = [
        "search",
        "zymurgy sourdough starter",
        "--index",
        str(tmp_path / "index"),
        "--json",
        "--now",
        NOW,
    ]
    assert cli.main([*query, *backend]) == 0
    theirs = json.loads(capsys.readouterr().out)
    assert cli.main(query) == 0
    ours = json.loads(capsys.readouterr().out)
    assert [r["chunk_id"] for r in theirs] == [r["chunk_id"] for r in ours]
    assert "m99" in [r["doc_id"] for r in theirs]


def test_sync_is_exact_on_qdrant_edge_and_its_idf_modifier_lags_deletes(tmp_path):
    """On Qdrant's own engine (qdrant-edge-py): the folded sync is exact after upserts and deletes; the
    IDF modifier still counts deleted points (until the optimizer vacuums them, which it does only past
    its deleted-points threshold): why folded weights are the default."""
    pytest.importorskip("qdrant_edge")
    from bench.qdrant_edge import EdgeClient
    from hybridlab.index.write.build import index_paths

    source = write_memories(tmp_path / "memories.jsonl")
    config = IndexConfig(models=("wordllama",))
    index_paths([source], tmp_path / "index", config, progress=False, cache_path=tmp_path / "e.duckdb")
    client = EdgeClient(tmp_path / "edge")
    try:
        assert qdrant_mirror.sync_index(tmp_path / "index", client, "folded").action == "full"
        assert qdrant_mirror.sync_index(tmp_path / "index", client, "idf", idf_modifier=True).action == "full"
        before = read_generation(tmp_path / "index")
        try:
            bm25_matches(before, client, "idf")
            idf_retriever = qdrant.QdrantSparseRetriever(client, "idf", before)
            everything = RowFilter(Filters(), None, before.n_chunks)
            scores_before = dict(
                zip(*[a.tolist() for a in idf_retriever.search("tunnel server", 50, everything)])
            )
        finally:
            before.store.close()
        edit_memories(source)
        index_paths([source], tmp_path / "index", config, progress=False, cache_path=tmp_path / "e.duckdb")
        generation = read_generation(tmp_path / "index")
        try:
            assert qdrant_mirror.sync_generation(generation, client, "folded").action == "incremental"
            bm25_matches(generation, client, "folded")
            qdrant_mirror.delete_documents(
                client, "idf", ["m05", "m06", "m07"]
            )  # IDF statistics should move...
            scores_after = dict(
                zip(*[a.tolist() for a in idf_retriever.search("tunnel server", 50, everything)])
            )
            assert all(scores_after[row] == scores_before[row] for row in scores_after)  # ...but do not
        finally:
            generation.store.close()
    finally:
        client.close()


def test_points_of_a_newer_generation_are_never_mapped_to_other_rows():
    """A search on the previous snapshot while a sync writes new chunk ids: unknown ids are left out."""
    from types import SimpleNamespace

    points = [
        SimpleNamespace(id=5, score=1.0),
        SimpleNamespace(id=7, score=3.0),
        SimpleNamespace(id=11, score=2.0),
        SimpleNamespace(id=2, score=0.5),
    ]
    rows, scores = qdrant._ranked(np.asarray([2, 5, 9], dtype=np.int64), points, 10)
    assert rows.tolist() == [1, 0] and scores.tolist() == [1.0, 0.5]
