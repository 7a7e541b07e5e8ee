"""Declared splits: SciFact's official train/test, cross-validated small sets, never-tuned sets."""

from __future__ import annotations

import pytest

from hybridlab.eval.datasets import data_dir, has_train_split, load_dataset, split_query_ids
from hybridlab.eval.evalsets import CROSS_VALIDATED, EvalSet, check_tunable, get_evalset


def tuning_dataset(evalset: EvalSet):
    """The queries a sweep may tune on; ValueError for a set that is never tuned on."""
    return evalset.dataset(check_tunable(evalset))


@pytest.fixture
def official(tmp_path):
    """A BEIR folder with an official train split (its own queries file) and a test split."""
    folder = tmp_path / "official"
    folder.mkdir()
    (folder / "queries.jsonl").write_text(
        "".join(f'{{"_id": "t{i}", "text": "test {i}"}}\n' for i in range(6))
    )
    (folder / "queries-train.jsonl").write_text(
        "".join(f'{{"_id": "r{i}", "text": "train {i}"}}\n' for i in range(4))
    )
    (folder / "qrels-test.tsv").write_text("".join(f"t{i}\td{i}\t1\n" for i in range(6)))
    (folder / "qrels-train.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"r{i}\td{i}\t1\n" for i in range(4))
    )
    return folder


def test_official_splits_are_the_files_not_sha1_halves(official):
    assert has_train_split(official)
    test, train = load_dataset(official, "test"), load_dataset(official, "train")
    assert sorted(test.queries) == [f"t{i}" for i in range(6)]  # every test query, not a half
    assert sorted(train.queries) == [f"r{i}" for i in range(4)] and train.queries["r0"] == "train 0"
    assert train.qrels == {f"r{i}": {f"d{i}": 1} for i in range(4)}
    assert load_dataset(official, "dev").queries == train.queries  # the split one tunes on
    assert load_dataset(official, "all").queries == test.queries
    assert load_dataset(official).split("train").queries == train.queries
    with pytest.raises(ValueError, match=r"unknown split 'x'; choose from \['all', 'dev', 'test', 'train'\]"):
        load_dataset(official, "x")


def test_a_single_qrels_folder_keeps_its_sha1_halves(official):
    (official / "qrels-train.tsv").unlink()
    assert not has_train_split(official)
    dev = load_dataset(official, "dev")
    assert sorted(dev.queries) == split_query_ids(load_dataset(official).qrels, "dev")


def test_named_sets_declare_their_splits():
    memories = get_evalset("memories")
    assert (memories.tuning_split, memories.report_split, memories.cv_folds) == (
        CROSS_VALIDATED,
        CROSS_VALIDATED,
        5,
    )
    assert memories.cross_validated and len(memories.report_dataset().queries) == 79
    assert tuning_dataset(memories).queries == memories.dataset("all").queries


@pytest.mark.parametrize("name", ["cisi", "cranfield", "med"])
def test_out_of_domain_sets_are_never_tuned_on(name):
    if not (data_dir() / name).is_dir():
        pytest.skip(f"{name} is not in the data dir")
    evalset = get_evalset(name)
    assert evalset.tuning_split is None and evalset.report_split == "all"
    with pytest.raises(
        ValueError, match=rf"{name} is never tuned on \(tuning_split = false\): it is an out-of-domain check"
    ):
        tuning_dataset(evalset)
    with pytest.raises(ValueError, match="never tuned on"):
        check_tunable(evalset)


def test_cv_folds_go_with_the_cross_validated_split(tmp_path):
    with pytest.raises(ValueError, match="cv_folds"):
        EvalSet("x", (tmp_path,), tmp_path, None, CROSS_VALIDATED, CROSS_VALIDATED, None)
    with pytest.raises(ValueError, match="cv_folds must be >= 2"):
        EvalSet("x", (tmp_path,), tmp_path, None, CROSS_VALIDATED, CROSS_VALIDATED, 1)


@pytest.mark.skipif(not (data_dir() / "scifact").is_dir(), reason="SciFact is not in the data dir")
def test_scifact_is_tuned_on_train_and_reported_on_all_300_test_queries():
    evalset = get_evalset("scifact")
    assert (evalset.tuning_split, evalset.report_split, evalset.cv_folds) == ("train", "test", None)
    train, test = tuning_dataset(evalset), evalset.report_dataset()
    assert (len(train.queries), sum(len(d) for d in train.qrels.values())) == (809, 919)
    assert (len(test.queries), sum(len(d) for d in test.qrels.values())) == (300, 339)
    assert not set(train.queries) & set(test.queries)
    assert evalset.dataset("dev").queries == train.queries
