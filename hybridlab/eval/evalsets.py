"""Named evaluation sets: where each one's corpus, queries and judgements live, and cached indexes.

`memories` and `holoviz` are our own ground truth (`ground_truth/`); `scifact`, `cisi`, `cranfield`
and `med` are BEIR-layout collections read in place from the data dir (`HYBRIDLAB_DATA`).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from hybridlab.config import IndexConfig, config_hash
from hybridlab.eval.datasets import REPO_ROOT, Dataset, data_dir, load_dataset

GROUND_TRUTH = REPO_ROOT / "ground_truth"


@dataclass(frozen=True)
class EvalSet:
    """A corpus to index plus queries/qrels to score, and the fixed `now` its recency needs."""

    name: str
    sources: tuple[Path, ...]
    judgements: Path
    now: str | None = None

    def dataset(self, split: str = "all") -> Dataset:
        return load_dataset(self.judgements, split=split)


def corpora_dir() -> Path:
    """The HoloViz docs corpus: `$HYBRIDLAB_CORPORA/holoviz`, else `<data dir>/../corpora/holoviz`."""
    env = os.environ.get("HYBRIDLAB_CORPORA")
    return Path(env) if env else data_dir().parent / "corpora"


def get_evalset(name: str) -> EvalSet:
    """The evaluation set called `name` (our ground truth or a BEIR dataset in the data dir)."""
    if name == "memories":
        folder = GROUND_TRUTH / "memories"
        settings = json.loads((folder / "eval.json").read_text()) if (folder / "eval.json").exists() else {}
        return EvalSet(name, (folder / settings.get("corpus", "memories.jsonl"),), folder, settings.get("now"))
    if name == "holoviz":
        return EvalSet(name, (corpora_dir() / "holoviz",), GROUND_TRUTH / "holoviz", None)
    folder = data_dir() / name
    if folder.is_dir():
        return EvalSet(name, (folder,), folder, None)
    known = ["memories", "holoviz"] + sorted(p.name for p in data_dir().glob("*") if p.is_dir())
    raise ValueError(f"unknown dataset {name!r}; choose from {known}")


def cache_root() -> Path:
    """Where evaluation indexes and the shared embeddings cache live (`HYBRIDLAB_CACHE`)."""
    return Path(os.environ.get("HYBRIDLAB_CACHE", REPO_ROOT / ".cache"))


def ensure_index(evalset: EvalSet, config: IndexConfig | None = None, *, progress: bool = True) -> Path:
    """An index of the set's corpus under this config, built once and then reused; every build
    shares one embeddings cache, so chunk-size variants embed only their new chunk texts."""
    from hybridlab.index.build import index_paths

    config = config or IndexConfig()
    folder = cache_root() / "indexes" / f"{evalset.name}-{config_hash(config.to_dict())}"
    index_paths(list(evalset.sources), folder, config, progress=progress,
                cache_path=cache_root() / "embeddings.duckdb")
    return folder
