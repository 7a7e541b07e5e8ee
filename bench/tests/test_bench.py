"""The benchmark harness's pure parts: percentiles, summaries, ratios, overlap, the row schema."""

from __future__ import annotations

import pytest

from bench.common import (
    find_rows,
    make_row,
    median_summary,
    percentile,
    ratio,
    summarize,
    top_overlap,
    validate_rows,
)
from bench.indexing import overhead
from bench.report import evaluate_targets, markdown


def test_percentile_interpolates_between_closest_ranks():
    values = [4.0, 1.0, 3.0, 2.0, 5.0]  # sorted 1..5, positions 0..4
    assert percentile(values, 0) == 1.0
    assert percentile(values, 50) == 3.0
    assert percentile(values, 100) == 5.0
    assert percentile(values, 95) == pytest.approx(4.0 + 0.8 * (5.0 - 4.0))  # position 3.8
    assert percentile([7.0], 99) == 7.0


def test_percentile_rejects_empty_and_out_of_range():
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def test_median_summary_takes_the_median_of_per_run_percentiles():
    runs = [[1.0, 2.0, 3.0], [10.0, 20.0, 30.0], [2.0, 4.0, 6.0]]  # run P50s: 2, 20, 4
    assert median_summary(runs)["p50"] == 4.0
    assert summarize([1.0, 2.0, 3.0])["p99"] == pytest.approx(2.98)  # position 1.98
    with pytest.raises(ValueError):
        median_summary([])


def test_ratio_and_overlap_and_overhead():
    assert ratio(3.0, 2.0) == 1.5
    assert ratio(None, 2.0) is None and ratio(1.0, 0.0) is None

    def ranked(ids: list[str]) -> dict[str, float]:  # a ranked list of ids as {doc: score}
        return {doc: -float(rank) for rank, doc in enumerate(ids)}

    assert top_overlap(ranked(["c", "x", "a"]), ranked(["a", "b", "c"]), top=3) == pytest.approx(2 / 3)
    assert top_overlap(ranked(["b", "a"]), ranked(["a", "b"]), top=10) == 1.0
    assert overhead(11.0, 10.0) == pytest.approx(0.1)
    with pytest.raises(ValueError):
        overhead(1.0, 0.0)


def test_make_row_has_the_schema_and_rejects_unknown_names():
    row = make_row("hybridlab", 5183, "hybrid", True, p50_ms=1.23456, search_p95_ms=0.5, encoder="torch")
    for field in (
        "system",
        "n_chunks",
        "mode",
        "filtered",
        "p50_ms",
        "p95_ms",
        "p99_ms",
        "search_p50_ms",
        "search_p95_ms",
        "encode_p50_ms",
        "ndcg@10",
        "peak_rss_mb",
    ):
        assert field in row
    assert row["p50_ms"] == 1.2346 and row["p95_ms"] is None and row["filtered"] is True
    assert validate_rows([row]) == []
    with pytest.raises(ValueError, match="chromadb"):
        make_row("elastic", 1, "vector", False)
    with pytest.raises(ValueError, match="staged"):
        make_row("hybridlab", 1, "fuzzy", False)
    with pytest.raises(ValueError, match="unknown row fields"):
        make_row("hybridlab", 1, "vector", False, qps=3)
    bad = dict(row, system="elastic")
    del bad["peak_rss_mb"]
    assert validate_rows([bad]) and validate_rows([dict(row, filtered="yes")])


def test_find_rows_and_targets_from_hand_made_rows():
    rows = [
        make_row(
            "hybridlab",
            5183,
            "staged",
            False,
            p95_ms=20.0,
            search_p50_ms=0.5,
            search_p95_ms=1.0,
            encoder="torch",
            **{"ndcg@10": 0.70},
        ),
        make_row("hybridlab", 5183, "staged", True, p95_ms=20.0, search_p95_ms=2.0, encoder="torch"),
        make_row(
            "hybridlab",
            5183,
            "vector",
            False,
            p95_ms=10.0,
            search_p50_ms=0.4,
            search_p95_ms=0.8,
            encoder="torch",
            **{"ndcg@10": 0.64},
        ),
        make_row("chromadb", 5183, "vector", False, search_p50_ms=1.2, **{"ndcg@10": 0.63}),
    ]
    assert len(find_rows(rows, system="hybridlab", mode="staged")) == 2
    targets = {t["target"]: t for t in evaluate_targets(rows)}
    assert targets["SciFact staged search P95 ≤ 1.5 ms"]["status"] == "met"
    assert targets["SciFact staged search P95 filtered ≤ 1.5 ms"]["status"] == "missed"
    assert targets["SciFact hybrid search P95 ≤ 1.5 ms"]["status"] == "not measured"
    assert targets["5,183 chunks: staged end-to-end P95 / vector-only ≤ 1.3×"]["measured"] == 2.0
    chroma = targets["faster than chromadb vector at ≥ its nDCG@10"]
    assert chroma["measured"] == pytest.approx(3.0) and chroma["status"] == "met"
    meta = {"date": "2026-11-22", "command": "x", "seconds": 60.0, "load_start": [1.0], "load_end": [2.0]}
    text = markdown(
        rows, {"cpu_model": "cpu", "cores": 2, "memory_gb": 24}, meta, ["a note"], list(targets.values())
    )
    assert "shared machine" in text and "| chromadb | vector | False |" in text and "- a note" in text


def test_time_opening_measures_a_full_hash_and_a_reopen(tiny_index, tmp_path):
    import shutil

    from bench.latency import time_opening
    from hybridlab.index.format import layout

    index = tmp_path / "index"
    shutil.copytree(tiny_index, index)
    rows = time_opening(index, repeats=2)
    assert [r["variant"] for r in rows] == ["cold-start-open-hash-all", "cold-start-open-reopen"]
    assert validate_rows(rows) == []
    manifest = layout.read_manifest(index)
    assert all(
        r["n_chunks"] == manifest.counts.chunks and r["repeats"] == 2 and r["p50_ms"] > 0 for r in rows
    )
    assert rows[0]["size_mb"] == round(sum(f.bytes for f in (manifest.files or {}).values()) / 1e6, 1)
    meta = {"date": "2026-11-24", "command": "x", "seconds": 1.0, "load_start": [1.0], "load_end": [1.0]}
    text = markdown(rows, {"cpu_model": "cpu", "cores": 2, "memory_gb": 24}, meta, [], [])
    assert f"| cold-start-open-reopen | {rows[1]['n_chunks']:,} |" in text


def test_changed_vectors_deletes_and_adds_half_the_share_each():
    import numpy as np

    from bench.graph import changed_vectors

    vectors = np.random.default_rng(0).normal(size=(1000, 8)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    new, old_to_new = changed_vectors(vectors, 0.1)
    assert len(new) == 1000 and (old_to_new == -1).sum() == 50
    kept = old_to_new >= 0
    assert np.array_equal(new[old_to_new[kept]], vectors[kept])
    assert np.allclose(np.linalg.norm(new[950:], axis=1), 1.0, atol=1e-5)
