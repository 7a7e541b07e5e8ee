"""Hits rendered for a reader (hybridlab.reports.hits): marked query terms, relevance marks, queries by kind."""

from __future__ import annotations

from dataclasses import dataclass

from hybridlab.reports.hits import breakdown, hit_card, hits_html, mark_terms, pick_queries


@dataclass
class Hit:  # the fields of a SearchResult the cards read
    rank: int
    doc_id: str
    title: str = ""
    section: str = ""
    score: float = 1.0
    snippet: str = ""
    tags: tuple[str, ...] = ()
    updated_at: str | None = None
    explain: dict | None = None


def test_marks_the_words_that_share_a_bm25_term_with_the_query():
    # stemmed ("Configuring" ~ "configuration"), identifier parts ("SelectEditor" ~ "editor"), stop words never
    marked = mark_terms("Configuring the SelectEditor & <b>", "the editor configuration")
    assert marked == (
        '<mark style="background:#fde68a;padding:0 1px">Configuring</mark> the '
        '<mark style="background:#fde68a;padding:0 1px">SelectEditor</mark> &amp; &lt;b&gt;'
    )
    assert mark_terms("nothing here", "unrelated") == "nothing here"


def test_breakdown_names_each_signal_and_dashes_a_missing_one():
    explain = {
        "dense_score": 0.5,
        "dense_rank": 2,
        "bm25_score": None,
        "matched_tags": ["rust"],
        "tag_boost": 1.2,
        "recency_factor": 0.9,
        "fused_score": 0.25,
        "final_score": 0.3,
    }
    assert breakdown(explain, 0.3) == (
        "dense 0.500 (#2) · bm25 — · tags rust ×1.2 · recency 0.900 · fused 0.2500 · final 0.3000"
    )


def test_a_card_shows_title_section_and_whether_the_hit_is_judged_relevant():
    hit = Hit(
        1,
        "docs/a.md",
        title="Guide",
        section="Install",
        snippet="pip install it",
        tags=("setup",),
        updated_at="2026-11-01T00:00:00Z",
    )
    relevant = hit_card(hit, "install", relevance=2, judged=True)
    assert (
        "1. Guide › Install" in relevant and "<code>docs/a.md</code>" in relevant and "2026-11-01" in relevant
    )
    assert "✓ highly relevant" in relevant and "tags setup" in relevant
    assert "not judged relevant" in hit_card(hit, "install", relevance=None, judged=True)
    unjudged = hit_card(hit, "install")
    assert "relevant" not in unjudged and "1. Guide › Install" in unjudged
    memory = hit_card(Hit(2, "mem-7", title="Moved the VPN to", snippet="Moved the VPN to a new box."), "vpn")
    assert (
        "<b>2. <code>mem-7</code></b>" in memory and memory.count("mem-7") == 1
    )  # no title repeating the text


def test_the_heading_counts_the_relevant_documents_found():
    hits = [Hit(1, "a"), Hit(2, "b"), Hit(3, "c")]
    page = hits_html(hits, "q", qrels={"a": 1, "c": 0, "z": 2})
    assert "2 of 2 relevant documents" not in page and "1 of 2 relevant documents in the top 3" in page
    assert "relevant documents" not in hits_html(hits, "q") and "no results" in hits_html([], "q")


def test_picks_the_first_query_of_each_wanted_kind_the_set_has():
    queries = {"q3": "three", "q1": "one", "q2": "two", "q4": "four"}
    kinds = {"q1": "tag", "q2": "identifier", "q3": "identifier", "q4": "general"}
    assert pick_queries(queries, kinds, ["identifier", "paraphrase", "tag"]) == [
        ("identifier", "q2", "two"),
        ("tag", "q1", "one"),
    ]
    assert pick_queries(queries, {}, ["identifier"], fallback=2) == [("", "q3", "three"), ("", "q1", "one")]
