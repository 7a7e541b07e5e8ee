"""The Optuna sweep: search spaces, parameter routing, the index-config cap, shared studies."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from tiny_evalset import tiny_env, tiny_index  # noqa: F401  (fixtures)

from hybridlab.config import IndexConfig, SearchConfig
from hybridlab.eval.evalsets import EvalSet
from hybridlab.eval.evaluator import full_search_config, resolve_evalset
from hybridlab.tune.sweep import (
    ALPHA,
    BM25_K1,
    FUSION,
    NORMALIZATION,
    RRF_K,
    Param,
    default_params,
    run_study,
    space_for,
    split_params,
    suggest,
)

optuna.logging.set_verbosity(optuna.logging.WARNING)


def test_suggest_asks_only_for_active_conditional_parameters():
    space = (FUSION, ALPHA, RRF_K, NORMALIZATION)
    rrf = suggest(optuna.trial.FixedTrial({"fusion": "rrf", "alpha": 0.25, "rrf_k": 30}), space)
    assert rrf == {"fusion": "rrf", "alpha": 0.25, "rrf_k": 30}
    convex = suggest(optuna.trial.FixedTrial({"fusion": "convex", "alpha": 0.5, "normalization": "z-score"}), space)
    assert convex == {"fusion": "convex", "alpha": 0.5, "normalization": "z-score"}


def test_split_params_routes_index_parameters_into_the_index_config():
    search, config = split_params({"alpha": 0.3, "bm25_k1": 0.9, "bm25_b": 0.5, "chunk_size": 800,
                                    "chunk_overlap": 0}, IndexConfig(models=("wordllama",)))
    assert search == {"alpha": 0.3}
    assert (config.bm25.k1, config.bm25.b, config.chunk.chunk_size, config.chunk.chunk_overlap) == (0.9, 0.5, 800, 0)
    assert config.models == ("wordllama",)
    assert config.bm25.method == "lucene"  # untouched fields keep the base's values


def test_full_search_config_holds_every_field_and_validates():
    full = full_search_config({"alpha": 0.4, "fusion": "dbsf"})
    assert set(full) == set(SearchConfig.__dataclass_fields__)
    assert (full["alpha"], full["fusion"], full["rrf_k"]) == (0.4, "dbsf", 60)
    assert full_search_config({"candidates": 40})["candidates"] == 100  # the engine scores max(candidates, limit)
    with pytest.raises(ValueError, match="alpha"):
        full_search_config({"alpha": 1.5})


def test_spaces_sweep_chunking_only_where_documents_are_long():
    names = {name: {p.name for p in space_for(name)} for name in ("memories", "holoviz", "scifact")}
    assert "chunk_size" in names["holoviz"] and "chunk_size" not in names["scifact"] | names["memories"]
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
        "fusion": SearchConfig.fusion, "alpha": 0.8, **({"rrf_k": 60} if SearchConfig.fusion == "rrf" else {}),
        **({"normalization": SearchConfig.normalization} if SearchConfig.fusion == "convex" else {}),
        "staged": True, "candidates": SearchConfig.candidates, "fallback_threshold": SearchConfig.fallback_threshold,
        "expand_hops": SearchConfig.expand_hops, "fill_dense": True, "bm25_k1": 1.5, "bm25_b": 0.75}
    small = default_params(space, n_chunks=100)
    assert small["staged"] is False and small["fill_dense"] is False and small["alpha"] == 0.5


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
    study = run_study("fake", trials=8, run_dir=tmp_path, evaluator=evaluator, max_index_configs=2,
                      enqueue_defaults=False,
                      space=(ALPHA, BM25_K1, Param("bm25_b", "categorical", choices=(0.3, 0.6, 0.9))))
    states = [t.state.name for t in study.trials]
    assert states.count("COMPLETE") == 8
    assert len(evaluator.index_configs) <= 2
    assert len({t.user_attrs["index_key"] for t in study.trials if t.state.name == "COMPLETE"}) <= 2
    assert (tmp_path / "study.db").is_file()


def test_same_seed_same_suggestions(tmp_path):
    params = []
    for name in ("a", "b"):
        study = run_study("fake", trials=5, storage=f"sqlite:///{tmp_path / name}.db", evaluator=FakeEvaluator(),
                          space=(FUSION, ALPHA), seed=7, enqueue_defaults=False)
        params.append([t.params for t in study.trials])
    assert params[0] == params[1]


WORKER = """
import sys, time
from pathlib import Path
from hybridlab.config import IndexConfig
from hybridlab.eval.evaluator import Evaluator, resolve_evalset
from hybridlab.tune.sweep import run_study
folder, storage, seed, flags = sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
base = IndexConfig(models=("wordllama",))
evaluator = Evaluator(resolve_evalset(folder))
evaluator.score({}, base, "dev")  # warm up (model, index, ranx) so both workers start trials together
(flags / f"ready-{seed}").touch()
while not (flags / "go").exists():
    time.sleep(0.05)
run_study(folder, trials=8, storage=storage, study_name="shared", seed=seed, base_index=base,
          evaluator=evaluator, max_index_configs=1)
"""


@pytest.mark.slow
def test_two_worker_processes_fill_one_study(tmp_path, tiny_index):  # noqa: F811
    folder, cache = tiny_index
    storage = f"sqlite:///{tmp_path / 'shared.db'}"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "HYBRIDLAB_CACHE": str(cache)}
    workers = [subprocess.Popen([sys.executable, "-c", WORKER, str(folder), storage, str(seed), str(tmp_path)],
                                env=env, stderr=subprocess.PIPE, text=True) for seed in (1, 2)]
    deadline = time.monotonic() + 600
    while not all((tmp_path / f"ready-{seed}").exists() for seed in (1, 2)):
        if any(w.poll() not in (None, 0) for w in workers) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    (tmp_path / "go").touch()
    for worker in workers:
        _, err = worker.communicate(timeout=600)
        assert worker.returncode == 0, err[-2000:]
    study = optuna.load_study(study_name="shared", storage=storage)
    complete = [t for t in study.trials if t.state.name == "COMPLETE"]
    assert len(complete) >= 8
    assert len({t.user_attrs["worker"] for t in complete}) == 2
    assert all(0.0 <= t.value <= 1.0 for t in complete)


HOLDER = "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); print('held', flush=True); time.sleep(120)"


@pytest.mark.slow
def test_variant_is_built_from_the_base_vectors_while_the_shared_cache_is_busy(tiny_env):  # noqa: F811
    from hybridlab.config import Bm25Config
    from hybridlab.eval.evalsets import cache_root
    from hybridlab.eval.evaluator import Evaluator

    evaluator = Evaluator(resolve_evalset(tiny_env))
    variant = IndexConfig(models=("wordllama",), bm25=Bm25Config(k1=0.9, b=0.3))
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(cache_root() / "embeddings.duckdb")],
                              stdout=subprocess.PIPE, text=True)  # another process's long build
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
