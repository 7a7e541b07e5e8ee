"""The segmented index: BM25 with global statistics equals bm25s, and any sequence of adds, changes
and deletes (with or without merges) answers exactly like a fresh full build of the same documents."""

from __future__ import annotations

import itertools
import random
import shutil

import numpy as np
import pytest

from hybridlab.config import Bm25Config, IndexConfig
from hybridlab.index.format import layout
from hybridlab.index.format.manifest import Segment
from hybridlab.index.format.sparse import SparseIndex, _bm25s
from hybridlab.index.format.tokenizer import Tokenizer
from hybridlab.index.write import merge
from hybridlab.index.write.build import apply_changes, optimize
from hybridlab.index.write.memory import make_memory
from hybridlab.index.write.merge import merge_plan
from hybridlab.search.engine import open_index

WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "panel",
    "holoviews",
    "bokeh",
    "widget",
    "plot",
    "layout",
    "stream",
    "param",
    "server",
    "notebook",
    "table",
    "chart",
    "slider",
    "data",
    "frame",
    "index",
    "vector",
    "search",
    "memory",
    "tag",
    "python",
    "async",
    "render",
    "cache",
    "tunnel",
    "deploy",
]
QUERIES = (
    "panel widget",
    "holoviews stream plot",
    "data frame table",
    "vector search memory",
    "async render cache",
    "slider",
    "bokeh server layout notebook",
    "tunnel deploy python",
)
NOW = "2026-11-01T00:00:00Z"
CONFIG = IndexConfig(models=("wordllama",), graph_k=3)
SOURCE = "mcp:memories"


def _row_weights(index: SparseIndex) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per live row, (term ids of `index.vocab`, BM25 weight of each term, IDF folded in)."""
    rows, terms, values = index.weights()
    order = np.lexsort((terms, rows))  # by row (chunk), then term
    rows, terms, values = rows[order], terms[order], values[order]
    bounds = np.searchsorted(rows, np.arange(index.size + 1))
    return [(terms[bounds[r] : bounds[r + 1]], values[bounds[r] : bounds[r + 1]]) for r in range(index.size)]


def _text(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 25)))


def _memory(doc_id: str, text: str, day: int, tags: tuple[str, ...]):
    return make_memory(
        text, list(tags), created_at=f"2026-10-{day:02d}T12:00:00Z", memory_id=doc_id, source=SOURCE
    )


def test_bm25_scores_equal_bm25s_on_a_fresh_build():
    rng = random.Random(7)
    docs = [_text(rng) for _ in range(400)] + ["", "panel"]
    config = Bm25Config()
    ours = SparseIndex.build(docs, np.arange(len(docs)), config)
    tokenizer = Tokenizer(config)
    vocab: dict[str, int] = {}
    ids = [[vocab.setdefault(t, len(vocab)) for t in tokenizer.tokenize(d)] for d in docs]
    from bm25s.tokenization import Tokenized

    reference = _bm25s().BM25(k1=config.k1, b=config.b, method=config.method)
    reference.index(Tokenized(ids=ids, vocab=vocab), show_progress=False)
    for query in (*QUERIES, "panel panel widget", "nothing-known"):
        term_ids = [vocab[t] for t in tokenizer.query_terms(query) if t in vocab]
        expected = reference.get_scores_from_ids(term_ids) if term_ids else np.zeros(len(docs), np.float32)
        np.testing.assert_array_equal(ours.scores(ours.query_ids(query)), expected)


def test_bm25_over_segments_uses_global_statistics():
    """Two segments plus a tombstone score exactly like one index of the live rows."""
    rng = random.Random(3)
    docs = [_text(rng) for _ in range(60)]
    config = Bm25Config()
    whole = SparseIndex.build(
        [d for i, d in enumerate(docs) if i != 5], np.asarray([i for i in range(60) if i != 5]), config
    )
    first = SparseIndex.build(docs[:40], np.arange(40), config)
    second = SparseIndex.build(docs[40:], np.arange(40, 60), config)
    live = np.ones(40, dtype=bool)
    live[5] = False
    combined = SparseIndex([first.parts[0], second.parts[0]], [live, None], whole.chunk_ids, first.tokenizer)
    for query in QUERIES:
        np.testing.assert_array_equal(
            combined.score_terms(combined.query_terms(query)), whole.score_terms(whole.query_terms(query))
        )
        assert combined.query_idf(query) == whole.query_idf(query)
    assert (combined.k1, combined.b) == (config.k1, config.b)


def test_bm25_groups_of_segments_score_like_one_index_and_are_reused():
    """Segments of several size classes (combined per class into one CSC), with tombstones, score,
    weigh and match exactly like one index of the live rows; a next generation with one more small
    segment reuses the unchanged groups and rebuilds only the one it joins."""
    from hybridlab.index.format.sparse import GroupCache, group_parts

    rng = random.Random(11)
    sizes = [300, 40, 3, 20, 1, 2]  # classes: 300 -> 2, 40 and 20 -> 1, 3 / 1 / 2 -> 0
    docs = [_text(rng) for _ in range(sum(sizes) + 1)]
    config = Bm25Config()
    starts = np.concatenate([[0], np.cumsum(sizes)])
    parts = [
        SparseIndex.build(docs[a:b], np.arange(a, b), config).parts[0] for a, b in itertools.pairwise(starts)
    ]
    live = [None] * len(parts)
    for i, dead in ((0, [5, 17]), (3, [0]), (4, [0])):  # segment 4 (one row) entirely tombstoned
        live[i] = np.ones(sizes[i], dtype=bool)
        live[i][dead] = False
    alive = np.concatenate([np.ones(n, dtype=bool) if mask is None else mask for n, mask in zip(sizes, live)])
    ids = np.flatnonzero(alive)
    whole = SparseIndex.build([docs[i] for i in ids], ids, config)
    cache = GroupCache()
    combined = SparseIndex(parts, live, ids, whole.tokenizer, groups=cache)
    assert group_parts(parts) == [[0], [1, 3], [2, 4, 5]]
    candidates = np.arange(0, len(ids), 7)
    for query in (*QUERIES, "panel panel widget", "nothing-known"):
        np.testing.assert_array_equal(
            combined.score_terms(combined.query_terms(query)), whole.score_terms(whole.query_terms(query))
        )
        assert combined.query_idf(query) == whole.query_idf(query)
        np.testing.assert_array_equal(
            combined.matched_idf_share(query, candidates), whole.matched_idf_share(query, candidates)
        )
    for (terms, weights), (terms_w, weights_w) in zip(_row_weights(combined), _row_weights(whole)):
        assert [combined._terms[t] for t in terms] == [whole._terms[t] for t in terms_w]
        np.testing.assert_array_equal(weights, weights_w)
    groups = {key: cache.get(key) for key in [tuple(parts[i] for i in m) for m in group_parts(parts)]}
    extra = SparseIndex.build([docs[-1]], np.asarray([len(docs) - 1]), config).parts[0]
    SparseIndex([*parts, extra], [*live, None], np.append(ids, len(docs) - 1), whole.tokenizer, groups=cache)
    assert cache.get((parts[0],)) is groups[(parts[0],)] is parts[0]  # a group of one is the segment itself
    assert cache.get((parts[1], parts[3])) is groups[(parts[1], parts[3])]  # unchanged group: reused
    assert (parts[2], parts[4], parts[5], extra) in cache._groups and (
        parts[2],
        parts[4],
        parts[5],
    ) not in cache._groups


def test_dense_over_segments_searches_and_gathers_like_one_index():
    """Unfiltered, filtered and gathered vectors over flat segments with tombstones equal one FAISS
    index of the live vectors (scores bit for bit: FAISS's own kernel scores each segment)."""
    from hybridlab.index.format.dense import DenseIndex, SegmentedDense

    rng = np.random.default_rng(5)
    vectors = rng.standard_normal((230, 16)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    cuts = [0, 100, 130, 131, 230]
    parts = [DenseIndex.build(vectors[a:b], np.arange(a, b), "m") for a, b in itertools.pairwise(cuts)]
    live = [None, np.ones(30, dtype=bool), None, np.ones(99, dtype=bool)]
    live[1][[0, 29]] = False
    live[3][50] = False
    alive = np.concatenate(
        [np.ones(b - a, dtype=bool) if m is None else m for (a, b), m in zip(itertools.pairwise(cuts), live)]
    )
    ids = np.flatnonzero(alive)
    whole = DenseIndex.build(vectors[ids], ids, "m")
    segmented = SegmentedDense("m", parts, live)
    np.testing.assert_array_equal(segmented.ids, ids)
    for query in vectors[:5]:
        for depth in (1, 10, 500):
            got, expected = segmented.search(query, depth), whole.search(query, depth)
            np.testing.assert_array_equal(got[0], expected[0])
            np.testing.assert_array_equal(got[1], expected[1])
        allowed = ids[::3]
        got, expected = segmented.search(query, 7, allowed), whole.search(query, 7, allowed)
        np.testing.assert_array_equal(got[0], expected[0])
        np.testing.assert_allclose(got[1], expected[1], atol=1e-6)
    rows = np.asarray([5, 0, len(ids) - 1, 101, 101, 130, 3])
    np.testing.assert_array_equal(segmented.take(rows), whole.vectors[rows])
    np.testing.assert_array_equal(segmented.take(np.zeros(0, np.int64)), np.zeros((0, 16), np.float32))


def _runs(index_dir) -> dict[tuple[str, str], dict[str, float]]:
    runs = {}
    with open_index(index_dir) as index:
        for query in QUERIES:
            for name, options in (
                ("bm25", {"mode": "bm25"}),
                ("vector", {"mode": "vector"}),
                ("hybrid", {"mode": "hybrid", "staged": False}),
                ("staged", {"mode": "hybrid", "staged": True, "expand_hops": 2, "candidates": 5}),
            ):
                runs[(query, name)] = index.run(query, now=NOW, depth=1000, limit=1000, **options)
            runs[(query, "tagged")] = index.run(query, now=NOW, depth=1000, limit=1000, tags=["red"])
    return runs


def _assert_same(got, expected):
    assert got.keys() == expected.keys()
    for key, run in expected.items():
        assert got[key].keys() == run.keys(), key
        for doc_id, score in run.items():
            assert got[key][doc_id] == pytest.approx(score, abs=1e-6), (key, doc_id)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_writes_answer_like_a_fresh_build(tmp_path, embedding_cache_path, monkeypatch, seed):
    """Random adds, changes and deletes (each a commit: a segment and/or tombstones; merges with a
    small merge factor), then bm25, vector, hybrid, staged and filtered runs equal those of a fresh
    build of the same documents, and again after `optimize`."""
    monkeypatch.setattr(merge, "MERGE_FACTOR", 3)
    rng = random.Random(seed)
    documents: dict[str, object] = {}
    index_dir = tmp_path / "index"
    counter = 0
    for step in range(8):
        for _ in range(rng.randint(0, 6) if step else 12):  # adds
            counter += 1
            doc_id = f"m{counter:04d}"
            documents[doc_id] = _memory(
                doc_id, _text(rng), rng.randint(1, 28), tuple(rng.sample(["red", "blue"], rng.randint(0, 2)))
            )
        for doc_id in rng.sample(sorted(documents), min(len(documents), rng.randint(0, 2))):  # changes
            documents[doc_id] = _memory(doc_id, _text(rng), rng.randint(1, 28), ("red",))
        for doc_id in rng.sample(sorted(documents), min(len(documents) - 1, rng.randint(0, 2))):  # deletes
            del documents[doc_id]
        apply_changes(
            index_dir,
            [(SOURCE, list(documents.values()), True)],
            CONFIG,
            progress=False,
            cache_path=embedding_cache_path,
            merge=rng.random() < 0.6,
        )
    manifest = layout.read_manifest(index_dir)
    fresh = tmp_path / "fresh"
    apply_changes(
        fresh,
        [(SOURCE, list(documents.values()), True)],
        CONFIG,
        progress=False,
        cache_path=embedding_cache_path,
    )
    expected = _runs(fresh)
    _assert_same(_runs(index_dir), expected)
    assert len(manifest.segment_list) >= 1
    optimize(index_dir)
    assert len(layout.read_manifest(index_dir).segment_list) == 1
    _assert_same(_runs(index_dir), expected)


def test_a_write_adds_one_segment_and_rewrites_nothing(tmp_path, embedding_cache_path):
    index_dir = tmp_path / "index"
    first = [_memory(f"a{i}", f"panel widget {i} alpha", 3, ()) for i in range(5)]
    apply_changes(
        index_dir, [(SOURCE, first, False)], CONFIG, progress=False, cache_path=embedding_cache_path
    )
    before = layout.read_manifest(index_dir)
    files_before = {name: value for name, value in (before.files or {}).items() if "graph-" not in name}
    report = apply_changes(
        index_dir,
        [(SOURCE, [_memory("b1", "holoviews stream", 4, ("red",))], False)],
        CONFIG,
        progress=False,
        cache_path=embedding_cache_path,
    )
    after = layout.read_manifest(index_dir)
    assert report.committed and report.new_chunks == 1
    assert [s.name for s in after.segments] == [before.path, after.path]
    for name, value in files_before.items():  # the earlier segment's files are the same files, untouched
        assert after.file(name) == value
        assert layout.file_sha256(index_dir / name) == value.sha256
    # a change is a tombstone in the old segment plus the new version in a new segment
    apply_changes(
        index_dir,
        [(SOURCE, [_memory("a0", "bokeh server", 5, ())], False)],
        CONFIG,
        progress=False,
        cache_path=embedding_cache_path,
    )
    changed = layout.read_manifest(index_dir)
    assert changed.segments[0].deleted == ("a0",) and len(changed.segments) == 3
    with open_index(index_dir) as index:
        assert index.n_chunks == 6
        assert index.get_document("a0").text == "bokeh server"
        assert [r.doc_id for r in index.search("bokeh server", mode="bm25", limit=2)] == ["a0"]
        stats = index.stats()
        assert len(stats.segments) == 3 and stats.tombstones == 1


def test_a_reader_refresh_opens_only_new_segments(tmp_path, embedding_cache_path):
    index_dir = tmp_path / "index"
    apply_changes(
        index_dir,
        [(SOURCE, [_memory("a", "panel widget", 3, ())], False)],
        CONFIG,
        progress=False,
        cache_path=embedding_cache_path,
    )
    with open_index(index_dir) as index:
        first = index.snapshot().generation.segments[0]
        apply_changes(
            index_dir,
            [(SOURCE, [_memory("b", "holoviews plot", 3, ())], False)],
            CONFIG,
            progress=False,
            cache_path=embedding_cache_path,
        )
        assert index.refresh()
        segments = index.snapshot().generation.segments
        assert len(segments) == 2 and segments[0] is first  # the old segment object is reused, not re-read
        assert index.search("holoviews", mode="bm25", limit=1)[0].doc_id == "b"


def test_small_segments_are_parquet_and_a_held_generation_outlives_their_removal(
    tmp_path, embedding_cache_path, monkeypatch
):
    """A write's small segment stores its rows as Parquet tables (no DuckDB file); a reader holding
    a generation keeps answering from it (documents, tag filters) after merges removed its segments."""
    monkeypatch.setenv("HYBRIDLAB_MERGE_FACTOR", "2")
    index_dir = tmp_path / "index"
    apply_changes(
        index_dir,
        [(SOURCE, [_memory("a", "panel widget", 3, ("red",))], False)],
        CONFIG,
        progress=False,
        cache_path=embedding_cache_path,
    )
    apply_changes(
        index_dir,
        [(SOURCE, [_memory("b", "holoviews plot", 3, ("red",))], False)],
        CONFIG,
        progress=False,
        cache_path=embedding_cache_path,
        merge=False,
    )
    manifest = layout.read_manifest(index_dir)
    newest = index_dir / manifest.segments[-1].name
    assert (newest / "chunks.parquet").is_file() and not (newest / layout.STORE_FILE).exists()
    with open_index(index_dir) as index:
        held = index.snapshot()
        for i in range(4):  # tiered merges with factor 2: the segments the held generation names are removed
            apply_changes(
                index_dir,
                [(SOURCE, [_memory(f"c{i}", f"bokeh chart {i}", 4, ("blue",))], False)],
                CONFIG,
                progress=False,
                cache_path=embedding_cache_path,
            )
        layout.wait_for_trash()
        assert not newest.exists()
        rows = held.generation.store.fetchall("SELECT doc_id FROM documents ORDER BY doc_id")
        assert [r[0] for r in rows] == ["a", "b"]
        assert index.refresh()
        assert sorted(r.doc_id for r in index.search_by_tag(["blue"], limit=10)) == [
            f"c{i}" for i in range(4)
        ]


def test_merge_plan_is_tiered():
    def segment(chunks, rows, deleted=()):
        return Segment(name="gen-000001", chunks=chunks, rows=rows, deleted=deleted)

    small = segment(1, 1)
    assert merge_plan([segment(5000, 5000)] + [small] * 9, factor=10) is None
    assert merge_plan([segment(5000, 5000)] + [small] * 10, factor=10) == (1, 11)
    assert merge_plan([segment(40, 40)] * 3 + [small] * 2, factor=3) == (0, 3)
    assert merge_plan([segment(100, 4000, ("x",)), small], factor=10) == (0, 2)


def test_optimize_merges_everything_and_keeps_answers(tmp_path, embedding_cache_path):
    index_dir = tmp_path / "index"
    for i in range(4):
        apply_changes(
            index_dir,
            [(SOURCE, [_memory(f"d{i}", f"{WORDS[i]} {WORDS[i + 5]} panel", 3, ())], False)],
            CONFIG,
            progress=False,
            cache_path=embedding_cache_path,
        )
    before = _runs(index_dir)
    report = optimize(index_dir)
    manifest = layout.read_manifest(index_dir)
    assert report.committed and len(manifest.segments) == 1 and manifest.last_merge.reason == "optimize"
    _assert_same(_runs(index_dir), before)
    copy = tmp_path / "copy"
    shutil.copytree(index_dir, copy)
    assert not optimize(copy).committed  # already one segment


def test_cli_index_optimize_and_stats(tmp_path, embedding_cache_path, capsys):
    from hybridlab.cli import main

    index_dir = tmp_path / "index"
    for i in range(3):
        apply_changes(
            index_dir,
            [(SOURCE, [_memory(f"c{i}", f"{WORDS[i]} panel", 3, ())], False)],
            CONFIG,
            progress=False,
            cache_path=embedding_cache_path,
        )
    assert main(["stats", "--index", str(index_dir)]) == 0
    assert "segments 3, tombstoned documents 0, last merge none" in capsys.readouterr().out
    assert main(["index", "--optimize", "--index", str(index_dir), "-q"]) == 0
    assert "optimize: merged every segment into one" in capsys.readouterr().err
    assert len(layout.read_manifest(index_dir).segments) == 1
    assert main(["index", "--index", str(index_dir), "-q"]) == 2
    assert "give PATHS to index, or --optimize" in capsys.readouterr().err
