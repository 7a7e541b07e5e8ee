"""The MCP server: a thin adapter exposing an index to AI assistants as ten typed tools.

Each tool is a module-level function `name(..., *, ctx)` whose docstring is the tool's description,
whose signature (as written: nothing rewrites it) is the input schema and whose pydantic result is the
output schema the SDK publishes; :func:`create_server` registers :data:`TOOLS`. A call finds its
:class:`Service` (the index, its :class:`~hybridlab.memory.MemoryService`, the server's settings) in
the SDK's request `Context`, as what the server's lifespan yields (:func:`_service`). `search`,
`get_document` and `stats` each read one snapshot of the index, so a writer committing meanwhile mixes
no newer generation into a response. The memory tools hand their call to the memory service, which
owns dedupe, store, update, delete and refresh. See docs/internals/search.md#mcp-server."""

from __future__ import annotations

import contextlib
import copy
import functools
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any, Literal, cast

from hybridlab.config import resolve_search_config
from hybridlab.errors import HybridlabError, InvalidValueError
from hybridlab.extras import require
from hybridlab.memory import (
    NEAR_THRESHOLD,
    MemoryFilters,
    MemoryService,
    ProjectScope,
    check_project,
)
from hybridlab.search.engine import SearchResult, StoredDocument, resolve_now
from hybridlab.search.sections import document_sections, find_section
from hybridlab.search.time_range import resolve_time_range
from hybridlab.server.http_auth import (
    StaticTokenVerifier,
    auth_settings,
)

# This module is the MCP adapter: without the SDK (and the pydantic it brings) importing it fails with
# a message naming the `mcp` extra, and so does `hybridlab mcp`.
require("mcp")

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel, ConfigDict, Field

logger = logging.getLogger(__name__)

SERVER_NAME = "hybridlab"
MAX_LIMIT = 100
INSTRUCTIONS = (
    "Hybrid (semantic + keyword + tag + recency) search over a local index of documents and memories. "
    "Use `search` to find things, `get_document` to read one, `store_memory` to remember a fact "
    "for later, `update_memory` / `delete_memory` to correct or forget one, `list_memories` and "
    "`search_by_tag` for the newest items, `list_collections` / `list_documents` to browse, and `stats` to see "
    "what the index holds. Long texts come in pages (`get_document` takes `offset`, `max_chars`). "
    'Searches and lists take `time` in words ("yesterday", "last week") or ISO `since`/`until`. '
    "Memories belong to a project (`project`, default the server's): a call sees only its project's "
    'documents and memories unless it passes project="*".'
)

WARM_QUERIES = (
    "warm up",
    "how is the project configured",
    "which editor and terminal settings does the user prefer for python development on the laptop",
)

Limit = Annotated[int, Field(ge=1, le=MAX_LIMIT, description=f"results to return, 1..{MAX_LIMIT}")]
#: the default budgets keep a response under ~10k characters: search's text fields (snippets or texts,
#: shared by the results) and get_document's page of text
SEARCH_MAX_CHARS = 5_000
DOCUMENT_MAX_CHARS = 8_000
TOC_CHARS = 1_000  # the section titles listed on a document's first page (JSON quoting included)
MAX_CHARS_CAP = 200_000
SearchChars = Annotated[
    int, Field(ge=100, le=MAX_CHARS_CAP, description="characters of text in all results together")
]
PageChars = Annotated[int, Field(ge=1, le=MAX_CHARS_CAP, description="characters of text in this page")]
#: the default project of the tools comes from this variable (a read of every project: project="*")
PROJECT_ENV = "HYBRIDLAB_PROJECT"


class TimeWindow(BaseModel):
    """The time filter a call used: from `time` words (their `expression`) or ISO since/until."""

    expression: str | None = None
    since: str | None = None
    until: str | None = None


class SearchHit(BaseModel):
    """One document found by `search`."""

    rank: int
    doc_id: str
    title: str
    section: str
    score: float
    snippet: str
    tags: list[str]
    collection: str
    chunk_type: str
    updated_at: str | None = None
    text: str | None = None
    truncated: bool = False
    explain: dict[str, Any] | None = None


class SearchResponse(BaseModel):
    """The results of one `search` call."""

    query: str
    count: int
    results: list[SearchHit]
    time_range: TimeWindow | None = None


class DocumentResponse(BaseModel):
    """One document: `text` is its characters offset..offset+len(text) of total_chars; next_offset
    (null on the last page) is the offset of the next page."""

    doc_id: str
    title: str
    collection: str
    doc_type: str
    text: str
    offset: int = 0
    total_chars: int
    next_offset: int | None = None
    tags: list[str]
    created_at: str | None = None
    updated_at: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    remaining_chars: int = 0
    section_count: int = 1
    section: str | None = None
    next_section: int | None = None
    sections: list[str] | None = Field(default=None, description="a first page's table of contents")


class CollectionInfo(BaseModel):
    """One collection: its documents and chunks, chunks per chunk type, its most common tags (tag ->
    documents) and how many distinct tags it has."""

    name: str
    documents: int
    chunks: int
    chunk_types: dict[str, int]
    tags: dict[str, int]
    tag_count: int


class CollectionList(BaseModel):
    """The collections of the index, by name: each is a project."""

    count: int
    collections: list[CollectionInfo]
    default_project: str | None = None


class DocumentEntry(BaseModel):
    """A document listed by `list_documents` (no text: read it with `get_document`)."""

    rank: int
    doc_id: str
    title: str
    collection: str
    doc_type: str
    total_chars: int
    tags: list[str]
    updated_at: str | None = None


class DocumentList(BaseModel):
    """One page of `list_documents`; pass `next_cursor` back as cursor for the next page."""

    count: int
    results: list[DocumentEntry]
    next_cursor: str | None = None


class TaggedDocument(BaseModel):
    """A document found by `search_by_tag` (newest first)."""

    rank: int
    doc_id: str
    title: str
    collection: str
    doc_type: str
    text: str
    tags: list[str]
    created_at: str | None = None
    updated_at: str | None = None
    truncated: bool = False


class TagResponse(BaseModel):
    """The results of one `search_by_tag` call."""

    tags: list[str]
    match: str
    count: int
    results: list[TaggedDocument]
    time_range: TimeWindow | None = None


class MemoryList(BaseModel):
    """One page of `list_memories` (newest first); pass `next_cursor` back for the next page."""

    count: int
    results: list[TaggedDocument]
    next_cursor: str | None = None
    time_range: TimeWindow | None = None


class DeletedResponse(BaseModel):
    """What `delete_memory` deleted (or, with dry_run, would delete)."""

    dry_run: bool
    count: int
    ids: list[str]
    not_found: list[str] = Field(default_factory=list)
    generation: int | None = None
    time_range: TimeWindow | None = None


class StoredMemoryResponse(BaseModel):
    """A memory that was committed to the index and is searchable now."""

    id: str
    generation: int | None
    tags: list[str]
    created_at: str
    updated_at: str | None = None
    batch_size: int = Field(description="memories committed together")
    seconds: float
    pending: bool = Field(
        default=False, description="commit deferred (--commit-delay); still found by the next search"
    )
    created: bool = Field(
        default=True, description="false: an equal memory existed and is returned unchanged"
    )
    duplicate_of: str | None = None
    near_duplicate_of: str | None = Field(
        default=None, description="most similar memory, cosine >= near_threshold"
    )
    similarity: float | None = None
    project: str | None = None


class ServerActivity(BaseModel):
    """This server's memory writes and settings."""

    memory_commits: int  # stores and deletes committed as a generation of their own (no log)
    memory_log_appends: int  # stores and deletes appended to the write-ahead log
    memory_log_folds: int  # logs folded into a segment
    wal_records: int | None  # records the log holds before its fold (0: a segment per write)
    memories_pending: int  # acknowledged, their deferred commit (commit_delay) not made yet
    commit_delay: float
    warm_seconds: float | None  # loading the embedding model at the start took (None: not warmed)
    backend: str


class StatsResponse(BaseModel):
    """The index, the search settings in force (and their sources), this server."""

    #: typed: what clients read most. The other keys (`Index.stats`' counts per collection, chunk type
    #: and model, models, bm25, chunking, segments, write_ahead_log; collections, chunk_types,
    #: search_config, config_file) come as extra fields: every field typed would put the tool list over
    #: its budget (tests/server/test_mcp_budgets.py: 5,000 tokens, 20 characters to spare)
    model_config = ConfigDict(extra="allow")

    generation: int
    documents: int
    chunks: int
    search_config_sources: dict[str, str]
    server: ServerActivity


def _tool_error(error: BaseException) -> ToolError:
    """The SDK's ToolError carrying a readable message (a KeyError's repr quotes stripped)."""
    message = error.args[0] if isinstance(error, KeyError) and error.args else str(error)
    return ToolError(str(message))


#: what the library raises for the caller's mistakes (bad input, an unknown id: `InvalidValueError`,
#: `DocumentNotFoundError`) and for a failed write (a locked index); a bare ValueError, KeyError or
#: FileNotFoundError is a bug, reported by `_tool` as an internal error (a user's missing path is a PathNotFoundError)
LIBRARY_ERRORS = (HybridlabError,)


def _service(ctx: Context) -> Service:
    """The :class:`Service` a tool call works on: what :func:`create_server`'s lifespan yields, which
    the SDK hands every call in its request `Context`."""
    return cast(Service, ctx.request_context.lifespan_context)


def _tool(function: Callable[..., Any]) -> Callable[..., Any]:
    """The tool of a tool function (its signature as written, `ctx` included: the SDK reads it
    through `functools.wraps`), whose errors say who is at fault: a `HybridlabError` raised anywhere
    in it (the user's to fix, its message says how) and the tool errors it raises itself reach the
    client with their message; anything else is a bug in hybridlab, an "internal error" whose text
    stays on the server: its traceback goes to the server's log."""

    @functools.wraps(function)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except (ToolError, MCPError):
            raise
        except HybridlabError as error:
            raise _tool_error(error) from None
        except Exception as error:
            logger.exception("internal error in tool %s", function.__name__)
            raise ToolError(
                f"internal error in {function.__name__} ({type(error).__name__}): a bug in "
                f"hybridlab, not in the call; the server's log has the traceback"
            ) from None

    return guarded


class HybridlabServer(MCPServer):
    """The SDK's server holding the :class:`Service` its lifespan hands the tools (`service`, also
    for tests and the benchmark), listing the tools' JSON schemas compacted (:func:`_compact_schema`)."""

    def __init__(self, service: Service, **settings: Any) -> None:
        super().__init__(SERVER_NAME, **settings)
        self.service = service

    async def list_tools(self) -> list[Any]:
        """The SDK's tool list, each input and output schema a compacted copy."""
        tools = await super().list_tools()
        for tool in tools:
            tool.input_schema = _compacted(tool.input_schema)
            tool.output_schema = _compacted(tool.output_schema)
        return tools


@contextlib.contextmanager
def _tool_errors(*kinds: type[BaseException]) -> Iterator[None]:
    """Errors of `kinds` raised inside become tool errors with a readable message."""
    try:
        yield
    except kinds as error:
        raise _tool_error(error) from None


def default_project(project: str | None) -> str | None:
    """The server's default project: `project` (`hybridlab mcp --project`), else `HYBRIDLAB_PROJECT`,
    else none: then a read without `project` covers every collection and a store goes to no project,
    as before projects existed."""
    name = project if project is not None else (os.environ.get(PROJECT_ENV) or None)
    return None if name is None else check_project(name)


class Service:
    """What every tool works on: the index's memory service (its index, memory writer and default
    project) and the server's settings (config file, backend, warm-up time). The SDK runs sync tools
    in worker threads; Index is thread-safe, so reads run side by side, each on the generation it
    started with; after a memory commit the index re-opens and later reads see the new generation."""

    def __init__(
        self,
        index_dir: str | os.PathLike,
        config: str | os.PathLike | Mapping | None,
        lock_wait: float,
        commit_delay: float,
        backend: Callable[[Any], Any] | None = None,
        backend_name: str = "local",
        wal_records: int | None = None,
        project: str | None = None,
    ) -> None:
        self.index_dir = Path(index_dir)
        if MemoryService.create_if_missing(self.index_dir):
            logger.info(
                "created an empty memory index at %s (default model and settings, in its manifest); "
                "store_memory works now",
                self.index_dir,
            )
        self.config_path = None if config is None or isinstance(config, Mapping) else str(config)
        self.backend_name = backend_name
        self.memories = MemoryService.open(
            self.index_dir,
            config,
            backend=backend,
            lock_wait=lock_wait,
            commit_delay=commit_delay,
            wal_records=wal_records,
            default_project=project,
        )
        self.index = self.memories.index
        self.writer = self.memories.writer  # its counters and settings are what `stats` reports
        self.default_project = self.memories.default_project
        self.warm_seconds: float | None = None

    def scope(self, project: str | None, known: Sequence[str], collection: str | None = None) -> ProjectScope:
        """What a read covers (:meth:`MemoryService.scope`: projects are the memory service's)."""
        return self.memories.scope(project, known, collection)

    def time_range(self, time: str | None, since: str | None, until: str | None) -> Any:
        """The call's time filter (None: none), relative to `HYBRIDLAB_NOW` or the clock; bad input is a tool error."""
        with _tool_errors(*LIBRARY_ERRORS):
            return resolve_time_range(time, since, until, resolve_now(None))

    def warm(self) -> None:
        """Load the embedding model and encode a few queries, so the first real search is quick."""
        started = time.perf_counter()
        try:
            snapshot, models = self.index.snapshot(), self.index.query_models
            for model in self.index.models:  # a few lengths: torch prepares kernels per input shape
                for text in WARM_QUERIES:
                    models.encode_queries(snapshot, model, [text])
            models.warm_late(snapshot, WARM_QUERIES)  # the second stage's query encoder, if stored
        except Exception:  # a model that fails to load is reported by the first search instead
            logger.exception("warming the embedding model failed")
        self.warm_seconds = time.perf_counter() - started
        logger.info("embedding model warm in %.2fs", self.warm_seconds)

    @contextlib.contextmanager
    def reading(self, flush: bool = True) -> Iterator[Any]:
        """The index, deferred memories committed first (:meth:`MemoryService.index_for_read`);
        library errors become tool errors."""
        index = self.memories.index_for_read(flush)
        with _tool_errors(*LIBRARY_ERRORS):  # an unknown doc_id included (DocumentNotFoundError)
            yield index


# -------------------------------------------------------------------------------------------- tools
# Each tool is a function `name(arguments..., *, ctx)`: its docstring is the description clients read,
# its arguments but `ctx` the tool's input schema, its pydantic result the output schema; the SDK fills
# `ctx` with the request Context, where `_service` finds the Service. `create_server` registers TOOLS,
# in this order.


def search(
    query: str,
    limit: Limit = 10,
    tags: list[str] | None = None,
    chunk_types: list[str] | None = None,
    collection: str | None = None,
    project: str | None = None,
    min_score: float | None = None,
    staged: bool | None = None,
    explain: bool = False,
    time: str | None = None,
    since: str | None = None,
    until: str | None = None,
    content: Literal["snippet", "chunk", "full"] = "snippet",
    max_chars: SearchChars = SEARCH_MAX_CHARS,
    *,
    ctx: Context,
) -> SearchResponse:
    """Search the index (semantic + keyword + tag + recency) for the best documents.

    tags: only documents with all these tags (default: tags named in the query boost).
    chunk_types, collection: see `stats`. project: default the server's, "*" all.
    staged: force/forbid BM25-then-rerank. explain: each result's score breakdown.
    time: words, e.g. "yesterday", "last week", "in March"; or ISO since/until.
    content: "snippet" (default), "chunk" or "full" text; max_chars (default 5000) is shared by all
    results, a cut one has truncated=true: read on with get_document.
    Example: {"query": "linked brushing release notes", "content": "chunk", "time": "this year"}"""
    service = _service(ctx)
    window = service.time_range(time, since, until)
    with service.reading() as index:
        # ranks and gives the texts, though a writer may commit a newer one meanwhile
        snapshot = index.snapshot()
        scope = service.scope(project, snapshot.generation.known_collections, collection)
        if scope.empty:
            return SearchResponse(query=query, count=0, results=[], time_range=_window(window))
        results = index.search_response(
            query,
            snapshot=snapshot,
            limit=limit,
            tags=tags,
            chunk_types=chunk_types,
            collection=scope.collection,
            min_score=min_score,
            staged=staged,
            explain=explain,
            content=content,
            since=window and window.since,
            until=window and window.until,
        ).results
    hits = [_hit(result, content, window) for result in results]
    _fit_texts(hits, max_chars, "snippet" if content == "snippet" else "text")
    return SearchResponse(query=query, count=len(hits), results=hits, time_range=_window(window))


def get_document(
    doc_id: str,
    offset: Annotated[int, Field(ge=0)] = 0,
    max_chars: PageChars = DOCUMENT_MAX_CHARS,
    section: int | str | None = None,
    *,
    ctx: Context,
) -> DocumentResponse:
    """Read one document by the doc_id a search returned, a page at a time: at most max_chars
    characters (default 8000) from offset. next_offset (null at the end) starts the next page;
    remaining_chars is what follows. A first page lists the document's header sections;
    section (a number or title) reads one section, offset counting from its start, next_section after it.
    Example: {"doc_id": "doc/about/releases.md", "section": "Version 1.4.0"}"""
    service = _service(ctx)
    with service.reading() as index:
        snapshot = index.snapshot()  # the document and the header levels that split it, of one generation
        document = index.get_document(doc_id, snapshot=snapshot)
        levels = snapshot.generation.manifest.index_config.chunk.header_levels
    text = document.text
    sections = document_sections(text, document.doc_type, levels)
    with _tool_errors(*LIBRARY_ERRORS):
        part = find_section(sections, section) if section is not None else None
    start, stop = (part.start, part.end) if part else (0, len(text))
    if start + offset > stop:
        raise _tool_error(
            InvalidValueError(
                f"offset {offset} is past the end of {doc_id!r} "
                f"({'section ' + str(part.index) + ': ' if part else ''}{stop - start} characters)",
                field="offset",
            )
        )
    end = min(start + offset + max_chars, stop)
    titles = _titles(sections, TOC_CHARS) if part is None and offset == 0 and len(sections) > 1 else None
    return DocumentResponse(
        doc_id=document.doc_id,
        title=document.title,
        collection=document.collection,
        doc_type=document.doc_type,
        tags=list(document.tags),
        created_at=document.created_at,
        updated_at=document.updated_at,
        metadata=dict(document.metadata),
        text=text[start + offset : end],
        offset=offset,
        total_chars=len(text),
        next_offset=end - start if end < stop else None,
        remaining_chars=len(text) - end,
        section_count=len(sections),
        section=part.title if part else None,
        sections=titles,
        next_section=part.index + 1 if part and part.index + 1 < len(sections) else None,
    )


def store_memory(
    content: str,
    tags: list[str] = [],  # noqa: B006 - the SDK needs a JSON default; never mutated
    memory_type: str = "note",
    created_at: str | None = None,
    context: str | None = None,
    allow_duplicate: bool = False,
    near_threshold: Annotated[float, Field(ge=0.5, le=1.0)] | None = NEAR_THRESHOLD,
    skip_near_duplicate: bool = False,
    project: str | None = None,
    *,
    ctx: Context,
) -> StoredMemoryResponse:
    """Remember a fact, preference, decision or note (<= 20,000 characters) in a project (default
    the server's); found by the next search. created_at: ISO, default now. The same content
    (ignoring case and whitespace) in the project is not stored twice: the existing memory comes
    back, created=false (allow_duplicate=true stores a copy). One at near_threshold cosine or above
    (default 0.95; null: off) is reported as near_duplicate_of; skip_near_duplicate=true returns it.
    context: the turn before it, indexed with it (a question worded like that turn finds it), not
    its content.
    Example: {"content": "Deploys run on Fridays.", "tags": ["deploy"], "memory_type": "decision"}"""
    service = _service(ctx)
    outcome = service.memories.store(
        content,
        tags,
        memory_type,
        created_at,
        context=context,
        allow_duplicate=allow_duplicate,
        near_threshold=near_threshold,
        skip_near_duplicate=skip_near_duplicate,
        project=project,
    )
    return StoredMemoryResponse(**outcome.to_dict())


def update_memory(
    memory_id: str,
    content: str | None = None,
    tags: list[str] | None = None,
    memory_type: str | None = None,
    project: str | None = None,
    move_to: str | None = None,
    *,
    ctx: Context,
) -> StoredMemoryResponse:
    """Correct a memory: the fields given replace its content, tags and/or type; same id and
    created_at, updated_at now. project: where it is (default the server's, "*" any);
    move_to: the project it moves to.
    Example: {"memory_id": "mem-795dd95d27ad4622", "content": "The deploy key moved to the Infra vault."}"""
    service = _service(ctx)
    updated = service.memories.update(
        memory_id, content=content, tags=tags, memory_type=memory_type, project=project, move_to=move_to
    )
    return StoredMemoryResponse(**updated.stored.to_dict(), project=updated.project)


def delete_memory(
    ids: list[str] | None = None,
    tags: list[str] | None = None,
    match: Literal["all", "any"] = "any",
    time: str | None = None,
    since: str | None = None,
    until: str | None = None,
    dry_run: bool = False,
    project: str | None = None,
    *,
    ctx: Context,
) -> DeletedResponse:
    """Forget memories for good: by ids, or all with the tags (match "any"/"all") and/or in a time
    range (as in `search`), of one project (default the server's, "*" all). dry_run=true only lists them.
    Example: {"tags": ["scratch"], "time": "last week", "dry_run": true}"""
    service = _service(ctx)
    window = service.time_range(time, since, until)
    if bool(ids) == bool(tags or window):
        raise _tool_error(
            InvalidValueError("give ids, or tags and/or a time range (time, since, until): one of the two")
        )
    filters = None if ids else _filters(tags or (), match, window)
    deletion = service.memories.delete(ids or (), filters, dry_run=dry_run, project=project)
    return DeletedResponse(
        dry_run=deletion.dry_run,
        count=len(deletion.ids),
        ids=list(deletion.ids),
        not_found=list(deletion.not_found),
        generation=deletion.generation,
        time_range=_window(window),
    )


def list_memories(
    limit: Limit = 10,
    cursor: str | None = None,
    tags: list[str] | None = None,
    match: Literal["all", "any"] = "all",
    time: str | None = None,
    since: str | None = None,
    until: str | None = None,
    max_chars: SearchChars = SEARCH_MAX_CHARS,
    project: str | None = None,
    *,
    ctx: Context,
) -> MemoryList:
    """List memories newest first, a page at a time (limit default 10); only those with tags and/or
    in a time range if given, of one project (default the server's, "*" all). Pass next_cursor back
    as cursor. max_chars (default 5000) is shared by the texts (a cut one has truncated=true).
    Example: {"tags": ["deploy"], "time": "this month", "limit": 5}"""
    service = _service(ctx)
    window = service.time_range(time, since, until)
    page = service.memories.page(_filters(tags or (), match, window), project, limit=limit, cursor=cursor)
    results = _tagged(page.documents, max_chars)
    return MemoryList(
        count=len(results), results=results, next_cursor=page.next_cursor, time_range=_window(window)
    )


def search_by_tag(
    tags: list[str],
    match: Literal["all", "any"] = "all",
    limit: Limit = 10,
    time: str | None = None,
    since: str | None = None,
    until: str | None = None,
    max_chars: SearchChars = SEARCH_MAX_CHARS,
    project: str | None = None,
    *,
    ctx: Context,
) -> TagResponse:
    """The newest documents with all (match="all") or any of the tags; time and project as in `search`.
    max_chars (default 5000) is shared by the texts (a cut one has truncated=true).
    Example: {"tags": ["python", "testing"], "match": "any", "time": "last week"}"""
    service = _service(ctx)
    window = service.time_range(time, since, until)
    with service.reading() as index:
        scope = service.scope(project, index.known_collections)
        found = (
            []
            if scope.empty
            else index.search_by_tag(
                tags,
                match=match,
                limit=limit,
                since=window and window.since,
                until=window and window.until,
                collection=scope.collection,
            )
        )
    results = _tagged(found, max_chars)
    return TagResponse(
        tags=list(tags), match=match, count=len(results), results=results, time_range=_window(window)
    )


def list_collections(*, ctx: Context) -> CollectionList:
    """The collections (each is a project) to browse: documents, chunks per type, top tags. Then
    list_documents or search with collection=. Example: {}"""
    service = _service(ctx)
    with service.reading() as index:
        collections = [CollectionInfo(**c.to_dict()) for c in index.list_collections()]
    return CollectionList(
        count=len(collections), collections=collections, default_project=service.default_project
    )


def list_documents(
    collection: str | None = None,
    prefix: str | None = None,
    cursor: str | None = None,
    limit: Limit = 20,
    *,
    ctx: Context,
) -> DocumentList:
    """Documents (doc_id, title, total_chars, tags; no text) newest first, a page at a time, of a
    collection and/or doc_id prefix. Pass next_cursor back as cursor; read one with get_document.
    Example: {"collection": "panel", "prefix": "reference/widgets/", "limit": 50}"""
    service = _service(ctx)
    with service.reading() as index:
        found, next_cursor = index.list_documents(
            collection=collection, prefix=prefix or None, limit=limit, cursor=cursor
        )
    results = [
        DocumentEntry(
            rank=rank,
            doc_id=doc.doc_id,
            title=doc.title,
            collection=doc.collection,
            doc_type=doc.doc_type,
            total_chars=len(doc.text),
            tags=list(doc.tags),
            updated_at=doc.updated_at,
        )
        for rank, doc in enumerate(found, 1)
    ]
    return DocumentList(count=len(results), results=results, next_cursor=next_cursor)


def stats(*, ctx: Context) -> StatsResponse:
    """The index: documents and chunks per collection and type, tags, models, and the search
    settings in force with their source. Example: {}"""
    service = _service(ctx)
    with service.reading() as index:
        snapshot = index.snapshot()  # the counts and the adaptive settings of one generation
        facts = index.stats(snapshot=snapshot).to_dict()
        config, sources = resolve_search_config({}, config_file=index.config_file, n_chunks=snapshot.n_chunks)
        generation = snapshot.generation
        collections, chunk_types = list(generation.known_collections), list(generation.known_chunk_types)
    writer = service.writer
    activity = ServerActivity(
        memory_commits=writer.commits,
        memory_log_appends=writer.appends,
        memory_log_folds=writer.folds,
        wal_records=writer.wal_records,
        memories_pending=writer.pending,
        commit_delay=writer.commit_delay,
        warm_seconds=service.warm_seconds,
        backend=service.backend_name,
    )
    # the other keys are extra fields (extra="allow"), which mypy (without pydantic's plugin) cannot see
    return StatsResponse(  # type: ignore[call-arg]
        **facts,
        collections=collections,
        chunk_types=chunk_types,
        search_config=asdict(config),
        search_config_sources=sources,
        config_file=service.config_path,
        server=activity,
        projects=_project_memories(generation),
        default_project=service.default_project,
    )


#: the tools, in the order clients list them
TOOLS = (
    search,
    get_document,
    store_memory,
    update_memory,
    delete_memory,
    list_memories,
    search_by_tag,
    list_collections,
    list_documents,
    stats,
)


def create_server(
    index_dir: str | os.PathLike,
    config: str | os.PathLike | Mapping | None = None,
    *,
    warm: bool = False,
    lock_wait: float = 10.0,
    commit_delay: float = 0.0,
    auth_token: str | None = None,
    backend: Callable[[Any], Any] | None = None,
    backend_name: str = "local",
    wal_records: int | None = None,
    project: str | None = None,
) -> Any:
    """An MCPServer serving the index at `index_dir` with the exported `config` (a JSON file's path or
    its parsed dict; `HYBRIDLAB_*` env variables override it). With `warm`, the embedding model loads
    in the background as the server starts; `lock_wait` = seconds `store_memory` waits for another
    process's writer lock before it reports the index as locked; `commit_delay` > 0 defers memory
    commits and `wal_records` = records (stores, updates, deletes) the write-ahead log holds before it
    is folded into a segment (None: `HYBRIDLAB_WAL_RECORDS` or 64; 0: a segment per write; see
    :class:`hybridlab.memory.MemoryService`, whose writer they set); `auth_token` = the bearer token every HTTP request must
    carry (see :mod:`hybridlab.server.http_auth`; stdio and in-process clients are not affected);
    `backend` = the snapshot factory of :class:`~hybridlab.search.engine.Index` (default: the local
    retrievers), described as `backend_name` in `stats`; `project` = the default project of the
    tools (else `HYBRIDLAB_PROJECT`; see :func:`default_project`)."""
    service = Service(
        index_dir,
        config,
        lock_wait,
        commit_delay,
        backend,
        backend_name,
        wal_records,
        default_project(project),
    )

    @asynccontextmanager
    async def lifespan(_server: Any) -> AsyncIterator[Service]:
        """The service every tool call works on (`ctx.request_context.lifespan_context`)."""
        if warm:
            threading.Thread(target=service.warm, name="hybridlab-warm", daemon=True).start()
        try:
            yield service
        finally:
            service.writer.flush()  # deferred memories are committed before the server exits

    auth: dict[str, Any] = {}
    if auth_token is not None:
        auth = {"token_verifier": StaticTokenVerifier(auth_token), "auth": auth_settings()}
    server = HybridlabServer(
        service, instructions=INSTRUCTIONS, lifespan=lifespan, log_level="WARNING", **auth
    )
    for function in TOOLS:
        server.add_tool(_tool(function))
    return server


@contextlib.contextmanager
def serving(index_dir: str | os.PathLike, config: str | os.PathLike | Mapping | None = None) -> Iterator[Any]:
    """A server over the index at `index_dir` (:func:`create_server`) that lets go of the index and
    its log on exit, so servers one after another over fresh folders (the memory benchmark served,
    :mod:`hybridlab.eval.conversations.served`) hold no file open."""
    server = create_server(index_dir, config)
    try:
        yield server
    finally:
        server.service.memories.close()


def _compacted(schema: Any) -> Any:
    """A compacted copy of a JSON schema (:func:`_compact_schema`); None stays None."""
    schema = copy.deepcopy(schema)
    _compact_schema(schema)
    return schema


def _compact_schema(schema: Any) -> None:
    """Compact a tool's JSON schema in place, meaning unchanged: no titles (pydantic gives every
    property one, "Doc Id" for doc_id), no `"additionalProperties": true` (JSON Schema's default),
    no `"default": null` (an optional property left out is null) and `{"type": ["string", "null"]}`
    for a nullable simple type."""
    if isinstance(schema, dict):
        if isinstance(schema.get("title"), str):
            del schema["title"]
        if "default" in schema and schema["default"] is None:
            del schema["default"]
        if schema.get("additionalProperties") is True:
            del schema["additionalProperties"]
        options = schema.get("anyOf")
        if isinstance(options, list) and len(options) == 2 and {"type": "null"} in options:
            other = options[1 - options.index({"type": "null"})]
            if set(other) == {"type"} and isinstance(other["type"], str):
                del schema["anyOf"]
                schema["type"] = [other["type"], "null"]
        for value in schema.values():
            _compact_schema(value)
    elif isinstance(schema, list):
        for value in schema:
            _compact_schema(value)


def _fit_texts(hits: list[Any], budget: int, field: str) -> None:
    """Cut the hits' `field` texts to `budget` characters in all, fairly: each gets an equal share of
    what is left, and a text shorter than its share leaves the rest to the longer ones."""
    left, waiting = budget, len(hits)
    for hit in sorted(hits, key=lambda h: len(getattr(h, field) or "")):
        text = getattr(hit, field) or ""
        share = left // waiting
        if len(text) > share:
            setattr(hit, field, text[:share])
            hit.truncated = True
        left -= min(len(text), share)
        waiting -= 1


def _titles(sections: list[Any], budget: int) -> list[str]:
    """'number. title' of each section while they fit in `budget` characters, then '…' for the rest."""
    titles: list[str] = []
    for section in sections:
        entry = f"{section.index}. {section.title}"
        budget -= len(entry) + 8  # quotes, comma, indentation
        if budget < 0:
            return [*titles, f"… {len(sections) - len(titles)} more: read on with section={section.index}"]
        titles.append(entry)
    return titles


def _hit(result: SearchResult, content: str, window: Any) -> SearchHit:
    """A search result as the tool returns it: the snippet, or instead the text `content` asked
    for; with explain, the time range the call resolved."""
    hit = SearchHit(**result.to_dict())
    if content != "snippet":
        hit.snippet = ""
    if hit.explain is not None and window is not None:
        hit.explain = {**hit.explain, "time_range": window.to_dict()}
    return hit


def _window(window: Any) -> TimeWindow | None:
    return None if window is None else TimeWindow(**window.to_dict())


def _tagged(documents: Sequence[StoredDocument], max_chars: int) -> list[TaggedDocument]:
    """The documents' listing entries (ranked by their position: 1 = the newest), their texts cut to
    `max_chars` in all (:func:`_fit_texts`)."""
    results = [
        TaggedDocument(
            rank=rank,
            doc_id=doc.doc_id,
            title=doc.title,
            collection=doc.collection,
            doc_type=doc.doc_type,
            text=doc.text,
            tags=list(doc.tags),
            created_at=doc.created_at,
            updated_at=doc.updated_at,
        )
        for rank, doc in enumerate(documents, 1)
    ]
    _fit_texts(results, max_chars, "text")
    return results


def _filters(tags: Sequence[str], match: str, window: Any) -> MemoryFilters:
    """The memory filters of a call's tags and time window (None: no time filter)."""
    return MemoryFilters(tuple(tags), match, window and window.since, window and window.until)


def _project_memories(generation: Any) -> dict[str, int]:
    """Memories per collection, every collection listed (each is a project; 0: documents only)."""
    memories = {
        (collection, doc_id)
        for doc_id, collection, chunk_type in zip(
            generation.doc_ids, generation.collections, generation.chunk_types, strict=True
        )
        if chunk_type == "memory"
    }
    counts = Counter(collection for collection, _ in memories)
    return {name: counts[name] for name in generation.known_collections}
