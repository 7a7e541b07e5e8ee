"""The ground truth in `ground_truth/` passes its checks, and the checks name file, line and field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ground_truth.validate import RULES, ground_truth_sets, main, validate_set
from hybridlab.eval.evalsets import GROUND_TRUTH, corpora_dir

MEMORIES = [
    {
        "id": "m1",
        "content": "The tunnel listens on port 2333 for its control channel.",
        "tags": ["rathole", "release_process"],
        "created_at": "2024-01-01T10:00:00Z",
        "memory_type": "fact",
        "metadata": {"project": "rathole"},
    },
    {
        "id": "m2",
        "content": "Certificates renew every sixty days through certbot.",
        "tags": ["rathole", "release process"],
        "created_at": "2024-02-01T10:00:00Z",
        "memory_type": "note",
        "metadata": {"project": "rathole"},
    },
    {
        "id": "m3",
        "content": "User prefers short answers with the code first.",
        "tags": ["communication"],
        "created_at": "2024-03-01T10:00:00Z",
        "memory_type": "preference",
        "metadata": {"scope": "user"},
    },
]
QUERIES = [
    {"_id": "q1", "text": "which port does the control channel use", "metadata": {"kind": "identifier"}},
    {"_id": "q2", "text": "release-process", "metadata": {"kind": "tag"}},
    {"_id": "q3", "text": "how terse should replies be", "metadata": {"kind": "paraphrase"}},
]
QRELS = ["query-id\tcorpus-id\tscore", "q1\tm1\t2", "q2\tm1\t1", "q2\tm2\t1", "q3\tm3\t2"]


def write_set(folder: Path, memories=MEMORIES, queries=QUERIES, qrels=QRELS) -> Path:
    """A tiny memories-style set: eval.json, memories.jsonl, queries.jsonl, qrels-test.tsv."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "eval.json").write_text(
        json.dumps(
            {
                "now": "2026-11-01T00:00:00Z",
                "corpus": "memories.jsonl",
                "queries": "queries.jsonl",
                "qrels": "qrels-test.tsv",
            }
        )
    )
    for name, rows in (("memories.jsonl", memories), ("queries.jsonl", queries)):
        lines = [row if isinstance(row, str) else json.dumps(row) for row in rows]
        (folder / name).write_text("".join(line + "\n" for line in lines))
    (folder / "qrels-test.tsv").write_text("\n".join(qrels) + "\n")
    return folder


def where(report) -> set[tuple[str, int | None, str]]:
    return {(problem.path.name, problem.line, problem.field) for problem in report.problems}


@pytest.mark.parametrize("name", ground_truth_sets())
def test_every_ground_truth_set_passes(name):
    report = validate_set(GROUND_TRUTH / name)
    assert [str(problem) for problem in report.problems] == []
    assert report.queries > 0 and report.judgements >= report.queries


def test_the_repository_holds_both_sets():
    assert ground_truth_sets() == ["holoviz", "memories"]
    assert sorted(RULES) == ["holoviz", "memories"]


def test_holoviz_judgements_name_files_of_the_corpus():
    if not (corpora_dir() / "holoviz").is_dir():
        pytest.skip(f"HoloViz corpus not found at {corpora_dir() / 'holoviz'} (set HYBRIDLAB_CORPORA)")
    report = validate_set(GROUND_TRUTH / "holoviz")
    assert report.documents_checked and report.problems == []


def test_holoviz_keeps_its_required_query():
    lines = (GROUND_TRUTH / "holoviz" / "queries.jsonl").read_text().splitlines()
    queries = [json.loads(line) for line in lines]
    [query] = [q for q in queries if q["text"] == "Tabulator frozen_columns embed_content"]
    assert query["metadata"]["kind"] == "api"
    rows = (GROUND_TRUTH / "holoviz" / "qrels-test.tsv").read_text().splitlines()
    assert f"{query['_id']}\tpanel/examples/reference/widgets/Tabulator.ipynb\t2" in rows


def test_a_valid_tiny_set_passes(tmp_path):
    report = validate_set(write_set(tmp_path / "memories"))
    assert report.problems == []
    assert (report.queries, report.judgements, report.documents) == (3, 4, 3)


def test_broken_files_are_named_by_line_and_field(tmp_path):
    memories = [
        *MEMORIES,
        {
            "id": "m1",
            "content": "again",
            "tags": ["x"],
            "created_at": "2024-01-01T00:00:00Z",
            "memory_type": "note",
        },  # line 4: duplicate id
        {
            "id": "m5",
            "content": "",
            "tags": ["Upper"],
            "created_at": "yesterday",
            "memory_type": "musing",
            "metadata": {"project": "ferrox"},
        },  # line 5
        {
            "id": "m6",
            "content": "From the future.",
            "tags": ["x"],
            "created_at": "2027-01-01T00:00:00Z",
            "memory_type": "note",
        },  # line 6: after now
        "{not json",
    ]  # line 7
    queries = [
        *QUERIES,
        {"_id": "q1", "text": "again", "metadata": {"kind": "general"}},  # line 4: duplicate id
        {"_id": "q5", "text": "Release-Process", "metadata": {"kind": "vibes"}},  # line 5: kind, text
        {"_id": "q6", "text": "never judged", "metadata": {"kind": "general"}},
    ]  # line 6
    qrels = [
        *QRELS,
        "q9\tm1\t1",  # line 6: unknown query
        "q1\tm404\t1",  # line 7: unknown memory
        "q1\tm3\tthree",  # line 8: score not an integer
        "q1\tm1\t1",  # line 9: judged twice
        "q5\tm1\t3",  # line 10: grade outside {1, 2}
        "q1\tm2",
    ]  # line 11: two columns
    report = validate_set(write_set(tmp_path / "memories", memories, queries, qrels))
    assert where(report) == {
        ("memories.jsonl", 4, "id"),
        ("memories.jsonl", 5, "content"),
        ("memories.jsonl", 5, "tags"),
        ("memories.jsonl", 5, "created_at"),
        ("memories.jsonl", 5, "memory_type"),
        ("memories.jsonl", 6, "created_at"),
        ("memories.jsonl", 7, "line"),
        ("queries.jsonl", 4, "_id"),
        ("queries.jsonl", 5, "text"),
        ("queries.jsonl", 5, "metadata.kind"),
        ("queries.jsonl", 6, "_id"),
        ("qrels-test.tsv", 6, "query-id"),
        ("qrels-test.tsv", 7, "corpus-id"),
        ("qrels-test.tsv", 8, "score"),
        ("qrels-test.tsv", 9, "corpus-id"),
        ("qrels-test.tsv", 10, "score"),
        ("qrels-test.tsv", 11, "line"),
    }
    messages = "\n".join(str(problem) for problem in report.problems)
    assert "memories.jsonl:4: id: duplicate id 'm1' (first on line 1)" in messages
    assert "qrels-test.tsv:7: corpus-id: 'm404' is not in memories.jsonl" in messages
    assert "queries.jsonl:5: metadata.kind: 'vibes' is not one of" in messages


def test_the_judgement_rules_of_the_memories_set(tmp_path):
    memories = [
        *MEMORIES,
        {
            "id": "m4",
            "content": "Renewal hooks reload the tunnel after new certificates arrive.",
            "tags": ["rathole", "release-process"],
            "created_at": "2024-04-01T10:00:00Z",
            "memory_type": "fact",
            "metadata": {"project": "rathole"},
        },
    ]
    queries = [*QUERIES, {"_id": "q4", "text": "current tunnel port", "metadata": {"kind": "current"}}]
    qrels = [
        "query-id\tcorpus-id\tscore",
        "q1\tm1\t2",
        "q1\tm2\t2",  # lines 2-3: two grade-2 answers
        "q2\tm1\t1",
        "q2\tm3\t1",  # lines 4-5: m3 lacks the tag, m2 and m4 carry it unjudged
        "q3\tm3\t2",
        "q3\tm1\t1",  # lines 6-7: q3 shares "answers" with m3, "port" with m1
        "q4\tm1\t1",
        "q4\tm4\t1",
    ]  # a `current` query with two answers
    queries[2] = {"_id": "q3", "text": "which port do answers use", "metadata": {"kind": "paraphrase"}}
    report = validate_set(write_set(tmp_path / "memories", memories, queries, qrels))
    assert where(report) == {
        ("queries.jsonl", 1, "score"),  # q1: two grade-2
        ("queries.jsonl", 2, "corpus-id"),  # q2: m2, m4 carry the tag unjudged
        ("qrels-test.tsv", 5, "corpus-id"),  # q2: m3 judged without the tag
        ("qrels-test.tsv", 6, "text"),
        ("qrels-test.tsv", 7, "text"),  # q3 shares "answers"/"port"
        ("queries.jsonl", 4, "_id"),  # q4: current, two answers
    }
    messages = [str(problem) for problem in report.problems]
    assert sum("carries the tag but is not judged" in m for m in messages) == 2
    assert any("q3 (paraphrase) shares ['port'] with m1" in m for m in messages)


def test_a_set_without_rules_is_refused(tmp_path):
    refused = r"unknown ground-truth set 'other'; choose from \['holoviz', 'memories'\]"
    with pytest.raises(ValueError, match=refused):
        validate_set(write_set(tmp_path / "other"))


def test_the_command_checks_every_set(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    assert "memories: 79 queries, 191 judgements: OK" in out
    assert "holoviz: 77 queries, 250 judgements: OK" in out


def test_judgements_of_a_folder_corpus_name_its_files(tmp_path):
    corpus = tmp_path / "corpus"
    (corpus / "panel").mkdir(parents=True)
    (corpus / "panel" / "Tabulator.ipynb").write_text("{}")
    folder = tmp_path / "holoviz"
    folder.mkdir()
    (folder / "queries.jsonl").write_text(
        json.dumps({"_id": "h1", "text": "frozen columns", "metadata": {"kind": "api"}}) + "\n"
    )
    (folder / "qrels-test.tsv").write_text(
        "query-id\tcorpus-id\tscore\nh1\tpanel/Tabulator.ipynb\t2\n"
        "h1\tpanel/Missing.ipynb\t1\nh1\t../corpus/panel/Tabulator.ipynb\t1\n"
    )
    report = validate_set(folder, corpus)
    assert where(report) == {("qrels-test.tsv", 3, "corpus-id"), ("qrels-test.tsv", 4, "corpus-id")}
    unchecked = validate_set(folder, tmp_path / "nowhere")
    assert unchecked.problems == [] and not unchecked.documents_checked
