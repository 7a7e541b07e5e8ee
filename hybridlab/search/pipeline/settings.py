"""The settings step: the search's SearchConfig (auto values resolved), the dense model, the rows the
filters allow, and the tags and collections the query names."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

from hybridlab.config import SearchConfig, resolve_auto, resolve_search_config
from hybridlab.encoders.late import canonical_late_name
from hybridlab.encoders.registry import canonical_name
from hybridlab.errors import InvalidValueError
from hybridlab.search.filters import Filters
from hybridlab.search.pipeline.records import QueryTags
from hybridlab.search.retrievers import RowFilter
from hybridlab.search.snapshot import Snapshot
from hybridlab.search.tags import resolve_tags


def choose_model(
    snapshot: Snapshot, config_file: Mapping[str, Any], embedding_model: str | None, language: str | None
) -> str:
    """embedding_model > language (via the index's language table) > the index's single model."""
    if embedding_model:
        name = canonical_name(embedding_model)
        if name not in snapshot.dense:
            raise InvalidValueError(
                f"the index has no vectors of {name!r}; it has {snapshot.models}", field="embedding_model"
            )
        return name
    if language:
        table = dict(snapshot.generation.manifest.index_config.model_by_language)
        table.update(config_file.get("language_models", {}))
        if language not in table:
            raise InvalidValueError(
                f"no embedding model configured for language {language!r}; "
                f"known languages: {sorted(table)}; or pass embedding_model",
                field="language",
            )
        return choose_model(snapshot, config_file, table[language], None)
    if len(snapshot.dense) == 1:
        return next(iter(snapshot.dense))
    if not snapshot.dense:
        raise InvalidValueError("the index has no embedding vectors; use mode='bm25'")
    raise InvalidValueError(
        f"the index holds vectors of several models {snapshot.models}; choose one with "
        f"embedding_model=... (CLI --embedding-model) or language=... (CLI --language)"
    )


def stores_late(snapshot: Snapshot, model: str) -> bool:
    """Whether the index records token vectors of late-interaction model `model`."""
    return canonical_late_name(model) in snapshot.generation.manifest.late


def settings(
    snapshot: Snapshot, options: Mapping[str, Any], filters: Filters, config_file: Mapping[str, Any]
) -> tuple[SearchConfig, str, RowFilter, str | None]:
    """The search settings (auto values resolved) and where alpha came from, the rows the filters
    allow, and the dense model (None when no dense signal is asked for)."""
    options = dict(options)
    embedding_model = options.pop("embedding_model", None)
    language = options.pop("language", None)
    config, sources = resolve_search_config(
        options,
        config_file=config_file,
        n_chunks=snapshot.n_chunks,
        memory_share=snapshot.generation.memory_share,
    )
    config = resolve_auto(config, snapshot.n_chunks)
    if sources["late_depth"] == "default" and (
        config.mode != "hybrid" or not stores_late(snapshot, config.late_model)
    ):
        # the default second stage re-scores hybrid searches (where it was measured) on an index
        # that stores its token vectors; asked for explicitly, it re-scores any mode and encodes
        # the candidates that have no stored vectors (slower, same scores)
        config = dataclasses.replace(config, late_depth=0)
    assert config.alpha is not None  # `resolve_search_config` fills an unset alpha (adaptive)
    allowed = snapshot.store.allowed(filters)
    needs_dense = config.mode == "vector" or (config.mode == "hybrid" and config.alpha > 0)
    model = choose_model(snapshot, config_file, embedding_model, language) if needs_dense else None
    return config, sources["alpha"], allowed, model


#: a tag worn by at most this share of the rows tells fully which rows a query means; one worn by
#: at least the other share tells nothing (it splits the rows no better than a coin)
TELLING_TAG_SHARE, UNTELLING_TAG_SHARE = 0.1, 0.5


def tag_information(share: float) -> float:
    """How much naming a tag worn by `share` of the rows says about which row is meant, in [0, 1]:
    1.0 up to :data:`TELLING_TAG_SHARE`, 0.0 from :data:`UNTELLING_TAG_SHARE`, log-linear in the
    tag's IDF between (`log(0.5 / share) / log(0.5 / 0.1)`: 0.57 at 20%, 0.32 at 30%). A speaker's
    name on half of a two-person conversation's turns, or a tag on most memories, must not outvote
    the text signals (LoCoMo: questions that name the wrong speaker, docs/evaluation.md#memory-benchmarks);
    a project tag on 9% of the memories keeps its full weight."""
    if share <= TELLING_TAG_SHARE:
        return 1.0
    if share >= UNTELLING_TAG_SHARE:
        return 0.0
    return math.log(UNTELLING_TAG_SHARE / share) / math.log(UNTELLING_TAG_SHARE / TELLING_TAG_SHARE)


def query_tags(
    snapshot: Snapshot, query: str, config: SearchConfig, boost_tags: Sequence[str] | None
) -> QueryTags:
    """The tags (and collections) the query names, or the explicit `boost_tags` as given."""
    if boost_tags is None:
        match = snapshot.tag_vocabulary.extract(query)
        tags, matched_terms, coverage = match.tags, match.matched_terms, match.coverage
        collections = tuple(snapshot.collection_vocabulary.extract(query).tags)
    else:
        tags, matched_terms, coverage = (
            resolve_tags(boost_tags, snapshot.tag_vocabulary),
            len(boost_tags),
            1.0,
        )
        collections = ()
    boost = config.tag_boost if matched_terms >= config.tag_boost_min_terms else 1.0
    information = 1.0
    if boost_tags is None and tags and not collections:  # named by the query, not given: how telling
        rows = snapshot.generation.tag_rows
        information = max(
            tag_information(len(rows[tag]) / max(snapshot.n_chunks, 1)) if tag in rows else 1.0
            for tag in tags
        )
    return QueryTags(tuple(tags), collections, boost, coverage, information)
