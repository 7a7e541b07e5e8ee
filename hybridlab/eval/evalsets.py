"""Named evaluation sets, declared in TOML files: where each one's corpus, queries and judgements
live, its fixed `now`, and where it may be tuned and where it is reported; and their cached indexes.
See docs/internals/tune-eval.md#evaluation-sets.
"""

from __future__ import annotations

import os
import re
import string
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hybridlab.config import IndexConfig, config_hash
from hybridlab.errors import InvalidValueError, PathNotFoundError
from hybridlab.eval.datasets import REPO_ROOT, Dataset, data_dir, load_dataset
from hybridlab.filelock import exclusive_lock
from hybridlab.index.write.build import index_paths
from hybridlab.index.write.tokens import shared_token_stores
from hybridlab.ingest.sources import IRDS, is_irds

GROUND_TRUTH = REPO_ROOT / "ground_truth"
PACKAGED_EVALSETS = Path(__file__).with_name("evalsets.toml")
EVALSETS_ENV = "HYBRIDLAB_EVALSETS"

#: `tuning_split`/`report_split` of a cross-validated set: k folds of all its judged queries.
CROSS_VALIDATED = "cv"


@dataclass(frozen=True)
class EvalSet:
    """A corpus to index plus queries/qrels to score, the fixed `now` its recency needs, and its
    declared splits: tune on `tuning_split` (None = never tuned on), report on `report_split`;
    `cv_folds` = k of the nested k-fold cross-validation when both are :data:`CROSS_VALIDATED`.
    `judgements`: the qrels (a BEIR folder, a qrels file or `irds:<id>`); `queries`: where the
    queries are when not there; `kinds`: the queries' metadata field holding each one's kind."""

    name: str
    sources: tuple[Path, ...]
    judgements: Path
    now: str | None = None
    tuning_split: str | None = "dev"
    report_split: str = "test"
    cv_folds: int | None = None
    queries: Path | None = None
    kinds: str = "kind"

    def __post_init__(self) -> None:
        cross_validated = CROSS_VALIDATED in {self.tuning_split, self.report_split}
        if cross_validated != (self.cv_folds is not None):
            raise InvalidValueError(
                f"{self.name}: cv_folds ({self.cv_folds}) goes with tuning/report split "
                f"{CROSS_VALIDATED!r} (got {self.tuning_split!r}/{self.report_split!r})"
            )
        if self.cv_folds is not None and self.cv_folds < 2:
            raise InvalidValueError(f"{self.name}: cv_folds must be >= 2, got {self.cv_folds}")

    @property
    def cross_validated(self) -> bool:
        return self.cv_folds is not None

    @property
    def queries_path(self) -> Path:
        """Where the queries (and their metadata, e.g. kinds) are read from."""
        return self.queries or self.judgements

    @property
    def folder_name(self) -> str:
        """The name as a folder name (an irds id holds `:` and `/`)."""
        return re.sub(r"[^\w.-]+", "-", self.name)

    def dataset(self, split: str = "all") -> Dataset:
        """The queries/qrels of `split`; :data:`CROSS_VALIDATED` = all judged queries (the folds' pool)."""
        return load_dataset(
            self.judgements, split="all" if split == CROSS_VALIDATED else split, queries=self.queries
        )

    def report_dataset(self) -> Dataset:
        """The queries results are reported on."""
        return self.dataset(self.report_split)


def check_tunable(evalset: EvalSet) -> str:
    """The set's tuning split; ValueError naming the rule when the set is never tuned on."""
    if evalset.tuning_split is None:
        raise InvalidValueError(
            f"{evalset.name} is never tuned on (tuning_split = false): it is an out-of-domain check "
            "of every default (a default tuned on it would be judged on the queries it was fitted to); "
            "tune on scifact (train), memories or holoviz (cv)"
        )
    return evalset.tuning_split


def corpora_dir() -> Path:
    """The HoloViz docs corpus: `$HYBRIDLAB_CORPORA/holoviz`, else `<data dir>/../corpora/holoviz`."""
    env = os.environ.get("HYBRIDLAB_CORPORA")
    return Path(env) if env else data_dir().parent / "corpora"


def use_evalsets(path: str | os.PathLike | None) -> None:
    """`--evalsets PATH`: check the file and put it in `HYBRIDLAB_EVALSETS` (seen by subprocesses:
    sweep workers, notebooks, repro commands); None leaves the environment as it is."""
    if path is not None:
        path = Path(path).resolve()
        read_evalsets(path)
        os.environ[EVALSETS_ENV] = str(path)


def evalset_files() -> list[Path]:
    """The packaged file, then the user's (`HYBRIDLAB_EVALSETS`), whose sets win."""
    user = os.environ.get(EVALSETS_ENV)
    return [PACKAGED_EVALSETS, *([Path(user)] if user else [])]


def declared() -> dict[str, tuple[Path, dict[str, Any]]]:
    """Every declared set: name -> (its file, its fields)."""
    return {name: (path, entry) for path in evalset_files() for name, entry in read_evalsets(path).items()}


def read_evalsets(path: Path) -> dict[str, dict[str, Any]]:
    """The sets of one TOML file (name -> fields), each field checked; ValueError names file, set and field."""
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PathNotFoundError(f"evaluation sets file not found: {path}") from None
    except tomllib.TOMLDecodeError as error:
        raise InvalidValueError(f"{path}: not valid TOML: {error}") from None
    for name, entry in data.items():
        if not isinstance(entry, dict):
            raise InvalidValueError(f"{path}: {name!r} is not a set: declare it as a table, [{name}]")
        _evalset(name, path, entry, check_paths=False)
    return data


_TYPES: dict[str, tuple[type, ...]] = {
    "corpus": (str, list),
    "qrels": (str,),
    "queries": (str,),
    "now": (str,),
    "tuning_split": (str, bool),
    "report_split": (str,),
    "cv_folds": (int,),
    "kinds": (str,),
}


def _evalset(name: str, file: Path, entry: dict[str, Any], check_paths: bool = True) -> EvalSet:
    """The EvalSet a file's entry declares; ValueError/FileNotFoundError naming file, set and field."""
    where = f"{file}: set {name!r}"
    unknown = sorted(set(entry) - set(_TYPES))
    if unknown:
        raise InvalidValueError(f"{where}: unknown field {unknown[0]!r}; fields are {list(_TYPES)}")
    if "corpus" not in entry:
        raise InvalidValueError(f"{where}: field 'corpus' is missing")
    for key, value in entry.items():
        if (
            not isinstance(value, _TYPES[key])
            or (key == "tuning_split" and value is True)
            or (key == "corpus" and isinstance(value, list) and not all(isinstance(v, str) for v in value))
        ):
            raise InvalidValueError(f"{where}: field {key!r} has the wrong type ({value!r})")
    values = {"data": str(data_dir()), "corpora": str(corpora_dir()), "ground_truth": str(GROUND_TRUTH)}

    def path(key: str, text: str) -> Path:
        try:
            text = string.Template(text).substitute(values)
        except (KeyError, ValueError) as error:
            raise InvalidValueError(
                f"{where}: field {key!r}: unknown placeholder in {text!r} ({error}); "
                f"placeholders are {['${' + v + '}' for v in values]}"
            ) from None
        resolved = Path(text) if is_irds(text) else (Path(file).parent / text).resolve()
        if check_paths and not is_irds(text) and not resolved.exists():
            raise PathNotFoundError(f"{where}: field {key!r}: {resolved} does not exist")
        return resolved

    corpus = entry["corpus"] if isinstance(entry["corpus"], list) else [entry["corpus"]]
    sources = tuple(path("corpus", c) for c in corpus)
    judgements = path("qrels", entry["qrels"]) if "qrels" in entry else sources[0]
    tuning = entry.get("tuning_split", "dev")
    try:
        return EvalSet(
            name,
            sources,
            judgements,
            entry.get("now"),
            tuning or None,
            entry.get("report_split", "test"),
            entry.get("cv_folds"),
            path("queries", entry["queries"]) if "queries" in entry else None,
            entry.get("kinds", "kind"),
        )
    except ValueError as error:
        raise InvalidValueError(f"{where}: {str(error).removeprefix(f'{name}: ')}") from None


def get_evalset(name: str) -> EvalSet:
    """The evaluation set called `name`: a declared set, a BEIR folder of the data dir, or `irds:<id>`."""
    if is_irds(name):
        return EvalSet(name, (Path(name),), Path(name), tuning_split=None, report_split="all")
    sets = declared()
    if name in sets:
        file, entry = sets[name]
        return _evalset(name, file, entry)
    folder = data_dir() / name
    if folder.is_dir():
        return EvalSet(name, (folder,), folder)
    known = list(sets) + sorted(p.name for p in data_dir().glob("*") if p.is_dir() and p.name not in sets)
    raise InvalidValueError(
        f"unknown dataset {name!r}; choose from {known} (declared in "
        f"{', '.join(map(str, evalset_files()))}), a folder, or {IRDS}<ir_datasets id>"
    )


def cache_root() -> Path:
    """Where evaluation indexes live (`HYBRIDLAB_CACHE`, else the checkout's `.cache`)."""
    return Path(os.environ.get("HYBRIDLAB_CACHE", REPO_ROOT / ".cache"))


def embedding_cache_path() -> Path:
    """The embeddings cache every evaluation index shares: `$HYBRIDLAB_EMBEDDING_CACHE`; else, when
    `HYBRIDLAB_CACHE` names a cache, its `embeddings.duckdb` (a private cache stays private: the
    benchmarks and tests that measure cold builds set it); else the user's cache,
    `$XDG_CACHE_HOME/hybridlab/embeddings.duckdb` (`~/.cache/...`), beside the ONNX model cache.

    A vector is keyed by the model (with its revision and encoder settings) and the sha256 of the
    exact text embedded, so one cache serves every checkout and clone of this machine: a fresh
    clone's evaluation indexes embed only texts no clone has embedded before."""
    given = os.environ.get("HYBRIDLAB_EMBEDDING_CACHE")
    if given:
        return Path(given).expanduser()
    if os.environ.get("HYBRIDLAB_CACHE"):
        return cache_root() / "embeddings.duckdb"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "hybridlab" / "embeddings.duckdb"


def index_folder(evalset: EvalSet, config: IndexConfig) -> Path:
    """Where :func:`ensure_index` keeps this set's index of `config`."""
    return cache_root() / "indexes" / f"{evalset.folder_name}-{index_key(config)}"


def index_key(config: IndexConfig) -> str:
    """The name of `config`'s cached index: a hash of its settings but the encoder's batch size
    (speed only: the same vectors to ~1e-7)."""
    return config_hash({k: v for k, v in config.to_dict().items() if k != "embed_batch_size"})


def ensure_index(evalset: EvalSet, config: IndexConfig | None = None, *, progress: bool = True) -> Path:
    """An index of the set's corpus under this config, built once and then reused; every build
    shares one embeddings cache, so chunk-size variants embed only their new chunk texts."""
    config = config or IndexConfig()
    folder = index_folder(evalset, config)
    cache = embedding_cache_path()
    # one build at a time per embeddings cache: the processes of a parallel test run (pytest-xdist)
    # or of two clones would otherwise collide on the cache's DuckDB file during a long cold build;
    # a waiter then finds the index built and its check is a scan of unchanged files
    with (
        exclusive_lock(cache.with_name(cache.name + ".build.lock")),
        shared_token_stores(cache.with_name("tokens")),  # late-interaction vectors, shared likewise
    ):
        index_paths(list(evalset.sources), folder, config, progress=progress, cache_path=cache)
    return folder
