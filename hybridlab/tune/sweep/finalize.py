"""The sweep's record: the study's best trial and the baselines scored on the report split (out of
fold on a cross-validated set), compared with the defaults, per query kind where queries have kinds;
and the out-of-sample figures a reproduction condition records."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hybridlab.config import IndexConfig
from hybridlab.errors import InvalidValueError
from hybridlab.eval.evalsets import EvalSet
from hybridlab.eval.evaluator import BASELINES, Evaluator
from hybridlab.eval.significance import PairedTest, paired_test
from hybridlab.eval.systems import per_kind
from hybridlab.tune.engine import engine_state
from hybridlab.tune.export import DEFAULT_TEST, MAX_P, describe_test, measure_settings
from hybridlab.tune.record import (
    BestTrial,
    CrossValidationRecord,
    DefaultsRecord,
    KindFigure,
    SweepRecord,
    TrialCounts,
    per_kind_from_json,
)
from hybridlab.tune.sweep.objective import DEFAULT_METRIC, tuning_split


def query_kinds(
    evalset: EvalSet, per_query: Mapping[str, Mapping[str, float]]
) -> dict[str, dict[str, KindFigure]] | None:
    """{system: {kind: figure}} of one metric's per-query values, or None when the set's queries
    carry no `metadata.kind` (the BEIR sets)."""
    kinds = {
        system: per_kind(evalset.queries_path, values, evalset.kinds) for system, values in per_query.items()
    }
    if all(set(by_kind) <= {"-"} for by_kind in kinds.values()):
        return None
    return per_kind_from_json(kinds)


@dataclass(frozen=True)
class _TunedScore:
    """The tuned side of a sweep's record: its per-query values and metrics (the best trial's config
    on the report split; the tuning procedure's out-of-fold scores on a cross-validated set), and
    whether, by `comparison`, it beats the defaults, said in one sentence (`verdict`)."""

    per_query: dict[str, float]
    metrics: dict[str, float]
    beats: bool
    verdict: str
    comparison: PairedTest

    @classmethod
    def out_of_fold(cls, cv: CrossValidationRecord) -> _TunedScore:
        """The tuning procedure's scores of a nested cross-validation
        (:func:`~hybridlab.tune.sweep.crossval.cross_validate`)."""
        return cls(
            dict(cv.tuned.per_query), dict(cv.tuned.metrics), cv.significant, cv.verdict, cv.comparison
        )


def _tuned_on_report(
    evaluator: Evaluator,
    search: dict[str, Any],
    config: IndexConfig,
    report_ids: Sequence[str],
    defaults: Mapping[str, float],
    defaults_test: Mapping[str, float],
    *,
    metric: str,
) -> _TunedScore:
    """The tuned config (`search` on an index of `config`) scored on the report split's queries
    `report_ids`, and a paired DEFAULT_TEST of it against the defaults' per-query values (it beats
    them at p < MAX_P with a higher mean)."""
    tuning, report = tuning_split(evaluator.evalset), evaluator.evalset.report_split
    per_query, test = measure_settings(evaluator, search, config, report, report_ids, metric)
    outcome = paired_test(per_query, defaults, DEFAULT_TEST)
    beats = outcome.p_value < MAX_P and outcome.difference > 0
    verdict = (
        f"the tuned config {'beats' if beats else 'does NOT significantly beat'} the defaults on the "
        f"{report} split ({len(report_ids)} queries; tuned on {tuning}, "
        f"{len(evaluator.dataset(tuning).queries)} queries) {metric}: {test[metric]:.4f} vs "
        f"{defaults_test[metric]:.4f} ({describe_test(DEFAULT_TEST)} p = {outcome.p_value:.4g})"
    )
    return _TunedScore(per_query, test, beats, verdict, outcome)


def _defaults_on_tuning(
    study, evaluator: Evaluator, base_index: IndexConfig, tuning: str
) -> dict[str, float]:
    """The defaults' metrics on the tuning split: those of the study's enqueued defaults trial when
    it completed on `base_index`, else measured now."""
    enqueued = [
        t
        for t in study.trials
        if t.user_attrs.get("defaults")
        and t.state.name == "COMPLETE"
        and t.user_attrs.get("index") == base_index.to_dict()
    ]
    return enqueued[0].user_attrs["metrics"] if enqueued else evaluator.score({}, base_index, tuning)


def finalize(
    study,
    evaluator: Evaluator,
    *,
    metric: str = DEFAULT_METRIC,
    base_index: IndexConfig | None = None,
    cv: CrossValidationRecord | None = None,
) -> SweepRecord:
    """The sweep's record (:class:`~hybridlab.tune.record.SweepRecord`): the best trial of `study`
    (tuned on the set's tuning split) and the defaults, BM25 and vector search scored on the report
    split, with a paired test of tuned vs defaults, per query kind where the queries have kinds. A
    cross-validated set needs `cv` (:func:`~hybridlab.tune.sweep.crossval.cross_validate`): its
    "test" figures are then the tuning procedure's out-of-fold scores, and `study` (tuned on every
    query) gives the config an export serves only when the nested CV is significant. `dev_*` = the
    tuning split (`tuned_on`), `test_*` = the report split (`split`)."""
    evalset = evaluator.evalset
    tuning, report = tuning_split(evalset), evalset.report_split
    if evalset.cross_validated and cv is None:
        raise InvalidValueError(f"{evalset.name} is cross-validated: pass cv=cross_validate(...) to finalize")
    best = study.best_trial
    base_index = base_index or IndexConfig()
    search = dict(best.user_attrs["search"])
    config = IndexConfig.from_manifest(best.user_attrs["index"])
    report_ids = sorted(evaluator.dataset(report).queries)
    per_query: dict[str, dict[str, float]] = {"tuned": {}}  # the tuned column first
    baselines: dict[str, dict[str, float]] = {}
    for name, options in BASELINES.items():
        per_query[name], baselines[name] = measure_settings(
            evaluator, options, base_index, report, report_ids, metric
        )
    tuned = (
        _tuned_on_report(
            evaluator, search, config, report_ids, per_query["defaults"], baselines["defaults"], metric=metric
        )
        if cv is None
        else _TunedScore.out_of_fold(cv)
    )
    per_query["tuned"] = tuned.per_query
    defaults_dev = _defaults_on_tuning(study, evaluator, base_index, tuning)
    return SweepRecord(
        dataset=evaluator.evalset.name,
        metric=metric,
        split=report,
        tuned_on=tuning,
        now=evaluator.evalset.now,
        study=study.study_name,
        trials=TrialCounts(
            complete=sum(t.state.name == "COMPLETE" for t in study.trials),
            pruned=sum(t.state.name == "PRUNED" for t in study.trials),
        ),
        queries={tuning: len(evaluator.dataset(tuning).queries), report: len(report_ids)},
        best=BestTrial(
            trial=best.number,
            params=best.params,
            dev_value=best.value,
            dev_metrics=best.user_attrs.get("metrics"),
            search=search,
            index=config.to_dict(),
            test_metrics=tuned.metrics,
        ),
        defaults=DefaultsRecord(index=base_index.to_dict(), dev_metrics=defaults_dev),
        baselines=baselines,
        comparison=tuned.comparison,
        per_kind=query_kinds(evalset, per_query),
        cross_validation=cv,
        beats_defaults=tuned.beats,
        verdict=tuned.verdict,
        engine=engine_state(),
    )


def out_of_sample_figures(record: SweepRecord) -> dict[str, Any]:
    """A sweep's out-of-sample figures, as `{"queries", "metrics"}` (what `hybridlab eval --json`
    prints, so a reproduction condition can record them): the tuning procedure's out-of-fold
    metrics on a cross-validated set (with `<metric>_low`/`_high`, its 95% interval), else the tuned
    config's on the report split; with `defaults_<metric>` (the defaults on the same queries),
    `p_value` (the paired test) and, where the queries have kinds, `<metric>[<kind>]` of the tuned (out-of-fold) runs per kind."""
    metric, comparison, cv = record.metric, record.comparison, record.cross_validation
    if comparison is None:
        raise InvalidValueError(f"the sweep record of {record.dataset} holds no comparison with the defaults")
    figures = {**record.tuned_metrics, f"defaults_{metric}": comparison.mean_b, "p_value": comparison.p_value}
    if cv:  # the out-of-fold mean's 95% interval
        figures.update({f"{metric}_low": cv.tuned.interval.low, f"{metric}_high": cv.tuned.interval.high})
    for kind, value in sorted(((record.per_kind or {}).get("tuned") or {}).items()):
        if kind != "-":
            figures[f"{metric}[{kind}]"] = value.mean
    return {"queries": comparison.n, "metrics": figures}
