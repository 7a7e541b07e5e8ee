"""Fast tests of the sweep script's and the quality report's pure helpers (no index, no model)."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from hybridlab.config import ChunkConfig, IndexConfig
from hybridlab.quality_report import DEFAULT_SYSTEM, SYSTEMS, render_markdown, write_report

_spec = importlib.util.spec_from_file_location("sweep_alpha", Path(__file__).with_name("sweep_alpha.py"))
sweep_alpha = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sweep_alpha)


def test_parse_values_types_each_parameter_like_its_field():
    assert sweep_alpha.parse_values("alpha", "0,0.5, 1") == [0.0, 0.5, 1.0]
    assert sweep_alpha.parse_values("rrf_k", "10,60") == [10, 60]
    assert sweep_alpha.parse_values("staged", "true,false") == [True, False]
    assert sweep_alpha.parse_values("chunk_size", "500,1500") == [500, 1500]
    assert sweep_alpha.parse_values("header_levels", "1+2,1+2+3") == [(1, 2), (1, 2, 3)]
    assert sweep_alpha.parse_values("k1", "0.9,1.5") == [0.9, 1.5]
    assert sweep_alpha.parse_values("stemmer", "english,none") == ["english", None]


def test_parse_values_rejects_unknown_parameters_and_bad_values():
    with pytest.raises(ValueError, match=r"unknown parameter 'colour'; choose from \[.*'alpha'.*'chunk_size'"):
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
    p_values = {system: {m: 0.5 for m in ("hit_rate@10", "mrr", "ndcg@10", "recall@100")}
                for system in SYSTEMS if system != DEFAULT_SYSTEM}
    p_values["bm25"]["ndcg@10"] = 0.001
    return {
        "dataset": name, "split": "all", "queries": 3, "now": None, "chunks": 4, "documents": 2,
        "default_settings": {"fusion": "rrf", "alpha": 0.5, "alpha_source": "adaptive", "staged": False,
                             "rrf_k": 60, "normalization": "min-max", "decay": 0.01},
        "comparison": {"systems": list(SYSTEMS), "metrics": ["hit_rate@10", "mrr", "ndcg@10", "recall@100"],
                       "scores": scores, "p_values": p_values, "max_p": 0.05, "stat_test": "student"},
        "wins_losses_ndcg@10": {"bm25": {"wins": 2, "ties": 1, "losses": 0}, "dense": {"wins": 0, "ties": 3, "losses": 0}},
    }


def test_quality_report_headline_marks_non_significant_systems():
    text = render_markdown([_record("toy")], "2026-01-02", "python -m hybridlab.quality_report")
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
