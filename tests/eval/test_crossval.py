"""Deterministic k folds and nested cross-validation."""

from __future__ import annotations

import pytest

from hybridlab.eval.crossval import k_folds, nested_cv

QIDS = [f"q{i}" for i in range(1, 9)]


def test_folds_follow_the_sha1_order_dealt_round_robin():
    # sha1 order (see test_datasets): q6, q8, q7, q5, q3, q4, q1, q2 -> dealt to folds 0, 1, 0, 1, ...
    assert k_folds(QIDS, 2) == [["q1", "q3", "q6", "q7"], ["q2", "q4", "q5", "q8"]]


def test_folds_partition_the_ids_are_balanced_and_stable():
    ids = [f"query-{i}" for i in range(79)]
    folds = k_folds(ids, 5)
    assert sorted(q for fold in folds for q in fold) == sorted(ids)
    assert sorted(len(f) for f in folds) == [15, 16, 16, 16, 16]
    assert k_folds(list(reversed(ids)), 5) == folds  # independent of the order given
    with pytest.raises(ValueError, match="k must be >= 2"):
        k_folds(ids, 1)
    with pytest.raises(ValueError, match="5 folds need at least 5"):
        k_folds(ids[:3], 5)


def test_nested_cv_scores_each_fold_with_a_config_tuned_on_the_others():
    value = {q: float(q[1:]) for q in QIDS}
    seen = []

    def tune(train):
        seen.append(train)
        return sum(value[q] for q in train) / len(train)  # the "config": the mean of the tuning queries

    result = nested_cv(QIDS, tune, lambda config, fold: dict.fromkeys(fold, config), k=2)
    # fold 0 = q1 q3 q6 q7 (mean 4.25), fold 1 = q2 q4 q5 q8 (mean 4.75): each gets the other's mean
    assert seen == [["q2", "q4", "q5", "q8"], ["q1", "q3", "q6", "q7"]]
    assert result.configs == [4.75, 4.25] and result.fold_means == [4.75, 4.25]
    assert result.per_query["q1"] == 4.75 and result.per_query["q2"] == 4.25
    assert result.mean == 4.5 and result.interval.low < 4.5 < result.interval.high


def test_nested_cv_rejects_scores_for_other_queries():
    with pytest.raises(ValueError, match="exactly the fold's"):
        nested_cv(QIDS, lambda train: 0, lambda config, fold: {"x": 1.0}, k=2)


def test_grid_cross_validated_choice_scores_each_fold_at_the_value_best_elsewhere():
    from hybridlab.tune.grid import cross_validated_choice

    ids = [f"q{i}" for i in range(10)]
    # "0.1" is better on every query but q0; "0" is the baseline
    per_query = {"0": {q: 0.5 for q in ids}, "0.1": {q: (0.0 if q == "q0" else 0.7) for q in ids}}
    chosen = cross_validated_choice(per_query, 5)
    assert chosen["chosen"] == ["0.1"] * 5 and chosen["baseline_value"] == "0"
    assert chosen["mean"] == pytest.approx((9 * 0.7 + 0.0) / 10) and chosen["baseline_mean"] == 0.5
    assert 0.0 <= chosen["p_value"] <= 1.0
    tied = cross_validated_choice({"a": {q: 1.0 for q in ids}, "b": {q: 1.0 for q in ids}}, 2)
    assert tied["chosen"] == ["a", "a"]  # ties: the earlier value
