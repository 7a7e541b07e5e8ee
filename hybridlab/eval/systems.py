"""The systems an evaluation compares (BM25, dense, the default hybrid, each fusion method) and
their runs over an evaluation set's queries; shared by the quality report and the parameter grids."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hybridlab.config import IndexConfig
from hybridlab.eval.datasets import load_query_metadata
from hybridlab.eval.evalsets import EvalSet, ensure_index, get_evalset
from hybridlab.eval.evaluate import Run, make_run
from hybridlab.search.engine import open_index

DEFAULT_SYSTEM = "hybrid (default)"

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
DATASETS = ("scifact", "memories", "holoviz")


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


def system_runs(
    opened: OpenedSet, queries: Mapping[str, str], systems: Mapping[str, Mapping[str, Any]]
) -> dict[str, Run]:
    """One run per system over `queries`, with the set's fixed `now` (recency) when it has one."""
    return {
        name: make_run(opened.index, queries, now=opened.evalset.now, **options)
        for name, options in systems.items()
    }


def per_kind(
    queries: Path, per_query: Mapping[str, float], field: str = "kind"
) -> dict[str, dict[str, float]]:
    """Mean of one metric per query kind (`metadata.<field>` in the queries file), with the count."""
    kinds = {qid: meta.get(field, "-") for qid, meta in load_query_metadata(queries).items()}
    groups: dict[str, list[float]] = {}
    for qid, value in per_query.items():
        groups.setdefault(kinds.get(qid, "-"), []).append(value)
    return {
        kind: {"n": len(values), "mean": sum(values) / len(values)} for kind, values in sorted(groups.items())
    }
