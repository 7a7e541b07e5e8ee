"""Fusion of whole runs with the engine's own fusion functions, and the choice of method and weights
on a tuning split, reported on another (Cormack et al. 2009; Bruch et al. 2023; Qdrant 2024).
See docs/internals/tune-eval.md#fusing-run-files.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hybridlab.errors import InvalidValueError
from hybridlab.eval.evaluate import Qrels, Run, score
from hybridlab.extras import require
from hybridlab.search.fusion import FUSERS, NORMALIZERS, THEORETICAL_MIN, fuse, rank

__all__ = [
    "FusionSetting",
    "candidate_settings",
    "fuse_runs",
    "tune_fusion",
    "tune_fusion_optuna",
    "weight_grid",
]


@dataclass(frozen=True)
class FusionSetting:
    """One way to fuse: the method, its normalisation (convex only), the weight of each run, rrf_k."""

    method: str
    weights: tuple[tuple[str, float], ...]
    normalization: str = "min-max"
    rrf_k: int = 60

    def __post_init__(self) -> None:
        if self.method not in FUSERS:
            raise InvalidValueError(f"unknown fusion {self.method!r}; choose from {sorted(FUSERS)}")
        if self.normalization not in NORMALIZERS:
            raise InvalidValueError(
                f"unknown normalization {self.normalization!r}; choose from {sorted(NORMALIZERS)}"
            )

    def describe(self) -> str:
        weights = ", ".join(f"{name} {weight:g}" for name, weight in self.weights)
        method = {"rrf": f"rrf (rrf_k {self.rrf_k})", "convex": f"convex {self.normalization}"}.get(
            self.method, self.method
        )
        return f"{method}; weights {weights}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "normalization": self.normalization if self.method == "convex" else None,
            "weights": dict(self.weights),
            "rrf_k": self.rrf_k if self.method == "rrf" else None,
        }


def fuse_runs(
    runs: Mapping[str, Mapping[str, Mapping[str, float]]], setting: FusionSetting, limit: int | None = None
) -> Run:
    """Each query's runs fused by :func:`hybridlab.search.fusion.fuse`, the ``limit`` best kept (all
    if None; ties by ascending doc id). Queries: those of any run; a run lacking one adds nothing."""
    if len(runs) < 2:
        raise InvalidValueError(f"fusion needs at least two runs, got {len(runs)}")
    weights = dict(setting.weights)
    unknown = sorted(set(weights) - set(runs))
    if unknown:
        raise InvalidValueError(f"weights name runs {unknown} that are not given; runs: {list(runs)}")
    qids = dict.fromkeys(qid for run in runs.values() for qid in run)
    fused: Run = {}
    for qid in qids:
        scores = fuse(
            setting.method,
            {name: run.get(qid, {}) for name, run in runs.items()},
            weights,
            rrf_k=setting.rrf_k,
            normalization=setting.normalization,
        )
        fused[qid] = dict(rank(scores, limit))
    return fused


def weight_grid(names: Sequence[str], step: float = 0.1) -> list[dict[str, float]]:
    """Every weighting of ``names`` on the simplex in steps of ``step`` (weights sum to 1; a weight
    of 0 leaves that run out), in a fixed order."""
    if not 0.0 < step <= 1.0 or abs(round(1 / step) - 1 / step) > 1e-9:
        raise InvalidValueError(f"the grid step must divide 1 (0.5, 0.25, 0.1, ...), got {step!r}")
    units = round(1 / step)
    grid = []
    for parts in itertools.product(range(units + 1), repeat=len(names) - 1):
        if sum(parts) <= units:
            shares = (*parts, units - sum(parts))
            grid.append({name: share / units for name, share in zip(names, shares)})
    return grid


def candidate_settings(
    names: Sequence[str],
    *,
    methods: Sequence[str] | None = None,
    normalizations: Sequence[str] | None = None,
    weights: Sequence[Mapping[str, float]] | None = None,
    rrf_k: int = 60,
    step: float = 0.1,
) -> list[FusionSetting]:
    """The grid a tuning searches: each method × (for convex) each normalisation × each weighting.

    Unset, ``methods`` is every fuser; ``normalizations`` min-max and z-score, and theoretical-min-max
    where every run is named after a retriever of ``THEORETICAL_MIN``; ``weights`` :func:`weight_grid`."""
    if normalizations is None:
        normalizations = ["min-max", "z-score"]
        if set(names) <= set(THEORETICAL_MIN):
            normalizations.append("theoretical-min-max")
    weightings = list(weights) if weights is not None else weight_grid(names, step)
    settings = []
    for method in methods or sorted(FUSERS):
        for normalization in normalizations if method == "convex" else ["min-max"]:
            settings += [
                FusionSetting(method, tuple((n, float(w[n])) for n in names), normalization, rrf_k)
                for w in weightings
            ]
    return settings


def tune_fusion(
    runs: Mapping[str, Run],
    tune_qrels: Qrels,
    settings: Sequence[FusionSetting],
    *,
    metric: str = "ndcg@10",
    limit: int | None = None,
) -> tuple[FusionSetting, list[dict[str, Any]]]:
    """The setting with the best mean ``metric`` on the queries of ``tune_qrels`` (the first of equals,
    in the order given), and every setting's value. Only those queries of the runs are fused (each
    cut to ``limit`` results, as the fused run that is written)."""
    if not settings:
        raise InvalidValueError("no fusion setting to choose from")
    tuning = _tuning_runs(runs, tune_qrels)
    return _first_best(((s, _value(tuning, tune_qrels, s, metric, limit)) for s in settings), metric)


def tune_fusion_optuna(
    runs: Mapping[str, Run],
    tune_qrels: Qrels,
    settings: Sequence[FusionSetting],
    *,
    trials: int = 50,
    seed: int = 0,
    metric: str = "ndcg@10",
    limit: int | None = None,
) -> tuple[FusionSetting, list[dict[str, Any]]]:
    """As :func:`tune_fusion`, with ``trials`` settings proposed by Optuna's TPE sampler (seeded, so
    the same runs give the same choice): the method and normalisation among those of ``settings``, the
    weights continuous on the simplex (or the one weighting of ``settings`` when it has only one)."""
    require("optuna")
    import optuna

    if not settings:
        raise InvalidValueError("no fusion setting to choose from")
    tuning = _tuning_runs(runs, tune_qrels)
    fusions = list(dict.fromkeys(f"{s.method}/{s.normalization}" for s in settings))
    weightings = list(dict.fromkeys(s.weights for s in settings))
    names = [name for name, _ in settings[0].weights]
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=seed))

    def proposed():
        for _ in range(trials):
            trial = study.ask()
            method, normalization = trial.suggest_categorical("fusion", fusions).split("/")
            weights = weightings[0]
            if len(weightings) > 1:
                raw = [trial.suggest_float(name, 0.0, 1.0) for name in names]
                weights = tuple((n, r / sum(raw) if sum(raw) else 1 / len(raw)) for n, r in zip(names, raw))
            setting = FusionSetting(method, weights, normalization, settings[0].rrf_k)
            value = _value(tuning, tune_qrels, setting, metric, limit)
            study.tell(trial, value)
            yield setting, value

    return _first_best(proposed(), metric)


def _tuning_runs(runs: Mapping[str, Run], tune_qrels: Qrels) -> dict[str, Run]:
    """The runs restricted to the tuning queries: nothing of another split reaches a tuning."""
    if not tune_qrels:
        raise InvalidValueError("the tuning qrels judge no query")
    return {name: {q: run[q] for q in tune_qrels if q in run} for name, run in runs.items()}


def _value(
    tuning: Mapping[str, Run], tune_qrels: Qrels, setting: FusionSetting, metric: str, limit: int | None
) -> float:
    return score(tune_qrels, fuse_runs(tuning, setting, limit), [metric])[metric]


def _first_best(scored, metric: str) -> tuple[FusionSetting, list[dict[str, Any]]]:
    """The first setting of the best value among (setting, value) pairs, and the table of them all."""
    pairs = list(scored)
    table = [{**setting.to_dict(), metric: value} for setting, value in pairs]
    return max(pairs, key=lambda pair: pair[1])[0], table  # max keeps the first of equals
