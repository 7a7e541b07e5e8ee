"""K-fold cross-validation over query ids, for the small evaluation sets (memories, holoviz).

Folds are deterministic: the ids are ordered by the sha1 of the id (ties by id) and dealt round
robin, so the folds are balanced (sizes differ by at most one), the same on every machine and run,
and independent of the order the ids come in. :func:`nested_cv` scores every fold with a config
tuned on the other folds only, so each query's score is out of sample.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from hybridlab.errors import InvalidValueError
from hybridlab.eval.significance import Interval, mean_ci

DEFAULT_FOLDS = 5
Config = TypeVar("Config")


def k_folds(query_ids: Iterable[str], k: int = DEFAULT_FOLDS) -> list[list[str]]:
    """`k` disjoint folds covering `query_ids` (each fold sorted by id)."""
    ids = sorted(set(query_ids), key=lambda q: (hashlib.sha1(q.encode()).hexdigest(), q))
    if k < 2:
        raise InvalidValueError(f"k must be >= 2, got {k}", field="k")
    if len(ids) < k:
        raise InvalidValueError(f"{k} folds need at least {k} query ids, got {len(ids)}")
    return [sorted(ids[i::k]) for i in range(k)]


@dataclass(frozen=True)
class CrossValidation:
    """Out-of-fold scores: `per_query` = {qid: value} from the config tuned without its fold,
    `configs[i]` = the config chosen for fold `folds[i]`, `fold_means[i]` its mean, and the mean
    over all queries with its confidence interval."""

    folds: list[list[str]]
    configs: list[Any]
    per_query: dict[str, float]
    fold_means: list[float]
    interval: Interval

    @property
    def mean(self) -> float:
        return self.interval.mean

    def to_dict(self) -> dict[str, Any]:
        return {
            "k": len(self.folds),
            "folds": self.folds,
            "configs": self.configs,
            "fold_means": self.fold_means,
            "per_query": self.per_query,
            **self.interval.to_dict(),
        }


def nested_cv(
    query_ids: Iterable[str],
    tune: Callable[[list[str]], Config],
    score: Callable[[Config, list[str]], Mapping[str, float]],
    *,
    k: int = DEFAULT_FOLDS,
    confidence: float = 0.95,
    method: str = "t",
) -> CrossValidation:
    """For each of `k` folds, `tune(other folds' ids)` picks a config and `score(config, fold ids)`
    gives the fold's per-query values; the mean of all out-of-fold values with a `confidence`
    interval (:func:`hybridlab.eval.significance.mean_ci`)."""
    folds = k_folds(query_ids, k)
    configs: list[Any] = []
    per_query: dict[str, float] = {}
    fold_means: list[float] = []
    for i, fold in enumerate(folds):
        train = sorted(q for j, other in enumerate(folds) if j != i for q in other)
        config = tune(train)
        values = dict(score(config, list(fold)))
        if set(values) != set(fold):
            raise ValueError(
                f"score() must return a value for exactly the fold's {len(fold)} queries, got {len(values)}"
            )
        configs.append(config)
        per_query.update(values)
        fold_means.append(sum(values.values()) / len(values))
    ordered = [per_query[q] for q in sorted(per_query)]
    return CrossValidation(
        folds, configs, dict(sorted(per_query.items())), fold_means, mean_ci(ordered, confidence, method)
    )
