"""Hyper-parameter search with Optuna: search spaces per dataset, the dev-split objective, studies.

Tune on the dev split, report on test (pyserini/ranx style). A trial suggests search-time knobs
(alpha, fusion, rrf_k, normalization, recency, tag weight, staged candidates) and index-build knobs
(BM25 k1/b, chunk size/overlap). Each distinct index config is built once by
:func:`hybridlab.eval.evalsets.ensure_index` (chunk variants embed only their new chunk texts through the
shared embeddings cache); a study holds at most ``max_index_configs`` of them — a trial asking for
one more is pruned before it costs anything.

`hybridlab sweep` runs ``notebooks/sweep.ipynb`` through papermill; the notebook calls
:func:`run_study` and :func:`finalize`.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hybridlab.config import IndexConfig, SearchConfig
from hybridlab.eval.evaluator import (
    BASELINES,
    EVAL_LIMIT,
    Evaluator,
    full_search_config,
    index_key,
    resolve_evalset,
)
from hybridlab.tune.runs import new_run_dir, storage_for, update_index, write_summary

logger = logging.getLogger(__name__)

DEFAULT_METRIC = "ndcg@10"
DEFAULT_TRIALS = {"memories": 120, "scifact": 80, "holoviz": 30}
DEFAULT_MAX_INDEX_CONFIGS = 4
INDEX_TARGETS = {"bm25_k1": ("bm25", "k1"), "bm25_b": ("bm25", "b"),
                 "chunk_size": ("chunk", "chunk_size"), "chunk_overlap": ("chunk", "chunk_overlap")}


@dataclass(frozen=True)
class Param:
    """One dimension of a search space. `kind` is float|int|categorical; `when` makes it conditional
    on another parameter's value (`("fusion", ("rrf",))`)."""

    name: str
    kind: str
    low: float | None = None
    high: float | None = None
    choices: tuple[Any, ...] = ()
    log: bool = False
    step: float | None = None
    when: tuple[str, tuple[Any, ...]] | None = None

    def __post_init__(self) -> None:
        if self.kind not in {"float", "int", "categorical"}:
            raise ValueError(f"unknown parameter kind {self.kind!r}; choose from ['categorical', 'float', 'int']")
        if self.name not in {f.name for f in dataclasses.fields(SearchConfig)} | set(INDEX_TARGETS):
            raise ValueError(f"unknown parameter {self.name!r}; use a SearchConfig field or one of {sorted(INDEX_TARGETS)}")


FUSION = Param("fusion", "categorical", choices=("rrf", "convex", "dbsf"))
ALPHA = Param("alpha", "float", 0.0, 1.0, step=0.05)
RRF_K = Param("rrf_k", "int", 5, 200, log=True, when=("fusion", ("rrf",)))
NORMALIZATION = Param("normalization", "categorical", choices=("min-max", "z-score", "theoretical-min-max"),
                      when=("fusion", ("convex",)))
STAGED = Param("staged", "categorical", choices=(False, True))
#: candidates below the evaluation depth act as EVAL_LIMIT (the engine takes max(candidates, limit))
CANDIDATES = Param("candidates", "int", EVAL_LIMIT, 1000, log=True, when=("staged", (True,)))
FALLBACK = Param("fallback_threshold", "int", 0, 50, when=("staged", (True,)))
EXPAND_HOPS = Param("expand_hops", "int", 0, 4, when=("staged", (True,)))
FILL_DENSE = Param("fill_dense", "categorical", choices=(False, True))
DECAY = Param("decay", "float", 0.0005, 0.1, log=True)
RECENCY_WEIGHT = Param("recency_weight", "float", 0.0, 0.8, step=0.05)
TAG_WEIGHT = Param("tag_weight", "float", 0.0, 3.0, step=0.1)
BM25_K1 = Param("bm25_k1", "categorical", choices=(0.9, 1.2, 1.5))
BM25_B = Param("bm25_b", "categorical", choices=(0.5, 0.75, 0.9))
CHUNK_SIZE = Param("chunk_size", "categorical", choices=(800, 1500, 2500))
CHUNK_OVERLAP = Param("chunk_overlap", "categorical", choices=(0, 150))

_SEARCH_TIME = (FUSION, ALPHA, RRF_K, NORMALIZATION, STAGED, CANDIDATES, FALLBACK, EXPAND_HOPS, FILL_DENSE)
#: Search spaces by dataset. Memories are short (<300 chars: one chunk each) and dated and tagged;
#: BEIR sets have one chunk per document, no dates and no tags, so only fusion, staging and BM25
#: matter there; chunk size is swept only on the HoloViz docs, where documents are long.
SPACES: dict[str, tuple[Param, ...]] = {
    "memories": _SEARCH_TIME + (DECAY, RECENCY_WEIGHT, TAG_WEIGHT, BM25_K1, BM25_B),
    "holoviz": _SEARCH_TIME + (TAG_WEIGHT, BM25_K1, BM25_B, CHUNK_SIZE, CHUNK_OVERLAP),
    "beir": _SEARCH_TIME + (BM25_K1, BM25_B),
}


def space_for(dataset: str) -> tuple[Param, ...]:
    """The search space of a dataset name (BEIR sets share `beir`)."""
    return SPACES.get(dataset, SPACES["beir"])


def suggest(trial, space: Sequence[Param]) -> dict[str, Any]:
    """Ask the trial for every active parameter of `space` (conditional ones only when their
    parent has one of the listed values)."""
    params: dict[str, Any] = {}
    for p in space:
        if p.when is not None and params.get(p.when[0]) not in p.when[1]:
            continue
        if p.kind == "categorical":
            params[p.name] = trial.suggest_categorical(p.name, list(p.choices))
        elif p.kind == "int":
            params[p.name] = trial.suggest_int(p.name, int(p.low), int(p.high), log=p.log)
        else:
            value = trial.suggest_float(p.name, p.low, p.high, log=p.log, step=p.step)
            params[p.name] = round(value, 10) if p.step else value  # 0.6000000000000001 -> 0.6
    return params


def split_params(params: Mapping[str, Any], base: IndexConfig | None = None) -> tuple[dict[str, Any], IndexConfig]:
    """Trial parameters -> (search settings, index config built from `base`)."""
    base = base or IndexConfig()
    search = {k: v for k, v in params.items() if k not in INDEX_TARGETS}
    chunk = {INDEX_TARGETS[k][1]: v for k, v in params.items() if INDEX_TARGETS.get(k, ("",))[0] == "chunk"}
    bm25 = {INDEX_TARGETS[k][1]: v for k, v in params.items() if INDEX_TARGETS.get(k, ("",))[0] == "bm25"}
    config = dataclasses.replace(base, chunk=dataclasses.replace(base.chunk, **chunk),
                                 bm25=dataclasses.replace(base.bm25, **bm25))
    return search, config


class Objective:
    """The value of one trial: `metric` of its settings on the `split` queries (dev by default)."""

    def __init__(self, evaluator: Evaluator, space: Sequence[Param], *, metric: str = DEFAULT_METRIC,
                 split: str = "dev", base_index: IndexConfig | None = None,
                 max_index_configs: int = DEFAULT_MAX_INDEX_CONFIGS) -> None:
        from hybridlab.eval.evaluate import METRICS

        if metric not in METRICS:
            raise ValueError(f"unknown metric {metric!r}; choose from {list(METRICS)}")
        if max_index_configs < 1:
            raise ValueError(f"max_index_configs must be >= 1, got {max_index_configs}")
        self.evaluator, self.space, self.metric, self.split = evaluator, tuple(space), metric, split
        self.base_index = base_index or IndexConfig()
        self.max_index_configs = max_index_configs

    def __call__(self, trial) -> float:
        import optuna

        params = suggest(trial, self.space)
        search, config = split_params(params, self.base_index)
        key = index_key(config)
        used = {t.user_attrs.get("index_key") for t in trial.study.get_trials(deepcopy=False)
                if t.number != trial.number and t.state.name in {"COMPLETE", "RUNNING"}}
        used.discard(None)
        trial.set_user_attr("index_key", key)
        if key not in used and len(used) >= self.max_index_configs:
            trial.set_user_attr("index_key", None)
            raise optuna.TrialPruned(f"cap of {self.max_index_configs} index configs reached")
        trial.set_user_attr("index", config.to_dict())
        trial.set_user_attr("search", full_search_config(search))
        trial.set_user_attr("worker", os.getpid())
        metrics = self.evaluator.score(search, config, self.split)
        trial.set_user_attr("metrics", metrics)
        return metrics[self.metric]


def default_params(space: Sequence[Param], n_chunks: int, base: IndexConfig | None = None) -> dict[str, Any]:
    """The package defaults expressed in `space` (adaptive alpha and auto staging resolved for an
    index of `n_chunks`), so a study's first trial measures exactly the defaults."""
    from hybridlab.config import adaptive_alpha, resolve_auto

    base, defaults = base or IndexConfig(), resolve_auto(SearchConfig(), n_chunks)
    values: dict[str, Any] = {}
    for p in space:
        if p.when is not None and values.get(p.when[0]) not in p.when[1]:
            continue
        if p.name in INDEX_TARGETS:
            part, name = INDEX_TARGETS[p.name]
            values[p.name] = getattr(getattr(base, part), name)
        elif p.name == "alpha":
            values[p.name] = adaptive_alpha(n_chunks) if defaults.alpha is None else defaults.alpha
        else:
            values[p.name] = getattr(defaults, p.name)
    return values


def _create_study(optuna, name: str, storage: str | None, run_dir, seed: int, attempts: int = 10):
    """Create or load the study; workers starting together may race to create the SQLite schema
    (sqlalchemy OperationalError / IntegrityError), so a few retries follow."""
    import time

    from sqlalchemy.exc import SQLAlchemyError

    def create():
        return optuna.create_study(study_name=name, storage=storage_for(storage, run_dir),
                                   sampler=optuna.samplers.TPESampler(seed=seed), direction="maximize",
                                   load_if_exists=True)

    for attempt in range(attempts - 1):
        try:
            return create()
        except SQLAlchemyError:  # schema creation race: OperationalError, IntegrityError, ...
            time.sleep(0.5 + attempt)
    return create()


def run_study(dataset: str | os.PathLike, *, trials: int, storage: str | None = None,
              study_name: str | None = None, run_dir: str | os.PathLike | None = None,
              metric: str = DEFAULT_METRIC, seed: int = 0, max_index_configs: int = DEFAULT_MAX_INDEX_CONFIGS,
              base_index: IndexConfig | None = None, space: Sequence[Param] | None = None,
              evaluator: Evaluator | None = None, progress: bool = False, enqueue_defaults: bool = True):
    """Create or join a study and work until it holds `trials` completed trials (shared across all
    workers of the same storage + study). Pruned trials (index-config cap) do not count. A new
    study's first trial is the package defaults (`enqueue_defaults`)."""
    import optuna
    from optuna.study import MaxTrialsCallback
    from optuna.trial import TrialState

    evalset = evaluator.evalset if evaluator else resolve_evalset(dataset)
    evaluator = evaluator or Evaluator(evalset, progress=progress)
    space = space if space is not None else space_for(evalset.name)
    objective = Objective(evaluator, space, metric=metric, base_index=base_index,
                          max_index_configs=max_index_configs)
    if not progress:
        optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = _create_study(optuna, study_name or f"{evalset.name}-{metric}", storage, run_dir, seed)
    if enqueue_defaults and not study.trials:
        n_chunks = evaluator.index(base_index or IndexConfig()).n_chunks
        study.enqueue_trial(default_params(space, n_chunks, base_index), user_attrs={"defaults": True})
    study.set_user_attr("dataset", str(dataset))
    study.set_user_attr("metric", metric)
    study.optimize(objective, n_trials=trials * 5,
                   callbacks=[MaxTrialsCallback(trials, states=(TrialState.COMPLETE,))])
    return study


def finalize(study, evaluator: Evaluator, *, metric: str = DEFAULT_METRIC,
             base_index: IndexConfig | None = None) -> dict[str, Any]:
    """The sweep's record: the best trial's settings with dev and test metrics next to the
    defaults', BM25's and vector search's (all on the test split)."""
    best = study.best_trial
    base_index = base_index or IndexConfig()
    search = {k: v for k, v in best.user_attrs["search"].items()}
    config = IndexConfig.from_dict(best.user_attrs["index"])
    test = evaluator.score(search, config, "test")
    baselines = {name: evaluator.score(options, base_index, "test") for name, options in BASELINES.items()}
    defaults_dev = evaluator.score({}, base_index, "dev")
    beats = test[metric] > baselines["defaults"][metric]
    return {
        "dataset": evaluator.evalset.name, "metric": metric, "split": "test", "tuned_on": "dev",
        "now": evaluator.evalset.now, "study": study.study_name,
        "trials": {"complete": sum(t.state.name == "COMPLETE" for t in study.trials),
                   "pruned": sum(t.state.name == "PRUNED" for t in study.trials)},
        "queries": {"dev": len(evaluator.dataset("dev").queries), "test": len(evaluator.dataset("test").queries)},
        "best": {"trial": best.number, "params": best.params, "dev_value": best.value,
                 "dev_metrics": best.user_attrs.get("metrics"), "search": search, "index": config.to_dict(),
                 "test_metrics": test},
        "defaults": {"index": base_index.to_dict(), "dev_metrics": defaults_dev},
        "baselines": baselines,
        "beats_defaults": beats,
        "verdict": (f"the tuned config {'beats' if beats else 'does NOT beat'} the defaults on test {metric}: "
                    f"{test[metric]:.4f} vs {baselines['defaults'][metric]:.4f}"),
    }


def cli_sweep(args: argparse.Namespace) -> int:
    """`hybridlab sweep`: run notebooks/sweep.ipynb into a new run folder, then export the winner."""
    import time

    from papermill.exceptions import PapermillExecutionError

    from hybridlab.eval.evaluate import METRICS
    from hybridlab.tune.export import export_config, write_config
    from hybridlab.tune.notebooks import run_notebook

    if args.metric not in METRICS:
        raise ValueError(f"unknown metric {args.metric!r}; choose from {list(METRICS)}")
    resolve_evalset(args.dataset)  # an unknown name fails here, listing the choices
    trials = args.trials or DEFAULT_TRIALS.get(Path(args.dataset).name, 30)
    run_dir = new_run_dir(args.reports, f"sweep-{Path(args.dataset).name}")
    parameters = {"dataset": str(args.dataset), "trials": trials, "storage": args.storage, "study": args.study,
                  "metric": args.metric, "seed": getattr(args, "seed", 0),
                  "max_index_configs": getattr(args, "max_index_configs", DEFAULT_MAX_INDEX_CONFIGS),
                  "models": getattr(args, "models", None),
                  "run_dir": str(run_dir.resolve())}
    print(f"sweep {args.dataset}: {trials} trials -> {run_dir}", flush=True)
    started = time.perf_counter()
    try:
        run_notebook("sweep", run_dir, parameters)
    except PapermillExecutionError as error:  # the partial notebook is kept in the run folder
        print(f"error: the sweep notebook failed: {error.ename}: {error.evalue} (see {run_dir / 'sweep.ipynb'})",
              file=sys.stderr)
        return 1
    metrics = json.loads((run_dir / "metrics.json").read_text())
    write_summary(run_dir, metrics)
    update_index(args.reports)
    if args.export:
        path = write_config(export_config(run_dir), args.export)
        print(f"exported the winning config to {path}")
    print(f"{metrics['verdict']} ({time.perf_counter() - started:.0f} s)")
    return 0
