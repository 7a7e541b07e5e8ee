"""The hydrate step: SearchResults of the ranked hits (texts, tags and dates from the store, snippets,
the chunk's or the document's text and `explain` when asked), all read from the snapshot that ranked
them, so a writer committing meanwhile cannot mix two generations into one answer."""

from __future__ import annotations

from hybridlab.search.pipeline.explain import explain, feature_table
from hybridlab.search.pipeline.records import Retrieval
from hybridlab.search.results import SearchResult, iso_utc, make_snippet
from hybridlab.search.snapshot import Snapshot


def hydrate(
    snapshot: Snapshot, retrieval: Retrieval, with_explain: bool, content: str = "snippet"
) -> list[SearchResult]:
    """SearchResults of the retrieval's first `limit` hits, ranked from 1: texts, tags and dates
    from the store, snippets; with `content` "chunk" each result's chunk text, with "full" its
    document's whole text (one read per document)."""
    hits = retrieval.hits[: retrieval.config.limit]
    if not hits:
        return []
    generation = snapshot.generation
    details = snapshot.store.details([hit.row for hit in hits])
    table = feature_table(snapshot, retrieval) if with_explain else None  # once, not per hit
    documents = (
        document_texts(snapshot, [generation.doc_ids[hit.row] for hit in hits]) if content == "full" else {}
    )
    results = []
    for rank, (hit, (text, doc_tags, when)) in enumerate(zip(hits, details), start=1):
        row = hit.row
        results.append(
            SearchResult(
                rank=rank,
                doc_id=generation.doc_ids[row],
                chunk_id=int(generation.chunk_ids[row]),
                title=generation.titles[row],
                section=generation.sections[row],
                score=round(hit.score, 6),
                snippet=make_snippet(text, retrieval.query, retrieval.config.snippet_chars),
                collection=generation.collections[row],
                chunk_type=generation.chunk_types[row],
                tags=tuple(doc_tags or ()),
                updated_at=iso_utc(when),
                explain=explain(snapshot, hit, retrieval, table) if with_explain else None,
                text=text if content == "chunk" else documents.get(generation.doc_ids[row]),
            )
        )
    return results


def document_texts(snapshot: Snapshot, doc_ids: list[str]) -> dict[str, str]:
    """The whole text of each document, read once per document from the snapshot's store."""
    texts = {}
    for doc_id in dict.fromkeys(doc_ids):
        row = snapshot.store.document(doc_id)
        if row is not None:  # a document of this snapshot: ranked from it
            texts[doc_id] = row["text"]
    return texts
