"""Configurations you can serve, exported from a sweep only when they beat the defaults out of sample.

See docs/internals/tune-eval.md#exported-configs (the gate and the document's fields).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hybridlab.config import (
    SEARCH_FIELDS,
    IndexConfig,
    load_config_file,
    resolve_auto,
    resolve_search_config,
    with_added_settings,
)
from hybridlab.errors import InvalidValueError
from hybridlab.eval.datasets import REPO_ROOT, split_query_ids
from hybridlab.eval.evalsets import CROSS_VALIDATED, EvalSet, get_evalset
from hybridlab.eval.evaluate import METRICS, score, score_per_query
from hybridlab.eval.evaluator import EVAL_LIMIT, Evaluator, resolve_evalset
from hybridlab.eval.significance import (
    DEFAULT_PERMUTATIONS,
    DEFAULT_SEED,
    Interval,
    PairedTest,
    holm,
    mean_ci,
    paired_test,
)
from hybridlab.index.format.graph import graph_size
from hybridlab.tune.engine import git
from hybridlab.tune.record import BestTrial, Candidate, CrossValidationRecord, FoldConfig, SweepRecord

DEFAULT_TOLERANCE = 0.0005
MAX_P = 0.05  # significance level of the export gate, after Holm's correction
DEFAULT_TEST = "randomization"
#: Sets the shipped defaults were chosen on: their figures there are in sample, said next to them.
DEFAULTS_FITTED_ON = {
    "memories": (
        "the shipped defaults (tag_weight, decay, recency_weight, convex fusion) were themselves chosen "
        "on these memories queries (2026-11-22), so the defaults' figure here is in sample"
    ),
}


def package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("hybridlab")
    except PackageNotFoundError:
        return "unknown"


def git_commit(repo: Path = REPO_ROOT) -> str | None:
    """HEAD's commit (with `+dirty` when the tree has changes), or None outside git."""
    commit = git("rev-parse", "HEAD", repo=repo)
    dirty = (git("status", "--porcelain", "--untracked-files=no", repo=repo) or "").strip()
    return None if commit is None else commit.strip() + ("+dirty" if dirty else "")


def _now_utc() -> str:
    return dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


# ------------------------------------------------------------------ pinning
def pinned_search(search: Mapping[str, Any], n_chunks: int) -> dict[str, Any]:
    """Every SearchConfig field as the engine resolves it today on an index of `n_chunks`: unset ones
    from the defaults, adaptive `alpha` and auto `staged`/`fill_dense` decided (no env, no config
    file), `candidates` at least the evaluation depth (see `full_search_config`)."""
    settings = {k: v for k, v in search.items() if v is not None}
    config, _ = resolve_search_config(settings, config_file=None, env={}, n_chunks=n_chunks)
    resolved = dataclasses.asdict(resolve_auto(config, n_chunks))
    resolved["candidates"] = max(resolved["candidates"], EVAL_LIMIT)
    return resolved


def pinned_index(config: IndexConfig, n_vectors: int) -> IndexConfig:
    """`config` with its auto corpus-graph size (`graph_k=None`) decided for `n_vectors`."""
    return dataclasses.replace(config, graph_k=graph_size(config.graph_k, n_vectors))


@dataclasses.dataclass(frozen=True)
class Pinned:
    """Settings to evaluate and export: a candidate's name (trial), its pinned search and index."""

    name: str
    trial: int | None
    search: dict[str, Any]
    index: IndexConfig


def pin(
    evaluator: Evaluator, name: str, trial: int | None, search: Mapping[str, Any], index: IndexConfig
) -> Pinned:
    """`search` (its SearchConfig fields) and `index` pinned for the index they build."""
    n_chunks = evaluator.index(index).n_chunks
    search = {k: v for k, v in search.items() if k in SEARCH_FIELDS}
    return Pinned(name, trial, pinned_search(search, n_chunks), pinned_index(index, n_chunks))


# ------------------------------------------------------------------ which queries are out of sample
def record_evalset(dataset: str, dataset_path: str | None = None, now: str | None = None) -> EvalSet:
    """The evaluation set a sweep record or an exported config names: `dataset` (its declared splits
    when it is a named set), the BEIR folder `dataset_path` when given, with the record's fixed `now`."""
    evalset = resolve_evalset(dataset_path) if dataset_path else get_evalset(dataset)
    if now != evalset.now:
        evalset = dataclasses.replace(evalset, now=now)
    return evalset


def tuned_on_ids(record: SweepRecord, evaluator: Evaluator) -> set[str]:
    """The queries a sweep was tuned on: `tuned_on_queries` when recorded, else the split it names.
    An older record's `dev` was the sha1 half of the test judgements even where the set now has an
    official train split (SciFact before 2026-11-25): its recorded query count tells them apart."""
    if record.tuned_on_queries is not None:
        return set(record.tuned_on_queries)
    name = record.tuned_on
    if name == CROSS_VALIDATED:
        raise InvalidValueError(
            "a cross-validated sweep is exported from its out-of-fold scores, which this record does not hold"
        )
    recorded = (record.queries or {}).get(name)
    current = set(evaluator.dataset(name).queries)
    if recorded is None or recorded == len(current):
        return current
    if name in {"dev", "test"}:
        legacy = set(split_query_ids(evaluator.dataset("all").qrels, name))
        if len(legacy) == recorded:
            return legacy
    raise InvalidValueError(
        f"cannot tell which queries the sweep was tuned on: it records {recorded} {name!r} "
        f"queries, the {name!r} split has {len(current)} today"
    )


def out_of_sample_ids(record: SweepRecord, evaluator: Evaluator) -> list[str]:
    """The report split's queries the sweep did not tune on (sorted)."""
    split = evaluator.evalset.report_split
    ids = sorted(set(evaluator.dataset(split).queries) - tuned_on_ids(record, evaluator))
    if not ids:
        raise InvalidValueError(
            f"the sweep was tuned on every query of the report split {split!r}: nothing out of sample"
        )
    return ids


# ------------------------------------------------------------------ measuring
def subset_run(
    evaluator: Evaluator, search: Mapping[str, Any], index: IndexConfig, split: str, query_ids: Sequence[str]
) -> dict[str, dict[str, float]]:
    """The run of these settings restricted to `query_ids` of `split` (a query without results maps
    to an empty ranking)."""
    run = evaluator.run(search, index, split)
    return {q: run.get(q, {}) for q in query_ids}


def score_run(
    evaluator: Evaluator, run: Mapping[str, Mapping[str, float]], split: str, metric: str
) -> tuple[dict[str, float], dict[str, float]]:
    """(per-query `metric`, mean of every metric) of a run over exactly its queries of `split`."""
    qrels = evaluator.dataset(split).qrels
    subset = {q: qrels[q] for q in run}
    metrics = list(dict.fromkeys([*METRICS, metric]))
    return score_per_query(subset, dict(run), [metric])[metric], score(subset, dict(run), metrics)


def measure_settings(
    evaluator: Evaluator,
    search: Mapping[str, Any],
    index: IndexConfig,
    split: str,
    query_ids: Sequence[str],
    metric: str,
) -> tuple[dict[str, float], dict[str, float]]:
    """(per-query `metric`, mean of every metric) of settings over `query_ids` of `split`."""
    return score_run(evaluator, subset_run(evaluator, search, index, split, query_ids), split, metric)


def measure(
    evaluator: Evaluator, pinned: Pinned, split: str, query_ids: Sequence[str], metric: str
) -> tuple[dict[str, float], dict[str, float]]:
    """(per-query `metric`, mean of every metric) of pinned settings over `query_ids` of `split`."""
    return measure_settings(evaluator, pinned.search, pinned.index, split, query_ids, metric)


def out_of_fold_run(
    evaluator: Evaluator,
    folds: Sequence[Sequence[str]],
    settings: Sequence[tuple[Mapping[str, Any], IndexConfig]],
    split: str = CROSS_VALIDATED,
) -> dict[str, dict[str, float]]:
    """Nested cross-validation's run: each fold's queries ranked by the config chosen for that fold
    (`settings[i]` = its (search settings, index config), tuned without fold i's queries)."""
    if len(folds) != len(settings):
        raise InvalidValueError(f"{len(folds)} folds but {len(settings)} fold configs")
    run: dict[str, dict[str, float]] = {}
    for fold, (search, index) in zip(folds, settings):
        run.update(subset_run(evaluator, search, index, split, fold))
    return run


def _pin_entry(evaluator: Evaluator, name: str, entry: BestTrial | Candidate | FoldConfig) -> Pinned:
    """A record's trial with its settings (the best trial, a candidate, a fold's config) pinned as `name`."""
    return pin(evaluator, name, entry.trial, entry.search, IndexConfig.from_dict(entry.index))


def _candidate_rows(
    candidates: Sequence[Pinned],
    measured: Sequence[tuple[dict[str, float], dict[str, float]]],
    tests: Sequence[PairedTest],
    max_p: float,
) -> list[dict[str, Any]]:
    """One row per candidate: its metrics, its paired test against the defaults, the Holm-corrected
    p-value of that test among all the candidates', and whether it beats the defaults (corrected
    p < `max_p`, a higher mean)."""
    adjusted = holm([t.p_value for t in tests])
    return [
        {
            "name": c.name,
            "trial": c.trial,
            "test_metrics": metrics,
            **t.to_dict(),
            "p_holm": p,
            "significant": p < max_p and t.difference > 0,
        }
        for c, (_, metrics), t, p in zip(candidates, measured, tests, adjusted)
    ]


def _export_verdict(
    rows: Sequence[Mapping[str, Any]],
    chosen: int | None,
    *,
    metric: str,
    split: str,
    query_ids: Sequence[str],
    split_size: int,
    test: str,
    max_p: float,
) -> str:
    """One sentence on what was exported and why: the chosen candidate (else the best-scoring one)
    against the defaults on the out-of-sample queries, with its raw and corrected p-values."""
    top = rows[chosen] if chosen is not None else max(rows, key=lambda r: r["mean_a"])
    scope = f"{len(query_ids)} out-of-sample queries of the report split {split!r}" + (
        f" ({split_size - len(query_ids)} the sweep tuned on left out)" if len(query_ids) < split_size else ""
    )
    correction = f"Holm over {len(rows)} candidates" if len(rows) > 1 else "1 candidate"
    outcome = "exported the tuned config" if chosen is not None else "kept the defaults"
    return (
        f"{outcome}: {top['name']} {'beats' if chosen is not None else 'does not significantly beat'} "
        f"the defaults on {metric} over {scope}: {top['mean_a']:.4f} vs {top['mean_b']:.4f} "
        f"({describe_test(test)} p = {top['p_value']:.4g}, corrected {top['p_holm']:.4g}, {correction}, "
        f"threshold {max_p})"
    )


def export_config(
    run_dir: str | os.PathLike,
    *,
    test: str = DEFAULT_TEST,
    max_p: float = MAX_P,
    permutations: int = DEFAULT_PERMUTATIONS,
    evaluator: Evaluator | None = None,
) -> dict[str, Any]:
    """The config document to serve from a finished sweep run: its winner when it beats the
    defaults out of sample and significantly, else the defaults with the verdict (docs/internals/tune-eval.md).

    Candidates are the record's `candidates` (`[{trial, search, index}]`) when it lists several,
    else its best trial; their p-values are Holm-corrected together."""
    run_dir = Path(run_dir)
    record = SweepRecord.read(run_dir)
    evaluator = evaluator or Evaluator(record_evalset(record.dataset, record.dataset_path, record.now))
    if record.cross_validation:
        return export_cross_validated(
            run_dir, record, evaluator, test=test, max_p=max_p, permutations=permutations
        )
    evalset = evaluator.evalset
    metric, split = record.metric, evalset.report_split
    query_ids = out_of_sample_ids(record, evaluator)

    listed: Sequence[BestTrial | Candidate] = record.candidates or [record.best]
    defaults = pin(evaluator, "defaults", None, {}, record.defaults_index)
    candidates = [_pin_entry(evaluator, f"trial {c.trial}", c) for c in listed]

    defaults_per_query, defaults_metrics = measure(evaluator, defaults, split, query_ids, metric)
    measured = [measure(evaluator, c, split, query_ids, metric) for c in candidates]
    tests = [
        paired_test(per_query, defaults_per_query, test, **_test_options(test, permutations))
        for per_query, _ in measured
    ]
    rows = _candidate_rows(candidates, measured, tests, max_p)
    winners = [i for i, row in enumerate(rows) if row["significant"]]
    chosen = max(winners, key=lambda i: rows[i]["mean_a"]) if winners else None
    exported = candidates[chosen] if chosen is not None else defaults
    exported_metrics = measured[chosen][1] if chosen is not None else defaults_metrics
    verdict = _export_verdict(
        rows,
        chosen,
        metric=metric,
        split=split,
        query_ids=query_ids,
        split_size=len(evaluator.dataset(split).queries),
        test=test,
        max_p=max_p,
    )
    return _document(
        run_dir,
        record,
        evaluator,
        exported,
        chosen is not None,
        split,
        query_ids,
        record.tuned_on,
        exported_metrics,
        defaults_metrics,
        verdict,
        rows,
        {"test": test, "max_p": max_p, "correction": "holm", "permutations": permutations},
    )


def _document(
    run_dir: Path,
    record: SweepRecord,
    evaluator: Evaluator,
    exported: Pinned,
    beats: bool,
    split: str,
    query_ids: Sequence[str],
    tuned_on: str,
    exported_metrics: Mapping[str, float],
    defaults_metrics: Mapping[str, float],
    verdict: str,
    candidates: list[dict[str, Any]],
    significance: Mapping[str, Any],
    scope: str | None = None,
    cross_validation: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The exported config document: `exported`'s settings and the provenance of the verdict."""
    metric, best = record.metric, record.best
    return {
        "search": exported.search,
        "index": exported.index.to_dict(),
        "provenance": {
            "dataset": record.dataset,
            "dataset_path": record.dataset_path,
            "now": evaluator.evalset.now,
            "split": split,
            "query_ids": list(query_ids),
            "queries": len(query_ids),
            "tuned_on": tuned_on,
            "metric": metric,
            "exported": "tuned" if beats else "defaults",
            "trial": exported.trial,
            "test_metrics": exported_metrics,
            "test_value": exported_metrics[metric],
            **({"test_metrics_scope": scope} if scope else {}),
            "defaults_test_metrics": defaults_metrics,
            "beats_defaults": beats,
            "verdict": verdict,
            "significance": {**significance, "seed": DEFAULT_SEED},
            "candidates": candidates,
            **({"cross_validation": cross_validation} if cross_validation else {}),
            "sweep": {
                "run": run_dir.name,
                "study": record.study,
                "best_trial": best.trial,
                "dev_value": best.dev_value,
                "test_metrics": best.test_metrics,
                "verdict": record.verdict,
            },
            "eval_limit": EVAL_LIMIT if record.eval_limit is None else record.eval_limit,
            "package_version": package_version(),
            "git_commit": git_commit(),
            "date": _now_utc(),
        },
    }


def _test_options(test: str, permutations: int) -> dict[str, int]:
    return {"permutations": permutations, "seed": DEFAULT_SEED} if test == "randomization" else {}


def describe_test(test: str) -> str:
    """`randomization test`, `t-test`: a test's name for a sentence."""
    return test if test.endswith("test") else f"{test} test"


def _check_folds_cover(record: SweepRecord, folds: Sequence[Sequence[str]], query_ids: list[str]) -> None:
    """ValueError unless the record's folds partition today's queries of the set."""
    if sorted(q for fold in folds for q in fold) != query_ids:
        raise InvalidValueError(
            f"the record's {len(folds)} folds do not cover today's {len(query_ids)} queries of "
            f"{record.dataset}: re-run the sweep"
        )


@dataclasses.dataclass(frozen=True)
class _OutOfFold:
    """A cross-validated sweep re-run now: the tuning procedure's out-of-fold scores (each fold's
    queries ranked by the config tuned without them, `fold_configs`), the defaults' on the same
    queries, and their paired test (`significant`: p < max_p and a higher mean)."""

    folds: list[list[str]]
    fold_configs: list[Pinned]
    tuned_metrics: dict[str, float]
    tuned_ci: Interval
    defaults: Pinned
    defaults_metrics: dict[str, float]
    defaults_ci: Interval
    outcome: PairedTest
    significant: bool

    def scope(self, metric: str, trials_per_fold: int, test: str, max_p: float) -> str:
        """The comparison in words: both means with their 95% intervals, and the test."""
        tuned_ci, defaults_ci = self.tuned_ci, self.defaults_ci
        return (
            f"nested {len(self.folds)}-fold cross-validation over {sum(map(len, self.folds))} queries "
            f"({trials_per_fold} trials per fold): out-of-fold {metric} {tuned_ci.mean:.4f} "
            f"[{tuned_ci.low:.4f}, {tuned_ci.high:.4f}] vs "
            f"defaults {defaults_ci.mean:.4f} [{defaults_ci.low:.4f}, {defaults_ci.high:.4f}] "
            f"({describe_test(test)} p = {self.outcome.p_value:.4g}, threshold {max_p})"
        )

    def provenance(self, trials_per_fold: int) -> dict[str, Any]:
        """The exported document's `cross_validation` record."""
        return {
            "k": len(self.folds),
            "trials_per_fold": trials_per_fold,
            "folds": self.folds,
            "fold_trials": [c.trial for c in self.fold_configs],
            "tuned": {"metrics": self.tuned_metrics, **self.tuned_ci.to_dict()},
            "defaults": {"metrics": self.defaults_metrics, **self.defaults_ci.to_dict()},
            "test": self.outcome.to_dict(),
        }


def _rerun_out_of_fold(
    evaluator: Evaluator,
    record: SweepRecord,
    cv: CrossValidationRecord,
    folds: list[list[str]],
    query_ids: Sequence[str],
    *,
    test: str,
    max_p: float,
    permutations: int,
) -> _OutOfFold:
    """Re-run the record's fold configs on their folds' queries and the defaults on every query, and
    compare them per query with a paired `test`."""
    metric, split = record.metric, CROSS_VALIDATED
    fold_configs = [_pin_entry(evaluator, f"fold {i + 1}", c) for i, c in enumerate(cv.configs)]
    run = out_of_fold_run(evaluator, folds, [(c.search, c.index) for c in fold_configs], split)
    tuned_per_query, tuned_metrics = score_run(evaluator, run, split, metric)
    defaults = pin(evaluator, "defaults", None, {}, record.defaults_index)
    defaults_per_query, defaults_metrics = measure(evaluator, defaults, split, query_ids, metric)
    outcome = paired_test(tuned_per_query, defaults_per_query, test, **_test_options(test, permutations))
    return _OutOfFold(
        folds=folds,
        fold_configs=fold_configs,
        tuned_metrics=tuned_metrics,
        tuned_ci=mean_ci([tuned_per_query[q] for q in query_ids]),
        defaults=defaults,
        defaults_metrics=defaults_metrics,
        defaults_ci=mean_ci([defaults_per_query[q] for q in query_ids]),
        outcome=outcome,
        significant=outcome.p_value < max_p and outcome.difference > 0,
    )


def export_cross_validated(
    run_dir: Path,
    record: SweepRecord,
    evaluator: Evaluator,
    *,
    test: str = DEFAULT_TEST,
    max_p: float = MAX_P,
    permutations: int = DEFAULT_PERMUTATIONS,
) -> dict[str, Any]:
    """The config to serve from a cross-validated sweep (memories, holoviz). Nested k-fold CV scores
    the tuning *procedure* out of sample: each fold's queries ranked by the config tuned without
    them. The fold configs and the defaults are re-run now, and compared per query with a paired
    test (one comparison: no correction needed). The config tuned on all queries (the record's
    `best`) is exported only when the procedure beats the defaults significantly (p < `max_p`, a
    higher mean); otherwise the defaults, with the verdict. `test_metrics` is what `repro` re-runs:
    the exported config on every query (in sample for a tuned config; its out-of-sample estimate is
    `cross_validation.tuned`)."""
    cv = record.cross_validation
    if cv is None:
        raise InvalidValueError(f"the sweep of {record.dataset} was not cross-validated")
    metric, split = record.metric, CROSS_VALIDATED
    query_ids = sorted(evaluator.dataset(split).queries)
    folds = [list(fold) for fold in cv.folds]
    _check_folds_cover(record, folds, query_ids)
    compared = _rerun_out_of_fold(
        evaluator, record, cv, folds, query_ids, test=test, max_p=max_p, permutations=permutations
    )
    significant, defaults_metrics = compared.significant, compared.defaults_metrics

    best = record.best
    final = _pin_entry(evaluator, f"trial {best.trial}", best)
    exported = final if significant else compared.defaults
    exported_metrics = (
        measure(evaluator, final, split, query_ids, metric)[1] if significant else defaults_metrics
    )
    scope = compared.scope(metric, cv.trials_per_fold, test, max_p)
    verdict = (
        f"exported the config tuned on all queries (trial {best.trial}): the tuning procedure beats the "
        f"defaults in {scope}"
        if significant
        else f"kept the defaults: the tuning procedure does not significantly beat the defaults in {scope}"
    )
    if record.dataset in DEFAULTS_FITTED_ON:
        verdict += f"; {DEFAULTS_FITTED_ON[record.dataset]}"
    row = {
        "name": f"nested {len(folds)}-fold CV",
        "trial": best.trial,
        "test_metrics": compared.tuned_metrics,
        **compared.outcome.to_dict(),
        "p_holm": compared.outcome.p_value,
        "significant": significant,
    }
    metrics_scope = (
        "in sample (the exported config was tuned on these queries; its out-of-sample estimate is "
        "cross_validation.tuned)"
        if significant
        else "the defaults on every query (untuned by this sweep)"
    )
    return _document(
        run_dir,
        record,
        evaluator,
        exported,
        significant,
        split,
        query_ids,
        CROSS_VALIDATED,
        exported_metrics,
        defaults_metrics,
        verdict,
        [row],
        {"test": test, "max_p": max_p, "correction": "none (one comparison)", "permutations": permutations},
        metrics_scope,
        compared.provenance(cv.trials_per_fold),
    )


def write_config(config: Mapping[str, Any], path: str | os.PathLike) -> Path:
    """Write a config document as pretty JSON (creating the folder) and check it loads back."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    load_config_file(path)
    return path


def repro(
    config: Mapping[str, Any], tolerance: float = DEFAULT_TOLERANCE
) -> list[tuple[str, float, float, bool]]:
    """Re-run the evaluation a config records: its dataset's split (only its `query_ids` when it
    lists them), its exact index and search settings (as arguments, so env variables cannot change
    them), its fixed `now`. Returns (metric, recorded, measured, ok) per recorded test metric."""
    provenance = config.get("provenance") or {}
    if "dataset" not in provenance or "test_metrics" not in provenance:
        raise InvalidValueError("the config has no provenance.dataset / provenance.test_metrics to reproduce")
    evaluator = Evaluator(
        record_evalset(provenance["dataset"], provenance.get("dataset_path"), provenance.get("now"))
    )
    split = provenance.get("split", "test")
    recorded = provenance["test_metrics"]
    search, index = with_added_settings(config["search"]), IndexConfig.from_manifest(config["index"])
    if provenance.get("query_ids"):
        query_ids = provenance["query_ids"]
        run = evaluator.run(search, index, split)
        qrels = evaluator.dataset(split).qrels
        measured = score(
            {q: qrels[q] for q in query_ids}, {q: run.get(q, {}) for q in query_ids}, list(recorded)
        )
    else:
        measured = evaluator.score(search, index, split, metrics=list(recorded))
    return [
        (m, float(recorded[m]), measured[m], abs(measured[m] - float(recorded[m])) <= tolerance)
        for m in recorded
    ]
