"""Malformed inputs (tests/data/bad/, plus big files generated in tmp_path) each give the expected
skip warning or error naming the file; odd queries are answered or refused clearly."""

from __future__ import annotations

import logging
import shutil
import signal
from pathlib import Path

import pytest

from hybridlab.index.write.build import index_paths

from .helpers import MODEL_ARGS, NOW, cli, record

BAD = Path(__file__).resolve().parents[1] / "data" / "bad"

# file in tests/data/bad/folder -> (outcome, expected words): "skipped" with the reason, "warned"
# (indexed, with a log warning) or "indexed"
FOLDER_CASES = {
    "truncated.ipynb": ("skipped", "invalid notebook"),
    "not_a_notebook.ipynb": ("skipped", "invalid notebook"),
    "empty_json.ipynb": ("skipped", "invalid notebook"),
    "binary.md": ("skipped", "binary file (NUL bytes)"),
    "nul_in_text.md": ("skipped", "binary file (NUL bytes)"),
    "utf16.md": ("skipped", "binary file (NUL bytes)"),  # UTF-16 is not supported: NULs in ASCII text
    "empty.md": ("skipped", "empty"),
    "only_whitespace.rst": ("skipped", "empty"),
    "latin1.md": ("warned", "not valid UTF-8"),
    "mixed_encoding.md": ("warned", "not valid UTF-8"),
    "deep_headers.md": ("indexed", ""),
    "bom.md": ("indexed", ""),
    "crlf.txt": ("indexed", ""),
    "control_chars.md": ("indexed", ""),
    "unclosed_fence.md": ("indexed", ""),
    "rtl_and_emoji.md": ("indexed", ""),
}
GENERATED_CASES = {  # written at test time (never committed)
    "huge_50mb.md": ("skipped", "file too large"),
    "long_line.txt": ("indexed", ""),  # 200 kB without a space or newline
    "many_headers.md": ("indexed", ""),  # 20,000 headings
}
# memories file in tests/data/bad/memories -> words of the error (which also names file:line)
MEMORY_CASES = {
    "invalid_json.jsonl": ":2: invalid JSON",
    "truncated.jsonl": ":1: invalid JSON",
    "array_line.jsonl": ":2: expected a JSON object",
    "missing_content.jsonl": ":1: field 'content' must be a non-empty string",
    "bad_tags.jsonl": ":1: field 'tags' must be a list of strings",
    "bad_date.jsonl": ":1: 'created_at' is not ISO-8601",
    "duplicate_id.jsonl": ":2: duplicate id 'ok-1'",
    "empty_id.jsonl": ":1: field 'id' must be a non-empty string",
    "invalid_utf8.jsonl": ":1: not valid UTF-8",
}


def test_the_table_covers_every_committed_bad_file():
    assert sorted(p.name for p in (BAD / "folder").iterdir()) == sorted(FOLDER_CASES)
    assert sorted(p.name for p in (BAD / "memories").iterdir()) == sorted(MEMORY_CASES)


@pytest.fixture(scope="module")
def bad_folder_index(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad")
    folder = root / "folder"
    shutil.copytree(BAD / "folder", folder)
    with open(folder / "huge_50mb.md", "wb") as handle:
        handle.truncate(50 * 1024 * 1024)  # sparse: 50 MB of NULs without writing them
    (folder / "long_line.txt").write_text("x" * 200_000)
    (folder / "many_headers.md").write_text("".join(f"## H{i}\nword{i}\n" for i in range(20_000)))
    return root, folder


def test_bad_folder_is_indexed_with_every_bad_file_reported(bad_folder_index, caplog):
    from hybridlab.config import IndexConfig
    from hybridlab.index.admin.verify import verify
    from hybridlab.search.engine import open_index

    root, folder = bad_folder_index
    with caplog.at_level(logging.WARNING):
        report = index_paths([folder], root / "index", IndexConfig(models=("wordllama",)), progress=False)
    skipped = {Path(path).name: reason for path, reason in report.skipped}
    cases = {**FOLDER_CASES, **GENERATED_CASES}
    for name, (outcome, words) in cases.items():
        if outcome == "skipped":
            assert words in skipped.get(name, ""), name
        else:
            assert name not in skipped, (name, skipped.get(name))
        if outcome == "warned":
            assert any(name in r.getMessage() and words in r.getMessage() for r in caplog.records), name
    assert report.documents == sum(1 for outcome, _ in cases.values() if outcome != "skipped")
    assert verify(root / "index") == []
    index = open_index(root / "index")
    assert index.get_document("deep_headers.md").title == "Level 1 heading"
    assert index.run("espresso machine", now=NOW)
    index.close()
    record("malformed_inputs", len(cases) + len(MEMORY_CASES))


@pytest.mark.parametrize("name", sorted(MEMORY_CASES))
def test_bad_memories_file_is_an_error_naming_file_and_line(name, tmp_path):
    from hybridlab.config import IndexConfig

    with pytest.raises(ValueError) as caught:
        index_paths(
            [BAD / "memories" / name], tmp_path / "index", IndexConfig(models=("wordllama",)), progress=False
        )
    assert f"{name}{MEMORY_CASES[name]}" in str(caught.value)
    assert not (tmp_path / "index" / "manifest.json").exists()  # nothing half-written


def test_bad_memories_file_via_cli_exits_2_with_message(tmp_path):
    result = cli(
        "index",
        str(BAD / "memories" / "invalid_utf8.jsonl"),
        "--index",
        str(tmp_path / "i"),
        *MODEL_ARGS,
        "-q",
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.startswith("error: ") and "invalid_utf8.jsonl:1: not valid UTF-8" in result.stderr
    assert "Traceback" not in result.stderr


# Queries ========================================================================================
QUERIES = {
    "100 kB": "panel widget " * 8_000,
    "only stop words": "the of and to in is it that a",
    "only punctuation": "?!.,;:()[]{}<>/\\|@#$%^&*-_=+~`'\"" * 3,
    "emoji": "\U0001f600\U0001f680\U0001f469\u200d\U0001f4bb\u2764\ufe0f",
    "whitespace": " \t\n ",
    "empty": "",
    "NUL": "panel\x00widget",
    "lone surrogate": "panel \ud800 widget",
    "RTL + zero width": "\u05e9\u05dc\u05d5\u05dd\u200b\u200e panel",
    "very long word": "a" * 50_000,
}


class _Timeout(Exception):
    pass


@pytest.fixture(scope="module")
def opened(small_index):
    from hybridlab.search.engine import open_index

    index = open_index(small_index)
    yield index
    index.close()


@pytest.mark.parametrize("label", sorted(QUERIES))
def test_odd_queries_are_answered_or_refused_in_bounded_time(opened, label):
    """Answered (finite scores) or refused with a ValueError that says why; a 20 s alarm bounds
    the time (a safety net against hangs, not a speed assertion)."""

    def alarm(*_args):
        raise _Timeout(label)

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(20)
    try:
        for mode in ("hybrid", "bm25", "vector"):
            try:
                results = opened.search(QUERIES[label], now=NOW, mode=mode, limit=5)
            except ValueError as error:
                assert str(error), label
                continue
            assert len(results) <= 5
            assert all(r.score == r.score for r in results)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_odd_queries_via_cli_never_traceback(small_index):
    for label in ("100 kB", "only punctuation", "empty"):
        result = cli("search", QUERIES[label], "--index", str(small_index), "--json", check=False)
        assert result.returncode in (0, 2), label
        assert "Traceback" not in result.stderr, (label, result.stderr[-1000:])
        if result.returncode == 2:
            assert result.stderr.startswith("error: ")
    record("odd_queries", len(QUERIES))
