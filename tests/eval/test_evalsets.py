"""Evaluation sets declared in TOML files (hybridlab.eval.evalsets): the packaged file, a user's file
through `eval`, `grid --cv` and `repro`, the errors; datasets by ir_datasets id; BEIR files as sources."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hybridlab.cli import main
from hybridlab.config import IndexConfig
from hybridlab.eval.datasets import load_qrels
from hybridlab.eval.evalsets import (
    PACKAGED_EVALSETS,
    embedding_cache_path,
    ensure_index,
    get_evalset,
    read_evalsets,
)
from hybridlab.index.write.build import index_paths
from hybridlab.ingest.sources import IngestReport, read_source

MODELS = ("wordllama",)  # builds in about a second
TOPICS = {
    "docker": ("container image build with a dockerfile", "compose services and networks"),
    "postgres": ("database vacuum and autovacuum", "replication slot lag on the primary"),
    "rust": ("borrow checker and lifetimes", "cargo workspace with many crates"),
    "travel": ("flight booking at the airport", "hotel reservation in the city"),
    "search": ("bm25 ranking of lexical matches", "fusion of dense and sparse retrieval"),
    "garden": ("tomato seedlings need sun", "compost heap turning schedule"),
}


def write_beir(folder: Path) -> Path:
    """A tiny BEIR folder: 12 documents, 6 queries with a kind each, graded qrels (space-separated)."""
    folder.mkdir(parents=True, exist_ok=True)
    docs, queries, qrels = [], [], []
    for t, (topic, texts) in enumerate(TOPICS.items()):
        for i, text in enumerate(texts):
            docs.append({"_id": f"{topic}-{i}", "title": topic.title(), "text": f"Notes on {topic}: {text}."})
            qrels.append(f"q-{topic} {topic}-{i} {2 - i}")
        queries.append(
            {
                "_id": f"q-{topic}",
                "text": f"{topic} {texts[0].split()[0]}",
                "metadata": {"kind": "short" if t % 2 else "topic"},
            }
        )
    (folder / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    (folder / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    (folder / "qrels.txt").write_text("\n".join(qrels) + "\n")
    return folder


@pytest.fixture
def user_sets(tmp_path, monkeypatch) -> Path:
    """A user's evaluation-sets file declaring `tiny` (cross-validated, 2 folds) over a BEIR folder."""
    monkeypatch.setenv("HYBRIDLAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("HYBRIDLAB_EVALSETS", raising=False)  # restored after the test (use_evalsets sets it)
    write_beir(tmp_path / "tiny")
    path = tmp_path / "sets.toml"
    path.write_text(
        '[tiny]\ncorpus = "tiny/corpus.jsonl"\nqrels = "tiny/qrels.txt"\nqueries = "tiny/queries.jsonl"\n'
        'tuning_split = "cv"\nreport_split = "cv"\ncv_folds = 2\nkinds = "kind"\n'
    )
    return path


def test_packaged_sets_are_the_entries_of_the_shipped_file():
    assert list(read_evalsets(PACKAGED_EVALSETS)) == [
        "memories",
        "holoviz",
        "scifact",
        "cisi",
        "cranfield",
        "med",
    ]
    memories = get_evalset("memories")
    assert (memories.now, memories.cv_folds, memories.sources[0].name) == (
        "2026-11-01T00:00:00Z",
        5,
        "memories.jsonl",
    )


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ('[x]\nqrels = "q.tsv"\n', r"set 'x': field 'corpus' is missing"),
        ('[x]\ncorpus = "c"\nqrel = "q.tsv"\n', r"set 'x': unknown field 'qrel'; fields are \['corpus'"),
        ('[x]\ncorpus = "c"\ncv_folds = "5"\n', r"set 'x': field 'cv_folds' has the wrong type \('5'\)"),
        ('[x]\ncorpus = "c"\ntuning_split = true\n', r"set 'x': field 'tuning_split' has the wrong type"),
        ('[x]\ncorpus = "${nowhere}/c"\n', r"set 'x': field 'corpus': unknown placeholder"),
        (
            '[x]\ncorpus = "c"\ntuning_split = "cv"\nreport_split = "cv"\n',
            r"set 'x': cv_folds \(None\) goes with",
        ),
        ("x = 1\n", r"'x' is not a set: declare it as a table, \[x\]"),
        ("[x\n", r"not valid TOML"),
    ],
)
def test_errors_name_the_file_the_set_and_the_field(tmp_path, entry, message):
    path = tmp_path / "sets.toml"
    path.write_text(entry)
    with pytest.raises(ValueError, match=message) as error:
        read_evalsets(path)
    assert str(error.value).startswith(f"{path}: ")


def test_a_missing_path_is_named_when_the_set_is_used(user_sets, monkeypatch):
    user_sets.write_text('[gone]\ncorpus = "nowhere"\n')
    monkeypatch.setenv("HYBRIDLAB_EVALSETS", str(user_sets))
    with pytest.raises(
        FileNotFoundError, match=rf"{user_sets}: set 'gone': field 'corpus': .*nowhere does not exist"
    ):
        get_evalset("gone")
    assert main(["eval", "--evalsets", str(user_sets), "--dataset", "nope", "--json"]) == 2


@pytest.mark.slow  # about 18 s: a grid and a repro subprocess
def test_a_user_declared_set_runs_through_eval_grid_cv_and_repro(user_sets, tmp_path, capsys):
    assert (
        main(["eval", "--evalsets", str(user_sets), "--dataset", "x"]) == 2
    )  # user sets are added, not alone
    assert "unknown dataset 'x'; choose from ['memories'" in capsys.readouterr().err
    evalset = get_evalset("tiny")
    assert (evalset.cv_folds, len(evalset.report_dataset().queries)) == (2, 6)
    index = ensure_index(evalset, IndexConfig(models=MODELS), progress=False)

    assert main(["eval", "--dataset", "tiny", "--index", str(index), "--mode", "bm25", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["queries"] == 6 and printed["metrics"]["ndcg@10"] > 0.5
    assert (
        main(
            [
                "eval",
                "--dataset",
                "tiny",
                "--index",
                str(index),
                "--mode",
                "bm25",
                "--kind",
                "short",
                "--json",
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["queries"] == 3

    assert (
        main(
            [
                "grid",
                "--evalsets",
                str(user_sets),
                "--dataset",
                "tiny",
                "--param",
                "alpha",
                "--values",
                "0,1",
                "--cv",
                "2",
                "--model",
                "wordllama",
                "--out",
                str(tmp_path / "grid"),
                "--json",
            ]
        )
        == 0
    )
    grid = json.loads(capsys.readouterr().out)
    assert grid["queries"] == 6 and 0 < grid["metrics"]["ndcg@10"] <= 1

    conditions = tmp_path / "conditions.yaml"
    conditions.write_text(
        "conditions:\n- name: tiny-bm25\n  dataset: tiny\n  split: cv\n  queries: 6\n  cheap: true\n"
        "  index: {models: [wordllama]}\n"
        "  command: hybridlab eval --index ${index} --dataset tiny --mode bm25 --json\n"
        f"  metrics: {{ndcg@10: {printed['metrics']['ndcg@10']:.4f}}}\n"
    )
    assert main(["repro", "--evalsets", str(user_sets), "--conditions", str(conditions), "--all"]) == 0
    assert "all 1 conditions reproduced" in capsys.readouterr().out


# ------------------------------------------------------------------ sources and files
def test_a_beir_corpus_file_is_read_as_beir_and_qrels_columns_may_be_spaces(tmp_path):
    folder = write_beir(tmp_path / "b")
    documents = read_source(folder / "corpus.jsonl", IngestReport())
    assert len(documents) == 12 and documents[0].title == "Docker" and documents[0].collection == "b"
    renamed = folder / "docs.jsonl"  # by its first object (`_id`, no `id`), whatever its name
    renamed.write_text((folder / "corpus.jsonl").read_text())
    assert [d.doc_id for d in read_source(renamed, IngestReport())] == [d.doc_id for d in documents]
    spaced, tabbed = folder / "qrels.txt", folder / "qrels.tsv"
    tabbed.write_text("query-id\tcorpus-id\tscore\n" + spaced.read_text().replace(" ", "\t"))
    trec = folder / "qrels.trec"
    trec.write_text(
        "".join(f"{q} 0 {d} {r}\n" for q, d, r in (line.split() for line in spaced.read_text().splitlines()))
    )
    assert load_qrels(spaced) == load_qrels(tabbed) == load_qrels(trec) and load_qrels(spaced)[
        "q-docker"
    ] == {"docker-0": 2, "docker-1": 1}


@pytest.fixture(scope="module")
def local_irds(tmp_path_factory) -> str:
    """A dataset registered with ir_datasets over local files (no download): `irds:hybridlab-test/tiny`."""
    ir_datasets = pytest.importorskip("ir_datasets")
    from ir_datasets.datasets.base import Dataset
    from ir_datasets.formats import TrecQrels, TsvDocs, TsvQueries
    from ir_datasets.util import LocalDownload

    folder = tmp_path_factory.mktemp("irds")
    write_beir(folder)
    docs = [json.loads(line) for line in (folder / "corpus.jsonl").read_text().splitlines()]
    queries = [json.loads(line) for line in (folder / "queries.jsonl").read_text().splitlines()]
    (folder / "docs.tsv").write_text("".join(f"{d['_id']}\t{d['title']}. {d['text']}\n" for d in docs))
    (folder / "queries.tsv").write_text("".join(f"{q['_id']}\t{q['text']}\n" for q in queries))
    (folder / "qrels.trec").write_text(
        "".join(
            f"{q} 0 {d} {r}\n"
            for q, d, r in (line.split() for line in (folder / "qrels.txt").read_text().splitlines())
        )
    )
    name = "hybridlab-test/tiny"
    if name not in ir_datasets.registry._registered:
        ir_datasets.registry.register(
            name,
            Dataset(
                TsvDocs(LocalDownload(folder / "docs.tsv")),
                TsvQueries(LocalDownload(folder / "queries.tsv")),
                TrecQrels(LocalDownload(folder / "qrels.trec"), {0: "no", 1: "yes"}),
            ),
        )
    return f"irds:{name}"


def test_a_dataset_by_ir_datasets_id_is_indexed_and_evaluated(local_irds, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HYBRIDLAB_CACHE", str(tmp_path / "cache"))
    index = tmp_path / "index"
    assert main(["index", local_irds, "--index", str(index), "--model", "wordllama", "-q", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["documents"] == 12
    assert main(["eval", "--dataset", local_irds, "--index", str(index), "--mode", "bm25", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["queries"] == 6 and printed["metrics"]["ndcg@10"] > 0.5
    assert get_evalset(local_irds).report_dataset().qrels["q-docker"] == {"docker-0": 2, "docker-1": 1}
    assert main(["eval", "--dataset", "irds:no/such-dataset", "--index", str(index), "--json"]) == 2
    assert "ir_datasets has no dataset 'no/such-dataset'" in capsys.readouterr().err


def test_without_ir_datasets_the_message_names_the_extra(monkeypatch):
    import hybridlab.extras
    from hybridlab.errors import MissingExtraError
    from hybridlab.ingest.sources import irds_dataset

    monkeypatch.setattr(hybridlab.extras, "is_available", lambda module: module != "ir_datasets")
    with pytest.raises(MissingExtraError, match=r"pip install 'hybridlab\[irds\]'"):
        irds_dataset("irds:beir/scifact")


def test_the_embeddings_cache_is_the_users_unless_a_cache_is_named(tmp_path, monkeypatch):
    """One embeddings cache per user serves every clone (a fresh clone's evaluation indexes embed
    only texts not embedded before); a named `HYBRIDLAB_CACHE` keeps its own (cold benchmarks)."""
    for name in ("HYBRIDLAB_EMBEDDING_CACHE", "HYBRIDLAB_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert embedding_cache_path() == tmp_path / "home" / ".cache" / "hybridlab" / "embeddings.duckdb"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert embedding_cache_path() == tmp_path / "xdg" / "hybridlab" / "embeddings.duckdb"
    monkeypatch.setenv("HYBRIDLAB_CACHE", str(tmp_path / "private"))
    assert embedding_cache_path() == tmp_path / "private" / "embeddings.duckdb"
    monkeypatch.setenv("HYBRIDLAB_EMBEDDING_CACHE", str(tmp_path / "given.duckdb"))
    assert embedding_cache_path() == tmp_path / "given.duckdb"


def test_a_build_creates_the_cache_folder_and_another_clones_build_embeds_nothing(
    user_sets, tmp_path, monkeypatch
):
    monkeypatch.setenv("HYBRIDLAB_EMBEDDING_CACHE", str(tmp_path / "user" / "cache" / "emb.duckdb"))
    monkeypatch.setenv("HYBRIDLAB_EVALSETS", str(user_sets))
    evalset = get_evalset("tiny")
    ensure_index(evalset, progress=False)
    assert (tmp_path / "user" / "cache" / "emb.duckdb").is_file()
    # another clone (its own index folder) building the same corpus: every vector from the cache
    report = index_paths(
        list(evalset.sources), tmp_path / "clone-index", progress=False, cache_path=embedding_cache_path()
    )
    assert (report.embedded, report.cache_hits) == (0, report.chunks) and report.chunks == 12
