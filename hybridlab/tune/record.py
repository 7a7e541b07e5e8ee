"""The sweep record: `metrics.json` of a sweep run folder (`reports/<date>-sweep-<set>/`), what
:func:`hybridlab.tune.sweep.finalize` measured and the sweep notebook writes, and what
`export-config`, the summary, the report and the staleness check read back. This module is its only
reader: the others take a :class:`SweepRecord`.

Its keys keep their historical names: `dev_*` = the tuning split (`tuned_on`), `test_*` = the
report split (`split`). A key this module does not know is kept (`extra`) and written back."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from hybridlab.errors import PathNotFoundError

#: the record's file in a sweep run folder
RECORD_FILE = "metrics.json"


@dataclass(frozen=True)
class BestTrial:
    """The study's best trial: its number, Optuna parameters, value on the tuning split
    (`dev_value`, with every metric there in `dev_metrics`), the search settings and index config it
    ran (`index` as `IndexConfig.to_dict` writes it) and its metrics on the report split
    (`test_metrics`; out of fold on a cross-validated set)."""

    trial: int | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    dev_value: float | None = None
    dev_metrics: Mapping[str, float] | None = None
    search: Mapping[str, Any] = field(default_factory=dict)
    index: Mapping[str, Any] = field(default_factory=dict)
    test_metrics: Mapping[str, float] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BestTrial:
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class SweepRecord:
    """One sweep's record. `dataset` (with `dataset_path` for a BEIR folder) is tuned on `tuned_on`
    and reported on `split` with `metric`; `best` is the study's best trial, `defaults` the package
    defaults' index and tuning-split metrics, `baselines` each baseline's report-split metrics,
    `comparison` the paired test of tuned vs defaults (`PairedTest.to_dict`), `per_kind` the metrics
    per query kind, `cross_validation` the nested cross-validation of a cross-validated set (None
    otherwise), `engine` the engine state the figures were measured on (:func:`.runs.engine_state`);
    `storage`, `workers`, `elapsed_s` and `eval_limit` are what the notebook adds."""

    dataset: str
    metric: str
    best: BestTrial = field(default_factory=BestTrial)
    split: str = "test"
    tuned_on: str = "dev"
    verdict: str | None = None
    beats_defaults: bool | None = None
    now: str | None = None
    study: str | None = None
    storage: str | None = None
    dataset_path: str | None = None
    workers: int | None = None
    elapsed_s: float | None = None
    eval_limit: int | None = None
    trials: Mapping[str, int] | None = None
    queries: Mapping[str, int] | None = None
    tuned_on_queries: tuple[str, ...] | None = None
    candidates: tuple[Mapping[str, Any], ...] | None = None
    defaults: Mapping[str, Any] | None = None
    baselines: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    comparison: Mapping[str, Any] | None = None
    per_kind: Mapping[str, Any] | None = None
    cross_validation: Mapping[str, Any] | None = None
    engine: Mapping[str, Any] | None = None
    #: keys of the file this class does not name, written back as they were
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SweepRecord:
        """The record of a parsed `metrics.json` (or of :func:`~hybridlab.tune.sweep.finalize`'s dict)."""
        names = {f.name for f in fields(cls)} - {"extra"}
        values: dict[str, Any] = {name: data[name] for name in names if name in data}
        values["best"] = BestTrial.from_json(data.get("best") or {})
        if values.get("tuned_on_queries") is not None:
            values["tuned_on_queries"] = tuple(values["tuned_on_queries"])
        if values.get("candidates") is not None:
            values["candidates"] = tuple(values["candidates"])
        return cls(**values, extra={k: v for k, v in data.items() if k not in names})

    def to_json(self) -> dict[str, Any]:
        """The record as `metrics.json` holds it."""
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        data["best"] = self.best.to_json()
        for name in ("tuned_on_queries", "candidates"):
            if data[name] is not None:
                data[name] = list(data[name])
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
    def tuned_metrics(self) -> Mapping[str, float]:
        """The tuned config's figures on the report split: the tuning procedure's out-of-fold
        metrics on a cross-validated set, else the best trial's."""
        return self.cross_validation["tuned"]["metrics"] if self.cross_validation else self.best.test_metrics


def record_path(run_dir: str | os.PathLike) -> Path:
    """Where the record of the sweep run in `run_dir` is."""
    return Path(run_dir) / RECORD_FILE


def is_finished_sweep(run_dir: str | os.PathLike) -> bool:
    """Whether `run_dir` holds a record (the sweep finished)."""
    return record_path(run_dir).is_file()
