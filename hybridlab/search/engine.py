"""The hybrid search engine: dense + BM25 + tag signals, fused, with recency and pushed-down filters.
See docs/internals/search.md#engine."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Self

from hybridlab.config import load_config_file
from hybridlab.errors import InvalidValueError
from hybridlab.index.format.manifest import Manifest
from hybridlab.index.reader import Generation, SegmentCache, consistency_problems, index_stamp
from hybridlab.search import listing
from hybridlab.search.filters import Filters, parse_when
from hybridlab.search.models import QueryModels
from hybridlab.search.pipeline import first_stage, records, steps
from hybridlab.search.pipeline.settings import choose_model
from hybridlab.search.records import (
    CollectionSummary,
    IndexStats,
    StoredDocument,
    collection_summaries,
    index_stats,
    stored_document,
)
from hybridlab.search.results import RunResponse, SearchResponse, SearchResult, iso_utc, make_snippet
from hybridlab.search.snapshot import Snapshot, open_snapshot, snapshot_of
from hybridlab.search.tags import resolve_tags

__all__ = [
    "CollectionSummary",
    "Index",
    "IndexStats",
    "RunResponse",
    "SearchResponse",
    "SearchResult",
    "StoredDocument",
    "iso_utc",
    "make_snippet",
    "open_index",
    "resolve_now",
]

MAX_QUERY_CHARS = records.MAX_QUERY_CHARS
QUERY_CACHE_SIZE = 4096


def resolve_now(now: str | datetime | None) -> datetime:
    """Reference time for recency: argument > `HYBRIDLAB_NOW` > the clock."""
    given = parse_when(now, "now")  # None also for "": not given, as an empty HYBRIDLAB_NOW
    if given is not None:
        return given
    env = os.environ.get("HYBRIDLAB_NOW")
    from_env = parse_when(env, "HYBRIDLAB_NOW") if env else None  # never None for a non-empty value
    return from_env if from_env is not None else datetime.now(UTC)


def _tuple(values: str | Iterable[str] | None) -> tuple[str, ...]:
    return () if values is None else (values,) if isinstance(values, str) else tuple(values)


def make_filters(
    *,
    tags: Sequence[str] = (),
    tags_any: bool = False,
    chunk_types=None,
    collection=None,
    since=None,
    until=None,
    embedding_model: str | None = None,
) -> Filters:
    """Filters from search arguments (a single string or a sequence for the any-of fields)."""
    return Filters(
        chunk_types=_tuple(chunk_types),
        tags=tuple(tags),
        tags_any=tags_any,
        collections=_tuple(collection),
        since=parse_when(since, "since"),
        until=parse_when(until, "until"),
        embedding_model=embedding_model,
    )


class Index:
    """An opened index: searches, documents, stats. Re-opens itself when a writer commits.

    Safe to share between threads: each call works on the snapshot it took at its start."""

    def __init__(
        self,
        index_dir: str | os.PathLike,
        config: str | os.PathLike | Mapping | None = None,
        *,
        check: bool = True,
        backend: Callable[[Generation], Snapshot] = snapshot_of,
    ) -> None:
        self.index_dir = Path(index_dir)
        self.config_file = dict(config) if isinstance(config, Mapping) else load_config_file(config)
        self.config_path = None if isinstance(config, Mapping) else config
        self._check = check
        self._backend = backend  # generation -> snapshot: local retrievers, or Qdrant's
        self._lock = threading.Lock()  # one re-open at a time
        self.query_models = QueryModels()  # every query-side model, loaded on first use
        self._segments = SegmentCache()  # segments are immutable: a refresh reads only new ones
        self._snapshot: Snapshot = open_snapshot(
            self.index_dir, check=check, backend=backend, cache=self._segments
        )

    # ---------------------------------------------------------------- the snapshot
    def snapshot(self) -> Snapshot:
        """The current generation, re-opened first when a writer has committed or logged a memory
        since (two stats: the manifest and the generation's write-ahead log)."""
        current = self._snapshot
        if index_stamp(self.index_dir, current.generation.number) != current.generation.stamp:
            self.refresh()
            current = self._snapshot
        return current

    def refresh(self) -> bool:
        """Re-open if another process committed a new generation; True when it did. Searches
        running meanwhile finish on the generation they started with."""
        with self._lock:
            if (
                index_stamp(self.index_dir, self._snapshot.generation.number)
                == self._snapshot.generation.stamp
            ):
                return False
            self._snapshot = open_snapshot(
                self.index_dir, check=self._check, backend=self._backend, cache=self._segments
            )
            # the old snapshot's DuckDB connection closes when its last search lets go of it
            return True

    def close(self) -> None:
        with self._lock:
            self._snapshot.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def consistency_problems(self) -> list[str]:
        """Every chunk id in DuckDB is in BM25 and in its models' FAISS indexes, and vice versa;
        counts and models match the manifest."""
        return consistency_problems(self._snapshot.generation)

    # ---------------------------------------------------------------- the current generation, for tools and tests
    @property
    def manifest(self) -> Manifest:
        return self._snapshot.generation.manifest

    @property
    def generation(self) -> int:
        return self._snapshot.number

    @property
    def n_chunks(self) -> int:
        return self._snapshot.n_chunks

    @property
    def models(self) -> list[str]:
        return self._snapshot.models

    @property
    def known_collections(self) -> list[str]:
        return list(self._snapshot.generation.known_collections)

    @property
    def dense(self) -> Mapping[str, Any]:
        """Model -> FAISS index (:class:`~hybridlab.index.format.dense.DenseIndex`)."""
        return self._snapshot.generation.dense

    @property
    def _con(self) -> Any:
        """The DuckDB connection, unlocked: single-threaded tools and tests only."""
        return self._snapshot.generation.store.raw

    # ---------------------------------------------------------------- the index's models
    def choose_model(self, embedding_model: str | None, language: str | None) -> str:
        """embedding_model > language (via the index's language table) > the index's single model."""
        return choose_model(self._snapshot, self.config_file, embedding_model, language)

    # ---------------------------------------------------------------- search
    make_filters = staticmethod(make_filters)

    def _retrieve(
        self,
        query: str,
        options: Mapping[str, Any],
        filters: Filters,
        boost_tags: Sequence[str] | None,
        now: datetime,
    ) -> records.Retrieval:
        """The first stage's retrieval on the current snapshot (for tests and tools)."""
        search = records.Search(query, options, filters, boost_tags, now, self.config_file)
        return first_stage.retrieve(self._snapshot, search, self.query_models)

    def search(
        self,
        query: str,
        *,
        tags: Sequence[str] | None = None,
        tags_any: bool = False,
        chunk_types: Sequence[str] | str | None = None,
        collection: Sequence[str] | str | None = None,
        since: str | datetime | None = None,
        until: str | datetime | None = None,
        embedding_model: str | None = None,
        language: str | None = None,
        now: str | datetime | None = None,
        explain: bool = False,
        content: str = "snippet",
        **options: Any,
    ) -> list[SearchResult]:
        """Search; keyword options are any :class:`SearchConfig` field (limit, mode, alpha, fusion,
        rrf_k, depth, decay, staged, candidates, min_score, ...).

        Tags: `tags=None` extracts the index's tags named in the query (case-insensitive, `-`/`_`/space
        variants, multi-word tags, stop words dropped) and a collection the query names; chunks
        carrying them form the tag run (score: matching tags + 1 for a named collection), fused with
        weight `(1 - alpha) * tag_weight * coverage` (coverage = share of the query's non-stop words
        that named tags, 1.0 for explicit tags; x `tag_boost` when `tag_boost_min_terms`+ query words
        matched), so one incidental tag word in a long query cannot outvote the text signals. No
        match leaves a dense+BM25 search, ranked
        exactly as with `tags=[]`, which turns tag signals off. `tags=[...]` are used as given: they
        drive the tag run AND filter the results to chunks carrying all of them (any of them with
        `tags_any=True`).

        Filters (`tags`, `chunk_types` any-of, `collection`, `since`/`until` on the update date,
        `embedding_model` = chunks having vectors of that model) are resolved in DuckDB to a row set
        pushed into both retrievers, so `limit` results come back whenever `limit` chunks match.
        `min_score` applies to the final score. Unknown chunk types/collections raise ValueError.

        Recency: final = fused * (1 - recency_weight + recency_weight * exp(-decay * days)), days since
        the update relative to `now` (argument > `HYBRIDLAB_NOW` > clock). `recency_weight` is 0 by
        default (an old memory that answers is not sunk by its age; measured in
        docs/figures.md#recency-weight); a query asking for the
        latest state ("current", "now", "latest", ...) gets `recency_intent_weight` (0.5). With a
        weight the factor scales the fused score by at most that share, so it reorders near-ties (the
        newest of near-identical memories wins) but cannot bury an old document that is the only
        relevant one under irrelevant new ones, which a full multiplication by the decay factor would.
        """
        return self.search_response(
            query,
            tags=tags,
            tags_any=tags_any,
            chunk_types=chunk_types,
            collection=collection,
            since=since,
            until=until,
            embedding_model=embedding_model,
            language=language,
            now=now,
            explain=explain,
            content=content,
            **options,
        ).results

    def search_response(
        self,
        query: str,
        *,
        tags: Sequence[str] | None = None,
        tags_any: bool = False,
        chunk_types: Sequence[str] | str | None = None,
        collection: Sequence[str] | str | None = None,
        since: str | datetime | None = None,
        until: str | datetime | None = None,
        embedding_model: str | None = None,
        language: str | None = None,
        now: str | datetime | None = None,
        explain: bool = False,
        content: str = "snippet",
        snapshot: Snapshot | None = None,
        **options: Any,
    ) -> SearchResponse:
        """What :meth:`search` returns (same arguments), with the search's timings, mode and the
        generation that answered: `snapshot`, else the current one (:meth:`snapshot`). `content`
        "chunk" or "full" gives each result the text of its chunk or of its whole document, read from
        the same snapshot as the ranking (a writer may commit a newer generation meanwhile); pass the
        snapshot you read more from (:meth:`get_document`) for the same reason."""
        snapshot = self.snapshot() if snapshot is None else snapshot
        tag_list = None if tags is None else _tuple(tags)
        if tag_list and not all(isinstance(t, str) and t.strip() for t in tag_list):
            raise InvalidValueError(f"tags must be non-empty strings, got {list(tag_list)!r}", field="tags")
        vectors_of = (
            choose_model(snapshot, self.config_file, embedding_model, None) if embedding_model else None
        )
        filters = make_filters(
            tags=resolve_tags(tag_list, snapshot.tag_vocabulary) if tag_list else (),
            tags_any=tags_any,
            chunk_types=chunk_types,
            collection=collection,
            since=since,
            until=until,
            embedding_model=vectors_of,
        )
        options = {**options, "embedding_model": embedding_model, "language": language}
        asked = records.Search(query, options, filters, tag_list, resolve_now(now), self.config_file, content)
        return steps.search(snapshot, asked, self.query_models, explain)

    def run(
        self,
        query: str,
        *,
        now: str | datetime | None = None,
        filters: Filters | None = None,
        tags: Sequence[str] | None = None,
        **options: Any,
    ) -> dict[str, float]:
        """`{doc_id: score}` for evaluation: documents ranked by their best chunk, `limit` of them."""
        return self.run_response(query, now=now, filters=filters, tags=tags, **options).run

    def run_response(
        self,
        query: str,
        *,
        now: str | datetime | None = None,
        filters: Filters | None = None,
        tags: Sequence[str] | None = None,
        **options: Any,
    ) -> RunResponse:
        """What :meth:`run` returns, with the search's timings, mode and the generation that answered
        (the current one: `run` does not look for a newer generation, call `refresh`)."""
        snapshot = self._snapshot
        options.setdefault("limit", 100)
        asked = records.Search(
            query,
            options,
            filters or Filters(),
            None if tags is None else _tuple(tags),
            resolve_now(now),
            self.config_file,
        )
        return steps.run(snapshot, asked, self.query_models)

    # ---------------------------------------------------------------- documents and stats
    def get_document(self, doc_id: str, *, snapshot: Snapshot | None = None) -> StoredDocument:
        """The full text and metadata of one document (DocumentNotFoundError, a KeyError, when absent) in
        `snapshot`, else in the current generation."""
        if not isinstance(doc_id, str) or not doc_id:
            raise InvalidValueError("doc_id must be a non-empty string", field="doc_id")
        return stored_document(self.snapshot() if snapshot is None else snapshot, doc_id)

    def search_by_tag(
        self,
        tags: Sequence[str],
        *,
        match: str = "all",
        limit: int = 10,
        since: str | datetime | None = None,
        until: str | datetime | None = None,
        collection: str | None = None,
    ) -> list[StoredDocument]:
        """Documents carrying all (or any) of the tags, newest first (updated within `since`..`until`;
        only `collection`'s when given, as in :meth:`list_documents`)."""
        if match not in {"all", "any"}:
            raise InvalidValueError(f"unknown match {match!r}; choose from ['all', 'any']", field="match")
        if not tags or not all(isinstance(t, str) and t.strip() for t in tags):
            raise InvalidValueError("tags must be a non-empty list of non-empty strings", field="tags")
        return self.list_documents(
            tags=tags, match=match, since=since, until=until, limit=limit, collection=collection
        )[0]

    def list_documents(
        self,
        *,
        tags: Sequence[str] = (),
        match: str = "all",
        since: str | datetime | None = None,
        until: str | datetime | None = None,
        chunk_types: Sequence[str] = (),
        collection: str | None = None,
        prefix: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> tuple[list[StoredDocument], str | None]:
        """(documents, next page's cursor): newest first under the filters (:mod:`~hybridlab.search.listing`),
        only `collection`'s (ValueError when the index has no such collection) and those whose doc id
        starts with `prefix`; an unknown chunk type matches nothing here (an empty memory store lists nothing)."""
        snapshot = self.snapshot()
        if any(t not in snapshot.generation.known_chunk_types for t in chunk_types):
            return [], None
        wanted = resolve_tags(tags, snapshot.tag_vocabulary) if tags else ()
        filters = make_filters(
            tags=wanted,
            tags_any=match == "any",
            chunk_types=chunk_types,
            since=since,
            until=until,
            collection=collection,
        )
        page = listing.newest_documents(snapshot, filters, limit=limit, cursor=cursor, prefix=prefix)
        return [stored_document(snapshot, doc_id) for doc_id in page.doc_ids], page.next_cursor

    def list_collections(self, top_tags: int = 20) -> list[CollectionSummary]:
        """Each collection (sorted by name): its documents and chunks, chunks per chunk type, and its
        `top_tags` most common tags with their document counts (`tag_count`: all its distinct tags)."""
        return collection_summaries(self.snapshot().generation, top_tags)

    def stats(self, *, snapshot: Snapshot | None = None) -> IndexStats:
        """Counts per collection, chunk type and model (with the encoder spec the manifest records
        of each model: source, revision, dim, pooling, prompts, ...), plus the manifest's build facts;
        of `snapshot`, else of the current generation."""
        return index_stats(self.index_dir, self.snapshot() if snapshot is None else snapshot)


def open_index(index_dir: str | os.PathLike, config: str | os.PathLike | Mapping | None = None) -> Index:
    """Open an index folder for searching (read-only; re-opens itself after writers commit)."""
    return Index(index_dir, config)
