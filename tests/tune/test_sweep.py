"""The Optuna sweep: search spaces, parameter routing, the index-config cap, shared studies."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from tiny_evalset import tiny_env, tiny_index  # noqa: F401  (fixtures)

from hybridlab.config import IndexConfig, SearchConfig, adaptive_alpha
from hybridlab.eval.datasets import Dataset
from hybridlab.eval.evalsets import EvalSet
from hybridlab.eval.evaluate import score
from hybridlab.eval.evaluator import full_search_config, resolve_evalset
from hybridlab.tune.export import export_config
from hybridlab.tune.record import KindFigure
from hybridlab.tune.summary import write_summary
from hybridlab.tune.sweep.crossval import cross_validate
from hybridlab.tune.sweep.finalize import finalize
from hybridlab.tune.sweep.objective import Objective
from hybridlab.tune.sweep.space import (
    ALPHA,
    BM25_K1,
    FUSION,
    INDEX_TARGETS,
    NORMALIZATION,
    RRF_K,
    SPACES,
    Param,
    default_params,
    space_for,
    split_params,
    suggest,
)
from hybridlab.tune.sweep.study import run_study

optuna.logging.set_verbosity(optuna.logging.WARNING)


def test_suggest_asks_only_for_active_conditional_parameters():
    space = (FUSION, ALPHA, RRF_K, NORMALIZATION)
    rrf = suggest(optuna.trial.FixedTrial({"fusion": "rrf", "alpha": 0.25, "rrf_k": 30}), space)
    assert rrf == {"fusion": "rrf", "alpha": 0.25, "rrf_k": 30}
    convex = suggest(
        optuna.trial.FixedTrial({"fusion": "convex", "alpha": 0.5, "normalization": "z-score"}), space
    )
    assert convex == {"fusion": "convex", "alpha": 0.5, "normalization": "z-score"}


def test_split_params_routes_index_parameters_into_the_index_config():
    search, config = split_params(
        {"alpha": 0.3, "bm25_k1": 0.9, "bm25_b": 0.5, "chunk_size": 800, "chunk_overlap": 0},
        IndexConfig(models=("wordllama",)),
    )
    assert search == {"alpha": 0.3}
    assert (config.bm25.k1, config.bm25.b, config.chunk.chunk_size, config.chunk.chunk_overlap) == (
        0.9,
        0.5,
        800,
        0,
    )
    assert config.models == ("wordllama",)
    assert config.bm25.method == "lucene"  # untouched fields keep the base's values


def test_full_search_config_holds_every_field_and_validates():
    full = full_search_config({"alpha": 0.4, "fusion": "dbsf"})
    assert set(full) == set(SearchConfig.__dataclass_fields__)
    assert (full["alpha"], full["fusion"], full["rrf_k"]) == (0.4, "dbsf", 60)
    assert (
        full_search_config({"candidates": 40})["candidates"] == 100
    )  # the engine scores max(candidates, limit)
    with pytest.raises(ValueError, match="alpha"):
        full_search_config({"alpha": 1.5})


def test_default_spaces_sweep_search_and_bm25_knobs_not_chunking():
    names = {name: {p.name for p in space_for(name)} for name in ("memories", "holoviz", "scifact")}
    assert "chunk_size" not in names["holoviz"] | names["scifact"] | names["memories"]  # re-embeds per value
    assert {"adaptive_fusion", "lexical_floor", "lexical_ceiling"} <= names["holoviz"] & names["scifact"]
    assert "recency_intent_weight" in names["memories"] and "recency_intent_weight" not in names["scifact"]
    assert {"bm25_k1", "bm25_b", "alpha", "fusion"} <= names["scifact"]
    assert "decay" in names["memories"] and "decay" not in names["scifact"]  # BEIR documents have no dates


def test_param_rejects_unknown_names_and_kinds():
    with pytest.raises(ValueError, match="unknown parameter 'nonsense'"):
        Param("nonsense", "float", 0, 1)
    with pytest.raises(ValueError, match="unknown parameter kind"):
        Param("alpha", "normal", 0, 1)


def test_resolve_evalset_reads_a_folder_with_its_now(tmp_path):
    (tmp_path / "memories.jsonl").write_text("")
    (tmp_path / "eval.json").write_text(json.dumps({"now": "2026-01-01T00:00:00Z"}))
    evalset = resolve_evalset(tmp_path)
    assert evalset == EvalSet(tmp_path.name, (tmp_path / "memories.jsonl",), tmp_path, "2026-01-01T00:00:00Z")


def test_default_params_are_the_package_defaults_in_the_space():
    space = space_for("scifact")
    assert default_params(space, n_chunks=6000) == {
        "fusion": SearchConfig.fusion,
        "alpha": 0.6,
        **({"rrf_k": 60} if SearchConfig.fusion == "rrf" else {}),
        **({"normalization": SearchConfig.normalization} if SearchConfig.fusion == "convex" else {}),
        "staged": True,
        "candidates": SearchConfig.candidates,
        "fallback_threshold": SearchConfig.fallback_threshold,
        "expand_hops": SearchConfig.expand_hops,
        "fill_dense": True,
        "adaptive_fusion": True,
        "lexical_floor": SearchConfig.lexical_floor,
        "lexical_ceiling": SearchConfig.lexical_ceiling,
        "feedback_weight": SearchConfig.feedback_weight,
        "bm25_k1": 1.5,
        "bm25_b": 0.75,
    }
    small = default_params(space, n_chunks=100)
    assert small["staged"] is False and small["fill_dense"] is False and small["alpha"] == 0.5


def _shipped_defaults(name: str) -> list:
    """Every value the shipped defaults can take for a swept parameter (auto ones both ways)."""
    if name in INDEX_TARGETS:
        part, field = INDEX_TARGETS[name]
        return [getattr(getattr(IndexConfig(), part), field)]
    if name == "alpha":
        return [adaptive_alpha(100), adaptive_alpha(100_000)]
    value = getattr(SearchConfig(), name)
    return [False, True] if value is None and name in {"staged", "fill_dense"} else [value]


@pytest.mark.parametrize("dataset", sorted(SPACES))
def test_every_shipped_default_lies_in_its_sweep_range(dataset):
    for param in SPACES[dataset]:
        for value in _shipped_defaults(param.name):
            assert param.contains(value), f"{dataset}: the default {param.name}={value!r} is outside {param}"
    for n_chunks in (
        100,
        6000,
    ):  # the enqueued first trial is exactly the defaults, off or on the auto switches
        assert default_params(SPACES[dataset], n_chunks)


def test_param_contains_checks_range_grid_and_choices():
    weight = Param("tag_weight", "float", 0.0, 8.0, step=0.1)
    assert (
        weight.contains(4.0)
        and weight.contains(0.3)
        and not weight.contains(8.1)
        and not weight.contains(0.05)
    )
    assert not Param("tag_weight", "float", 0.0, 3.0, step=0.1).contains(SearchConfig.tag_weight)
    assert FUSION.contains("convex") and not FUSION.contains("sum")
    assert not Param("staged", "categorical", choices=(False, True)).contains(0)
    with pytest.raises(ValueError, match="the default tag_weight=4.0 lies outside its sweep range"):
        default_params((Param("tag_weight", "float", 0.0, 3.0, step=0.1),), n_chunks=100)


def test_objective_tunes_on_the_declared_tuning_split_and_never_on_untunable_sets(tmp_path):
    scifact_like = FakeEvaluator()
    scifact_like.evalset = EvalSet("scifact", (), Path("."), None, tuning_split="train", report_split="test")
    assert Objective(scifact_like, (ALPHA,)).split == "train"
    never = FakeEvaluator()
    never.evalset = EvalSet("cisi", (), Path("."), None, tuning_split=None, report_split="all")
    with pytest.raises(ValueError, match="cisi is never tuned on"):
        Objective(never, (ALPHA,))
    with pytest.raises(ValueError, match="cisi is never tuned on"):
        run_study("cisi", trials=2, run_dir=tmp_path, evaluator=never, space=(ALPHA,))


class FakeEvaluator:
    """Scores without an index: ndcg@10 = 1 - |alpha - 0.7| (so the best alpha is 0.7)."""

    evalset = EvalSet("fake", (), Path("."), None)

    def __init__(self) -> None:
        self.index_configs: set[str] = set()

    def score(self, search, config, split="dev", metrics=None):
        self.index_configs.add(json.dumps(config.to_dict(), sort_keys=True))
        value = 1.0 - abs(search["alpha"] - 0.7)
        return {"hit_rate@10": 1.0, "mrr": value, "ndcg@10": value, "recall@100": 1.0}


def test_study_respects_the_index_config_cap_and_counts_only_completed_trials(tmp_path):
    evaluator = FakeEvaluator()
    study = run_study(
        "fake",
        trials=8,
        run_dir=tmp_path,
        evaluator=evaluator,
        max_index_configs=2,
        enqueue_defaults=False,
        space=(ALPHA, BM25_K1, Param("bm25_b", "categorical", choices=(0.3, 0.6, 0.9))),
    )
    states = [t.state.name for t in study.trials]
    assert states.count("COMPLETE") == 8
    assert len(evaluator.index_configs) <= 2
    assert len({t.user_attrs["index_key"] for t in study.trials if t.state.name == "COMPLETE"}) <= 2
    assert (tmp_path / "study.db").is_file()


def test_same_seed_same_suggestions(tmp_path):
    params = []
    for name in ("a", "b"):
        study = run_study(
            "fake",
            trials=5,
            storage=f"sqlite:///{tmp_path / name}.db",
            evaluator=FakeEvaluator(),
            space=(FUSION, ALPHA),
            seed=7,
            enqueue_defaults=False,
        )
        params.append([t.params for t in study.trials])
    assert params[0] == params[1]


WORKER = """
import sys, time
from pathlib import Path
from hybridlab.config import IndexConfig
from hybridlab.eval.evaluator import Evaluator, resolve_evalset
from hybridlab.tune.sweep.progress import progress_line
from hybridlab.tune.sweep.space import INDEX_TARGETS, space_for
from hybridlab.tune.sweep.study import run_study
folder, storage, seed, flags = sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
other = 3 - seed
try:
    base = IndexConfig(models=("wordllama",))
    evaluator = Evaluator(resolve_evalset(folder))
    evaluator.score({}, base, "dev")  # warm up (model, index, ranx) so both workers start trials together
    (flags / f"ready-{seed}").touch()
    while not (flags / "go").exists():
        time.sleep(0.05)
    score, scored = evaluator.score, []

    def score_once_both_run(*args, **kwargs):
        # a barrier on each worker's FIRST scored trial only (on a loaded machine one worker could
        # otherwise fill the whole study before the other's first trial starts); released early
        # when the other worker has exited, so a dead partner cannot hold this one for minutes
        if not scored:
            (flags / f"trial-{seed}").touch()
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and not any(
                    (flags / f"{kind}-{other}").exists() for kind in ("trial", "exit")):
                time.sleep(0.05)
        scored.append(1)
        return score(*args, **kwargs)

    evaluator.score = score_once_both_run
    # search-time knobs only: with max_index_configs=1 a trial drawing other BM25 values than the
    # defaults' is pruned by the cap (8 of 9 draws of the default space), and a worker whose
    # trials * 5 trials were all pruned that way exited 0 without scoring one (~8% of runs)
    space = tuple(p for p in space_for(evaluator.evalset.name) if p.name not in INDEX_TARGETS)
    study = run_study(folder, trials=8, storage=storage, study_name="shared", seed=seed, base_index=base,
                      evaluator=evaluator, max_index_configs=1, space=space)
    print(f"worker {seed}: scored {len(scored)} trials; {progress_line(study, 8)}", flush=True)
finally:
    (flags / f"exit-{seed}").touch()
"""
#: the two workers take ~30 s together; past this they are killed and the test fails with both logs
TWO_WORKERS_TIMEOUT_S = 300


def _worker_logs(tmp_path: Path, workers: dict[int, subprocess.Popen]) -> str:
    """Each worker's exit code and the tail of its output (stdout and stderr)."""
    parts = []
    for seed, worker in workers.items():
        log = tmp_path / f"worker-{seed}.log"
        text = log.read_text(errors="replace") if log.is_file() else "(no log)"
        parts.append(f"--- worker {seed} (pid {worker.pid}, exit {worker.returncode}) ---\n{text[-3000:]}")
    return "\n".join(parts)


@pytest.mark.slow
def test_two_worker_processes_fill_one_study(tmp_path, tiny_index):  # noqa: F811
    folder, cache = tiny_index
    storage = f"sqlite:///{tmp_path / 'shared.db'}"
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "HYBRIDLAB_CACHE": str(cache),
    }
    workers: dict[int, subprocess.Popen] = {}
    try:
        for seed in (1, 2):
            with open(tmp_path / f"worker-{seed}.log", "wb") as log:  # files, not pipes: none can fill up
                workers[seed] = subprocess.Popen(
                    [sys.executable, "-c", WORKER, str(folder), storage, str(seed), str(tmp_path)],
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                )
        deadline = time.monotonic() + TWO_WORKERS_TIMEOUT_S
        while not all((tmp_path / f"ready-{seed}").exists() for seed in workers):
            if any(w.poll() is not None for w in workers.values()) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        (tmp_path / "go").touch()
        while any(w.poll() is None for w in workers.values()) and time.monotonic() < deadline:
            time.sleep(0.2)
        running = [seed for seed, w in workers.items() if w.poll() is None]
    finally:  # never leave a worker running or unreaped (a zombie) for the tests after this one
        for worker in workers.values():
            if worker.poll() is None:
                worker.kill()
        for worker in workers.values():
            worker.wait()
    logs = _worker_logs(tmp_path, workers)
    assert not running, f"workers {running} still ran after {TWO_WORKERS_TIMEOUT_S} s (killed)\n{logs}"
    assert all(w.returncode == 0 for w in workers.values()), logs
    study = optuna.load_study(study_name="shared", storage=storage)
    complete = [t for t in study.trials if t.state.name == "COMPLETE"]
    assert len(complete) >= 8, logs
    assert len({t.user_attrs["worker"] for t in complete}) == 2, logs
    assert all(0.0 <= t.value <= 1.0 for t in complete)


HOLDER = (
    "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); print('held', flush=True); time.sleep(120)"
)


@pytest.mark.slow
def test_variant_is_built_from_the_base_vectors_while_the_shared_cache_is_busy(tiny_env):  # noqa: F811
    from hybridlab.config import Bm25Config
    from hybridlab.eval.evalsets import cache_root
    from hybridlab.eval.evaluator import Evaluator

    evaluator = Evaluator(resolve_evalset(tiny_env))
    variant = IndexConfig(models=("wordllama",), bm25=Bm25Config(k1=0.9, b=0.3))
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(cache_root() / "embeddings.duckdb")],
        stdout=subprocess.PIPE,
        text=True,
    )  # another process's long build
    try:
        assert holder.stdout.readline().strip() == "held"
        index = evaluator.index(variant)
    finally:
        holder.kill()
        holder.wait()
    manifest = json.loads((index.index_dir / "manifest.json").read_text())
    assert manifest["embedding_cache"].endswith(f"sweep-embeddings-{tiny_env.name}.duckdb")
    assert manifest["config"]["bm25"]["k1"] == 0.9
    assert index.n_chunks == 24 and evaluator.score({}, variant, "dev")["hit_rate@10"] > 0


CV_QIDS = [f"q{i:02d}" for i in range(20)]
CV_QRELS = {q: {f"d-{q}": 1} for q in CV_QIDS}
HALVES = Param("alpha", "float", 0.0, 1.0, step=0.5)  # three values: 0, 0.5 (the adaptive default here), 1


class CrossValidatedStub:
    """A cross-validated set of 20 queries (kinds a/b) without an index: an alpha of at least
    `good` ranks each query's relevant document first (nDCG@10 1), anything less second behind a
    wrong one (1/log2(3))."""

    class _Index:
        n_chunks = 100  # adaptive alpha 0.5: the defaults

    def __init__(self, folder: Path, good: float) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "queries.jsonl").write_text(
            "".join(
                json.dumps({"_id": q, "text": q, "metadata": {"kind": "ab"[i % 2]}}) + "\n"
                for i, q in enumerate(CV_QIDS)
            )
        )
        self.evalset = EvalSet("cvstub", (), folder, None, tuning_split="cv", report_split="cv", cv_folds=4)
        self.good = good

    def index(self, config):
        return self._Index()

    def dataset(self, split):
        return Dataset("cvstub", self.evalset.judgements, {q: q for q in CV_QIDS}, CV_QRELS)

    def run(self, search, config=None, split="cv"):
        alpha = search.get("alpha")
        first = (0.5 if alpha is None else alpha) >= self.good  # None: the adaptive default, 0.5 here
        return {q: ({f"d-{q}": 1.0} if first else {"wrong": 1.0, f"d-{q}": 0.5}) for q in CV_QIDS}

    def score(self, search, config=None, split="cv", metrics=None):
        return score(CV_QRELS, self.run(search, config, split))


def _cross_validated_record(tmp_path, good):
    evaluator = CrossValidatedStub(tmp_path / "set", good)
    study = run_study("cvstub", trials=3, run_dir=tmp_path, evaluator=evaluator, space=(HALVES,))
    cv = cross_validate(
        "cvstub", evaluator, trials=3, run_dir=tmp_path, study_name=study.study_name, space=(HALVES,)
    )
    return evaluator, cv, finalize(study, evaluator, cv=cv)


@pytest.mark.slow
def test_nested_cross_validation_scores_each_fold_with_a_config_tuned_without_it(tmp_path):
    evaluator, cv, record = _cross_validated_record(tmp_path, good=1.0)
    assert cv.k == 4 and sorted(q for fold in cv.folds for q in fold) == CV_QIDS
    studies = optuna.get_all_study_names(f"sqlite:///{tmp_path / 'study.db'}")
    assert sorted(studies) == ["cvstub-ndcg@10"] + [f"cvstub-ndcg@10-fold{i}of4" for i in range(1, 5)]
    for fold, config in zip(cv.folds, cv.configs):
        study = optuna.load_study(study_name=config.study, storage=f"sqlite:///{tmp_path / 'study.db'}")
        assert study.user_attrs["queries"] == len(CV_QIDS) - len(fold)  # tuned on the other folds only
        assert config.params == {"alpha": 1.0} and config.tuning_value == 1.0
    assert cv.tuned.per_query == dict.fromkeys(CV_QIDS, 1.0) and cv.tuned.interval.mean == 1.0
    weak = 1 / math.log2(3)
    assert cv.defaults.interval.mean == pytest.approx(weak) and cv.defaults.fold_means == pytest.approx(
        (weak,) * 4
    )
    assert cv.significant and cv.comparison.p_value < 0.001
    assert cv.verdict.startswith("the tuning procedure beats the defaults out of fold (nested 4-fold")
    assert (record.split, record.tuned_on, record.queries) == ("cv", "cv", {"cv": 20})
    assert record.best.test_metrics["ndcg@10"] == 1.0 and record.beats_defaults
    assert (record.per_kind or {})["tuned"] == {"a": KindFigure(10, 1.0), "b": KindFigure(10, 1.0)}
    assert record.engine and record.engine.source_sha256
    summary = write_summary(tmp_path, record).read_text()
    assert (
        "## Nested cross-validation" in summary
        and "| kind | n | tuned | defaults | bm25 | vector |" in summary
    )

    run = tmp_path / "run"
    run.mkdir()
    record.write(run)
    config = export_config(run, evaluator=evaluator)
    provenance = config["provenance"]
    assert (config["search"]["alpha"], provenance["exported"], provenance["split"]) == (1.0, "tuned", "cv")
    assert provenance["query_ids"] == CV_QIDS and provenance["cross_validation"]["tuned"]["mean"] == 1.0
    assert provenance["verdict"].startswith("exported the config tuned on all queries")


def test_a_cross_validation_that_does_not_beat_the_defaults_exports_the_defaults(tmp_path):
    evaluator, cv, record = _cross_validated_record(tmp_path, good=0.5)  # the defaults are already perfect
    assert not cv.significant and cv.comparison.p_value == 1.0
    run = tmp_path / "run"
    run.mkdir()
    record.write(run)
    provenance = export_config(run, evaluator=evaluator)["provenance"]
    assert (provenance["exported"], provenance["trial"], provenance["beats_defaults"]) == (
        "defaults",
        None,
        False,
    )
    assert provenance["test_metrics"] == provenance["defaults_test_metrics"]
    assert provenance["verdict"].startswith(
        "kept the defaults: the tuning procedure does not significantly beat"
    )


def test_finalize_of_a_cross_validated_set_needs_the_cross_validation(tmp_path):
    evaluator = CrossValidatedStub(tmp_path / "set", 1.0)
    study = run_study("cvstub", trials=2, run_dir=tmp_path, evaluator=evaluator, space=(HALVES,))
    with pytest.raises(ValueError, match="cvstub is cross-validated: pass cv="):
        finalize(study, evaluator)
