"""The value of one trial: the metric of its settings on the tuning split (or on a fold study's
queries), with the guards that keep a study honest: one trial per parameter set, a cap on the index
configs a study builds, and no more completed trials than asked for, however many workers share it."""

from __future__ import annotations

import datetime as dt
import os
import socket
import time
from collections.abc import Sequence

from hybridlab.config import IndexConfig
from hybridlab.errors import InvalidValueError
from hybridlab.eval.evalsets import EvalSet, check_tunable
from hybridlab.eval.evaluate import METRICS
from hybridlab.eval.evaluator import Evaluator, full_search_config, index_key
from hybridlab.tune.export import measure_settings
from hybridlab.tune.sweep.space import Param, split_params, suggest

DEFAULT_METRIC = "ndcg@10"
DEFAULT_MAX_INDEX_CONFIGS = 4
#: a worker whose trial would overshoot the study waits this long between looks at the study
SLOT_POLL_S = 1.0
#: a trial RUNNING for longer than this (its worker died) no longer holds one of the study's slots
STALE_AFTER_S = 2 * 3600.0


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
