"""The sweep record: `metrics.json` of a sweep run folder (`reports/<date>-sweep-<set>/`), what
:func:`hybridlab.tune.sweep.finalize.finalize` measured and the sweep notebook writes, and what
`export-config`, the summary, the report and the staleness check read back. This module is its only
parser and writer: the others take a :class:`SweepRecord` and read its parts as attributes.

The file's layout is a contract with every run folder already under `reports/`: keys keep their
historical names (`dev_*` = the tuning split `tuned_on`, `test_*` = the report split `split`) and
their historical order, so a record read and written back is the same file byte for byte. A
top-level key this module does not know is kept (`extra`) and written back after the known ones.
Maps keyed by data (metric names, splits, systems, query kinds, query ids) stay maps; the parts
with a fixed set of keys are the frozen records below."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from hybridlab.config import IndexConfig
from hybridlab.errors import PathNotFoundError
from hybridlab.eval.significance import Interval, PairedTest

#: the record's file in a sweep run folder
RECORD_FILE = "metrics.json"

#: `{metric: mean}`
Metrics = Mapping[str, float]


def _shallow(record: Any) -> dict[str, Any]:
    """A flat record's fields in declaration order (the order its JSON keys have on disk)."""
    return {f.name: getattr(record, f.name) for f in fields(record)}


@dataclass(frozen=True)
class BestTrial:
    """The study's best trial: its number, Optuna parameters, value on the tuning split
    (`dev_value`, with every metric there in `dev_metrics`), the search settings and index config it
    ran (`index` as `IndexConfig.to_dict` wrote it, kept as written: :attr:`index_config` reads it)
    and its metrics on the report split (`test_metrics`; out of fold on a cross-validated set)."""

    trial: int | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    dev_value: float | None = None
    dev_metrics: Metrics | None = None
    search: Mapping[str, Any] = field(default_factory=dict)
    index: Mapping[str, Any] = field(default_factory=dict)
    test_metrics: Metrics = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BestTrial:
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})

    def to_json(self) -> dict[str, Any]:
        return _shallow(self)

    @property
    def index_config(self) -> IndexConfig:
        return IndexConfig.from_manifest(self.index)


@dataclass(frozen=True)
class Candidate:
    """One configuration an export weighs against the defaults (a record's `candidates` entry):
    its trial, search settings and index config (as `IndexConfig.to_dict` wrote it)."""

    trial: int | None
    search: Mapping[str, Any]
    index: Mapping[str, Any]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Candidate:
        return cls(data.get("trial"), data["search"], data["index"])

    def to_json(self) -> dict[str, Any]:
        return _shallow(self)


@dataclass(frozen=True)
class DefaultsRecord:
    """The package defaults a sweep compared against: the index config they ran on (the sweep's
    base index, as `IndexConfig.to_dict` wrote it) and their metrics on the tuning split."""

    index: Mapping[str, Any]
    dev_metrics: Metrics

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DefaultsRecord:
        return cls(data["index"], data["dev_metrics"])

    def to_json(self) -> dict[str, Any]:
        return _shallow(self)


@dataclass(frozen=True)
class TrialCounts:
    """How many trials of the main study completed and how many were pruned (index-config cap,
    repeated parameters, a full study)."""

    complete: int
    pruned: int

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TrialCounts:
        return cls(data["complete"], data["pruned"])

    def to_json(self) -> dict[str, Any]:
        return _shallow(self)


@dataclass(frozen=True)
class KindFigure:
    """One metric's mean over the queries of one kind (`metadata.kind`), and how many there are."""

    n: int
    mean: float

    def to_json(self) -> dict[str, Any]:
        return _shallow(self)


#: `{system: {kind: figure}}`, the systems in the order the record lists them
PerKind = Mapping[str, Mapping[str, KindFigure]]


def per_kind_from_json(
    data: Mapping[str, Mapping[str, Mapping[str, Any]]],
) -> dict[str, dict[str, KindFigure]]:
    """`{system: {kind: {"n", "mean"}}}` as records (what :func:`hybridlab.eval.systems.per_kind` gives)."""
    return {
        system: {kind: KindFigure(value["n"], value["mean"]) for kind, value in kinds.items()}
        for system, kinds in data.items()
    }


def per_kind_to_json(per_kind: PerKind) -> dict[str, dict[str, dict[str, Any]]]:
    """Per-kind figures as the record (and a report run's `metrics.json`) hold them."""
    return {system: {kind: v.to_json() for kind, v in kinds.items()} for system, kinds in per_kind.items()}


def comparison_from_json(data: Mapping[str, Any]) -> PairedTest:
    """A paired test as `PairedTest.to_dict` wrote it (its `difference` is recomputed, equal)."""
    return PairedTest(data["test"], data["n"], data["mean_a"], data["mean_b"], data["p_value"])


def _interval_from_json(data: Mapping[str, Any]) -> Interval:
    return Interval(data["mean"], data["low"], data["high"], data["confidence"], data["method"])


@dataclass(frozen=True)
class EngineState:
    """The engine a sweep's figures were measured on (:func:`hybridlab.tune.engine.engine_state`):
    the sha256 of its sources, the newest git commit touching them with its date, whether they had
    uncommitted changes (commit, date and dirty None outside git), and which paths it covers."""

    source_sha256: str
    commit: str | None
    date: str | None
    dirty: bool | None
    paths: tuple[str, ...]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EngineState:
        return cls(data["source_sha256"], data["commit"], data["date"], data["dirty"], tuple(data["paths"]))

    def to_json(self) -> dict[str, Any]:
        return {**_shallow(self), "paths": list(self.paths)}


@dataclass(frozen=True)
class FoldConfig:
    """What the study of one fold (numbered from 1) chose: its best trial with its parameters, its
    value on the other folds' queries (`tuning_value`), whether it was the enqueued defaults, and
    its search settings and index config (as `IndexConfig.to_dict` wrote it)."""

    fold: int
    study: str
    trial: int
    params: Mapping[str, Any]
    tuning_value: float
    defaults: bool
    search: Mapping[str, Any]
    index: Mapping[str, Any]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FoldConfig:
        return cls(**{f.name: data[f.name] for f in fields(cls)})

    def to_json(self) -> dict[str, Any]:
        return _shallow(self)


@dataclass(frozen=True)
class OutOfFoldScores:
    """One side of a nested cross-validation (the tuning procedure, or the defaults) on the same
    queries: its metrics, its mean on each fold's queries, the mean over all queries with its
    interval, and its per-query values of the cross-validation's metric."""

    metrics: Metrics
    fold_means: tuple[float, ...]
    interval: Interval
    per_query: Mapping[str, float]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> OutOfFoldScores:
        return cls(data["metrics"], tuple(data["fold_means"]), _interval_from_json(data), data["per_query"])

    def to_json(self) -> dict[str, Any]:
        return {
            "metrics": self.metrics,
            "fold_means": list(self.fold_means),
            **self.interval.to_dict(),
            "per_query": self.per_query,
        }


@dataclass(frozen=True)
class CrossValidationRecord:
    """A nested k-fold cross-validation of the tuning procedure
    (:func:`hybridlab.tune.sweep.crossval.cross_validate`): the folds, the config each fold's study
    chose without it, the tuning procedure's out-of-fold scores and the defaults' on the same
    queries, their paired test (`comparison`: a = tuned, b = defaults), whether the procedure beats
    the defaults (`significant`) and that said in one sentence (`verdict`)."""

    k: int
    trials_per_fold: int
    metric: str
    folds: tuple[tuple[str, ...], ...]
    configs: tuple[FoldConfig, ...]
    tuned: OutOfFoldScores
    defaults: OutOfFoldScores
    comparison: PairedTest
    significant: bool
    verdict: str

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CrossValidationRecord:
        return cls(
            k=data["k"],
            trials_per_fold=data["trials_per_fold"],
            metric=data["metric"],
            folds=tuple(tuple(fold) for fold in data["folds"]),
            configs=tuple(FoldConfig.from_json(c) for c in data["configs"]),
            tuned=OutOfFoldScores.from_json(data["tuned"]),
            defaults=OutOfFoldScores.from_json(data["defaults"]),
            comparison=comparison_from_json(data["comparison"]),
            significant=data["significant"],
            verdict=data["verdict"],
        )

    def to_json(self) -> dict[str, Any]:
        return {
            **_shallow(self),
            "folds": [list(fold) for fold in self.folds],
            "configs": [c.to_json() for c in self.configs],
            "tuned": self.tuned.to_json(),
            "defaults": self.defaults.to_json(),
            "comparison": self.comparison.to_dict(),
        }


def _optional(parse, value):
    return None if value is None else parse(value)


#: parsers of the top-level keys that hold a record (the rest are plain JSON values)
_PARSERS: dict[str, Any] = {
    "trials": TrialCounts.from_json,
    "best": BestTrial.from_json,
    "defaults": DefaultsRecord.from_json,
    "comparison": comparison_from_json,
    "per_kind": per_kind_from_json,
    "cross_validation": CrossValidationRecord.from_json,
    "engine": EngineState.from_json,
    "tuned_on_queries": tuple,
    "candidates": lambda entries: tuple(Candidate.from_json(c) for c in entries),
}
_WRITERS: dict[str, Any] = {
    "trials": TrialCounts.to_json,
    "best": BestTrial.to_json,
    "defaults": DefaultsRecord.to_json,
    "comparison": PairedTest.to_dict,
    "per_kind": per_kind_to_json,
    "cross_validation": CrossValidationRecord.to_json,
    "engine": EngineState.to_json,
    "tuned_on_queries": list,
    "candidates": lambda entries: [c.to_json() for c in entries],
}
#: keys written only when set: older and hand-made records name them, `finalize` never does
_WHEN_SET = ("tuned_on_queries", "candidates")


@dataclass(frozen=True)
class SweepRecord:
    """One sweep's record. `dataset` (with `dataset_path` for a BEIR folder) is tuned on `tuned_on`
    and reported on `split` with `metric`; `best` is the study's best trial, `defaults` the package
    defaults' index and tuning-split metrics, `baselines` each baseline's report-split metrics,
    `comparison` the paired test of tuned vs defaults, `per_kind` the metrics per query kind,
    `cross_validation` the nested cross-validation of a cross-validated set (None otherwise),
    `engine` the engine state the figures were measured on; `storage`, `workers`, `elapsed_s` and
    `eval_limit` are what the notebook adds. Its fields are declared in the file's key order."""

    dataset: str
    metric: str
    split: str = "test"
    tuned_on: str = "dev"
    now: str | None = None
    study: str | None = None
    trials: TrialCounts | None = None
    queries: Mapping[str, int] | None = None
    best: BestTrial = field(default_factory=BestTrial)
    defaults: DefaultsRecord | None = None
    baselines: Mapping[str, Metrics] = field(default_factory=dict)
    comparison: PairedTest | None = None
    per_kind: PerKind | None = None
    cross_validation: CrossValidationRecord | None = None
    beats_defaults: bool | None = None
    verdict: str | None = None
    engine: EngineState | None = None
    storage: str | None = None
    workers: int | None = None
    dataset_path: str | None = None
    elapsed_s: float | None = None
    eval_limit: int | None = None
    tuned_on_queries: tuple[str, ...] | None = None
    candidates: tuple[Candidate, ...] | None = None
    #: keys of the file this class does not name, written back as they were
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SweepRecord:
        """The record of a parsed `metrics.json`."""
        names = {f.name for f in fields(cls)} - {"extra"}
        values: dict[str, Any] = {
            name: _optional(_PARSERS.get(name, lambda v: v), data[name]) for name in names if name in data
        }
        values["best"] = BestTrial.from_json(data.get("best") or {})
        return cls(**values, extra={k: v for k, v in data.items() if k not in names})

    def to_json(self) -> dict[str, Any]:
        """The record as `metrics.json` holds it."""
        data: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "extra" or (f.name in _WHEN_SET and value is None):
                continue
            data[f.name] = _optional(_WRITERS.get(f.name, lambda v: v), value)
        return {**data, **self.extra}

    @classmethod
    def read(cls, run_dir: str | os.PathLike) -> SweepRecord:
        """The record of the finished sweep run in `run_dir`."""
        path = record_path(run_dir)
        if not path.is_file():
            raise PathNotFoundError(f"{path} not found: is {run_dir} a finished sweep run?")
        return cls.from_json(json.loads(path.read_text(encoding="utf-8")))

    def write(self, run_dir: str | os.PathLike) -> Path:
        """Write the record into `run_dir` (values JSON does not know, e.g. a numpy float, as text)."""
        path = record_path(run_dir)
        path.write_text(json.dumps(self.to_json(), indent=2, default=str), encoding="utf-8")
        return path

    @property
    def tuned_metrics(self) -> Metrics:
        """The tuned config's figures on the report split: the tuning procedure's out-of-fold
        metrics on a cross-validated set, else the best trial's."""
        return self.cross_validation.tuned.metrics if self.cross_validation else self.best.test_metrics

    @property
    def defaults_index(self) -> IndexConfig:
        """The index config the defaults ran on (the sweep's base index); a record without one
        names only the best trial's models."""
        if self.defaults is not None:
            return IndexConfig.from_dict(self.defaults.index)
        return IndexConfig.from_dict({"models": self.best.index.get("models", IndexConfig().models)})


def record_path(run_dir: str | os.PathLike) -> Path:
    """Where the record of the sweep run in `run_dir` is."""
    return Path(run_dir) / RECORD_FILE


def is_finished_sweep(run_dir: str | os.PathLike) -> bool:
    """Whether `run_dir` holds a record (the sweep finished)."""
    return record_path(run_dir).is_file()


def fold_settings(configs: Sequence[FoldConfig]) -> list[tuple[Mapping[str, Any], IndexConfig]]:
    """Each fold's chosen (search settings, index config), in fold order."""
    return [(c.search, IndexConfig.from_dict(c.index)) for c in configs]
