"""Named evaluation sets: where each one's corpus, queries and judgements live, and cached indexes.

`memories` and `holoviz` are our own ground truth (`ground_truth/`); `scifact`, `cisi`, `cranfield`
and `med` are BEIR-layout collections read in place from the data dir (`HYBRIDLAB_DATA`).

Every set declares where it may be tuned and where it is reported (:data:`SPLIT_RULES`): SciFact is
tuned on its official train split and reported on all 300 test queries, as published results are;
the small sets (memories, holoviz) are cross-validated, nested (each fold scored by a config tuned on
the other folds, :mod:`hybridlab.eval.crossval`); CISI, Cranfield and MED are never tuned on, they
are the out-of-domain check of every default.
"""
from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path

from hybridlab.config import IndexConfig, config_hash
from hybridlab.eval.datasets import REPO_ROOT, Dataset, data_dir, load_dataset

GROUND_TRUTH = REPO_ROOT / "ground_truth"


#: `tuning_split`/`report_split` of a cross-validated set: k folds of all its judged queries.
CROSS_VALIDATED = "cv"
#: Sets that are never tuned on (`tuning_split=None`): the out-of-domain check of every default.
NEVER_TUNED = ("cisi", "cranfield", "med")
#: name -> (tuning_split, report_split, cv_folds); a set not listed keeps the sha1 dev/test halves.
SPLIT_RULES: dict[str, tuple[str | None, str, int | None]] = {
    "scifact": ("train", "test", None),
    "memories": (CROSS_VALIDATED, CROSS_VALIDATED, 5),
    "holoviz": (CROSS_VALIDATED, CROSS_VALIDATED, 5),
    **{name: (None, "all", None) for name in NEVER_TUNED},
}


@dataclass(frozen=True)
class EvalSet:
    """A corpus to index plus queries/qrels to score, the fixed `now` its recency needs, and its
    declared splits: tune on `tuning_split` (None = never tuned on), report on `report_split`;
    `cv_folds` = k of the nested k-fold cross-validation when both are :data:`CROSS_VALIDATED`."""

    name: str
    sources: tuple[Path, ...]
    judgements: Path
    now: str | None = None
    tuning_split: str | None = "dev"
    report_split: str = "test"
    cv_folds: int | None = None

    def __post_init__(self) -> None:
        cross_validated = CROSS_VALIDATED in {self.tuning_split, self.report_split}
        if cross_validated != (self.cv_folds is not None):
            raise ValueError(f"{self.name}: cv_folds ({self.cv_folds}) goes with tuning/report split "
                             f"{CROSS_VALIDATED!r} (got {self.tuning_split!r}/{self.report_split!r})")
        if self.cv_folds is not None and self.cv_folds < 2:
            raise ValueError(f"{self.name}: cv_folds must be >= 2, got {self.cv_folds}")

    @property
    def cross_validated(self) -> bool:
        return self.cv_folds is not None

    def dataset(self, split: str = "all") -> Dataset:
        """The queries/qrels of `split`; :data:`CROSS_VALIDATED` = all judged queries (the folds' pool)."""
        return load_dataset(self.judgements, split="all" if split == CROSS_VALIDATED else split)

    def tuning_dataset(self) -> Dataset:
        """The queries a sweep may tune on; ValueError for a set that is never tuned on."""
        return self.dataset(check_tunable(self))

    def report_dataset(self) -> Dataset:
        """The queries results are reported on."""
        return self.dataset(self.report_split)


def check_tunable(evalset: EvalSet) -> str:
    """The set's tuning split; ValueError naming the rule when the set is never tuned on."""
    if evalset.tuning_split is None:
        raise ValueError(f"{evalset.name} is never tuned on: {', '.join(NEVER_TUNED)} are the out-of-domain "
                         "check of every default (issue 18); tune on scifact (train), memories or holoviz (cv)")
    return evalset.tuning_split


def _with_rules(evalset: EvalSet) -> EvalSet:
    """The set with the declared splits of its name (:data:`SPLIT_RULES`), if any."""
    if evalset.name not in SPLIT_RULES:
        return evalset
    tuning, report, folds = SPLIT_RULES[evalset.name]
    return dataclasses.replace(evalset, tuning_split=tuning, report_split=report, cv_folds=folds)


def corpora_dir() -> Path:
    """The HoloViz docs corpus: `$HYBRIDLAB_CORPORA/holoviz`, else `<data dir>/../corpora/holoviz`."""
    env = os.environ.get("HYBRIDLAB_CORPORA")
    return Path(env) if env else data_dir().parent / "corpora"


def get_evalset(name: str) -> EvalSet:
    """The evaluation set called `name` (our ground truth or a BEIR dataset in the data dir)."""
    if name == "memories":
        folder = GROUND_TRUTH / "memories"
        settings = json.loads((folder / "eval.json").read_text()) if (folder / "eval.json").exists() else {}
        return _with_rules(EvalSet(name, (folder / settings.get("corpus", "memories.jsonl"),), folder,
                                   settings.get("now")))
    if name == "holoviz":
        return _with_rules(EvalSet(name, (corpora_dir() / "holoviz",), GROUND_TRUTH / "holoviz", None))
    folder = data_dir() / name
    if folder.is_dir():
        return _with_rules(EvalSet(name, (folder,), folder, None))
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
