"""Hyper-parameter search with Optuna: search spaces per dataset, the dev-split objective, studies.

Tune on the dev split, report on test (pyserini/ranx style). A trial suggests search-time knobs
(alpha, fusion, rrf_k, normalization, recency, tag weight, staged candidates) and index-build knobs
(BM25 k1/b, chunk size/overlap). Each distinct index config is built once by
:func:`hybridlab.eval.evalsets.ensure_index` (chunk variants embed only their new chunk texts through the
shared embeddings cache); a study holds at most ``max_index_configs`` of them — a trial asking for
one more is pruned before it costs anything.

`hybridlab sweep` runs ``notebooks/sweep.ipynb`` through papermill; the notebook calls
:func:`run_study` and :func:`finalize`. With ``workers`` > 1 :func:`run_study` creates the study
(and its schema) once, enqueues the defaults, then starts that many worker processes
(``python -m hybridlab.tune.sweep``, :func:`worker_main`) on the same storage and waits for them;
the same command on other machines joins the study (docs/scale-out.md).
"""
from __future__ import annotations

import argparse
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
from hybridlab.tune.runs import JOURNAL_PREFIX, new_run_dir, storage_for, update_index, write_summary

logger = logging.getLogger(__name__)

DEFAULT_METRIC = "ndcg@10"
DEFAULT_TRIALS = {"memories": 120, "scifact": 80, "holoviz": 30}
DEFAULT_MAX_INDEX_CONFIGS = 4
#: a worker whose trial would overshoot the study waits this long between looks at the study
SLOT_POLL_S = 1.0
#: a trial RUNNING for longer than this (its worker died) no longer holds one of the study's slots
STALE_AFTER_S = 2 * 3600.0
#: seconds between two progress lines of the process that waits for its workers
PROGRESS_EVERY_S = 30.0
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
                 max_index_configs: int = DEFAULT_MAX_INDEX_CONFIGS, trials: int | None = None,
                 seed: int | None = None) -> None:
        from hybridlab.eval.evaluate import METRICS

        if metric not in METRICS:
            raise ValueError(f"unknown metric {metric!r}; choose from {list(METRICS)}")
        if max_index_configs < 1:
            raise ValueError(f"max_index_configs must be >= 1, got {max_index_configs}")
        self.evaluator, self.space, self.metric, self.split = evaluator, tuple(space), metric, split
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
        used = {t.user_attrs.get("index_key") for t in trial.study.get_trials(deepcopy=False)
                if t.number != trial.number and t.state.name in {"COMPLETE", "RUNNING"}}
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
        metrics = self.evaluator.score(search, config, self.split)
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
            ahead = sum(t.number < trial.number and (
                t.state == TrialState.COMPLETE or t.datetime_start is None
                or (now - t.datetime_start).total_seconds() < STALE_AFTER_S) for t in trials)
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


def _create_study(optuna, name: str, storage: str | None, run_dir, seed: int, join_seed: int,
                  attempts: int = 10):
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
            return optuna.create_study(study_name=name, storage=storage_for(storage, run_dir),
                                       sampler=sampler(seed), direction="maximize"), True
        except optuna.exceptions.DuplicatedStudyError:
            return optuna.load_study(study_name=name, storage=storage_for(storage, run_dir),
                                     sampler=sampler(join_seed)), False

    for attempt in range(attempts - 1):
        try:
            return create()
        except (SQLAlchemyError, optuna.exceptions.StorageInternalError):  # schema creation race
            time.sleep(0.5 + attempt)
    return create()


def run_study(dataset: str | os.PathLike, *, trials: int, storage: str | None = None,
              study_name: str | None = None, run_dir: str | os.PathLike | None = None,
              metric: str = DEFAULT_METRIC, seed: int = 0, max_index_configs: int = DEFAULT_MAX_INDEX_CONFIGS,
              base_index: IndexConfig | None = None, space: Sequence[Param] | None = None,
              evaluator: Evaluator | None = None, progress: bool = False, enqueue_defaults: bool = True,
              workers: int = 1):
    """Create or join a study and work until it holds `trials` completed trials (shared across all
    workers of the same storage + study; pruned trials — index-config cap, duplicate parameter sets,
    a full study — do not count). The process that creates the study seeds its sampler with `seed`
    and enqueues the package defaults as the first trial (`enqueue_defaults`); a process joining an
    existing study never enqueues and seeds with :func:`derive_seed` (`seed`, :func:`worker_id`).
    `workers` > 1: this process only creates or joins the study, then runs that many worker
    processes on it (:func:`spawn_workers`) and waits for them."""
    import optuna
    from optuna.study import MaxTrialsCallback
    from optuna.trial import TrialState

    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    evalset = evaluator.evalset if evaluator else resolve_evalset(dataset)
    evaluator = evaluator or Evaluator(evalset, progress=progress)
    custom_space = space
    space = space if space is not None else space_for(evalset.name)
    if not progress:
        optuna.logging.set_verbosity(optuna.logging.WARNING)
    name = study_name or f"{evalset.name}-{metric}"
    join_seed = derive_seed(seed, worker_id())
    study, created = _create_study(optuna, name, storage, run_dir, seed, join_seed)
    if enqueue_defaults and created:
        n_chunks = evaluator.index(base_index or IndexConfig()).n_chunks
        study.enqueue_trial(default_params(space, n_chunks, base_index), user_attrs={"defaults": True})
    study.set_user_attr("dataset", str(dataset))
    study.set_user_attr("metric", metric)
    if len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))) >= trials:
        return study  # joined a finished study
    if workers > 1:
        url = storage or f"sqlite:///{Path(run_dir).resolve() / 'study.db'}"
        evaluator.index(base_index or IndexConfig())  # built once here, not by every worker at once
        spawn_workers(workers, study, dataset=dataset, trials=trials, storage=url, study_name=name,
                      metric=metric, seed=seed, max_index_configs=max_index_configs, base_index=base_index,
                      space=custom_space, log_dir=run_dir)
        return study
    objective = Objective(evaluator, space, metric=metric, base_index=base_index,
                          max_index_configs=max_index_configs, trials=trials,
                          seed=seed if created else join_seed)
    study.optimize(objective, n_trials=trials * 5,
                   callbacks=[MaxTrialsCallback(trials, states=(TrialState.COMPLETE,))])
    return study


def spawn_workers(count: int, study, *, dataset: str | os.PathLike, trials: int, storage: str, study_name: str,
                  metric: str = DEFAULT_METRIC, seed: int = 0, max_index_configs: int = DEFAULT_MAX_INDEX_CONFIGS,
                  base_index: IndexConfig | None = None, space: Sequence[Param] | None = None,
                  log_dir: str | os.PathLike | None = None) -> None:
    """Run `count` worker processes (``python -m hybridlab.tune.sweep``) on `study_name` in `storage`
    until the study holds `trials` completed trials, printing progress every PROGRESS_EVERY_S; each
    worker logs to `log_dir/worker-<i>.log`. Raises RuntimeError when a worker failed (after the
    others finished); an interrupt stops them all (their running trials end as FAIL)."""
    import tempfile

    argv = [sys.executable, "-m", "hybridlab.tune.sweep", "--dataset", str(dataset), "--trials", str(trials),
            "--storage", storage, "--study", study_name, "--metric", metric, "--seed", str(seed),
            "--max-index-configs", str(max_index_configs),
            "--index", json.dumps((base_index or IndexConfig()).to_dict()), "--parent", str(os.getpid())]
    if space is not None:
        argv += ["--space", json.dumps([dataclasses.asdict(p) for p in space])]
    log_dir = Path(log_dir) if log_dir is not None else Path(tempfile.mkdtemp(prefix="hybridlab-workers-"))
    logs = [log_dir / f"worker-{i}.log" for i in range(count)]
    processes: list[subprocess.Popen] = []
    try:
        for log in logs:
            with open(log, "wb") as out:
                processes.append(subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                                  stdin=subprocess.DEVNULL))
        print(f"{count} workers on study {study_name!r} (logs: {log_dir / 'worker-*.log'})", flush=True)
        last = time.monotonic()
        while any(p.poll() is None for p in processes):
            time.sleep(0.5)
            if time.monotonic() - last >= PROGRESS_EVERY_S:
                print(progress_line(study, trials), flush=True)
                last = time.monotonic()
    finally:
        for process in processes:
            if process.poll() is None:
                process.terminate()
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    print(progress_line(study, trials), flush=True)
    failed = [(i, p.returncode) for i, p in enumerate(processes) if p.returncode != 0]
    if failed:
        i, code = failed[0]
        tail = logs[i].read_text(errors="replace")[-3000:]
        raise RuntimeError(f"{len(failed)} of {count} sweep workers failed; worker {i} exited {code}:\n{tail}")


def progress_line(study, trials: int) -> str:
    """`<complete>/<trials> complete, <n> running, <n> pruned, <n> failed; best <value> (#<trial>)`."""
    counts: dict[str, int] = {}
    for t in study.get_trials(deepcopy=False):
        counts[t.state.name] = counts.get(t.state.name, 0) + 1
    line = (f"{counts.get('COMPLETE', 0)}/{trials} complete, {counts.get('RUNNING', 0)} running, "
            f"{counts.get('PRUNED', 0)} pruned, {counts.get('FAIL', 0)} failed")
    if counts.get("COMPLETE"):
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
    from sqlalchemy.engine import URL, make_url

    parsed = make_url(url)
    return URL.create(parsed.drivername, parsed.username, None, parsed.host, parsed.port, parsed.database,
                      parsed.query).render_as_string(hide_password=False)


def _param_from_dict(data: Mapping[str, Any]) -> Param:
    when = data.get("when")
    return Param(**{**data, "choices": tuple(data.get("choices", ())),
                    "when": (when[0], tuple(when[1])) if when else None})


def _stop_with_parent(parent: int, every_s: float = 2.0) -> None:
    """Interrupt the main thread (its running trial ends as FAIL) once `parent` is no longer this
    process's parent: a killed sweep leaves no workers behind."""
    import _thread
    import threading

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(every_s)
        _thread.interrupt_main()

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def worker_main(argv: Sequence[str] | None = None) -> int:
    """One sweep worker process (started by :func:`spawn_workers`): join the study and work until it
    holds its trials. SIGTERM ends the running trial as FAIL."""
    import signal

    def interrupt(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    parser = argparse.ArgumentParser(prog="python -m hybridlab.tune.sweep",
                                     description="one worker of a shared Optuna sweep")
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--trials", type=int, required=True)
    parser.add_argument("--storage", required=True)
    parser.add_argument("--study", required=True)
    parser.add_argument("--metric", default=DEFAULT_METRIC)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-index-configs", type=int, default=DEFAULT_MAX_INDEX_CONFIGS)
    parser.add_argument("--index", help="the base IndexConfig as JSON")
    parser.add_argument("--space", help="the search space as a JSON list of Param fields")
    parser.add_argument("--parent", type=int, help="stop when this process (the one waiting) is gone")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, interrupt)
    if args.parent is not None:
        _stop_with_parent(args.parent)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("hybridlab").setLevel(logging.INFO)
    base_index = IndexConfig.from_dict(json.loads(args.index)) if args.index else None
    space = tuple(_param_from_dict(p) for p in json.loads(args.space)) if args.space else None
    evaluator = Evaluator(resolve_evalset(args.dataset), progress=False)
    print(f"worker {worker_id()} joins study {args.study!r} (seed {derive_seed(args.seed, worker_id())})",
          flush=True)
    study = run_study(args.dataset, trials=args.trials, storage=args.storage, study_name=args.study,
                      metric=args.metric, seed=args.seed, max_index_configs=args.max_index_configs,
                      base_index=base_index, space=space, evaluator=evaluator, progress=True,
                      enqueue_defaults=False)
    print(progress_line(study, args.trials), flush=True)
    return 0


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
    """`hybridlab sweep`: run notebooks/sweep.ipynb into a new run folder, then export the winner.
    With `--workers N` the notebook runs N worker processes on the study (docs/scale-out.md)."""
    from papermill.exceptions import PapermillExecutionError

    from hybridlab.eval.evaluate import METRICS
    from hybridlab.tune.export import export_config, write_config
    from hybridlab.tune.notebooks import run_notebook

    if args.metric not in METRICS:
        raise ValueError(f"unknown metric {args.metric!r}; choose from {list(METRICS)}")
    resolve_evalset(args.dataset)  # an unknown name fails here, listing the choices
    trials = args.trials or DEFAULT_TRIALS.get(Path(args.dataset).name, 30)
    workers = getattr(args, "workers", 1)
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    run_dir = new_run_dir(args.reports, f"sweep-{Path(args.dataset).name}")
    parameters = {"dataset": str(args.dataset), "trials": trials, "storage": absolute_storage(args.storage),
                  "study": args.study, "workers": workers,
                  "metric": args.metric, "seed": getattr(args, "seed", 0),
                  "max_index_configs": getattr(args, "max_index_configs", DEFAULT_MAX_INDEX_CONFIGS),
                  "models": getattr(args, "models", None),
                  "run_dir": str(run_dir.resolve())}
    print(f"sweep {args.dataset}: {trials} trials{f' on {workers} workers' if workers > 1 else ''} -> {run_dir}",
          flush=True)
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


if __name__ == "__main__":
    sys.exit(worker_main())
