"""Hyper-parameter search with Optuna: search spaces per dataset, the tuning-split objective, studies.

See docs/internals/tune-eval.md#sweeps.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import logging
import os
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hybridlab.config import IndexConfig, SearchConfig, adaptive_alpha, resolve_auto
from hybridlab.errors import InvalidValueError
from hybridlab.eval.crossval import CrossValidation, k_folds, nested_cv
from hybridlab.eval.evalsets import CROSS_VALIDATED, EvalSet, check_tunable
from hybridlab.eval.evaluate import METRICS
from hybridlab.eval.evaluator import (
    BASELINES,
    EVAL_LIMIT,
    Evaluator,
    full_search_config,
    index_key,
    resolve_evalset,
)
from hybridlab.eval.significance import Interval, PairedTest, mean_ci, paired_test
from hybridlab.eval.systems import per_kind
from hybridlab.extras import require
from hybridlab.tune.export import (
    DEFAULT_TEST,
    DEFAULTS_FITTED_ON,
    MAX_P,
    describe_test,
    measure_settings,
    out_of_fold_run,
    score_run,
)
from hybridlab.tune.record import SweepRecord
from hybridlab.tune.runs import (
    JOURNAL_PREFIX,
    engine_state,
    storage_for,
)

logger = logging.getLogger(__name__)

DEFAULT_METRIC = "ndcg@10"
#: Trials of the study on the whole tuning split; a cross-validated set also runs one study per fold
#: (:func:`fold_trials`: memories 5 x 40). Once the indexes are built a trial takes about 1 s here on
#: SciFact's 809 train queries (query vectors are cached) and 0.2 s on memories.
DEFAULT_TRIALS = {"memories": 200, "scifact": 80, "holoviz": 30}
#: Trials per fold of a nested cross-validation are trials // k, but never fewer than this.
MIN_FOLD_TRIALS = 10
DEFAULT_MAX_INDEX_CONFIGS = 4
#: a worker whose trial would overshoot the study waits this long between looks at the study
SLOT_POLL_S = 1.0
#: a trial RUNNING for longer than this (its worker died) no longer holds one of the study's slots
STALE_AFTER_S = 2 * 3600.0
#: seconds between two progress lines of the process that waits for its workers
PROGRESS_EVERY_S = 30.0
INDEX_TARGETS = {
    "bm25_k1": ("bm25", "k1"),
    "bm25_b": ("bm25", "b"),
    "chunk_size": ("chunk", "chunk_size"),
    "chunk_overlap": ("chunk", "chunk_overlap"),
}


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
            raise InvalidValueError(
                f"unknown parameter kind {self.kind!r}; choose from ['categorical', 'float', 'int']"
            )
        if self.name not in {f.name for f in dataclasses.fields(SearchConfig)} | set(INDEX_TARGETS):
            raise InvalidValueError(
                f"unknown parameter {self.name!r}; use a SearchConfig field or one of {sorted(INDEX_TARGETS)}"
            )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Param:
        """A parameter from its fields as `dataclasses.asdict` wrote them to JSON (lists for tuples)."""
        when = data.get("when")
        return cls(
            **{
                **data,
                "choices": tuple(data.get("choices", ())),
                "when": (when[0], tuple(when[1])) if when else None,
            }
        )

    def contains(self, value: Any) -> bool:
        """Whether the sampler can propose `value`: one of the choices, or within [low, high] and
        on the step grid."""
        if self.kind == "categorical":
            return any(value == choice and type(value) is type(choice) for choice in self.choices)
        assert self.low is not None and self.high is not None  # a numeric parameter has its bounds
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not self.low <= value <= self.high
        ):
            return False
        if self.kind == "int" and value != int(value):
            return False
        if self.step is None:
            return True
        steps = (value - self.low) / self.step
        return abs(steps - round(steps)) < 1e-9


FUSION = Param("fusion", "categorical", choices=("rrf", "convex", "dbsf"))
ALPHA = Param("alpha", "float", 0.0, 1.0, step=0.05)
RRF_K = Param("rrf_k", "int", 5, 200, log=True, when=("fusion", ("rrf",)))
NORMALIZATION = Param(
    "normalization",
    "categorical",
    choices=("min-max", "z-score", "theoretical-min-max"),
    when=("fusion", ("convex",)),
)
STAGED = Param("staged", "categorical", choices=(False, True))
#: candidates below the evaluation depth act as EVAL_LIMIT (the engine takes max(candidates, limit))
CANDIDATES = Param("candidates", "int", EVAL_LIMIT, 1000, log=True, when=("staged", (True,)))
FALLBACK = Param("fallback_threshold", "int", 0, 50, when=("staged", (True,)))
EXPAND_HOPS = Param("expand_hops", "int", 0, 4, when=("staged", (True,)))
FILL_DENSE = Param("fill_dense", "categorical", choices=(False, True))
DECAY = Param("decay", "float", 0.0005, 0.1, log=True)
RECENCY_WEIGHT = Param("recency_weight", "float", 0.0, 0.8, step=0.05)
TAG_WEIGHT = Param("tag_weight", "float", 0.0, 8.0, step=0.1)  # the shipped default is 4.0
ADAPTIVE = Param("adaptive_fusion", "categorical", choices=(False, True))
#: floor <= 0.4 <= ceiling, so every pair is a valid ramp (SearchConfig asks floor <= ceiling)
LEXICAL_FLOOR = Param("lexical_floor", "float", 0.0, 0.4, step=0.05, when=("adaptive_fusion", (True,)))
LEXICAL_CEILING = Param("lexical_ceiling", "float", 0.4, 1.0, step=0.05, when=("adaptive_fusion", (True,)))
RECENCY_INTENT = Param(
    "recency_intent_weight", "float", 0.0, 1.0, step=0.05, when=("adaptive_fusion", (True,))
)
#: dense pseudo-relevance feedback (search/feedback.py): 0 = off; documents only where it is on
FEEDBACK_WEIGHT = Param("feedback_weight", "categorical", choices=(0.0, 0.25, 0.5, 1.0))
FEEDBACK_DOCS = Param("feedback_docs", "int", 1, 3, when=("feedback_weight", (0.25, 0.5, 1.0)))
#: a document's score from all its chunks (0 = the best alone); only sets with multi-chunk documents
CHUNK_DECAY = Param("chunk_decay", "float", 0.0, 0.5, step=0.05)
BM25_K1 = Param("bm25_k1", "categorical", choices=(0.9, 1.2, 1.5))
BM25_B = Param("bm25_b", "categorical", choices=(0.5, 0.75, 0.9))
CHUNK_SIZE = Param("chunk_size", "categorical", choices=(800, 1500, 2500))
CHUNK_OVERLAP = Param("chunk_overlap", "categorical", choices=(0, 150))

_SEARCH_TIME = (
    FUSION,
    ALPHA,
    RRF_K,
    NORMALIZATION,
    STAGED,
    CANDIDATES,
    FALLBACK,
    EXPAND_HOPS,
    FILL_DENSE,
    ADAPTIVE,
    LEXICAL_FLOOR,
    LEXICAL_CEILING,
    FEEDBACK_WEIGHT,
    FEEDBACK_DOCS,
)
#: Search spaces by dataset. Memories are short (<300 chars: one chunk each) and dated and tagged;
#: BEIR sets have one chunk per document, no dates and no tags, so only fusion, staging and BM25
#: matter there. Chunk size and overlap (CHUNK_SIZE, CHUNK_OVERLAP) re-chunk and re-embed the corpus per
#: value (HoloViz: ~9 min a variant here), so they are in no default space: give a space with them to
#: `run_study(space=...)` where that budget exists.
SPACES: dict[str, tuple[Param, ...]] = {
    "memories": _SEARCH_TIME + (DECAY, RECENCY_WEIGHT, RECENCY_INTENT, TAG_WEIGHT, BM25_K1, BM25_B),
    "holoviz": _SEARCH_TIME + (TAG_WEIGHT, CHUNK_DECAY, BM25_K1, BM25_B),
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
            assert p.low is not None and p.high is not None  # a numeric parameter has its bounds
            params[p.name] = trial.suggest_int(p.name, int(p.low), int(p.high), log=p.log)
        else:
            value = trial.suggest_float(p.name, p.low, p.high, log=p.log, step=p.step)
            params[p.name] = round(value, 10) if p.step else value  # 0.6000000000000001 -> 0.6
    return params


def split_params(
    params: Mapping[str, Any], base: IndexConfig | None = None
) -> tuple[dict[str, Any], IndexConfig]:
    """Trial parameters -> (search settings, index config built from `base`)."""
    base = base or IndexConfig()
    search = {k: v for k, v in params.items() if k not in INDEX_TARGETS}
    chunk = {INDEX_TARGETS[k][1]: v for k, v in params.items() if INDEX_TARGETS.get(k, ("",))[0] == "chunk"}
    bm25 = {INDEX_TARGETS[k][1]: v for k, v in params.items() if INDEX_TARGETS.get(k, ("",))[0] == "bm25"}
    config = dataclasses.replace(
        base, chunk=dataclasses.replace(base.chunk, **chunk), bm25=dataclasses.replace(base.bm25, **bm25)
    )
    return search, config


def tuning_split(evalset: EvalSet) -> str:
    """The split a sweep of `evalset` tunes on (its declared `tuning_split`; :data:`CROSS_VALIDATED`
    = every judged query, the folds' pool); ValueError for a set that is never tuned on."""
    return check_tunable(evalset)


class Objective:
    """The value of one trial: `metric` of its settings on the `split` queries (the evaluation set's
    tuning split by default), or on only `query_ids` of it (a fold study of a cross-validation)."""

    def __init__(
        self,
        evaluator: Evaluator,
        space: Sequence[Param],
        *,
        metric: str = DEFAULT_METRIC,
        split: str | None = None,
        query_ids: Sequence[str] | None = None,
        base_index: IndexConfig | None = None,
        max_index_configs: int = DEFAULT_MAX_INDEX_CONFIGS,
        trials: int | None = None,
        seed: int | None = None,
    ) -> None:
        if metric not in METRICS:
            raise InvalidValueError(f"unknown metric {metric!r}; choose from {list(METRICS)}", field="metric")
        if max_index_configs < 1:
            raise InvalidValueError(
                f"max_index_configs must be >= 1, got {max_index_configs}", field="max_index_configs"
            )
        self.evaluator, self.space, self.metric = evaluator, tuple(space), metric
        self.split = split or tuning_split(evaluator.evalset)
        self.query_ids = sorted(query_ids) if query_ids is not None else None
        self.base_index = base_index or IndexConfig()
        self.max_index_configs = max_index_configs
        self.trials, self.seed = trials, seed

    def __call__(self, trial) -> float:
        import optuna

        if self.trials is not None:
            self._wait_for_slot(trial)
        params = suggest(trial, self.space)
        twin = same_params_as(trial)
        if twin is not None:
            trial.set_user_attr("pruned", f"same parameters as trial #{twin}")
            raise optuna.TrialPruned(f"same parameters as trial #{twin}")
        search, config = split_params(params, self.base_index)
        key = index_key(config)
        used = {
            t.user_attrs.get("index_key")
            for t in trial.study.get_trials(deepcopy=False)
            if t.number != trial.number and t.state.name in {"COMPLETE", "RUNNING"}
        }
        used.discard(None)
        trial.set_user_attr("index_key", key)
        if key not in used and len(used) >= self.max_index_configs:
            trial.set_user_attr("index_key", None)
            trial.set_user_attr("pruned", "index-config cap")
            raise optuna.TrialPruned(f"cap of {self.max_index_configs} index configs reached")
        trial.set_user_attr("index", config.to_dict())
        trial.set_user_attr("search", full_search_config(search))
        trial.set_user_attr("worker", worker_id())
        if self.seed is not None:
            trial.set_user_attr("seed", self.seed)
        if self.query_ids is None:
            metrics = self.evaluator.score(search, config, self.split)
        else:
            metrics = measure_settings(
                self.evaluator, search, config, self.split, self.query_ids, self.metric
            )[1]
        trial.set_user_attr("metrics", metrics)
        return metrics[self.metric]

    def _wait_for_slot(self, trial) -> None:
        """Hold the trial while `trials` trials numbered before it are complete or running, so
        workers finishing together never overshoot the study; prune it (and stop this worker) once
        the study holds `trials` completed trials. A running trial older than STALE_AFTER_S (its
        worker died) holds no slot."""
        import optuna
        from optuna.trial import TrialState

        while True:
            trials = trial.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.RUNNING))
            if sum(t.state == TrialState.COMPLETE for t in trials) >= self.trials:
                trial.set_user_attr("pruned", "study full")
                trial.study.stop()
                raise optuna.TrialPruned("the study holds its trials")
            now = dt.datetime.now()
            ahead = sum(
                t.number < trial.number
                and (
                    t.state == TrialState.COMPLETE
                    or t.datetime_start is None
                    or (now - t.datetime_start).total_seconds() < STALE_AFTER_S
                )
                for t in trials
            )
            if ahead < self.trials:
                return
            time.sleep(SLOT_POLL_S)


def same_params_as(trial) -> int | None:
    """The number of another complete or running trial of the study with exactly `trial`'s
    parameters, if any. Each trial writes its parameters before it looks, so of two workers that
    drew the same set at the same time at least one sees the other."""
    from optuna.trial import TrialState

    params = trial.params
    for other in trial.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.RUNNING)):
        if other.number != trial.number and other.params == params:
            return other.number
    return None


def worker_id() -> str:
    """`host:pid` of this process, the name of a sweep worker in its trials' `worker` attribute."""
    return f"{socket.gethostname()}:{os.getpid()}"


def derive_seed(seed: int, worker: str) -> int:
    """A sampler seed of its own for a worker joining a study: the first 4 bytes of
    sha256(`seed/worker`), so workers on any machine never replay each other's proposals."""
    return int.from_bytes(hashlib.sha256(f"{seed}/{worker}".encode()).digest()[:4], "big")


def default_params(space: Sequence[Param], n_chunks: int, base: IndexConfig | None = None) -> dict[str, Any]:
    """The package defaults expressed in `space` (adaptive alpha and auto staging resolved for an
    index of `n_chunks`), so a study's first trial measures exactly the defaults."""
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
        if not p.contains(values[p.name]):
            raise InvalidValueError(
                f"the default {p.name}={values[p.name]!r} lies outside its sweep range {p}: the first "
                "trial would not measure the defaults"
            )
    return values


def _create_study(
    optuna, name: str, storage: str | None, run_dir, seed: int, join_seed: int, attempts: int = 10
):
    """(study, created): create the study with a TPE sampler seeded `seed`, or load it (sampler
    seeded `join_seed`) when it exists. The storage refuses a second study of one name, so exactly
    one process creates it. Processes starting together on a fresh database may race to create the
    schema (sqlalchemy OperationalError / IntegrityError, e.g. PostgreSQL's UniqueViolation on
    `studydirection`), so a few retries follow."""
    from sqlalchemy.exc import SQLAlchemyError

    def sampler(value: int):  # constant liar: running trials count as bad, so parallel workers spread out
        return optuna.samplers.TPESampler(seed=value, constant_liar=True)

    def create():
        try:
            return optuna.create_study(
                study_name=name,
                storage=storage_for(storage, run_dir),
                sampler=sampler(seed),
                direction="maximize",
            ), True
        except optuna.exceptions.DuplicatedStudyError:
            return optuna.load_study(
                study_name=name, storage=storage_for(storage, run_dir), sampler=sampler(join_seed)
            ), False

    for attempt in range(attempts - 1):
        try:
            return create()
        except (SQLAlchemyError, optuna.exceptions.StorageInternalError):  # schema creation race
            time.sleep(0.5 + attempt)
    return create()


@dataclass(frozen=True)
class _StudySettings:
    """What every process working on one study shares, as :func:`run_study` was given it; a worker
    process receives it on its command line (:meth:`worker_argv`, read back by
    :mod:`hybridlab.cli.sweep_worker`)."""

    dataset: str | os.PathLike
    trials: int
    study_name: str
    metric: str = DEFAULT_METRIC
    seed: int = 0
    max_index_configs: int = DEFAULT_MAX_INDEX_CONFIGS
    base_index: IndexConfig | None = None
    #: the search space given; None: the set's own (:func:`space_for`), which each worker resolves
    space: Sequence[Param] | None = None
    split: str | None = None
    query_ids: Sequence[str] | None = None

    def worker_argv(self, storage: str) -> list[str]:
        """The command line of one worker process (``python -m hybridlab.cli.sweep_worker``) on the
        study in `storage`, stopping when this process is gone."""
        argv = [
            sys.executable,
            "-m",
            "hybridlab.cli.sweep_worker",
            "--dataset",
            str(self.dataset),
            "--trials",
            str(self.trials),
            "--storage",
            storage,
            "--study",
            self.study_name,
            "--metric",
            self.metric,
            "--seed",
            str(self.seed),
            "--max-index-configs",
            str(self.max_index_configs),
            "--index",
            json.dumps((self.base_index or IndexConfig()).to_dict()),
            "--parent",
            str(os.getpid()),
        ]
        if self.space is not None:
            argv += ["--space", json.dumps([dataclasses.asdict(p) for p in self.space])]
        if self.split is not None:
            argv += ["--split", self.split]
        if self.query_ids is not None:
            argv += ["--queries", json.dumps(sorted(self.query_ids))]
        return argv


def _label_study(study, settings: _StudySettings) -> None:
    """Record on the study what it tunes: the set, the metric, the split and (a fold study) how many
    of its queries."""
    study.set_user_attr("dataset", str(settings.dataset))
    study.set_user_attr("metric", settings.metric)
    study.set_user_attr("split", settings.split)
    if settings.query_ids is not None:
        study.set_user_attr("queries", len(settings.query_ids))


def _shared_storage(storage: str | None, run_dir: str | os.PathLike | None) -> str:
    """The storage URL worker processes reach the study at: `storage`, else the run folder's SQLite
    file, as an absolute path."""
    if storage:
        return storage
    # the study is in the run folder's SQLite file (`storage_for` refused neither given)
    assert run_dir is not None
    return f"sqlite:///{Path(run_dir).resolve() / 'study.db'}"


def _optimize(
    study,
    evaluator: Evaluator,
    space: Sequence[Param],
    settings: _StudySettings,
    seed: int,
    callbacks: Sequence[Any],
) -> None:
    """Run trials of `study` in this process (sampler seeded `seed`) until it holds the settings'
    completed trials (at most five attempts per trial: pruned trials do not count)."""
    from optuna.study import MaxTrialsCallback
    from optuna.trial import TrialState

    objective = Objective(
        evaluator,
        space,
        metric=settings.metric,
        split=settings.split,
        query_ids=settings.query_ids,
        base_index=settings.base_index,
        max_index_configs=settings.max_index_configs,
        trials=settings.trials,
        seed=seed,
    )
    study.optimize(
        objective,
        n_trials=settings.trials * 5,
        callbacks=[MaxTrialsCallback(settings.trials, states=(TrialState.COMPLETE,)), *callbacks],
    )


def run_study(
    dataset: str | os.PathLike,
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
    evaluator: Evaluator | None = None,
    progress: bool = False,
    enqueue_defaults: bool = True,
    workers: int = 1,
    split: str | None = None,
    query_ids: Sequence[str] | None = None,
    callbacks: Sequence[Any] = (),
):
    """Create or join a study and work until it holds `trials` completed trials (shared across all
    workers of the same storage + study; pruned trials — index-config cap, duplicate parameter sets,
    a full study — do not count). Trials are scored on `split` (default: the set's tuning split;
    ValueError for a set that is never tuned on), only on its `query_ids` when given (a fold study).
    The process that creates the study seeds its sampler with `seed`
    and enqueues the package defaults as the first trial (`enqueue_defaults`); a process joining an
    existing study never enqueues and seeds with :func:`derive_seed` (`seed`, :func:`worker_id`).
    `workers` > 1: this process only creates or joins the study, then runs that many worker
    processes on it (:func:`spawn_workers`) and waits for them. `callbacks`: more Optuna callbacks of
    this process's trials (e.g. :class:`hybridlab.tune.runs.TrialBar`, the notebook's progress bar)."""
    require("optuna")
    import optuna
    from optuna.trial import TrialState

    if workers < 1:
        raise InvalidValueError(f"workers must be >= 1, got {workers}", field="workers")
    evalset = evaluator.evalset if evaluator else resolve_evalset(dataset)
    split = split or tuning_split(evalset)
    evaluator = evaluator or Evaluator(evalset, progress=progress)
    settings = _StudySettings(
        dataset=dataset,
        trials=trials,
        study_name=study_name or f"{evalset.name}-{metric}",
        metric=metric,
        seed=seed,
        max_index_configs=max_index_configs,
        base_index=base_index,
        space=space,
        split=split,
        query_ids=query_ids,
    )
    space = space if space is not None else space_for(evalset.name)
    if not progress:
        optuna.logging.set_verbosity(optuna.logging.WARNING)
    join_seed = derive_seed(seed, worker_id())
    study, created = _create_study(optuna, settings.study_name, storage, run_dir, seed, join_seed)
    if enqueue_defaults and created:
        n_chunks = evaluator.index(base_index or IndexConfig()).n_chunks
        study.enqueue_trial(default_params(space, n_chunks, base_index), user_attrs={"defaults": True})
    _label_study(study, settings)
    if len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))) >= trials:
        return study  # joined a finished study
    if workers > 1:
        url = _shared_storage(storage, run_dir)
        evaluator.index(base_index or IndexConfig())  # built once here, not by every worker at once
        _run_workers(workers, study, settings, url, run_dir)
        return study
    _optimize(study, evaluator, space, settings, seed if created else join_seed, callbacks)
    return study


class _WorkerProcesses:
    """The worker processes of one study, each writing to its own log; started, watched and stopped
    together (:func:`spawn_workers`)."""

    def __init__(self, argv: Sequence[str], logs: Sequence[Path]) -> None:
        self.argv, self.logs = list(argv), list(logs)
        self.processes: list[subprocess.Popen] = []

    def start(self) -> None:
        """Start one worker per log (those started so far are in `processes` should one fail)."""
        for log in self.logs:
            with open(log, "wb") as out:
                self.processes.append(
                    subprocess.Popen(
                        self.argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
                    )
                )

    def wait(self, study, trials: int) -> None:
        """Wait until every worker has exited, printing the study's progress every PROGRESS_EVERY_S."""
        last = time.monotonic()
        while any(p.poll() is None for p in self.processes):
            time.sleep(0.5)
            if time.monotonic() - last >= PROGRESS_EVERY_S:
                print(progress_line(study, trials), flush=True)
                last = time.monotonic()

    def stop(self) -> None:
        """Terminate the workers still running, and kill those that do not exit within 30 s."""
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def raise_if_failed(self) -> None:
        """RuntimeError with the end of the first failed worker's log, when any failed."""
        failed = [(i, p.returncode) for i, p in enumerate(self.processes) if p.returncode != 0]
        if failed:
            i, code = failed[0]
            tail = self.logs[i].read_text(errors="replace")[-3000:]
            raise RuntimeError(
                f"{len(failed)} of {len(self.logs)} sweep workers failed; worker {i} exited {code}:\n{tail}"
            )


def spawn_workers(
    count: int,
    study,
    *,
    dataset: str | os.PathLike,
    trials: int,
    storage: str,
    study_name: str,
    metric: str = DEFAULT_METRIC,
    seed: int = 0,
    max_index_configs: int = DEFAULT_MAX_INDEX_CONFIGS,
    base_index: IndexConfig | None = None,
    space: Sequence[Param] | None = None,
    log_dir: str | os.PathLike | None = None,
    split: str | None = None,
    query_ids: Sequence[str] | None = None,
) -> None:
    """Run `count` worker processes (``python -m hybridlab.cli.sweep_worker``) on `study_name` in `storage`
    until the study holds `trials` completed trials (scored on `split`, only its `query_ids` when
    given), printing progress every PROGRESS_EVERY_S; each worker logs to `log_dir/worker-<i>.log`
    (`<study_name>-worker-<i>.log` when several studies share the folder). Raises RuntimeError when a worker failed (after the
    others finished); an interrupt stops them all (their running trials end as FAIL)."""
    settings = _StudySettings(
        dataset=dataset,
        trials=trials,
        study_name=study_name,
        metric=metric,
        seed=seed,
        max_index_configs=max_index_configs,
        base_index=base_index,
        space=space,
        split=split,
        query_ids=query_ids,
    )
    _run_workers(count, study, settings, storage, log_dir)


def _run_workers(
    count: int, study, settings: _StudySettings, storage: str, log_dir: str | os.PathLike | None
) -> None:
    """:func:`spawn_workers` of a study's settings: `count` workers on the study in `storage`, logging
    to `log_dir` (a new temporary folder when None)."""
    import tempfile

    argv = settings.worker_argv(storage)
    log_dir = Path(log_dir) if log_dir is not None else Path(tempfile.mkdtemp(prefix="hybridlab-workers-"))
    prefix = "" if settings.query_ids is None else f"{settings.study_name}-"
    workers = _WorkerProcesses(argv, [log_dir / f"{prefix}worker-{i}.log" for i in range(count)])
    try:
        workers.start()
        print(
            f"{count} workers on study {settings.study_name!r} (logs: {log_dir / f'{prefix}worker-*.log'})",
            flush=True,
        )
        workers.wait(study, settings.trials)
    finally:
        workers.stop()
    print(progress_line(study, settings.trials), flush=True)
    workers.raise_if_failed()


def progress_line(study, trials: int) -> str:
    """`<complete>/<trials> complete, <n> running, <n> pruned, <n> failed; best <value> (#<trial>)`."""
    counts = Counter(t.state.name for t in study.get_trials(deepcopy=False))
    line = (
        f"{counts['COMPLETE']}/{trials} complete, {counts['RUNNING']} running, "
        f"{counts['PRUNED']} pruned, {counts['FAIL']} failed"
    )
    if counts["COMPLETE"]:
        best = study.best_trial
        line += f"; best {best.value:.4f} (#{best.number})"
    return line


def absolute_storage(url: str | None) -> str | None:
    """`url` with a relative `journal:` or SQLite path made absolute (notebooks and workers run in
    other folders)."""
    if url is None:
        return None
    if url.startswith(JOURNAL_PREFIX):
        return JOURNAL_PREFIX + str(Path(url.removeprefix(JOURNAL_PREFIX)).expanduser().resolve())
    path = url.removeprefix("sqlite:///")
    if url.startswith("sqlite:///") and path and not path.startswith("/") and path != ":memory:":
        return f"sqlite:///{Path(path).resolve()}"
    return url


def public_storage(url: str | None) -> str | None:
    """`url` without its password, for records (libpq reads it from PGPASSWORD or ~/.pgpass)."""
    if url is None or url.startswith(JOURNAL_PREFIX) or "@" not in url:
        return url
    require("sqlalchemy")
    from sqlalchemy.engine import URL, make_url

    parsed = make_url(url)
    return URL.create(
        parsed.drivername, parsed.username, None, parsed.host, parsed.port, parsed.database, parsed.query
    ).render_as_string(hide_password=False)


def stop_with_parent(parent: int, every_s: float = 2.0) -> None:
    """Interrupt the main thread (its running trial ends as FAIL) once `parent` is no longer this
    process's parent: a killed sweep leaves no workers behind."""
    import _thread
    import threading

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(every_s)
        _thread.interrupt_main()

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def run_worker(
    dataset: str | os.PathLike,
    *,
    trials: int,
    storage: str,
    study_name: str,
    metric: str = DEFAULT_METRIC,
    seed: int = 0,
    max_index_configs: int = DEFAULT_MAX_INDEX_CONFIGS,
    base_index: IndexConfig | None = None,
    space: Sequence[Param] | None = None,
    split: str | None = None,
    query_ids: Sequence[str] | None = None,
) -> None:
    """The work of one sweep worker process (started by :func:`spawn_workers`, its command line read
    by :mod:`hybridlab.cli.sweep_worker`): join the study `study_name` in `storage` and work until it
    holds `trials` trials (scored on `split`, only its `query_ids` when given)."""
    evaluator = Evaluator(resolve_evalset(dataset), progress=False)
    print(
        f"worker {worker_id()} joins study {study_name!r} (seed {derive_seed(seed, worker_id())})",
        flush=True,
    )
    study = run_study(
        dataset,
        trials=trials,
        storage=storage,
        study_name=study_name,
        metric=metric,
        seed=seed,
        max_index_configs=max_index_configs,
        base_index=base_index,
        space=space,
        evaluator=evaluator,
        progress=True,
        enqueue_defaults=False,
        split=split,
        query_ids=query_ids,
    )
    print(progress_line(study, trials), flush=True)


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


def _chosen_config(study, fold: int) -> dict[str, Any]:
    """What the study of fold `fold` (numbered from 1) chose: its best trial, its value on the other
    folds' queries, and its search settings and index config."""
    best = study.best_trial
    return {
        "fold": fold,
        "study": study.study_name,
        "trial": best.number,
        "params": best.params,
        "tuning_value": best.value,
        "defaults": bool(best.user_attrs.get("defaults")),
        "search": best.user_attrs["search"],
        "index": best.user_attrs["index"],
    }


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


def _tuned_out_of_fold(metrics: dict[str, float], result: CrossValidation) -> dict[str, Any]:
    """The tuning procedure's record of a cross-validation: its out-of-fold metrics, fold means,
    mean with its interval, and per-query values."""
    tuned = result.to_dict()
    return {
        "metrics": metrics,
        **{
            key: tuned[key]
            for key in ("fold_means", "mean", "low", "high", "confidence", "method", "per_query")
        },
    }


def _defaults_out_of_fold(
    metrics: dict[str, float],
    per_query: Mapping[str, float],
    interval: Interval,
    folds: Sequence[Sequence[str]],
) -> dict[str, Any]:
    """The defaults' record of a cross-validation: their metrics, their mean on each fold's queries,
    the mean with its interval, and their per-query values."""
    return {
        "metrics": metrics,
        "fold_means": [sum(per_query[q] for q in fold) / len(fold) for fold in folds],
        **interval.to_dict(),
        "per_query": dict(sorted(per_query.items())),
    }


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
) -> dict[str, Any]:
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
    return {
        "k": k,
        "trials_per_fold": trials,
        "metric": metric,
        "folds": result.folds,
        "configs": result.configs,
        "tuned": _tuned_out_of_fold(tuned_metrics, result),
        "defaults": _defaults_out_of_fold(defaults_metrics, defaults_per_query, defaults_ci, result.folds),
        "comparison": outcome.to_dict(),
        "significant": significant,
        "verdict": verdict,
    }


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
) -> dict[str, Any]:
    """Nested k-fold cross-validation of the tuning procedure on a cross-validated set (memories,
    holoviz; `k` = its `cv_folds`): for each fold a study of `trials` trials (defaults enqueued first,
    like every study) tunes on the other folds' queries, and the fold's queries are scored by the
    config it chose. Returns the folds, each fold's chosen config, the out-of-fold per-query values,
    fold means and mean with a 95% t interval, the same for the defaults on the same queries, and a
    paired `test` of tuned-out-of-fold against the defaults (`significant`: p < MAX_P, higher mean).
    Fold studies live beside the main one, named `<name>-fold<i>of<k>` (i from 1); `callbacks` go to
    each fold study (:func:`run_study`)."""
    evalset = evaluator.evalset
    _require_cross_validated(evalset)
    split, k = CROSS_VALIDATED, evalset.cv_folds
    assert k is not None  # a cross-validated set has its folds
    ids = sorted(evaluator.dataset(split).queries)
    folds = k_folds(ids, k)
    name = study_name or f"{evalset.name}-{metric}"
    run: dict[str, dict[str, float]] = {}

    def tune(train: list[str]) -> dict[str, Any]:
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

    def score(config: Mapping[str, Any], fold_ids: list[str]) -> dict[str, float]:
        fold_run = out_of_fold_run(evaluator, [fold_ids], [config], split)
        run.update(fold_run)
        return score_run(evaluator, fold_run, split, metric)[0]

    result = nested_cv(ids, tune, score, k=k)
    return _cross_validation_record(
        evaluator, result, run, ids, trials=trials, metric=metric, test=test, base_index=base_index
    )


def query_kinds(evalset: EvalSet, per_query: Mapping[str, Mapping[str, float]]) -> dict[str, dict] | None:
    """{system: {kind: {n, mean}}} of one metric's per-query values, or None when the set's queries
    carry no `metadata.kind` (the BEIR sets)."""
    kinds = {
        system: per_kind(evalset.queries_path, values, evalset.kinds) for system, values in per_query.items()
    }
    if all(set(by_kind) <= {"-"} for by_kind in kinds.values()):
        return None
    return kinds


@dataclass(frozen=True)
class _TunedScore:
    """The tuned side of a sweep's record: its per-query values and metrics (the best trial's config
    on the report split; the tuning procedure's out-of-fold scores on a cross-validated set), and
    whether, by `comparison`, it beats the defaults, said in one sentence (`verdict`)."""

    per_query: dict[str, float]
    metrics: dict[str, float]
    beats: bool
    verdict: str
    comparison: dict[str, Any]

    @classmethod
    def out_of_fold(cls, cv: Mapping[str, Any]) -> _TunedScore:
        """The tuning procedure's scores of a nested cross-validation (:func:`cross_validate`)."""
        return cls(
            dict(cv["tuned"]["per_query"]),
            dict(cv["tuned"]["metrics"]),
            bool(cv["significant"]),
            cv["verdict"],
            dict(cv["comparison"]),
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
    return _TunedScore(per_query, test, beats, verdict, outcome.to_dict())


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
    cv: Mapping[str, Any] | None = None,
) -> SweepRecord:
    """The sweep's record (:class:`~hybridlab.tune.record.SweepRecord`). The best trial of `study` (tuned on the set's tuning split) and the
    defaults, BM25 and vector search scored on the report split, with a paired test of tuned vs
    defaults, per query kind where the queries have kinds. A cross-validated set needs `cv`
    (:func:`cross_validate`): its "test" figures are then the tuning procedure's out-of-fold scores,
    and `study` (tuned on every query) gives the config an export serves only when the nested CV
    is significant. Keys keep their historical names: `dev_*` = the tuning split (`tuned_on`),
    `test_*` = the report split (`split`)."""
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
    record = {
        "dataset": evaluator.evalset.name,
        "metric": metric,
        "split": report,
        "tuned_on": tuning,
        "now": evaluator.evalset.now,
        "study": study.study_name,
        "trials": {
            "complete": sum(t.state.name == "COMPLETE" for t in study.trials),
            "pruned": sum(t.state.name == "PRUNED" for t in study.trials),
        },
        "queries": {tuning: len(evaluator.dataset(tuning).queries), report: len(report_ids)},
        "best": {
            "trial": best.number,
            "params": best.params,
            "dev_value": best.value,
            "dev_metrics": best.user_attrs.get("metrics"),
            "search": search,
            "index": config.to_dict(),
            "test_metrics": tuned.metrics,
        },
        "defaults": {"index": base_index.to_dict(), "dev_metrics": defaults_dev},
        "baselines": baselines,
        "comparison": tuned.comparison,
        "per_kind": query_kinds(evalset, per_query),
        "cross_validation": dict(cv) if cv is not None else None,
        "beats_defaults": tuned.beats,
        "verdict": tuned.verdict,
        "engine": engine_state(),
    }
    return SweepRecord.from_json(record)


def out_of_sample_figures(record: SweepRecord) -> dict[str, Any]:
    """A sweep's out-of-sample figures, as `{"queries", "metrics"}` (what `hybridlab eval --json`
    prints, so a reproduction condition can record them): the tuning procedure's out-of-fold
    metrics on a cross-validated set (with `<metric>_low`/`_high`, its 95% interval), else the tuned
    config's on the report split; with `defaults_<metric>` (the defaults on the same queries), `p_value` (the paired test) and, where the
    queries have kinds, `<metric>[<kind>]` of the tuned (out-of-fold) runs per kind."""
    metric, comparison, cv = record.metric, record.comparison or {}, record.cross_validation
    figures = {
        **record.tuned_metrics,
        f"defaults_{metric}": comparison["mean_b"],
        "p_value": comparison["p_value"],
    }
    if cv:  # the out-of-fold mean's 95% interval
        figures.update({f"{metric}_low": cv["tuned"]["low"], f"{metric}_high": cv["tuned"]["high"]})
    for kind, value in sorted(((record.per_kind or {}).get("tuned") or {}).items()):
        if kind != "-":
            figures[f"{metric}[{kind}]"] = value["mean"]
    return {"queries": comparison["n"], "metrics": figures}
