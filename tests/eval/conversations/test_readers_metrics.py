"""The benchmark readers on files in the published formats, and the metrics against hand-worked values."""

from __future__ import annotations

import json
import math

import pytest

from hybridlab.eval.conversations import metrics
from hybridlab.eval.conversations.locomo import BenchmarkFileError, evidence_ids, read_locomo
from hybridlab.eval.conversations.longmemeval import read_longmemeval


def test_locomo_reads_turns_dates_context_and_odd_evidence(locomo_file):
    haystacks = read_locomo(locomo_file)
    assert [h.haystack_id for h in haystacks] == ["conv-1", "conv-2"]
    conv = haystacks[0]
    assert len(conv.turns) == 7 and conv.session_dates["S1"].isoformat() == "2023-05-08T13:56:00+00:00"
    third = conv.turns[2]
    assert third.previous == "Melanie: Busy! What did you do last weekend?"
    assert conv.turns[4].previous == ""  # a session's first turn has no context
    assert "a painting of a sunrise" in conv.turns[3].text
    q = {q.category: q for q in conv.questions}
    assert q["multi-hop"].evidence_turns == ("D2:2", "D2:3") and q["multi-hop"].evidence_sessions == ("S2",)
    assert q["adversarial"].evidence_turns == ("D2:1",)
    memory = conv.memories("turn")[2]
    assert memory["tags"] == ["Caroline"] and memory["metadata"]["context"].startswith("Melanie:")
    assert memory["created_at"].startswith("2023-05-08")
    sessions = conv.memories("session")
    assert [m["id"] for m in sessions] == ["S1", "S2"] and "Caroline: I went to" in sessions[0]["content"]


def test_evidence_ids_normalises_the_published_variants():
    assert evidence_ids(["D8:6; D9:17"]) == ("D8:6", "D9:17")
    assert evidence_ids(["D:11:26", "D1:3", "D1:3"]) == ("D11:26", "D1:3")


def test_locomo_bad_file_names_the_field(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps([{"conversation": {}, "sample_id": "c"}]), encoding="utf-8")
    with pytest.raises(BenchmarkFileError, match=r"bad\.json\[0\].*'qa'"):
        read_locomo(path)


def test_longmemeval_reads_user_turns_evidence_and_abstention(longmemeval_file):
    haystacks = read_longmemeval(longmemeval_file)
    first, second = haystacks
    assert [t.turn_id for t in first.turns] == [
        "sharegpt_a_0_1",
        "ultrachat_b_1_1",
        "answer_x_1_1",
        "answer_x_1_3",
    ]
    question = first.questions[0]
    assert question.evidence_turns == ("answer_x_1_1",) and question.evidence_sessions == ("answer_x_1",)
    assert question.date.isoformat() == "2023-06-01T10:00:00+00:00" and not question.abstention
    assert second.questions[0].abstention
    assert first.turns[3].previous.startswith("assistant: Congratulations")


def test_longmemeval_missing_field(tmp_path):
    path = tmp_path / "lme.json"
    path.write_text(json.dumps([{"question_id": "x"}]), encoding="utf-8")
    with pytest.raises(BenchmarkFileError, match="missing field 'question_type'"):
        read_longmemeval(path)


def test_metrics_by_hand():
    ranked = ["a", "b", "c", "d"]
    assert metrics.fractional_recall(ranked, ["b", "z"], 2) == 0.5
    assert metrics.recall_any(ranked, ["d"], 3) == 0.0 and metrics.recall_any(ranked, ["d", "a"], 3) == 1.0
    assert (
        metrics.recall_all(ranked, ["a", "c"], 3) == 1.0 and metrics.recall_all(ranked, ["a", "d"], 3) == 0.0
    )
    # relevant at ranks 2 and 4 of 2 relevant: (1/log2(3) + 1/log2(5)) / (1 + 1/log2(3))
    expected = (1 / math.log2(3) + 1 / math.log2(5)) / (1 + 1 / math.log2(3))
    assert metrics.ndcg_any(ranked, ["b", "d"], 4) == pytest.approx(expected)


def test_turns_to_sessions_widens_k_like_the_official_code():
    session_of = {"t1": "s1", "t2": "s1", "t3": "s2", "t4": "s3"}
    # k=2 distinct sessions need the first three turns (s1, s1, s2)
    assert metrics.to_sessions(["t1", "t2", "t3", "t4"], session_of, 2) == ["s1", "s1", "s2"]
    assert metrics.unique(["s1", "s1", "s2"]) == ["s1", "s2"]
