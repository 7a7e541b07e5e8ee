"""Dense retrieval: filtered searches are exact and fill `depth` whichever plan they take (gathered
subset, row-bitmap scan, full scan, cached contiguous subset; flat or approximate index); HNSW's
efSearch comes from the index config."""

from __future__ import annotations

import gc
import json

import numpy as np
import pytest

from hybridlab.config import IndexConfig
from hybridlab.index.format import dense as dense_module
from hybridlab.index.format.dense import DenseIndex, scan_plan, top_exact

N, DIM = 4000, 24


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(3)
    vectors = rng.normal(size=(N, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    ids = np.arange(N, dtype=np.int64) * 3 + 5  # chunk ids with gaps, as after updates
    return vectors, ids, rng.normal(size=DIM).astype(np.float32)


def exact_top(vectors, ids, query, allowed, depth):
    """The reference: score every allowed vector, best first, ties by id."""
    rows = np.searchsorted(ids, allowed)
    scores = vectors[rows] @ query
    order = np.lexsort((allowed, -scores))[:depth]
    return allowed[order], scores[order]


def test_cost_rule_picks_gather_bitmap_or_full_scan_by_share():
    assert scan_plan(10, 1_000_000) == "gather"  # tiny: always gather
    assert scan_plan(3_000, 100_000) == "gather"  # 3% of the index
    assert scan_plan(25_000, 100_000) == "bitmap"  # a quarter: bitmap scan
    assert scan_plan(2_600, 5_183) == "bitmap"  # SciFact's half
    assert scan_plan(25_000, 100_000, bitmap_ok=False) == "gather"  # no flat storage to scan with a bitmap
    assert scan_plan(50_000, 100_000, bitmap_ok=False) == "full"


def test_top_exact_breaks_ties_by_id_across_the_cut():
    ids = np.asarray([9, 4, 7, 1, 3])
    scores = np.asarray([0.5, 0.9, 0.5, 0.5, 0.1], dtype=np.float32)
    got_ids, got_scores = top_exact(ids, scores, 3)
    assert got_ids.tolist() == [4, 1, 7] and got_scores.tolist() == pytest.approx([0.9, 0.5, 0.5])


@pytest.mark.parametrize("cache_bytes", [0, 1 << 30])
@pytest.mark.parametrize("factory", ["Flat", "HNSW32", "IVF16,Flat"])
@pytest.mark.parametrize("share", [0.02, 0.3, 0.9])
def test_filtered_search_is_exact_on_every_path(data, factory, share, cache_bytes, monkeypatch):
    """Gathered subset (2%), bitmap scan (30%, 90%; without flat storage: gather, full scan), then
    (cache allowing) the contiguous copy made on reuse: the exact ids and scores, on a flat index,
    a graph over flat storage and an inverted-file index."""
    monkeypatch.setattr(dense_module, "SUBSET_CACHE_BYTES", cache_bytes)
    vectors, ids, query = data
    index = DenseIndex.build(vectors, ids, "m", factory, ef_search=16)
    allowed = ids[np.random.default_rng(int(share * 100)).random(N) < share]
    assert (
        index._subset_for(allowed).plan
        == {
            "Flat": {0.02: "gather", 0.3: "bitmap", 0.9: "bitmap"},
            "HNSW32": {0.02: "gather", 0.3: "bitmap", 0.9: "bitmap"},
            "IVF16,Flat": {0.02: "gather", 0.3: "gather", 0.9: "full"},
        }[factory][share]
    )
    for depth in (1, 10, 200):
        got_ids, got_scores = index.search(query, depth, allowed)
        want_ids, want_scores = exact_top(vectors, ids, query, allowed, depth)
        assert got_ids.tolist() == want_ids.tolist()
        np.testing.assert_allclose(got_scores, want_scores, rtol=1e-5, atol=1e-5)
    assert (index._subset.matrix is not None) == (cache_bytes > 0)


def test_bitmap_path_equals_gathered_subset_scoring(data, monkeypatch):
    """The same filter through the bitmap scan and through gathering: same ids, same scores."""
    monkeypatch.setattr(dense_module, "SUBSET_CACHE_BYTES", 0)
    vectors, ids, query = data
    allowed = ids[::3]
    bitmap = DenseIndex.build(vectors, ids, "m")
    assert bitmap._subset_for(allowed).plan == "bitmap"
    monkeypatch.setattr(dense_module, "GATHER_SHARE", 1.0)
    gathered = DenseIndex.build(vectors, ids, "m")
    assert gathered._subset_for(allowed).plan == "gather"
    for depth in (10, 100, len(allowed) + 10):
        a_ids, a_scores = bitmap.search(query, depth, allowed)
        b_ids, b_scores = gathered.search(query, depth, allowed)
        assert a_ids.tolist() == b_ids.tolist() and len(a_ids) == min(depth, len(allowed))
        np.testing.assert_allclose(a_scores, b_scores, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("factory", ["Flat", "HNSW32"])
def test_filters_fill_depth_exactly_down_to_one_allowed_chunk(data, factory):
    """>= depth allowed chunks: exactly depth results; fewer: all of them; unknown ids are ignored."""
    vectors, ids, query = data
    index = DenseIndex.build(vectors, ids, "m", factory, ef_search=8)
    rng = np.random.default_rng(0)
    for n_allowed in (1, 3, 50, 1500, N):
        allowed = np.sort(rng.choice(ids, n_allowed, replace=False))
        for depth in (1, 10, 100):
            got, _ = index.search(query, depth, allowed)
            assert len(got) == min(depth, n_allowed) and set(got.tolist()) <= set(allowed.tolist())
    got, _ = index.search(query, 10, np.asarray([ids[5], 2]))  # 2 is no chunk id of this index
    assert got.tolist() == [ids[5]]
    assert len(index.search(query, 10, np.zeros(0, np.int64))[0]) == 0


def test_filter_state_is_reused_and_made_contiguous_on_reuse(data, monkeypatch):
    vectors, ids, query = data
    index = DenseIndex.build(vectors, ids, "m")
    index.search(query, 10, ids[::2])
    first = index._subset
    assert first.matrix is None  # a one-off filter costs no copy
    index.search(query, 10, ids[::2].copy())
    assert index._subset is first and first.uses == 2
    np.testing.assert_array_equal(first.matrix, vectors[::2])
    index.search(query, 10, ids[1::2])
    assert index._subset is not first and index._subset.rows.tolist() == list(range(1, N, 2))
    monkeypatch.setattr(dense_module, "SUBSET_CACHE_BYTES", len(vectors) // 2 * DIM * 4 - 1)
    index.search(query, 10, ids[::2])
    index.search(query, 10, ids[::2])
    assert index._subset.matrix is None  # over the budget: stays a scan


def test_hnsw_unfiltered_search_fills_depth_and_uses_ef_search(data):
    """A graph walk with a short candidate list can return fewer than `depth` hits: the search then
    answers exactly from the stored vectors."""
    vectors, ids, query = data
    index = DenseIndex.build(vectors, ids, "m", "HNSW32", ef_search=8)
    assert index.ef_search == 8 and index._inner.hnsw.efSearch == 8
    index.set_ef_search(64)
    assert index._inner.hnsw.efSearch == 64
    for depth in (10, 1000, N, N + 5):
        got, _ = index.search(query, depth)
        assert len(got) == min(depth, N) and len(set(got.tolist())) == len(got)
    flat = DenseIndex.build(vectors, ids, "m")
    assert flat.ef_search is None  # no-op on flat
    flat.set_ef_search(64)
    assert flat.ef_search is None


def test_vectors_view_outlives_its_index(data):
    """The flat storage is exposed without a copy; the view keeps the FAISS index alive."""
    vectors, ids, _ = data
    view = DenseIndex.build(vectors, ids, "m").vectors
    gc.collect()
    _ = [np.ones(50_000) for _ in range(20)]  # reuse freed memory, if it had been freed
    np.testing.assert_array_equal(view, vectors)
    assert not view.flags.writeable


def test_hnsw_ef_search_round_trips_through_config_manifest_and_load(tmp_path):
    from hybridlab.index.write.build import index_paths
    from hybridlab.search.engine import open_index

    config = IndexConfig(models=("wordllama",), dense_index="HNSW16", hnsw_ef_search=40)
    assert IndexConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    assert (
        IndexConfig.from_dict(
            {k: v for k, v in config.to_dict().items() if k != "hnsw_ef_search"}
        ).hnsw_ef_search
        == 128
    )
    lines = [
        json.dumps(
            {
                "id": f"m{i}",
                "content": f"note {i} about {w} and more {w}",
                "metadata": {"project": f"p{i % 2}"},
            }
        )
        for i, w in enumerate(["tunnel", "cache", "kernel", "backup", "schema"] * 8)
    ]
    (tmp_path / "m.jsonl").write_text("\n".join(lines) + "\n")
    index_paths(
        [tmp_path / "m.jsonl"],
        tmp_path / "index",
        config,
        progress=False,
        cache_path=tmp_path / "embeddings.duckdb",
    )
    with open_index(tmp_path / "index") as index:
        assert index.manifest.index_config.hnsw_ef_search == 40
        dense = index.dense["wordllama"]
        assert dense.ef_search == 40 and dense._inner.hnsw.efSearch == 40
        results = index.search("kernel", collection="p1", mode="vector", limit=10)
        assert len(results) == 10 and all(r.collection == "p1" for r in results)
