"""Reading sources: folders of docs and notebooks, BEIR corpora, memories JSONL; bad input."""

from __future__ import annotations

import gzip
import json
import logging
import os
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest

from hybridlab.config import IndexConfig
from hybridlab.index.format.rows import chunk_document
from hybridlab.ingest.chunking import embedding_text
from hybridlab.ingest.sources import IngestReport, memory_document, read_source, source_kind


def read(path: Path) -> tuple[dict, IngestReport]:
    report = IngestReport()
    return {d.doc_id: d for d in read_source(path, report)}, report


# ------------------------------------------------------------------ folders
def test_folder_reads_each_suffix_with_ids_collections_and_titles(corpus_copy):
    docs = corpus_copy / "docs"
    (docs / "panel" / "extra.markdown").write_text(
        "Intro line without a heading.\n\n## Later heading\n\ntext\n"
    )
    (docs / "script.py").write_text("print('not indexed')\n")
    (docs / "image.png").write_bytes(b"\x89PNG\r\n")
    (docs / ".git").mkdir()
    (docs / ".git" / "HEAD.md").write_text("# hidden\n")
    (docs / "hvplot" / ".ipynb_checkpoints").mkdir()
    (docs / "hvplot" / ".ipynb_checkpoints" / "scatter-checkpoint.ipynb").write_text("{}")
    found, report = read(docs)
    assert sorted(found) == [
        "faq.txt",
        "hvplot/scatter.ipynb",
        "panel/deploy.rst",
        "panel/extra.markdown",
        "panel/tabulator.md",
    ]
    assert report.documents == 5 and report.skipped == []
    summary = {doc_id: (d.collection, d.title, d.doc_type) for doc_id, d in found.items()}
    assert summary == {
        "faq.txt": ("docs", "faq", "text"),  # top-level file: the folder's own name; no heading: file stem
        "hvplot/scatter.ipynb": ("hvplot", "Scatter plots", "notebook"),
        "panel/deploy.rst": ("panel", "Deploying an app", "rst"),
        "panel/extra.markdown": ("panel", "extra", "markdown"),  # no H1 (only an H2): the file stem
        "panel/tabulator.md": ("panel", "Tabulator", "markdown"),
    }
    assert found["panel/tabulator.md"].source == str(docs.resolve())
    assert found["panel/tabulator.md"].metadata == {"path": "panel/tabulator.md"}
    assert found["panel/tabulator.md"].text == (docs / "panel" / "tabulator.md").read_text()
    assert found["panel/tabulator.md"].updated_at.tzinfo is not None


def test_nested_folders_use_slash_ids_and_the_first_component_as_collection(tmp_path):
    deep = tmp_path / "root" / "panel" / "examples" / "reference"
    deep.mkdir(parents=True)
    (deep / "Tabulator.md").write_text("# Tabulator\n\ntext\n")
    found, _ = read(tmp_path / "root")
    (document,) = found.values()
    assert (document.doc_id, document.collection) == ("panel/examples/reference/Tabulator.md", "panel")


def test_notebook_keeps_markdown_and_code_cells_and_drops_outputs(tiny_corpus):
    found, _ = read(tiny_corpus / "docs")
    notebook = found["hvplot/scatter.ipynb"]
    assert notebook.language == "python"
    assert notebook.text == (
        "# Scatter plots\n\nhvPlot draws a scatter plot of two columns with `df.hvplot.scatter`.\n\n"
        "```python\nimport hvplot.pandas\n# a comment line inside a code cell\n"
        "df.hvplot.scatter(x='bill_length', y='bill_depth')\n```\n\n"
        "## Colouring points\n\nPass `c=` with a column name to colour the points by a category.\n\n"
        "```python\ndf.hvplot.scatter(x='bill_length', y='bill_depth', c='species')\n```\n"
    )
    assert "zyzzyvaoutputonly" not in notebook.text


def test_single_file_source(tiny_corpus):
    found, _ = read(tiny_corpus / "docs" / "panel" / "tabulator.md")
    assert list(found) == ["tabulator.md"]
    assert found["tabulator.md"].collection == "panel"


def test_bad_files_inside_a_folder_are_warned_about_counted_and_skipped(corpus_copy, caplog):
    docs = corpus_copy / "docs"
    (docs / "blob.md").write_bytes(b"# title\x00\x01\x02binary")
    (docs / "broken.ipynb").write_text('{"cells": [ not json')
    (docs / "schema.ipynb").write_text(json.dumps({"cells": "nope"}))
    (docs / "empty.txt").write_text("  \n")
    os.symlink(docs / "missing-target.md", docs / "dangling.md")  # unreadable: the target is gone
    with caplog.at_level(logging.WARNING, logger="hybridlab.ingest.sources"):
        found, report = read(docs)
    assert sorted(found) == ["faq.txt", "hvplot/scatter.ipynb", "panel/deploy.rst", "panel/tabulator.md"]
    reasons = {Path(path).name: reason for path, reason in report.skipped}
    assert sorted(reasons) == ["blob.md", "broken.ipynb", "dangling.md", "empty.txt", "schema.ipynb"]
    assert reasons["blob.md"] == "binary file (NUL bytes)"
    assert reasons["broken.ipynb"].startswith("invalid notebook")
    assert reasons["schema.ipynb"].startswith("invalid notebook")
    assert reasons["empty.txt"] == "empty"
    warned = " ".join(record.getMessage() for record in caplog.records)
    for name in ("blob.md", "broken.ipynb", "schema.ipynb", "dangling.md"):
        assert name in warned


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_unreadable_file_in_a_folder_is_skipped(corpus_copy):
    secret = corpus_copy / "docs" / "secret.md"
    secret.write_text("# secret\n")
    secret.chmod(0)
    found, report = read(corpus_copy / "docs")
    assert "secret.md" not in found and [Path(p).name for p, _ in report.skipped] == ["secret.md"]


def test_invalid_utf8_is_read_with_replacement_and_a_warning(tmp_path, caplog):
    (tmp_path / "latin1.md").write_bytes("# Café\n\nnaïve text\n".encode("latin-1"))
    with caplog.at_level(logging.WARNING, logger="hybridlab.ingest.sources"):
        found, report = read(tmp_path)
    assert found["latin1.md"].text.startswith("# Caf\ufffd")
    assert report.skipped == [] and "not valid UTF-8" in caplog.text


def test_missing_path_and_unknown_file_kind_are_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such file or folder: .*nowhere"):
        read(tmp_path / "nowhere")
    (tmp_path / "data.csv").write_text("a,b\n")
    with pytest.raises(ValueError, match="data.csv: not a folder, BEIR dataset or memories .jsonl file"):
        read(tmp_path / "data.csv")


def test_bad_file_given_directly_is_an_error_naming_it(tmp_path):
    (tmp_path / "bad.ipynb").write_text("not json")
    with pytest.raises(ValueError, match=r"bad.ipynb: invalid notebook"):
        read(tmp_path / "bad.ipynb")
    (tmp_path / "blob.md").write_bytes(b"\x00\x01")
    with pytest.raises(ValueError, match=r"blob.md: binary file \(NUL bytes\)"):
        read(tmp_path / "blob.md")


# ------------------------------------------------------------------ BEIR
def test_beir_corpus_documents(tiny_corpus):
    assert source_kind(tiny_corpus / "beir") == "beir"
    found, _ = read(tiny_corpus / "beir")
    assert sorted(found) == ["d1", "d2", "d3"]
    d1 = found["d1"]
    assert (d1.title, d1.collection, d1.doc_type) == ("Vitamin D and bone health", "beir", "beir")
    (chunk,) = chunk_document(d1, IndexConfig())
    assert embedding_text(chunk, d1.title) == (
        "Vitamin D and bone health\nVitamin D supplementation in older adults did not lower the rate of "
        "hip fractures in a randomised trial."
    )
    (untitled,) = chunk_document(found["d3"], IndexConfig())
    assert embedding_text(untitled, "") == found["d3"].text


def test_beir_gzipped_corpus(tmp_path, tiny_corpus):
    folder = tmp_path / "gzipped"
    folder.mkdir()
    with gzip.open(folder / "corpus.jsonl.gz", "wt", encoding="utf-8") as handle:
        handle.write((tiny_corpus / "beir" / "corpus.jsonl").read_text())
    assert source_kind(folder) == "beir"
    found, _ = read(folder)
    assert sorted(found) == ["d1", "d2", "d3"]
    assert found["d2"].collection == "gzipped"


def test_beir_line_without_id_names_file_and_line(tmp_path):
    folder = tmp_path / "bad"
    folder.mkdir()
    (folder / "corpus.jsonl").write_text('{"_id": "a", "text": "x"}\n\n{"text": "no id"}\n')
    with pytest.raises(ValueError, match=r"corpus.jsonl:3: field '_id' is missing"):
        read(folder)


# ------------------------------------------------------------------ memories
def test_memories_jsonl(tiny_corpus):
    assert source_kind(tiny_corpus / "memories.jsonl") == "memories"
    found, _ = read(tiny_corpus / "memories.jsonl")
    assert sorted(found) == ["m1", "m2", "m3"]
    m1, m2, m3 = found["m1"], found["m2"], found["m3"]
    assert m1.tags == ("build", "decision")
    assert m1.created_at == datetime(2026, 10, 1, 9, 0, tzinfo=UTC)
    assert m1.updated_at == m1.created_at
    assert m1.metadata == {"memory_type": "decision"} and m1.collection == "memories"
    assert m2.metadata == {"project": "infra", "memory_type": "note"} and m2.collection == "infra"
    assert m3.created_at == datetime(2026, 9, 20, 6, 0, tzinfo=UTC)  # +02:00 to UTC
    assert m1.doc_type == "memory" and m1.title == m1.text
    (chunk,) = chunk_document(m1, IndexConfig())
    assert chunk.chunk_type == "memory" and chunk.text == m1.text


def test_memory_tags_are_normalised():
    document = memory_document(
        {"id": " x ", "content": "c", "tags": ["Build", "build", " TLS ", ""]}, "w", "s"
    )
    assert document.doc_id == "x" and document.tags == ("build", "tls")


GOOD = {"id": "m", "content": "text", "tags": ["a"], "created_at": "2026-01-01T00:00:00Z"}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"id": ""}, "id"),
        ({"id": 7}, "id"),
        ({"content": None}, "content"),
        ({"content": "   "}, "content"),
        ({"content": "x" * 100_001}, "content"),
        ({"tags": "a,b"}, "tags"),
        ({"tags": ["a", 3]}, "tags"),
        ({"created_at": "yesterday"}, "created_at"),
        ({"created_at": 1700000000}, "created_at"),
        ({"memory_type": 5}, "memory_type"),
        ({"metadata": [1, 2]}, "metadata"),
    ],
)
def test_memory_with_a_bad_field_names_file_line_and_field(tmp_path, change, field):
    path = tmp_path / "memories.jsonl"
    lines = [json.dumps({**GOOD, "id": "ok"}), json.dumps({**GOOD, **change})]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=rf"memories.jsonl:2: .*'{field}'"):
        read(path)


def test_malformed_jsonl_line_names_file_and_line(tmp_path):
    path = tmp_path / "memories.jsonl"
    path.write_text(json.dumps(GOOD) + "\n{not json\n")
    with pytest.raises(ValueError, match=r"memories.jsonl:2: invalid JSON"):
        read(path)
    path.write_text(json.dumps(GOOD) + "\n[1, 2]\n")
    with pytest.raises(ValueError, match=r"memories.jsonl:2: expected a JSON object, got list"):
        read(path)


def test_duplicate_memory_id_is_an_error(tmp_path):
    path = tmp_path / "memories.jsonl"
    path.write_text(json.dumps(GOOD) + "\n" + json.dumps(GOOD) + "\n")
    with pytest.raises(ValueError, match=r"memories.jsonl:2: duplicate id 'm'"):
        read(path)


def test_gzipped_memories(tmp_path, tiny_corpus):
    path = tmp_path / "mem.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write((tiny_corpus / "memories.jsonl").read_text())
    found, _ = read(path)
    assert sorted(found) == ["m1", "m2", "m3"]


def test_content_hash_changes_with_text_and_tags_only(tiny_corpus, tmp_path):
    found, _ = read(tiny_corpus / "memories.jsonl")
    copy = tmp_path / "memories.jsonl"
    shutil.copy(tiny_corpus / "memories.jsonl", copy)
    again, _ = read(copy)
    assert found["m1"].content_sha256 == again["m1"].content_sha256
    changed = memory_document({**GOOD, "tags": ["b"]}, "w", "s")
    assert changed.content_sha256 != memory_document(GOOD, "w", "s").content_sha256
