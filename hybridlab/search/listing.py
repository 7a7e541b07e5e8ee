"""Documents newest first under pushed-down filters, paged by an opaque cursor.
See docs/internals/search.md#listing."""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from hybridlab.errors import DocumentNotFoundError, InvalidValueError
from hybridlab.search.filters import Filters
from hybridlab.search.snapshot import Snapshot

__all__ = ["Page", "newest_documents"]


@dataclass(frozen=True)
class Page:
    """Doc ids newest first, and the cursor of the next page (None: this was the last)."""

    doc_ids: list[str]
    next_cursor: str | None


def encode_cursor(time: float, doc_id: str) -> str:
    return base64.urlsafe_b64encode(json.dumps([time, doc_id]).encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[float, str]:
    """(time, doc id) of a cursor; InvalidValueError (a ValueError) for anything this module did not write."""
    try:
        time, doc_id = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        return float(time), str(doc_id)
    except (ValueError, TypeError) as error:
        raise InvalidValueError(
            f"invalid cursor {cursor[:40]!r}: pass the next_cursor of the previous page", "cursor"
        ) from error


def newest_documents(
    snapshot: Snapshot,
    filters: Filters,
    *,
    limit: int | None = None,
    cursor: str | None = None,
    prefix: str | None = None,
) -> Page:
    """Up to `limit` (None: all) doc ids matching `filters` (and starting with `prefix`), newest first, after `cursor`."""
    if limit is not None and limit < 1:
        raise InvalidValueError(f"limit must be >= 1, got {limit}", "limit")
    generation = snapshot.generation
    mask = snapshot.store.allowed(filters).mask
    rows = np.arange(snapshot.n_chunks) if mask is None else np.flatnonzero(mask)
    times, doc_ids = generation.times, generation.doc_ids
    newest: dict[str, float] = {}
    for row in rows.tolist():
        time = 0.0 if math.isnan(times[row]) else float(times[row])
        newest.setdefault(doc_ids[row], time)
    if prefix:
        newest = {doc_id: time for doc_id, time in newest.items() if doc_id.startswith(prefix)}
    order = sorted(newest, key=lambda doc_id: (-newest[doc_id], doc_id))
    if cursor:
        after = decode_cursor(cursor)
        order = [doc_id for doc_id in order if (-newest[doc_id], doc_id) > (-after[0], after[1])]
    if limit is None or len(order) <= limit:
        return Page(order, None)
    page = order[:limit]
    return Page(page, encode_cursor(newest[page[-1]], page[-1]))


def memories_by_id(index: Any, ids: list[str], collection: str | None = None) -> tuple[list[str], list[str]]:
    """(memories among `ids`, ids not in the index); InvalidValueError for a document that is not a
    memory. With `collection`, a document of another collection (a memory of another project) is
    not in the index for this call: deleting by id never reaches into another project."""
    found, missing = [], []
    for doc_id in dict.fromkeys(ids):
        try:
            document = index.get_document(doc_id)
        except DocumentNotFoundError:
            missing.append(doc_id)
            continue
        if collection is not None and document.collection != collection:
            missing.append(doc_id)
            continue
        if document.doc_type != "memory":
            raise InvalidValueError(
                f"{doc_id!r} is a {document.doc_type!r} document, not a memory: not deleted", "ids"
            )
        found.append(doc_id)
    return found, missing


@dataclass(frozen=True)
class NearestMemory:
    """The memory nearest to another's vector: its doc id and their cosine similarity (the inner
    product of the two unit vectors, as the dense retriever scores it)."""

    doc_id: str
    similarity: float


def nearest_memory(
    snapshot: Snapshot,
    vectors: Mapping[str, np.ndarray],
    *,
    exclude: str | None = None,
    collection: str | None = None,
) -> NearestMemory | None:
    """The memory of `snapshot` whose vector is nearest to a memory's `vectors` (model -> its unit
    vector, as :meth:`hybridlab.index.write.memory.MemoryWriter.embed` gives them: embedded as a document,
    like the memories it is compared with), `exclude` left out; None when there is none. Compared by
    the first of `vectors`' models the snapshot has vectors of: a vector search over the memories
    alone (those of `collection` when given: one project's), without recency or tag signals, on
    this one snapshot."""
    generation = snapshot.generation
    if "memory" not in generation.known_chunk_types:
        return None
    if collection is not None and collection not in generation.known_collections:
        return None  # a project without a memory yet
    model = next((model for model in vectors if model in snapshot.dense), None)
    if model is None:
        return None
    within = () if collection is None else (collection,)
    allowed = snapshot.store.allowed(Filters(chunk_types=("memory",), collections=within))
    rows, scores = snapshot.dense[model].search(np.asarray(vectors[model], dtype=np.float32), 3, allowed)
    doc_ids = snapshot.generation.doc_ids
    found = [
        NearestMemory(doc_ids[row], float(score))
        for row, score in zip(rows.tolist(), scores.tolist(), strict=True)
        if doc_ids[row] != exclude
    ]
    return max(found, key=lambda near: near.similarity, default=None)
