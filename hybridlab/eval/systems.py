"""The systems an evaluation compares (BM25, dense, the default hybrid, each fusion method) and
their runs over an evaluation set's queries; shared by the quality report and the parameter grids."""
from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hybridlab.config import ChunkConfig, IndexConfig, resolve_auto, resolve_search_config
from hybridlab.eval.datasets import load_query_metadata
from hybridlab.eval.evalsets import EvalSet, ensure_index, get_evalset
from hybridlab.eval.evaluate import Run, make_run
from hybridlab.search.engine import open_index

DEFAULT_SYSTEM = "hybrid (default)"
WHOLE_DOCUMENTS = IndexConfig(chunk=ChunkConfig(strategy="whole"))

# name -> search options; every one runs on the default index of the set.
SYSTEMS: dict[str, dict[str, Any]] = {
    DEFAULT_SYSTEM: {},
    "bm25": {"mode": "bm25"},
    "dense": {"mode": "vector"},
    "rrf": {"mode": "hybrid", "fusion": "rrf"},
    "convex min-max": {"mode": "hybrid", "fusion": "convex", "normalization": "min-max"},
    "convex z-score": {"mode": "hybrid", "fusion": "convex", "normalization": "z-score"},
    "convex theoretical": {"mode": "hybrid", "fusion": "convex", "normalization": "theoretical-min-max"},
    "dbsf": {"mode": "hybrid", "fusion": "dbsf"},
}
# The fusion methods on their own (the alpha sweep's columns).
FUSION_SYSTEMS = {name: options for name, options in SYSTEMS.items() if options.get("mode") == "hybrid"}
# Systems that need another index of the same corpus: name -> (index config, search options).
EXTRA_SYSTEMS: dict[str, dict[str, tuple[IndexConfig, dict[str, Any]]]] = {
    "holoviz": {
        "dense, whole documents": (WHOLE_DOCUMENTS, {"mode": "vector"}),
        "hybrid (default), whole documents": (WHOLE_DOCUMENTS, {}),
    },
}
DATASETS = ("scifact", "memories", "holoviz")
OPTIONAL_DATASETS = ("cisi", "cranfield", "med")


@dataclass
class OpenedSet:
    """An evaluation set with its index opened, and how long making the index took."""

    evalset: EvalSet
    index: Any
    index_dir: Path
    seconds: float


def open_evalset(name: str, config: IndexConfig | None = None, *, progress: bool = False) -> OpenedSet:
    """Ensure the set's index under `config` (cached in .cache/indexes) and open it."""
    evalset = get_evalset(name)
    started = time.perf_counter()
    index_dir = ensure_index(evalset, config or IndexConfig(), progress=progress)
    return OpenedSet(evalset, open_index(index_dir), index_dir, time.perf_counter() - started)


def system_runs(opened: OpenedSet, queries: Mapping[str, str], systems: Mapping[str, Mapping[str, Any]]) -> dict[str, Run]:
    """One run per system over `queries`, with the set's fixed `now` (recency) when it has one."""
    return {name: make_run(opened.index, queries, now=opened.evalset.now, **options)
            for name, options in systems.items()}


def default_settings(opened: OpenedSet) -> dict[str, Any]:
    """The search settings the default hybrid resolves to on this index (adaptive alpha etc.)."""
    config, sources = resolve_search_config({}, config_file=opened.index.config_file, n_chunks=opened.index.n_chunks)
    config = resolve_auto(config, opened.index.n_chunks)
    return {"fusion": config.fusion, "alpha": config.alpha, "alpha_source": sources["alpha"], "rrf_k": config.rrf_k,
            "normalization": config.normalization, "depth": config.depth, "staged": config.staged,
            "expand_hops": config.expand_hops, "fill_dense": config.fill_dense,
            "decay": config.decay, "recency_weight": config.recency_weight, "tag_weight": config.tag_weight}


def per_kind(queries: Path, per_query: Mapping[str, float], field: str = "kind") -> dict[str, dict[str, float]]:
    """Mean of one metric per query kind (`metadata.<field>` in the queries file), with the count."""
    kinds = {qid: meta.get(field, "-") for qid, meta in load_query_metadata(queries).items()}
    groups: dict[str, list[float]] = {}
    for qid, value in per_query.items():
        groups.setdefault(kinds.get(qid, "-"), []).append(value)
    return {kind: {"n": len(values), "mean": sum(values) / len(values)} for kind, values in sorted(groups.items())}


