"""The corpus graph: exact neighbours, safe storage, and expansion of a scored pool."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from hybridlab.index.format.graph import (
    AUTO_GRAPH_MAX,
    build_corpus_graph,
    expand_by_graph,
    graph_size,
    load_graph,
    save_graph,
    update_corpus_graph,
)


def unit_rows(n: int, dim: int = 8, seed: int = 0) -> np.ndarray:
    vectors = np.random.default_rng(seed).normal(size=(n, dim)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def test_graph_holds_each_rows_exact_nearest_neighbours_without_itself():
    vectors = unit_rows(60)
    graph = build_corpus_graph(vectors, k=5)
    similarity = vectors @ vectors.T
    np.fill_diagonal(similarity, -np.inf)
    expected = np.argsort(-similarity, axis=1)[:, :5]
    assert graph.shape == (60, 5) and graph.dtype == np.int32
    assert np.array_equal(np.sort(graph, axis=1), np.sort(expected, axis=1))
    assert not np.any(graph == np.arange(60)[:, None])


def test_graph_of_an_index_smaller_than_k_is_padded():
    graph = build_corpus_graph(unit_rows(3), k=4)
    assert graph.shape == (3, 4)
    assert np.all(graph[:, 2:] == -1) and np.all(graph[:, :2] >= 0)
    assert build_corpus_graph(unit_rows(1), k=4).tolist() == [[-1, -1, -1, -1]]


def test_graph_round_trips_and_refuses_a_graph_of_another_index(tmp_path):
    graph = build_corpus_graph(unit_rows(20), k=3)
    path = tmp_path / "graph.npy"
    save_graph(graph, path)
    assert np.array_equal(load_graph(path, 20), graph)
    with pytest.raises(ValueError, match="does not fit 21 vectors"):
        load_graph(path, 21)
    save_graph(np.full((20, 3), 25, dtype=np.int32), path)
    with pytest.raises(ValueError, match="outside"):
        load_graph(path, 20)


# A line of 6 rows: row i's neighbours are i-1 and i+1. Scores rise towards row 5.
LINE = np.asarray([[1, -1], [0, 2], [1, 3], [2, 4], [3, 5], [4, -1]], dtype=np.int32)
VECTORS = np.eye(6, dtype=np.float32)
QUERY = np.asarray([0.0, 0.1, 0.2, 0.3, 0.4, 0.5], dtype=np.float32)


def test_expansion_follows_the_best_seed_one_hop_at_a_time():
    rows, scores = expand_by_graph(VECTORS, LINE, QUERY, np.asarray([1]), np.asarray([0.1]), hops=1, seeds=1)
    assert rows.tolist() == [1, 0, 2]  # the seed first, then its neighbours, scored exactly
    assert np.allclose(scores, [0.1, 0.0, 0.2])
    rows, _ = expand_by_graph(VECTORS, LINE, QUERY, np.asarray([1]), np.asarray([0.1]), hops=3, seeds=1)
    # hop 2 expands row 2 (best unexpanded: 0.2) -> adds 3; hop 3 expands row 3 -> adds 4
    assert rows.tolist() == [1, 0, 2, 3, 4]


def test_expansion_is_off_with_zero_hops_or_seeds_and_respects_the_filter():
    start = (np.asarray([2]), np.asarray([0.2], dtype=np.float32))
    for hops, seeds in ((0, 5), (3, 0)):
        rows, _ = expand_by_graph(VECTORS, LINE, QUERY, *start, hops=hops, seeds=seeds)
        assert rows.tolist() == [2]
    allowed = np.asarray([True, True, True, False, True, True])
    rows, _ = expand_by_graph(VECTORS, LINE, QUERY, *start, hops=5, seeds=3, keep=lambda r: allowed[r])
    assert 3 not in rows.tolist() and rows.tolist() == [
        2,
        1,
        0,
    ]  # row 3 is filtered out, so 4 and 5 are unreachable


def test_expansion_never_scores_a_row_twice():
    graph = build_corpus_graph(unit_rows(40, seed=3), k=6)
    rows, scores = expand_by_graph(
        unit_rows(40, seed=3),
        graph,
        unit_rows(1, seed=9)[0],
        np.arange(5),
        np.zeros(5, np.float32),
        hops=4,
        seeds=5,
    )
    assert len(rows) == len(set(rows.tolist())) == len(scores)


def test_graph_size_is_automatic_up_to_a_limit_and_explicit_otherwise():
    assert graph_size(None, 5_000) == 16 and graph_size(None, AUTO_GRAPH_MAX + 1) == 0
    assert graph_size(None, 1) == 0  # nothing to link
    assert graph_size(8, AUTO_GRAPH_MAX + 1) == 8 and graph_size(0, 100) == 0
    with pytest.raises(ValueError, match="graph_k"):
        graph_size(-1, 100)


def _changed(old: np.ndarray, n_removed: int, n_added: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """New vectors (old ones kept in order, then `n_added` new) and each old row's new row (-1: gone)."""
    rng = np.random.default_rng(seed)
    keep = np.ones(len(old), dtype=bool)
    keep[rng.choice(len(old), n_removed, replace=False)] = False
    vectors = np.concatenate([old[keep], unit_rows(n_added, old.shape[1], seed + 1)])
    old_to_new = np.full(len(old), -1)
    old_to_new[keep] = np.arange(keep.sum())
    return vectors, old_to_new


@pytest.mark.parametrize(("n_removed", "n_added"), [(0, 1), (0, 40), (25, 0), (10, 30)])
def test_updated_graph_is_the_graph_a_full_build_gives(n_removed, n_added):
    old = unit_rows(600, dim=16)
    vectors, old_to_new = _changed(old, n_removed, n_added, seed=3)
    updated, how = update_corpus_graph(vectors, build_corpus_graph(old, 8), old_to_new, 8)
    assert how == "updated"
    assert np.array_equal(updated, build_corpus_graph(vectors, 8))


def test_a_small_graph_that_grows_past_k_is_updated_exactly():
    old = unit_rows(3)
    vectors, old_to_new = _changed(old, 0, 2, seed=4)
    updated, how = update_corpus_graph(vectors, build_corpus_graph(old, 4), old_to_new, 4)
    assert how == "updated" and np.array_equal(updated, build_corpus_graph(vectors, 4))


def test_mostly_changed_vectors_get_a_full_build():
    old = unit_rows(100)
    vectors, old_to_new = _changed(old, 60, 60, seed=5)
    updated, how = update_corpus_graph(vectors, build_corpus_graph(old, 4), old_to_new, 4)
    assert how == "built" and np.array_equal(updated, build_corpus_graph(vectors, 4))


def test_successive_updates_with_a_reserve_give_a_full_builds_graph_and_search_only_what_they_must(
    monkeypatch,
):
    """With reserve columns, rows that lose a neighbour take the next known one instead of a search;
    after each of several updates (deletes and adds) the first k columns are a full build's graph."""
    import hybridlab.index.format.graph as graph_module

    searched: list[int] = []
    search = graph_module._search_and_merge

    def counting(vectors, graph, fresh, added, rows):
        searched.append(len(fresh))
        search(vectors, graph, fresh, added, rows)

    monkeypatch.setattr(graph_module, "_search_and_merge", counting)
    k, reserve = 6, 4
    vectors = unit_rows(400, dim=16, seed=7)
    rows = build_corpus_graph(vectors, k, reserve=reserve)
    assert rows.shape == (400, k + reserve) and np.array_equal(rows[:, :k], build_corpus_graph(vectors, k))
    for step in range(6):
        new_vectors, old_to_new = _changed(vectors, 5, 5, seed=20 + step)
        searched.clear()
        rows, how = update_corpus_graph(new_vectors, rows, old_to_new, k, reserve=reserve)
        fresh = sum(searched)
        assert how == "updated" and rows.shape == (400, k + reserve)
        assert np.array_equal(rows[:, :k], build_corpus_graph(new_vectors, k)), step
        assert 5 <= fresh < 5 + 40, step  # the new rows and the few that ran out of known neighbours
        assert rows.min() >= graph_module.UNKNOWN
        vectors = new_vectors


def test_a_graph_without_reserve_is_updated_into_one_with_a_reserve():
    from hybridlab.index.format.graph import UNKNOWN

    old = unit_rows(300, dim=16, seed=11)
    vectors, old_to_new = _changed(old, 10, 10, seed=12)
    rows, how = update_corpus_graph(vectors, build_corpus_graph(old, 5), old_to_new, 5, reserve=3)
    assert how == "updated" and rows.shape == (300, 8)
    assert np.array_equal(rows[:, :5], build_corpus_graph(vectors, 5))
    vectors, old_to_new = _changed(old, 0, 10, seed=15)  # additions only: the old lists are taken as they are
    rows, how = update_corpus_graph(vectors, build_corpus_graph(old, 5), old_to_new, 5, reserve=3)
    assert how == "updated" and rows.shape == (310, 8) and (rows[:300, 5:] == UNKNOWN).all()
    assert np.array_equal(rows[:, :5], build_corpus_graph(vectors, 5))
    tiny = unit_rows(3, seed=16)  # a complete list (-1 padded) without reserve stays complete, growing
    vectors, old_to_new = _changed(tiny, 0, 2, seed=17)
    rows, how = update_corpus_graph(vectors, build_corpus_graph(tiny, 3), old_to_new, 3, reserve=3)
    assert np.array_equal(rows, build_corpus_graph(vectors, 3, reserve=3))
    tiny = unit_rows(4, seed=13)  # complete lists (every other vector) stay complete through deletes
    vectors, old_to_new = _changed(tiny, 1, 1, seed=14)
    rows, how = update_corpus_graph(vectors, build_corpus_graph(tiny, 2, reserve=3), old_to_new, 2, reserve=3)
    assert np.array_equal(rows, build_corpus_graph(vectors, 2, reserve=3))


@pytest.mark.parametrize(("cells", "query_rows"), [(1 << 24, 1 << 10), (64, 3), (64, 1 << 10)])
def test_update_in_small_score_blocks_is_a_full_build(monkeypatch, cells, query_rows):
    """The update scores the fresh rows against every vector in blocks of `_QUERY_ROWS` rows x
    `_SCORE_CELLS` floats, keeps each block's best and merges the added rows into the kept lists:
    tiny blocks (a few rows and columns at a time, pairs scored a few at a time) give the same
    graph, also for complete lists that grow past `k`."""
    import hybridlab.index.format.graph as graph_module

    monkeypatch.setattr(graph_module, "_SCORE_CELLS", cells)
    monkeypatch.setattr(graph_module, "_QUERY_ROWS", query_rows)
    monkeypatch.setattr(graph_module, "_MERGE_CELLS", 64)
    old = unit_rows(500, dim=16, seed=21)
    vectors, old_to_new = _changed(old, 12, 30, seed=22)
    rows, how = update_corpus_graph(vectors, build_corpus_graph(old, 6, reserve=4), old_to_new, 6, reserve=4)
    assert how == "updated" and np.array_equal(rows[:, :6], build_corpus_graph(vectors, 6))
    tiny = unit_rows(5, seed=23)  # complete lists (-1 padded) take every added row, up to their width
    vectors, old_to_new = _changed(tiny, 0, 4, seed=24)
    rows, how = update_corpus_graph(vectors, build_corpus_graph(tiny, 3, reserve=4), old_to_new, 3, reserve=4)
    assert how == "updated" and np.array_equal(rows, build_corpus_graph(vectors, 3, reserve=4))


def test_merge_alone_matches_the_combined_search_and_merge():
    """`_merge_added` (used above `EXACT_GRAPH_MAX`, where fresh rows get the approximate search)
    puts the added rows into the kept lists exactly as `_search_and_merge` does."""
    import hybridlab.index.format.graph as graph_module

    old = unit_rows(400, dim=16, seed=31)
    vectors, _ = _changed(old, 0, 25, seed=32)
    kept = np.arange(400)
    added = np.arange(400, 425)
    start = np.full((425, 8), -1, dtype=np.int32)
    start[:400] = build_corpus_graph(old, 8)
    merged, combined = start.copy(), start.copy()
    rows = graph_module.SegmentRows([(vectors, None)])
    graph_module._merge_added(rows, merged, kept, added)
    graph_module._search_and_merge(rows, combined, added, added, kept)
    assert np.array_equal(merged[:400], combined[:400])
    assert np.array_equal(combined, build_corpus_graph(vectors, 8))


def test_above_the_exact_limit_kept_lists_still_take_new_rows_exactly(monkeypatch):
    """Above `EXACT_GRAPH_MAX` fresh rows get the approximate (HNSW) search of a full build, but
    the new rows are merged into every kept list exactly (`_merge_added`)."""
    import hybridlab.index.format.graph as graph_module

    old = unit_rows(400, dim=16, seed=71)
    vectors, old_to_new = _changed(old, 0, 20, seed=72)
    start = build_corpus_graph(old, 6, reserve=3)
    exact = build_corpus_graph(vectors, 6, reserve=3)
    monkeypatch.setattr(graph_module, "EXACT_GRAPH_MAX", 100)
    rows, how = update_corpus_graph(vectors, start, old_to_new, 6, reserve=3)
    assert how == "updated" and np.array_equal(rows[:400], exact[:400])


def test_fresh_lists_break_ties_by_row_even_at_the_cut():
    """Equal scores are ordered by row, lowest first, and the lowest rows make the cut."""
    from hybridlab.index.format.graph import _top_by_score

    scores = np.array([[0.5, 0.9, 0.5, 0.1, 0.5, 0.9], [0.2, 0.2, 0.2, 0.2, 0.2, 0.2]], dtype=np.float32)
    columns, values = _top_by_score(scores, 3)
    assert columns.tolist() == [[1, 5, 0], [0, 1, 2]]
    assert np.array_equal(values, np.array([[0.9, 0.9, 0.5], [0.2] * 3], dtype=np.float32))


def test_successive_updates_of_vectors_with_many_duplicates_give_a_full_builds_graph():
    """Vectors drawn from a small pool (many exact duplicates, so ties at every cut): after each of
    several updates that delete and add, every list holds the vectors a full build's holds, in its
    order, wherever the update knows them (reserve entries it lost are `UNKNOWN`). Which of equal
    vectors a list names may differ: float32 products of equal vectors need not round alike."""
    from hybridlab.index.format.graph import UNKNOWN

    rng = np.random.default_rng(51)
    pool = unit_rows(30, dim=8, seed=52)
    drawn = rng.integers(0, 30, 300)
    vectors = pool[drawn]
    k, reserve = 5, 4
    rows = build_corpus_graph(vectors, k, reserve=reserve)
    for step in range(5):
        keep = np.ones(len(vectors), dtype=bool)
        keep[rng.choice(len(vectors), 6, replace=False)] = False
        new_drawn = rng.integers(0, 30, 6)
        new_vectors = np.concatenate([vectors[keep], pool[new_drawn]])
        drawn = np.concatenate([drawn[keep], new_drawn])
        old_to_new = np.full(len(vectors), -1)
        old_to_new[keep] = np.arange(keep.sum())
        rows, how = update_corpus_graph(new_vectors, rows, old_to_new, k, reserve=reserve)
        full = build_corpus_graph(new_vectors, k, reserve=reserve)
        known = rows != UNKNOWN
        assert how == "updated" and known[:, :k].all() and (rows >= UNKNOWN).all(), step
        assert np.array_equal(drawn[rows[known]], drawn[full[known]]), step
        vectors = new_vectors


@pytest.mark.parametrize("single_below", [0.0, 1e18])
def test_update_restores_blas_threads_and_gives_the_same_graph_either_way(monkeypatch, single_below):
    """Small updates run their matrix products on one BLAS thread, big ones on BLAS's own: the
    graph is the same, and the process's BLAS thread count is what it was before."""
    import hybridlab.index.format.graph as graph_module

    threadpoolctl = pytest.importorskip("threadpoolctl")
    monkeypatch.setattr(graph_module, "SINGLE_THREAD_WORK", single_below)
    before = [lib["num_threads"] for lib in threadpoolctl.threadpool_info()]
    old = unit_rows(300, dim=16, seed=61)
    vectors, old_to_new = _changed(old, 8, 12, seed=62)
    rows, how = update_corpus_graph(vectors, build_corpus_graph(old, 5), old_to_new, 5)
    assert how == "updated" and np.array_equal(rows, build_corpus_graph(vectors, 5))
    assert [lib["num_threads"] for lib in threadpoolctl.threadpool_info()] == before


def test_writes_with_tombstones_keep_a_full_builds_graph_and_dead_ids_are_kept_per_folder(
    tmp_path, embedding_cache_path
):
    """Through `apply_changes`: changed documents tombstone the first segment; the updated graph
    (its live vectors copied once from the segments) equals a fresh build's. The tombstones' chunk
    ids are kept for the next write, per folder identity and tombstone list."""
    import os

    from hybridlab.config import IndexConfig
    from hybridlab.index.format import layout, segments
    from hybridlab.index.format.graph import load_graph
    from hybridlab.index.write.build import apply_changes
    from hybridlab.index.write.memory import make_memory

    config = IndexConfig(models=("wordllama",), graph_k=3)
    words = ["panel", "widget", "holoviews", "stream", "plot", "bokeh", "server", "layout", "data", "table"]

    def memory(i: int, version: int = 0):
        text = (
            " ".join(words[(i * 7 + j * (version + 3)) % len(words)] for j in range(6))
            + f" note {i} v{version}"
        )
        return make_memory(
            text, [], created_at="2026-10-01T12:00:00Z", memory_id=f"m{i:03d}", source="mcp:memories"
        )

    def graph_of(index_dir):  # each row's neighbours as document ids (one chunk a memory)
        from hybridlab.index.format import store

        manifest = layout.read_manifest(index_dir)
        chunks = []
        for entry in manifest.segment_list:
            con = store.open_segment(index_dir / entry.name)
            try:
                rows = con.execute("SELECT chunk_id, doc_id FROM chunks").fetchall()
            finally:
                con.close()
            chunks += [row for row in rows if row[1] not in set(entry.deleted)]
        doc_ids = np.asarray([doc_id for _, doc_id in sorted(chunks)])
        info = manifest.models["wordllama"]
        graph = load_graph(index_dir / info.graph_dir / info.graph, len(doc_ids))
        return dict(zip(doc_ids, doc_ids[graph].tolist(), strict=True))

    index_dir, fresh = tmp_path / "index", tmp_path / "fresh"
    documents = {i: memory(i) for i in range(40)}
    apply_changes(
        index_dir,
        [("mcp:memories", list(documents.values()), True)],
        config,
        progress=False,
        cache_path=embedding_cache_path,
    )
    for step in range(3):
        for i in range(step * 5, step * 5 + 4):
            documents[i] = memory(i, step + 1)
        apply_changes(
            index_dir,
            [("mcp:memories", list(documents.values()), True)],
            config,
            progress=False,
            cache_path=embedding_cache_path,
            merge=False,
        )
    manifest = layout.read_manifest(index_dir)
    first = manifest.segment_list[0]
    assert len(first.deleted) == 12 and manifest.models["wordllama"].graph_build == "updated"
    apply_changes(
        fresh,
        [("mcp:memories", list(documents.values()), True)],
        config,
        progress=False,
        cache_path=embedding_cache_path,
    )
    assert graph_of(index_dir) == graph_of(fresh)
    folder = index_dir / first.name
    dead = segments.dead_chunk_ids(folder, first)
    assert len(dead) == 12 and segments.dead_chunk_ids(folder, first) is dead  # kept for the next write
    info = folder.stat()  # a folder that is not the same one (another mtime): looked up again
    os.utime(folder, ns=(info.st_atime_ns, info.st_mtime_ns + 10**9))
    again = segments.dead_chunk_ids(folder, first)
    assert again is not dead and np.array_equal(again, dead)
    assert len(segments.dead_chunk_ids(folder, dataclasses.replace(first, deleted=first.deleted[:5]))) == 5


@pytest.mark.parametrize("cells", [1 << 18, 40])
def test_segment_rows_update_like_the_copied_vectors(monkeypatch, cells):
    """Vectors given as per-segment arrays and their live rows (not copied) give the graph their
    concatenation gives, with score blocks that straddle segments and skip dead rows."""
    import hybridlab.index.format.graph as graph_module
    from hybridlab.index.format.graph import SegmentRows

    monkeypatch.setattr(graph_module, "_SCORE_CELLS", cells)
    monkeypatch.setattr(graph_module, "_MERGE_CELLS", cells)
    old = unit_rows(300, dim=16, seed=81)
    graph = build_corpus_graph(old, 5, reserve=3)
    first, second = (
        old[:200],
        np.concatenate([old[200:], unit_rows(30, dim=16, seed=82)]),
    )  # 100 kept + 30 new
    dead_first, dead_second = np.array([3, 50, 51, 199]), np.array([0, 7])
    live_first = np.setdiff1d(np.arange(200), dead_first)
    live_second = np.setdiff1d(np.arange(130), dead_second)
    parts = SegmentRows([(first, live_first), (np.zeros((0, 16), np.float32), None), (second, live_second)])
    copied = np.concatenate([first[live_first], second[live_second]])
    assert len(parts) == len(copied) and np.array_equal(parts.array(), copied)
    rows = np.array([0, 195, 196, len(copied) - 1, 5])
    assert np.array_equal(parts.take(rows), copied[rows])
    old_to_new = np.full(300, -1)
    old_rows = np.concatenate([live_first, 200 + live_second[live_second < 100]])
    old_to_new[old_rows] = np.arange(len(old_rows))
    from_parts, how = update_corpus_graph(parts, graph, old_to_new, 5, reserve=3)
    from_copy, _ = update_corpus_graph(copied, graph, old_to_new, 5, reserve=3)
    assert how == "updated" and np.array_equal(from_parts, from_copy)
    assert np.array_equal(from_parts[:, :5], build_corpus_graph(copied, 5))
