"""The command line: golden search JSON, stats, index timing, one-line errors, a light `--help`."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from hybridlab import cli
from hybridlab.cli import search_kwargs

RESULT_KEYS = [
    "rank",
    "doc_id",
    "chunk_id",
    "title",
    "section",
    "score",
    "snippet",
    "collection",
    "chunk_type",
    "tags",
    "updated_at",
]


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run_error(capsys, *argv: str) -> str:
    """Run a command that must fail: exit code 2 and exactly one line `error: ...` on stderr."""
    try:
        code = cli.main(list(argv))
    except SystemExit as exit_:  # argparse errors
        code = exit_.code
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


# ------------------------------------------------------------------ search
def test_search_json_golden_bm25(capsys, tiny_index):
    # --decay 0: no recency factor (file documents are dated by their mtime), so scores are pure BM25
    code, out, _ = run(
        capsys,
        "search",
        "certificate host name",
        "--index",
        str(tiny_index),
        "--mode",
        "bm25",
        "--decay",
        "0",
        "--limit",
        "3",
        "--json",
    )
    assert code == 0
    results = json.loads(out)
    assert [list(r) for r in results] == [RESULT_KEYS] * 3
    assert [
        {
            k: r[k]
            for k in ("rank", "doc_id", "chunk_id", "title", "section", "collection", "chunk_type", "tags")
        }
        for r in results
    ] == [
        {
            "rank": 1,
            "doc_id": "panel/deploy.rst",
            "chunk_id": 2,
            "title": "Deploying an app",
            "section": "Deploying an app › Behind a proxy",
            "collection": "panel",
            "chunk_type": "text",
            "tags": [],
        },
        {
            "rank": 2,
            "doc_id": "m2",
            "chunk_id": 6,
            "title": "The staging server certificate expired; renewed it with the new ACME account.",
            "section": "",
            "collection": "infra",
            "chunk_type": "memory",
            "tags": ["ops", "tls"],
        },
        {
            "rank": 3,
            "doc_id": "hvplot/scatter.ipynb",
            "chunk_id": 1,
            "title": "Scatter plots",
            "section": "Scatter plots",
            "collection": "hvplot",
            "chunk_type": "text",
            "tags": [],
        },
    ]
    # BM25 (Lucene, k1 1.5, b 0.75) over the indexed text (section path + tags line + chunk)
    assert [r["score"] for r in results] == pytest.approx([2.59169, 0.887582, 0.48572], rel=1e-4)
    assert results[0]["snippet"] == (
        "…----- When the app sits behind a reverse proxy with its own certificate, a browser may refuse the "
        "connection with ERR_TLS_CERT_ALTNAME_INVALID: the certificate does not name the host. Issue a "
        "certificate whose subject alternative names incl…"
    )
    assert (
        results[1]["snippet"]
        == "The staging server certificate expired; renewed it with the new ACME account."
    )
    assert results[1]["updated_at"] == "2026-10-15T12:30:00Z"


def test_search_json_hybrid_top_hit(capsys, tiny_index):
    code, out, _ = run(
        capsys,
        "search",
        "SelectEditor dropdown",
        "--index",
        str(tiny_index),
        "--limit",
        "1",
        "--fusion",
        "rrf",
        "--alpha",
        "0.5",
        "--decay",
        "0",
        "--chunk-decay",
        "0",
        "--late-depth",
        "0",
        "--json",
    )
    assert code == 0
    (top,) = json.loads(out)
    assert list(top) == RESULT_KEYS
    assert (top["rank"], top["doc_id"], top["chunk_id"], top["title"], top["section"]) == (
        1,
        "panel/tabulator.md",
        3,
        "Tabulator",
        "Tabulator › Editors",
    )
    # first in both retrievers: RRF (rrf_k 60) weighted 0.5 / 0.5 (the best chunk alone: --chunk-decay 0)
    assert top["score"] == pytest.approx(0.5 / 61 + 0.5 / 61, abs=1e-6)
    assert "SelectEditor, which shows a dropdown list" in top["snippet"]


def test_search_text_output(capsys, tiny_index):
    code, out, _ = run(capsys, "search", "SelectEditor", "--index", str(tiny_index), "--limit", "1")
    assert code == 0
    assert out.splitlines()[0].startswith("  1. panel/tabulator.md  [Tabulator › Editors]  score=")


# ------------------------------------------------------------------ stats and index
def test_stats_prints_counts_per_collection_type_and_model(capsys, tiny_index):
    code, out, _ = run(capsys, "stats", "--index", str(tiny_index))
    assert code == 0
    lines = [" ".join(line.split()) for line in out.splitlines()]
    assert "documents 10, chunks 11, distinct tags 5" in lines
    for expected in (
        "beir 3 (3 documents)",
        "docs 1 (1 documents)",
        "hvplot 1 (1 documents)",
        "infra 1 (1 documents)",
        "memories 2 (2 documents)",
        "panel 3 (2 documents)",
        "memory 3",
        "text 8",
        "all-MiniLM-L6-v2 dim 384 vectors 11 index Flat",
    ):
        assert expected in lines, expected
    code, out, _ = run(capsys, "stats", "--index", str(tiny_index), "--json")
    stats = json.loads(out)
    assert stats["by_chunk_type"] == {"memory": 3, "text": 8}
    assert stats["models"]["all-MiniLM-L6-v2"]["vectors"] == 11


def test_index_json_records_time_and_chunks_per_second(capsys, tmp_path, tiny_corpus):
    code, out, err = run(
        capsys, "index", str(tiny_corpus / "beir"), "--index", str(tmp_path / "ix"), "--json", "-q"
    )
    assert code == 0, err
    report = json.loads(out)
    assert (report["documents"], report["chunks"], report["new_chunks"], report["committed"]) == (
        3,
        3,
        3,
        True,
    )
    assert report["seconds"] > 0
    assert report["chunks_per_second"] == pytest.approx(3 / report["seconds"], rel=0.05, abs=0.1)
    code, out, _ = run(capsys, "index", str(tiny_corpus / "beir"), "--index", str(tmp_path / "ix"), "-q")
    assert code == 0
    assert out.strip().startswith("3 documents: 0 added, 0 changed, 0 removed, 3 unchanged; 3 chunks (0 new)")
    assert " chunks/s; no change (index untouched)" in out


def test_index_output_has_no_library_debug_lines(tmp_path, tiny_corpus):
    # bm25s sets its logger to DEBUG on import, after the CLI configured logging: its build message
    # ("DEBUG bm25s: Building index from IDs objects") used to land in the output of every `index`
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "hybridlab.cli",
            "index",
            str(tiny_corpus / "beir"),
            "--index",
            str(tmp_path / "ix"),
            "-q",
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("3 documents: 3 added")
    assert "DEBUG" not in done.stderr + done.stdout, done.stderr


def test_index_warns_about_skipped_files(capsys, corpus_copy):
    pytest.importorskip("wordllama")  # the fast model: this test is about the warnings, not the vectors
    (corpus_copy / "docs" / "blob.md").write_bytes(b"\x00\x01binary")
    (corpus_copy / "docs" / "bad.ipynb").write_text("{")
    code, out, err = run(
        capsys,
        "index",
        str(corpus_copy / "docs"),
        "--index",
        str(corpus_copy / "ix"),
        "-q",
        "--model",
        "wordllama",
    )
    assert code == 0
    warnings = [line for line in err.splitlines() if line.startswith("warning: skipped")]
    assert len(warnings) == 2 and any("blob.md: binary file" in w for w in warnings)
    assert "; 2 files skipped;" in out


# ------------------------------------------------------------------ errors
def test_missing_source_path(capsys, tmp_path):
    line = run_error(capsys, "index", str(tmp_path / "nowhere"), "--index", str(tmp_path / "ix"))
    assert line == f"error: no such file or folder: {tmp_path / 'nowhere'}"
    assert not (tmp_path / "ix" / "manifest.json").exists()


def test_binary_file_given_directly(capsys, tmp_path):
    (tmp_path / "blob.md").write_bytes(b"\x00\x01")
    line = run_error(capsys, "index", str(tmp_path / "blob.md"), "--index", str(tmp_path / "ix"))
    assert line == f"error: {tmp_path / 'blob.md'}: binary file (NUL bytes)"


def test_malformed_jsonl_line(capsys, tmp_path):
    path = tmp_path / "memories.jsonl"
    path.write_text('{"id": "a", "content": "x", "tags": []}\n{"id": \n')
    line = run_error(capsys, "index", str(path), "--index", str(tmp_path / "ix"))
    assert line.startswith(f"error: {path}:2: invalid JSON")


def test_memory_with_a_bad_field(capsys, tmp_path):
    path = tmp_path / "memories.jsonl"
    path.write_text('{"id": "a", "content": "x", "tags": "not-a-list"}\n')
    line = run_error(capsys, "index", str(path), "--index", str(tmp_path / "ix"))
    assert line == f"error: {path}:1: field 'tags' must be a list of strings"


def test_empty_query(capsys, tiny_index):
    assert run_error(capsys, "search", "  ", "--index", str(tiny_index)) == (
        "error: empty query: give some words to search for"
    )


def test_limit_zero(capsys, tiny_index):
    line = run_error(capsys, "search", "x", "--index", str(tiny_index), "--limit", "0")
    assert line == "error: argument --limit/-k: must be >= 1, got 0 (see `hybridlab search --help`)"


def test_search_without_an_index(capsys, tmp_path):
    line = run_error(capsys, "search", "x", "--index", str(tmp_path / "none"))
    assert line.startswith(f"error: no index at {tmp_path / 'none'}")


def test_missing_command(capsys):
    assert run_error(capsys).startswith("error: the following arguments are required: COMMAND")


def test_help_does_not_import_heavy_libraries():
    code = (
        "import sys\n"
        "from hybridlab import cli\n"
        "cli.build_parser()\n"
        "try:\n"
        "    cli.main(['--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = ('torch', 'sentence_transformers', 'faiss', 'ranx', 'duckdb', 'bm25s', 'transformers')\n"
        "print('LOADED', sorted(m for m in heavy if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert done.returncode == 0, done.stderr
    assert "usage: hybridlab" in done.stdout
    assert done.stdout.strip().splitlines()[-1] == "LOADED []"


def test_the_parser_lists_each_group_modules_commands_in_help_order():
    """`build_parser` assembles the commands the group modules define (cli/indexing.py, ...,
    cli/membench.py), in the order `hybridlab --help` has always listed them."""
    import argparse

    commands = next(
        a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction)
    ).choices
    assert list(commands) == [
        "index",
        "search",
        "stats",
        "memories",
        "export",
        "models",
        "reindex",
        "eval",
        "fuse",
        "verify",
        "sweep",
        "grid",
        "report",
        "export-config",
        "learn-fusion",
        "repro",
        "mcp",
        "membench",
        "demo",
    ]
    done = subprocess.run(
        [sys.executable, "-m", "hybridlab.cli", "stats", "--help"],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and done.stdout.startswith("usage: hybridlab stats [-h] [--index INDEX_DIR]")


def test_public_names_are_exported_and_resolve():
    import hybridlab

    assert sorted(hybridlab.__all__) == sorted(hybridlab._EXPORTS)
    assert all(callable(getattr(hybridlab, name)) for name in hybridlab.__all__)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        hybridlab.nope  # noqa: B018


# ------------------------------------------------------------------ done-when checks on real data
def _ensure_eval_index(name: str, config=None, wait_seconds: float = 3600) -> Path:
    """The cached evaluation index, waiting while another process (the builder) holds its lock."""
    from hybridlab.eval.evalsets import ensure_index, get_evalset
    from hybridlab.index.format.layout import IndexLockedError

    deadline = time.monotonic() + wait_seconds
    while True:
        try:
            return ensure_index(get_evalset(name), config, progress=False)
        except IndexLockedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(10)


@pytest.mark.slow
@pytest.mark.xdist_group("evalsets")  # builds the HoloViz evaluation index: with the other builders
def test_holoviz_tabulator_query_finds_the_tabulator_notebook(capsys):
    from hybridlab.eval.evalsets import corpora_dir

    if not (corpora_dir() / "holoviz").is_dir():
        pytest.skip(f"no HoloViz corpus at {corpora_dir() / 'holoviz'}")
    index_dir = _ensure_eval_index("holoviz")
    code, out, err = run(
        capsys,
        "search",
        "Tabulator frozen_columns embed_content",
        "--index",
        str(index_dir),
        "--limit",
        "3",
        "--json",
    )
    assert code == 0, err
    doc_ids = [r["doc_id"] for r in json.loads(out)]
    assert "panel/examples/reference/widgets/Tabulator.ipynb" in doc_ids


@pytest.mark.slow
def test_scifact_subset_index_reports_time_and_chunks_per_second(capsys, tmp_path):
    import gzip

    from hybridlab.eval.datasets import data_dir, find_file

    try:
        corpus = find_file(data_dir() / "scifact", "corpus.jsonl")
    except FileNotFoundError as error:
        pytest.skip(str(error))
    subset = tmp_path / "scifact-subset"
    subset.mkdir()
    opener = gzip.open if corpus.suffix == ".gz" else open
    with opener(corpus, "rt", encoding="utf-8") as handle:
        lines = [next(handle) for _ in range(40)]
    (subset / "corpus.jsonl").write_text("".join(lines), encoding="utf-8")
    code, out, err = run(capsys, "index", str(subset), "--index", str(tmp_path / "ix"), "--json", "-q")
    assert code == 0, err
    report = json.loads(out)
    assert (report["documents"], report["chunks"], report["embedded"]) == (40, 40, 40)
    assert report["seconds"] > 0 and report["chunks_per_second"] > 0
    print(f"SciFact subset: 40 chunks in {report['seconds']:.1f} s, {report['chunks_per_second']} chunks/s")


@pytest.mark.parametrize(
    ("flags", "expected"), [((), None), (("--fill-dense",), True), (("--no-fill-dense",), False)]
)
def test_fill_dense_flags_are_three_way(flags, expected):
    args = cli.build_parser().parse_args(["search", "q", *flags])
    assert search_kwargs(args).get("fill_dense") is expected


def test_bm25s_logger_follows_the_application_logging_configuration():
    from hybridlab.config import Bm25Config
    from hybridlab.index.format.sparse import SparseIndex

    SparseIndex.build(["tunnel server config", "staging server deploy"], np.array([1, 2]), Bm25Config())
    assert logging.getLogger("bm25s").getEffectiveLevel() == logging.getLogger().getEffectiveLevel()


def test_eval_metrics_option_scores_the_named_metrics_and_refuses_unknown_ones(capsys, tmp_path):
    from hybridlab.cli import main

    run, qrels = tmp_path / "a.trec", tmp_path / "qrels.txt"
    run.write_text("q1 Q0 d1 1 2.0 a\nq1 Q0 d2 2 1.0 a\nq2 Q0 d3 1 1.0 a\n")
    qrels.write_text("q1 0 d2 1\nq2 0 d9 1\n")
    assert (
        main(["eval", "--run", str(run), "--qrels", str(qrels), "--metrics", "recall@1,hit_rate@2", "--json"])
        == 0
    )
    scores = json.loads(capsys.readouterr().out)["scores"]["a"]
    assert scores["recall@1"]["mean"] == 0.0 and scores["hit_rate@2"]["mean"] == 0.5
    with pytest.raises(SystemExit):
        main(["eval", "--run", str(run), "--qrels", str(qrels), "--metrics", "recal@5"])
    assert "unknown metric" in capsys.readouterr().err
