"""`hybridlab membench` end to end on tiny files in each format: indexes per haystack, the papers'
metrics with n, TREC runs that `eval --run` scores, and the MCP run equal to the lab's."""

from __future__ import annotations

import json

import pytest

from hybridlab.cli import main

pytestmark = pytest.mark.slow


def test_locomo_end_to_end_with_the_mcp_run(locomo_file, tmp_path, capfd):
    # capfd, not capsys: this test is where the MCP client is first imported, and its stdio client binds
    # the sys.stderr of that moment as its default errlog (a capsys stream has no fileno for subprocesses)
    out = tmp_path / "out"
    assert (
        main(
            [
                "membench",
                "locomo",
                str(locomo_file),
                "--out",
                str(out),
                "--work",
                str(tmp_path / "work"),
                "--via-mcp",
                "-q",
            ]
        )
        == 0
    )
    summary = json.loads((out / "summary.json").read_text())
    turn = summary["turn"]["levels"]["turn"]
    # 8 questions with evidence (the evidence-less one is left out), per category with n
    assert turn["bm25"]["recall@5"]["all"]["n"] == 8
    assert turn["hybrid"]["recall@5"]["adversarial"]["n"] == 2
    assert set(turn["hybrid"]["recall@5"]) >= {"all", "all-but-adversarial", "temporal", "single-hop"}
    assert 0.0 <= turn["hybrid"]["recall@50"]["all"]["mean"] <= 1.0
    assert "session" in summary["turn"]["levels"] and "session" in summary["session"]["levels"]
    # served = measured: the same ranking through store_memory + search
    assert abs(summary["turn-mcp"]["difference_recall@5"]) <= 0.005
    assert abs(summary["session-mcp"]["difference_recall@5"]) <= 0.005
    # the TREC files are what `eval --run` reads
    capfd.readouterr()
    assert (
        main(
            [
                "eval",
                "--run",
                str(out / "turn" / "hybrid-turn.trec"),
                "--run",
                str(out / "turn" / "bm25-turn.trec"),
                "--qrels",
                str(out / "turn" / "qrels-turn.txt"),
            ]
        )
        == 0
    )
    assert "hybrid-turn" in capfd.readouterr().out
    # a turn run mapped to sessions scores as the summary's session level, and fuses with the session run
    mapped = out / "turn" / "hybrid-turn-as-sessions.trec"
    assert (
        main(
            [
                "eval",
                "--run",
                str(mapped),
                "--qrels",
                str(out / "turn" / "qrels-session.txt"),
                "--metrics",
                "recall@5,hit_rate@5",
                "--json",
            ]
        )
        == 0
    )
    scored = json.loads(capfd.readouterr().out)
    assert scored["scores"]["hybrid-turn-as-sessions"]["recall@5"]["mean"] == pytest.approx(
        summary["turn"]["levels"]["session"]["hybrid"]["recall@5"]["all"]["mean"], abs=1e-4
    )
    fused = tmp_path / "fused.trec"
    assert (
        main(
            [
                "fuse",
                str(out / "session" / "hybrid-session.trec"),
                str(mapped),
                "--method",
                "rrf",
                "--out",
                str(fused),
            ]
        )
        == 0
    )
    assert fused.read_text().strip()


def test_longmemeval_end_to_end(longmemeval_file, tmp_path):
    out = tmp_path / "out"
    assert (
        main(
            [
                "membench",
                "longmemeval",
                str(longmemeval_file),
                "--out",
                str(out),
                "--work",
                str(tmp_path / "w"),
                "-q",
            ]
        )
        == 0
    )
    summary = json.loads((out / "summary.json").read_text())
    turn = summary["turn"]["levels"]
    # the abstention question is left out: one question scored, found at rank 1 by every system
    for level in ("turn", "session"):
        for name in ("recall_any@5", "recall_all@5", "ndcg_any@5"):
            assert turn[level]["hybrid"][name]["all"] == {"mean": 1.0, "n": 1}, (level, name)
    assert summary["session"]["levels"]["session"]["bm25"]["recall_any@5"]["all"]["n"] == 1
    lines = (out / "turn" / "qrels-turn.txt").read_text().splitlines()
    assert lines == ["q1 0 q1/answer_x_1_1 1"]


def test_leave_one_conversation_out(locomo_file, tmp_path, capfd):
    out = tmp_path / "cv"
    assert (
        main(
            [
                "membench",
                "locomo",
                str(locomo_file),
                "--out",
                str(out),
                "--work",
                str(tmp_path / "w"),
                "-q",
                "--cv",
                "alpha=0.5,0.9",
                "--cv",
                "recency_weight=0.2,0",
            ]
        )
        == 0
    )
    result = json.loads((out / "cv-turn.json").read_text())
    assert len(result["grid"]) == 4 and result["grid"][0] == {"alpha": 0.5, "recency_weight": 0.2}
    assert [fold["held_out"] for fold in result["folds"]] == ["conv-1", "conv-2"]
    assert result["n"] == 8 and 0.0 <= result["out_of_fold_recall@5"] <= 1.0
    assert "out of fold recall@5" in capfd.readouterr().out


def test_tuning_grid_and_axes():
    from hybridlab.eval.conversations.tuning import grid, parse_axis

    assert parse_axis("alpha=0.5,0.4") == ("alpha", [0.5, 0.4])
    assert parse_axis("adaptive_fusion=true,false") == ("adaptive_fusion", [True, False])
    assert grid({"a": [1, 2], "b": ["x"]}) == [{"a": 1, "b": "x"}, {"a": 2, "b": "x"}]
    with pytest.raises(ValueError, match="NAME=V1"):
        parse_axis("alpha")
