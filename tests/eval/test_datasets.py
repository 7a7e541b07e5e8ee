"""Tests for hybridlab.eval.datasets (BEIR reading, dev/test splits) and hybridlab.eval.evalsets (named sets)."""

from __future__ import annotations

import gzip
import json

import pytest

from bench.common import iter_corpus
from hybridlab.eval.datasets import (
    data_dir,
    find_file,
    load_dataset,
    load_qrels,
    load_queries,
    load_query_metadata,
    resolve_dataset,
    split_query_ids,
)
from hybridlab.eval.evalsets import GROUND_TRUTH, get_evalset


def write_jsonl(path, rows, compress=False):
    text = "".join(json.dumps(row) + "\n" for row in rows)
    if compress:
        with gzip.open(path, "wt", encoding="utf-8") as handle:
            handle.write(text)
    else:
        path.write_text(text, encoding="utf-8")


@pytest.fixture
def beir(tmp_path):
    """A gzipped BEIR dataset with qrels in `qrels/test.tsv` (the upstream layout)."""
    folder = tmp_path / "tinyset"
    (folder / "qrels").mkdir(parents=True)
    write_jsonl(
        folder / "corpus.jsonl.gz",
        [{"_id": "d1", "title": "One", "text": "first"}, {"_id": "d2", "title": "", "text": "second"}],
        compress=True,
    )
    write_jsonl(
        folder / "queries.jsonl.gz",
        [
            {"_id": "q1", "text": "find one", "metadata": {"kind": "a"}},
            {"_id": "q2", "text": "find two"},
            {"_id": "q9", "text": "unjudged"},
        ],
        compress=True,
    )
    (folder / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t2\nq2\td1\t0\n"
    )
    return folder


def test_load_dataset_reads_beir_layout(beir):
    dataset = load_dataset(beir)
    assert dataset.name == "tinyset"
    assert dataset.queries == {"q1": "find one", "q2": "find two"}  # q9 has no judgements
    assert dataset.qrels == {"q1": {"d1": 1}, "q2": {"d2": 2, "d1": 0}}
    assert [obj["_id"] for _, obj in iter_corpus(beir)] == ["d1", "d2"]
    assert load_query_metadata(beir) == {"q1": {"kind": "a"}, "q2": {}, "q9": {}}


def test_flat_qrels_file_and_plain_jsonl(tmp_path):
    write_jsonl(tmp_path / "queries.jsonl", [{"_id": 7, "text": "numeric id"}])
    (tmp_path / "qrels-test.tsv").write_text("7\tdoc\t1\n")  # no header
    assert load_queries(tmp_path) == {"7": "numeric id"}
    assert load_qrels(tmp_path) == {"7": {"doc": 1}}


def test_trec_qrels_with_four_columns(tmp_path):
    path = tmp_path / "qrels.tsv"
    path.write_text("q1\t0\td1\t1\nq1\t0\td2\t2\n")
    assert load_qrels(path) == {"q1": {"d1": 1, "d2": 2}}


def test_bad_qrels_score_names_file_and_line(tmp_path):
    path = tmp_path / "qrels.tsv"
    path.write_text("query-id\tcorpus-id\tscore\nq1\td1\thigh\n")
    with pytest.raises(ValueError, match=r"qrels.tsv:2: score 'high' is not an integer"):
        load_qrels(path)


def test_bad_queries_line_names_file_and_line(tmp_path):
    (tmp_path / "queries.jsonl").write_text('{"_id": "q1", "text": "ok"}\n{oops\n')
    with pytest.raises(ValueError, match=r"queries.jsonl:2: invalid JSON"):
        load_queries(tmp_path)
    (tmp_path / "queries.jsonl").write_text('{"_id": "q1"}\n')
    with pytest.raises(ValueError, match=r"queries.jsonl:1: a query needs '_id' and 'text'"):
        load_queries(tmp_path)


def test_missing_file_lists_what_was_looked_for(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"none of qrels-test.tsv, qrels/test.tsv \(or .gz\)"):
        find_file(tmp_path, "qrels-test.tsv", "qrels/test.tsv")


def test_data_dir_from_environment(beir, monkeypatch):
    monkeypatch.setenv("HYBRIDLAB_DATA", str(beir.parent))
    assert data_dir() == beir.parent
    assert resolve_dataset("tinyset") == beir
    assert load_dataset("tinyset").queries == {"q1": "find one", "q2": "find two"}
    with pytest.raises(FileNotFoundError, match="set HYBRIDLAB_DATA"):
        resolve_dataset("no-such-set")


# ------------------------------------------------------------------ dev/test splits
def test_split_is_pinned_by_sha1_of_the_query_id():
    # int(sha1(qid)[:8], 16) / 0xFFFFFFFF: q1 .876, q2 .946, q3 .474, q4 .603, q5 .190, q6 .021,
    # q7 .133, q8 .117 -> below 0.5 is dev.
    qrels = {f"q{i}": {"d": 1} for i in range(1, 9)}
    assert split_query_ids(qrels, "dev") == ["q3", "q5", "q6", "q7", "q8"]
    assert split_query_ids(qrels, "test") == ["q1", "q2", "q4"]


def test_split_is_disjoint_complete_and_independent_of_the_other_queries():
    qrels = {f"query-{i}": {"d": 1} for i in range(500)}
    dev, test = split_query_ids(qrels, "dev"), split_query_ids(qrels, "test")
    assert not set(dev) & set(test)
    assert set(dev) | set(test) == set(qrels)
    assert 200 < len(dev) < 300  # about half
    # a query's side does not depend on which other queries exist, nor on their order
    reversed_half = dict(list(reversed(qrels.items()))[:250])
    assert split_query_ids(reversed_half, "dev") == sorted(set(dev) & set(reversed_half))


def test_unknown_split_lists_the_choices(beir):
    with pytest.raises(ValueError, match=r"unknown split 'train'; choose from \['all', 'dev', 'test'\]"):
        load_dataset(beir, split="train")


def test_dataset_split_restricts_queries_and_qrels(beir):
    dataset = load_dataset(beir)
    # sha1 buckets: q1 .876 (test), q2 .946 (test)
    assert load_dataset(beir, split="test").queries == dataset.queries
    dev = dataset.split("dev")
    assert dev.queries == {} and dev.qrels == {}
    assert dataset.split("all") is dataset


# ------------------------------------------------------------------ named evaluation sets
def test_memories_evalset_has_its_fixed_now_and_query_kinds():
    evalset = get_evalset("memories")
    assert evalset.now == "2026-11-01T00:00:00Z"
    assert evalset.sources == (GROUND_TRUTH / "memories" / "memories.jsonl",)
    dataset = evalset.dataset()
    assert len(dataset.queries) == 79
    kinds = load_query_metadata(evalset.judgements)
    assert all(kinds[q].get("kind") for q in dataset.queries)
    dev, test = evalset.dataset("dev"), evalset.dataset("test")
    assert set(dev.queries) | set(test.queries) == set(dataset.queries)
    assert not set(dev.queries) & set(test.queries)


def test_unknown_evalset_lists_the_choices():
    with pytest.raises(ValueError, match=r"unknown dataset 'nope'; choose from \['memories', 'holoviz'"):
        get_evalset("nope")


@pytest.mark.skipif(not (data_dir() / "scifact").is_dir(), reason="SciFact is not in the data dir")
def test_scifact_test_queries_are_read():
    dataset = get_evalset("scifact").dataset()
    assert len(dataset.queries) == 300  # the BEIR SciFact test split
    assert sum(len(docs) for docs in dataset.qrels.values()) == 339
