"""Fast tests of the sweep script's and the quality report's pure helpers (no index, no model)."""

from __future__ import annotations

import json

import pytest

from bench.common import top_overlap
from bench.engine_report import PROJECT_SYSTEMS, named_collections, share_from
from bench.engine_report import render_markdown as engine_render_markdown
from bench.quality_report import DEFAULT_SYSTEM, SYSTEMS, render_markdown, write_report
from hybridlab.config import ChunkConfig, IndexConfig
from hybridlab.tune import grid as sweep_alpha


def test_parse_values_types_each_parameter_like_its_field():
    assert sweep_alpha.parse_values("alpha", "0,0.5, 1") == [0.0, 0.5, 1.0]
    assert sweep_alpha.parse_values("rrf_k", "10,60") == [10, 60]
    assert sweep_alpha.parse_values("staged", "true,false") == [True, False]
    assert sweep_alpha.parse_values("chunk_size", "500,1500") == [500, 1500]
    assert sweep_alpha.parse_values("header_levels", "1+2,1+2+3") == [(1, 2), (1, 2, 3)]
    assert sweep_alpha.parse_values("k1", "0.9,1.5") == [0.9, 1.5]
    assert sweep_alpha.parse_values("stemmer", "english,none") == ["english", None]


def test_parse_values_rejects_unknown_parameters_and_bad_values():
    with pytest.raises(
        ValueError, match=r"unknown parameter 'colour'; choose from \[.*'alpha'.*'chunk_size'"
    ):
        sweep_alpha.parse_values("colour", "1")
    with pytest.raises(ValueError, match="setting 'rrf_k': cannot parse 'x'"):
        sweep_alpha.parse_values("rrf_k", "x")
    with pytest.raises(ValueError, match="no values"):
        sweep_alpha.parse_values("alpha", " , ")


def test_index_config_for_changes_only_index_parameters():
    assert sweep_alpha.index_config_for("alpha", 0.5) == IndexConfig()
    assert sweep_alpha.index_config_for("chunk_size", 500).chunk == ChunkConfig(chunk_size=500)
    assert sweep_alpha.index_config_for("k1", 0.9).bm25.k1 == 0.9


def _record(name: str) -> dict:
    scores = {system: {m: 0.5 for m in ("hit_rate@10", "mrr", "ndcg@10", "recall@100")} for system in SYSTEMS}
    scores["bm25"]["ndcg@10"] = 0.25
    p_values = {
        system: {m: 0.5 for m in ("hit_rate@10", "mrr", "ndcg@10", "recall@100")}
        for system in SYSTEMS
        if system != DEFAULT_SYSTEM
    }
    p_values["bm25"]["ndcg@10"] = 0.001
    return {
        "dataset": name,
        "split": "all",
        "queries": 3,
        "now": None,
        "chunks": 4,
        "documents": 2,
        "default_settings": {
            "fusion": "rrf",
            "alpha": 0.5,
            "alpha_source": "adaptive",
            "staged": False,
            "rrf_k": 60,
            "normalization": "min-max",
            "decay": 0.01,
        },
        "comparison": {
            "systems": list(SYSTEMS),
            "metrics": ["hit_rate@10", "mrr", "ndcg@10", "recall@100"],
            "scores": scores,
            "p_values": p_values,
            "max_p": 0.05,
            "stat_test": "student",
        },
        "wins_losses_ndcg@10": {
            "bm25": {"wins": 2, "ties": 1, "losses": 0},
            "dense": {"wins": 0, "ties": 3, "losses": 0},
        },
    }


def test_quality_report_headline_marks_non_significant_systems():
    text = render_markdown([_record("toy")], "2026-01-02", "python -m bench.quality_report")
    headline = next(line for line in text.splitlines() if line.startswith("| toy |"))
    cells = [cell.strip() for cell in headline.split("|")[1:-1]]
    expected = {DEFAULT_SYSTEM: "0.500", "bm25": "0.250"}  # bm25's p = 0.001: significant, no †
    assert cells == ["toy", "3"] + [expected.get(system, "0.500 †") for system in SYSTEMS]
    assert "bm25: 2 wins, 1 ties, 0 losses (nDCG@10)" in text


def test_write_report_writes_dated_markdown_and_json(tmp_path):
    markdown, data = write_report([_record("toy")], tmp_path / "quality", "2026-01-02", "cmd")
    assert markdown == tmp_path / "quality" / "2026-01-02.md"
    assert markdown.read_text().startswith("# hybridlab quality report, 2026-01-02")
    assert json.loads(data.read_text())["datasets"][0]["dataset"] == "toy"


# --------------------------------------------------------------------------- engine acceptance report
def test_named_collections_matches_whole_words_case_insensitively():
    known = ["rathole", "cachekit", "lite", "litesearch"]
    assert named_collections("Rathole project codebase architecture", known) == ["rathole"]
    assert named_collections("how does litesearch rank?", known) == ["litesearch"]  # not 'lite'
    assert named_collections("deploying with systemd", known) == []


def test_share_from_counts_results_of_the_wanted_projects():
    assert share_from(["a", "a", "b", "a", "c"], ["a"]) == pytest.approx(0.6)
    assert share_from(["a", "b"], ["a", "b"]) == 1.0
    assert share_from([], ["a"]) == 0.0


def test_top_overlap_is_share_of_the_reference_top_k():
    reference = {"d1": 0.9, "d2": 0.8, "d3": 0.7, "d4": 0.1}
    other = {"d3": 5.0, "d1": 4.0, "d9": 3.0, "d2": 0.0}
    assert top_overlap(reference, other, top=2) == 0.5  # ref {d1, d2}; other {d3, d1}
    assert top_overlap(reference, other, top=3) == pytest.approx(2 / 3)  # other's top 3: d3, d1, d9
    assert top_overlap({}, other) == 1.0


def test_engine_report_markdown_has_every_section_and_the_means():
    systems = list(PROJECT_SYSTEMS)
    results = {
        "date": "2026-01-02",
        "model": "m",
        "memories_now": "2026-01-01",
        "project_queries": {
            "q1": {
                "query": "rathole codebase",
                "project": ["rathole"],
                "shares": dict(zip(systems, (1.0, 0.4, 0.2))),
            },
            "q2": {
                "query": "cachekit tls",
                "project": ["cachekit"],
                "shares": dict(zip(systems, (0.8, 0.6, 0.4))),
            },
        },
        "memories": {"queries": 2, "markdown": "| system | mrr |"},
        "scifact_staged": {
            "queries": 3,
            "chunks": 10,
            "mean_overlap": 0.97,
            "min_overlap": 0.8,
            "queries_below_0.8": 0,
            "ndcg_staged": 0.71,
            "ndcg_parallel": 0.70,
            "ndcg_relative_difference": 0.01 / 0.70,
        },
    }
    text = engine_render_markdown(results)
    assert "| **mean** | | **0.900** | **0.500** | **0.300** |" in text
    assert "all top 5 from the named project in 1 of 2 queries" in text
    assert "| 0.970 | 0.80 | 0 | 0.7100 | 0.7000 | +1.43% |" in text
    assert "| system | mrr |" in text
