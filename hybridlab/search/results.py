"""What a search returns: results, and responses that carry their own timings, mode and generation."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class SearchResult:
    """One hit: a document (best chunk) or a chunk, with its score and where it came from."""

    rank: int
    doc_id: str
    chunk_id: int
    title: str
    section: str
    score: float
    snippet: str
    collection: str
    chunk_type: str
    tags: tuple[str, ...] = ()
    updated_at: str | None = None
    explain: dict[str, Any] | None = None
    text: str | None = None  # the chunk's or the document's whole text, when the search asked for it

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["tags"] = list(self.tags)
        for key in ("explain", "text"):  # asked for: absent otherwise
            if data[key] is None:
                data.pop(key)
        return data


@dataclass(frozen=True)
class SearchResponse:
    """`Index.search_response`: the results plus how they were found.

    `timings`: `encode_ms` (query embedding; absent without a dense signal), `search_ms`
    (retrieval, fusion, recency; not encoding, not hydration) and `rerank_ms` (the rerank step:
    passages read and scored by the cross-encoder; only when `rerank_depth` > 0); `mode`: parallel / staged /
    fallback (hybrid) or vector / bm25 / tags; `generation`: the index generation that answered."""

    results: list[SearchResult]
    timings: Mapping[str, float]
    mode: str
    generation: int


@dataclass(frozen=True)
class RunResponse:
    """`Index.run_response`: `{doc_id: score}` for evaluation plus timings, mode and generation
    (as in :class:`SearchResponse`)."""

    run: dict[str, float]
    timings: Mapping[str, float]
    mode: str
    generation: int


def iso_utc(value: datetime | None) -> str | None:
    """ISO-8601 with a Z for the store's naive-UTC timestamps."""
    return None if value is None else value.replace(tzinfo=None).isoformat() + "Z"


def make_snippet(text: str, query: str, width: int) -> str:
    """A window of `text` around the first query word it contains, whitespace collapsed."""
    flat = " ".join(text.split())
    if len(flat) <= width:
        return flat
    lower = flat.lower()
    positions = [lower.find(w.lower()) for w in query.split() if len(w) > 2]
    positions = [p for p in positions if p >= 0]
    start = max(0, min(positions) - width // 4) if positions else 0
    snippet = flat[start : start + width]
    return ("…" if start else "") + snippet + ("…" if start + width < len(flat) else "")
