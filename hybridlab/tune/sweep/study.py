"""Create or join a study and work on it until it holds its trials: in this process, or through
worker processes on shared storage (:mod:`.workers`); and the work of one such worker."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

from hybridlab.config import IndexConfig
from hybridlab.errors import InvalidValueError
from hybridlab.eval.evaluator import Evaluator, resolve_evalset
from hybridlab.extras import require
from hybridlab.tune.sweep.objective import (
    DEFAULT_MAX_INDEX_CONFIGS,
    DEFAULT_METRIC,
    Objective,
    tuning_split,
    worker_id,
)
from hybridlab.tune.sweep.progress import progress_line
from hybridlab.tune.sweep.space import Param, default_params, space_for
from hybridlab.tune.sweep.storage import shared_storage, storage_for
from hybridlab.tune.sweep.workers import StudySettings, derive_seed, run_workers

#: Trials of the study on the whole tuning split; a cross-validated set also runs one study per fold
#: (:func:`~hybridlab.tune.sweep.crossval.fold_trials`: memories 5 x 40). Once the indexes are built
#: a trial takes about 1 s here on SciFact's 809 train queries (query vectors are cached) and 0.2 s
#: on memories.
DEFAULT_TRIALS = {"memories": 200, "scifact": 80, "holoviz": 30}


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


def _label_study(study, settings: StudySettings) -> None:
    """Record on the study what it tunes: the set, the metric, the split and (a fold study) how many
    of its queries."""
    study.set_user_attr("dataset", str(settings.dataset))
    study.set_user_attr("metric", settings.metric)
    study.set_user_attr("split", settings.split)
    if settings.query_ids is not None:
        study.set_user_attr("queries", len(settings.query_ids))


def _optimize(
    study,
    evaluator: Evaluator,
    space: Sequence[Param],
    settings: StudySettings,
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
    existing study never enqueues and seeds with :func:`~.workers.derive_seed` (`seed`, :func:`~.objective.worker_id`).
    `workers` > 1: this process only creates or joins the study, then runs that many worker
    processes on it (:func:`~.workers.spawn_workers`) and waits for them. `callbacks`: more Optuna callbacks of
    this process's trials (e.g. :class:`~.progress.TrialBar`, the notebook's progress bar)."""
    require("optuna")
    import optuna
    from optuna.trial import TrialState

    if workers < 1:
        raise InvalidValueError(f"workers must be >= 1, got {workers}", field="workers")
    evalset = evaluator.evalset if evaluator else resolve_evalset(dataset)
    split = split or tuning_split(evalset)
    evaluator = evaluator or Evaluator(evalset, progress=progress)
    settings = StudySettings(
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
        url = shared_storage(storage, run_dir)
        evaluator.index(base_index or IndexConfig())  # built once here, not by every worker at once
        run_workers(workers, study, settings, url, run_dir)
        return study
    _optimize(study, evaluator, space, settings, seed if created else join_seed, callbacks)
    return study


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
    """The work of one sweep worker process (started by :func:`~.workers.spawn_workers`, its command line read
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
