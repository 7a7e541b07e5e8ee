"""Nested k-fold cross-validation of the tuning procedure on a cross-validated set: a study per
fold tunes on the other folds, the held-out fold is scored by the config it chose, and the
out-of-fold scores are compared with the defaults' on the same queries."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from hybridlab.config import IndexConfig
from hybridlab.errors import InvalidValueError
from hybridlab.eval.crossval import CrossValidation, k_folds, nested_cv
from hybridlab.eval.evalsets import CROSS_VALIDATED, EvalSet
from hybridlab.eval.evaluator import Evaluator
from hybridlab.eval.significance import Interval, PairedTest, mean_ci, paired_test
from hybridlab.tune.export import (
    DEFAULT_TEST,
    DEFAULTS_FITTED_ON,
    MAX_P,
    describe_test,
    measure_settings,
    out_of_fold_run,
    score_run,
)
from hybridlab.tune.record import CrossValidationRecord, FoldConfig, OutOfFoldScores
from hybridlab.tune.sweep.objective import DEFAULT_MAX_INDEX_CONFIGS, DEFAULT_METRIC
from hybridlab.tune.sweep.space import Param
from hybridlab.tune.sweep.study import run_study

#: Trials per fold of a nested cross-validation are trials // k, but never fewer than this.
MIN_FOLD_TRIALS = 10


def fold_trials(trials: int, k: int) -> int:
    """Trials per fold of a nested cross-validation: `trials` // `k`, at least MIN_FOLD_TRIALS."""
    return max(MIN_FOLD_TRIALS, trials // k)


def _require_cross_validated(evalset: EvalSet) -> None:
    """ValueError for a set that is tuned on one split and reported on another."""
    if not evalset.cross_validated:
        raise InvalidValueError(
            f"{evalset.name} is not cross-validated: it is tuned on {evalset.tuning_split!r} and "
            f"reported on {evalset.report_split!r}"
        )


def _chosen_config(study, fold: int) -> FoldConfig:
    """What the study of fold `fold` (numbered from 1) chose: its best trial, its value on the other
    folds' queries, and its search settings and index config."""
    best = study.best_trial
    return FoldConfig(
        fold=fold,
        study=study.study_name,
        trial=best.number,
        params=best.params,
        tuning_value=best.value,
        defaults=bool(best.user_attrs.get("defaults")),
        search=best.user_attrs["search"],
        index=best.user_attrs["index"],
    )


def _cv_verdict(
    evalset: EvalSet,
    tuned: Interval,
    defaults: Interval,
    outcome: PairedTest,
    significant: bool,
    *,
    k: int,
    queries: int,
    trials: int,
    metric: str,
    test: str,
) -> str:
    """One sentence on whether the tuning procedure beats the defaults out of fold: both means with
    their 95% intervals, and the paired test (plus, where the defaults were fitted on the set, that
    caveat)."""
    verdict = (
        f"the tuning procedure {'beats' if significant else 'does NOT significantly beat'} the defaults out of "
        f"fold (nested {k}-fold cross-validation over {queries} queries, {trials} trials per fold): {metric} "
        f"{tuned.mean:.4f} [{tuned.low:.4f}, {tuned.high:.4f}] vs "
        f"{defaults.mean:.4f} [{defaults.low:.4f}, {defaults.high:.4f}] "
        f"({describe_test(test)} p = {outcome.p_value:.4g}, threshold {MAX_P})"
    )
    if evalset.name in DEFAULTS_FITTED_ON:
        verdict += f"; {DEFAULTS_FITTED_ON[evalset.name]}"
    return verdict


def _tuned_out_of_fold(metrics: dict[str, float], result: CrossValidation) -> OutOfFoldScores:
    """The tuning procedure's side of a cross-validation: its out-of-fold metrics, fold means,
    mean with its interval, and per-query values."""
    return OutOfFoldScores(metrics, tuple(result.fold_means), result.interval, result.per_query)


def _defaults_out_of_fold(
    metrics: dict[str, float],
    per_query: Mapping[str, float],
    interval: Interval,
    folds: Sequence[Sequence[str]],
) -> OutOfFoldScores:
    """The defaults' side of a cross-validation: their metrics, their mean on each fold's queries,
    the mean with its interval, and their per-query values."""
    return OutOfFoldScores(
        metrics,
        tuple(sum(per_query[q] for q in fold) / len(fold) for fold in folds),
        interval,
        dict(sorted(per_query.items())),
    )


def _cross_validation_record(
    evaluator: Evaluator,
    result: CrossValidation,
    run: Mapping[str, dict[str, float]],
    ids: Sequence[str],
    *,
    trials: int,
    metric: str,
    test: str,
    base_index: IndexConfig | None,
) -> CrossValidationRecord:
    """The record of a nested cross-validation (:func:`cross_validate`) of `ids`: the tuning
    procedure's out-of-fold scores (`run`: each query's results from its fold's chosen config), the
    defaults' on the same queries, and a paired `test` of the two."""
    evalset, k = evaluator.evalset, len(result.folds)
    tuned_metrics = score_run(evaluator, {q: run[q] for q in ids}, CROSS_VALIDATED, metric)[1]
    defaults_per_query, defaults_metrics = measure_settings(
        evaluator, {}, base_index or IndexConfig(), CROSS_VALIDATED, ids, metric
    )
    defaults_ci = mean_ci([defaults_per_query[q] for q in ids])
    outcome = paired_test(result.per_query, defaults_per_query, test)
    significant = outcome.p_value < MAX_P and outcome.difference > 0
    verdict = _cv_verdict(
        evalset,
        result.interval,
        defaults_ci,
        outcome,
        significant,
        k=k,
        queries=len(ids),
        trials=trials,
        metric=metric,
        test=test,
    )
    return CrossValidationRecord(
        k=k,
        trials_per_fold=trials,
        metric=metric,
        folds=tuple(tuple(fold) for fold in result.folds),
        configs=tuple(result.configs),
        tuned=_tuned_out_of_fold(tuned_metrics, result),
        defaults=_defaults_out_of_fold(defaults_metrics, defaults_per_query, defaults_ci, result.folds),
        comparison=outcome,
        significant=significant,
        verdict=verdict,
    )


def cross_validate(
    dataset: str | os.PathLike,
    evaluator: Evaluator,
    *,
    trials: int,
    storage: str | None = None,
    study_name: str | None = None,
    run_dir: str | os.PathLike | None = None,
    metric: str = DEFAULT_METRIC,
    seed: int = 0,
    max_index_configs: int = DEFAULT_MAX_INDEX_CONFIGS,
    base_index: IndexConfig | None = None,
    space: Sequence[Param] | None = None,
    workers: int = 1,
    test: str = DEFAULT_TEST,
    callbacks: Sequence[Any] = (),
) -> CrossValidationRecord:
    """Nested k-fold cross-validation of the tuning procedure on a cross-validated set (memories,
    holoviz; `k` = its `cv_folds`): for each fold a study of `trials` trials (defaults enqueued first,
    like every study) tunes on the other folds' queries, and the fold's queries are scored by the
    config it chose. Returns the folds, each fold's chosen config, the out-of-fold per-query values,
    fold means and mean with a 95% t interval, the same for the defaults on the same queries, and a
    paired `test` of tuned-out-of-fold against the defaults (`significant`: p < MAX_P, higher mean).
    Fold studies live beside the main one, named `<name>-fold<i>of<k>` (i from 1); `callbacks` go to
    each fold study (:func:`~hybridlab.tune.sweep.study.run_study`)."""
    evalset = evaluator.evalset
    _require_cross_validated(evalset)
    split, k = CROSS_VALIDATED, evalset.cv_folds
    assert k is not None  # a cross-validated set has its folds
    ids = sorted(evaluator.dataset(split).queries)
    folds = k_folds(ids, k)
    name = study_name or f"{evalset.name}-{metric}"
    run: dict[str, dict[str, float]] = {}

    def tune(train: list[str]) -> FoldConfig:
        held_out = set(ids) - set(train)
        fold = next(i for i, members in enumerate(folds) if set(members) == held_out)
        study = run_study(
            dataset,
            trials=trials,
            storage=storage,
            study_name=f"{name}-fold{fold + 1}of{k}",
            run_dir=run_dir,
            metric=metric,
            seed=seed,
            max_index_configs=max_index_configs,
            base_index=base_index,
            space=space,
            evaluator=evaluator,
            workers=workers,
            split=split,
            query_ids=train,
            callbacks=callbacks,
        )
        return _chosen_config(study, fold + 1)

    def score(config: FoldConfig, fold_ids: list[str]) -> dict[str, float]:
        fold_run = out_of_fold_run(
            evaluator, [fold_ids], [(config.search, IndexConfig.from_dict(config.index))], split
        )
        run.update(fold_run)
        return score_run(evaluator, fold_run, split, metric)[0]

    result = nested_cv(ids, tune, score, k=k)
    return _cross_validation_record(
        evaluator, result, run, ids, trials=trials, metric=metric, test=test, base_index=base_index
    )
