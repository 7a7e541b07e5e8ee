"""The search space of a sweep: its parameters (:class:`Param`), the space of each evaluation set, and
how a trial's parameters become search settings and an index config."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hybridlab.config import IndexConfig, SearchConfig, adaptive_alpha, resolve_auto
from hybridlab.errors import InvalidValueError
from hybridlab.eval.evaluator import EVAL_LIMIT

INDEX_TARGETS = {
    "bm25_k1": ("bm25", "k1"),
    "bm25_b": ("bm25", "b"),
    "chunk_size": ("chunk", "chunk_size"),
    "chunk_overlap": ("chunk", "chunk_overlap"),
}


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
            raise InvalidValueError(
                f"unknown parameter kind {self.kind!r}; choose from ['categorical', 'float', 'int']"
            )
        if self.name not in {f.name for f in dataclasses.fields(SearchConfig)} | set(INDEX_TARGETS):
            raise InvalidValueError(
                f"unknown parameter {self.name!r}; use a SearchConfig field or one of {sorted(INDEX_TARGETS)}"
            )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Param:
        """A parameter from its fields as `dataclasses.asdict` wrote them to JSON (lists for tuples)."""
        when = data.get("when")
        return cls(
            **{
                **data,
                "choices": tuple(data.get("choices", ())),
                "when": (when[0], tuple(when[1])) if when else None,
            }
        )

    def contains(self, value: Any) -> bool:
        """Whether the sampler can propose `value`: one of the choices, or within [low, high] and
        on the step grid."""
        if self.kind == "categorical":
            return any(value == choice and type(value) is type(choice) for choice in self.choices)
        assert self.low is not None and self.high is not None  # a numeric parameter has its bounds
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not self.low <= value <= self.high
        ):
            return False
        if self.kind == "int" and value != int(value):
            return False
        if self.step is None:
            return True
        steps = (value - self.low) / self.step
        return abs(steps - round(steps)) < 1e-9


FUSION = Param("fusion", "categorical", choices=("rrf", "convex", "dbsf"))
ALPHA = Param("alpha", "float", 0.0, 1.0, step=0.05)
RRF_K = Param("rrf_k", "int", 5, 200, log=True, when=("fusion", ("rrf",)))
NORMALIZATION = Param(
    "normalization",
    "categorical",
    choices=("min-max", "z-score", "theoretical-min-max"),
    when=("fusion", ("convex",)),
)
STAGED = Param("staged", "categorical", choices=(False, True))
#: candidates below the evaluation depth act as EVAL_LIMIT (the engine takes max(candidates, limit))
CANDIDATES = Param("candidates", "int", EVAL_LIMIT, 1000, log=True, when=("staged", (True,)))
FALLBACK = Param("fallback_threshold", "int", 0, 50, when=("staged", (True,)))
EXPAND_HOPS = Param("expand_hops", "int", 0, 4, when=("staged", (True,)))
FILL_DENSE = Param("fill_dense", "categorical", choices=(False, True))
DECAY = Param("decay", "float", 0.0005, 0.1, log=True)
RECENCY_WEIGHT = Param("recency_weight", "float", 0.0, 0.8, step=0.05)
TAG_WEIGHT = Param("tag_weight", "float", 0.0, 8.0, step=0.1)  # the shipped default is 4.0
ADAPTIVE = Param("adaptive_fusion", "categorical", choices=(False, True))
#: floor <= 0.4 <= ceiling, so every pair is a valid ramp (SearchConfig asks floor <= ceiling)
LEXICAL_FLOOR = Param("lexical_floor", "float", 0.0, 0.4, step=0.05, when=("adaptive_fusion", (True,)))
LEXICAL_CEILING = Param("lexical_ceiling", "float", 0.4, 1.0, step=0.05, when=("adaptive_fusion", (True,)))
RECENCY_INTENT = Param(
    "recency_intent_weight", "float", 0.0, 1.0, step=0.05, when=("adaptive_fusion", (True,))
)
#: dense pseudo-relevance feedback (search/feedback.py): 0 = off; documents only where it is on
FEEDBACK_WEIGHT = Param("feedback_weight", "categorical", choices=(0.0, 0.25, 0.5, 1.0))
FEEDBACK_DOCS = Param("feedback_docs", "int", 1, 3, when=("feedback_weight", (0.25, 0.5, 1.0)))
#: a document's score from all its chunks (0 = the best alone); only sets with multi-chunk documents
CHUNK_DECAY = Param("chunk_decay", "float", 0.0, 0.5, step=0.05)
BM25_K1 = Param("bm25_k1", "categorical", choices=(0.9, 1.2, 1.5))
BM25_B = Param("bm25_b", "categorical", choices=(0.5, 0.75, 0.9))
CHUNK_SIZE = Param("chunk_size", "categorical", choices=(800, 1500, 2500))
CHUNK_OVERLAP = Param("chunk_overlap", "categorical", choices=(0, 150))

_SEARCH_TIME = (
    FUSION,
    ALPHA,
    RRF_K,
    NORMALIZATION,
    STAGED,
    CANDIDATES,
    FALLBACK,
    EXPAND_HOPS,
    FILL_DENSE,
    ADAPTIVE,
    LEXICAL_FLOOR,
    LEXICAL_CEILING,
    FEEDBACK_WEIGHT,
    FEEDBACK_DOCS,
)
#: Search spaces by dataset. Memories are short (<300 chars: one chunk each) and dated and tagged;
#: BEIR sets have one chunk per document, no dates and no tags, so only fusion, staging and BM25
#: matter there. Chunk size and overlap (CHUNK_SIZE, CHUNK_OVERLAP) re-chunk and re-embed the corpus per
#: value (HoloViz: ~9 min a variant here), so they are in no default space: give a space with them to
#: `run_study(space=...)` where that budget exists.
SPACES: dict[str, tuple[Param, ...]] = {
    "memories": _SEARCH_TIME + (DECAY, RECENCY_WEIGHT, RECENCY_INTENT, TAG_WEIGHT, BM25_K1, BM25_B),
    "holoviz": _SEARCH_TIME + (TAG_WEIGHT, CHUNK_DECAY, BM25_K1, BM25_B),
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
            assert p.low is not None and p.high is not None  # a numeric parameter has its bounds
            params[p.name] = trial.suggest_int(p.name, int(p.low), int(p.high), log=p.log)
        else:
            value = trial.suggest_float(p.name, p.low, p.high, log=p.log, step=p.step)
            params[p.name] = round(value, 10) if p.step else value  # 0.6000000000000001 -> 0.6
    return params


def split_params(
    params: Mapping[str, Any], base: IndexConfig | None = None
) -> tuple[dict[str, Any], IndexConfig]:
    """Trial parameters -> (search settings, index config built from `base`)."""
    base = base or IndexConfig()
    search = {k: v for k, v in params.items() if k not in INDEX_TARGETS}
    chunk = {INDEX_TARGETS[k][1]: v for k, v in params.items() if INDEX_TARGETS.get(k, ("",))[0] == "chunk"}
    bm25 = {INDEX_TARGETS[k][1]: v for k, v in params.items() if INDEX_TARGETS.get(k, ("",))[0] == "bm25"}
    config = dataclasses.replace(
        base, chunk=dataclasses.replace(base.chunk, **chunk), bm25=dataclasses.replace(base.bm25, **bm25)
    )
    return search, config


def default_params(space: Sequence[Param], n_chunks: int, base: IndexConfig | None = None) -> dict[str, Any]:
    """The package defaults expressed in `space` (adaptive alpha and auto staging resolved for an
    index of `n_chunks`), so a study's first trial measures exactly the defaults."""
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
        if not p.contains(values[p.name]):
            raise InvalidValueError(
                f"the default {p.name}={values[p.name]!r} lies outside its sweep range {p}: the first "
                "trial would not measure the defaults"
            )
    return values
