"""Scoring search settings on an evaluation set: the indexes and split datasets opened once.

Used by the sweeps (:mod:`hybridlab.tune.sweep`), the exported configs' `repro`
(:mod:`hybridlab.tune.export`) and the reports.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import duckdb

from hybridlab.config import IndexConfig, SearchConfig
from hybridlab.eval.evalsets import (
    EvalSet,
    cache_root,
    embedding_cache_path,
    ensure_index,
    get_evalset,
    index_folder,
    index_key,
)
from hybridlab.eval.evaluate import METRICS, make_run, score
from hybridlab.index.format.embedding_cache import EmbeddingCache, cache_model
from hybridlab.index.format.layout import IndexLockedError
from hybridlab.index.format.store import IndexError_
from hybridlab.index.write.build import index_paths
from hybridlab.search.engine import open_index

EVAL_LIMIT = 100  # documents per query in evaluation runs (recall@100 needs 100)
BASELINES: dict[str, dict[str, Any]] = {
    "defaults": {},
    "bm25": {"mode": "bm25"},
    "vector": {"mode": "vector"},
}


def full_search_config(search: Mapping[str, Any]) -> dict[str, Any]:
    """Every SearchConfig field: the given settings over the defaults (validated), with
    `candidates` raised to the evaluation depth it effectively had (the engine scores
    max(candidates, limit) BM25 rows), so the exported value behaves as measured at any limit."""
    config = dataclasses.asdict(SearchConfig(**dict(search)))
    config["candidates"] = max(config["candidates"], EVAL_LIMIT)
    return config


def resolve_evalset(name_or_path: str | os.PathLike) -> EvalSet:
    """A named evaluation set (or `irds:<id>`), or a folder holding `queries.jsonl` + `qrels-test.tsv`
    and either a BEIR `corpus.jsonl` or a memories `memories.jsonl` (with an optional `eval.json`
    giving `now`)."""
    path = Path(name_or_path)
    if not path.is_dir():
        return get_evalset(str(name_or_path))
    settings = json.loads((path / "eval.json").read_text()) if (path / "eval.json").is_file() else {}
    if "corpus" in settings:
        source = path / settings["corpus"]
    elif (path / "memories.jsonl").is_file():
        source = path / "memories.jsonl"
    else:
        source = path
    return EvalSet(path.name, (source,), path, settings.get("now"))


class Evaluator:
    """Scores search settings on an evaluation set; indexes (one per index config) and the split
    datasets are opened once and kept."""

    def __init__(self, evalset: EvalSet, *, progress: bool = False) -> None:
        self.evalset = evalset
        self.progress = progress
        self._indexes: dict[str, Any] = {}
        self._datasets: dict[str, Any] = {}

    def dataset(self, split: str):
        if split not in self._datasets:
            self._datasets[split] = self.evalset.dataset(split)
        return self._datasets[split]

    def index(self, config: IndexConfig):
        key = index_key(config)
        if key not in self._indexes:
            self._indexes[key] = open_index(self._ensure(config))
        return self._indexes[key]

    def _ensure(self, config: IndexConfig, wait_s: float = 3600.0) -> Path:
        """ensure_index, waiting while another worker builds (or checks) the same index. When another
        process holds the shared embeddings cache (a long build), a variant of an already built index
        is built with a private cache seeded from that index's own vectors instead of waiting."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                folder = index_folder(self.evalset, config)
                if not (folder / "manifest.json").exists() and not _shared_cache_free():
                    seeded = self._seeded_cache(config)
                    if seeded is not None:
                        index_paths(
                            list(self.evalset.sources),
                            folder,
                            config,
                            progress=self.progress,
                            cache_path=seeded,
                        )
                        return folder
                return ensure_index(self.evalset, config, progress=self.progress)
            except (IndexLockedError, IndexError_):  # the index or the shared embeddings cache is busy
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def run(self, search: Mapping[str, Any], config: IndexConfig | None = None, split: str = "dev"):
        """The run (`{qid: {doc_id: score}}`) of these settings over the split's queries."""
        options = {**dict(search), "limit": EVAL_LIMIT}
        return make_run(
            self.index(config or IndexConfig()), self.dataset(split).queries, now=self.evalset.now, **options
        )

    def score(
        self,
        search: Mapping[str, Any],
        config: IndexConfig | None = None,
        split: str = "dev",
        metrics: Sequence[str] | None = None,
    ) -> dict[str, float]:
        return score(self.dataset(split).qrels, self.run(search, config, split), metrics or METRICS)

    def _seeded_cache(self, config: IndexConfig) -> Path | None:
        """A per-set private embeddings cache holding the vectors of the built index that shares
        `config`'s models (the base one); None when no such index is built yet."""
        base = dataclasses.replace(
            IndexConfig(),
            models=config.models,
            model_by_collection=config.model_by_collection,
            model_by_language=config.model_by_language,
        )
        if not (index_folder(self.evalset, base) / "manifest.json").exists():
            return None
        path = cache_root() / f"sweep-embeddings-{self.evalset.name}.duckdb"
        index = self.index(base)
        cache = EmbeddingCache(path)
        try:
            for model, dense in index.dense.items():
                sha_of = dict(
                    index._con.execute(
                        "SELECT chunk_id, embed_sha256 FROM chunk_vectors WHERE model = ? ORDER BY chunk_id",
                        [model],
                    ).fetchall()
                )
                key = cache_model(model)
                have = cache.get(key, list(sha_of.values()), dim=dense.dim)
                if len(have) < len(set(sha_of.values())):
                    cache.put(key, [sha_of[int(i)] for i in dense.ids], dense.vectors)
        finally:
            cache.close()
        return path


def _shared_cache_free() -> bool:
    """Whether the shared embeddings cache can be opened for writing right now."""

    path = embedding_cache_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        duckdb.connect(str(path)).close()
    except duckdb.IOException:
        return False
    return True
