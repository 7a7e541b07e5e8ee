"""Search results as a researcher reads them: each hit's title and section, a snippet with the
query's terms marked, whether the evaluation set judges it relevant, and its score breakdown.

`notebooks/explore.ipynb` is a view over these functions: :func:`hits_html` renders one query's
results as HTML (self-contained: inline styles, no scripts, nothing fetched), :func:`pick_queries`
chooses judged queries of different kinds, and :func:`query_box` is the ipywidgets box that searches
one's own queries. A term is marked where a word of the snippet shares a BM25 term with the query
(the index's tokenizer: stemmed, stop-worded, identifiers split into parts), so the marks show
what BM25 matched, not a substring search.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

from hybridlab.config import Bm25Config
from hybridlab.eval.datasets import load_query_metadata
from hybridlab.extras import require
from hybridlab.index.format.tokenizer import WORD, Tokenizer

#: relevance grade -> the label of a judged hit (higher grades read as "highly relevant")
GRADE_LABELS = {0: "judged not relevant", 1: "relevant", 2: "highly relevant"}
CARD_STYLE = (
    "border-left:4px solid {colour};padding:4px 10px;margin:6px 0;font-family:sans-serif;"
    "font-size:13px;line-height:1.4"
)
MARK_STYLE = "background:#fde68a;padding:0 1px"


def tokenizer_of(index: Any = None) -> Tokenizer:
    """The BM25 tokenizer an index was built with (its manifest's `bm25` settings), else the default one."""
    manifest = getattr(index, "manifest", None)  # an `Index`'s: the generation's `Manifest`
    return Tokenizer(manifest.index_config.bm25 if manifest is not None else Bm25Config())


def mark_terms(text: str, query: str, tokenizer: Tokenizer | None = None) -> str:
    """`text`, HTML-escaped, with each word that shares a BM25 term with `query` in a `<mark>`."""
    tokenizer = tokenizer or Tokenizer()
    wanted = set(tokenizer.query_terms(query))
    pieces, last = [], 0
    for match in WORD.finditer(text):
        if wanted & set(tokenizer.tokenize(match.group())):
            pieces += [
                html.escape(text[last : match.start()]),
                f'<mark style="{MARK_STYLE}">{html.escape(match.group())}</mark>',
            ]
            last = match.end()
    pieces.append(html.escape(text[last:]))
    return "".join(pieces)


def breakdown(explain: Mapping[str, Any] | None, score: float) -> str:
    """One line of where a score came from: dense and BM25 scores with their ranks, matched tags and
    their boost, the recency factor, the fused and the final score (plain text)."""
    e = explain or {}

    def part(name: str, value: float | None, rank: int | None) -> str:
        return f"{name} —" if value is None else f"{name} {value:.3f} (#{rank})"

    tags = ", ".join(e.get("matched_tags") or []) or "—"
    return " · ".join(
        [
            part("dense", e.get("dense_score"), e.get("dense_rank")),
            part("bm25", e.get("bm25_score"), e.get("bm25_rank")),
            f"tags {tags} ×{e.get('tag_boost', 1)}",
            f"recency {e.get('recency_factor', 1.0):.3f}",
            f"fused {e.get('fused_score', score):.4f}",
            f"final {e.get('final_score', score):.4f}",
        ]
    )


def hit_card(
    result: Any,
    query: str,
    *,
    relevance: int | None = None,
    judged: bool = False,
    tokenizer: Tokenizer | None = None,
) -> str:
    """One hit as HTML: rank, title › section, document id, tags and date, the snippet with the
    query's terms marked, and the score breakdown. `judged`: the query has judgements, so an
    unjudged hit is marked as such; `relevance`: its grade (None = not in the judgements)."""
    if relevance is not None and relevance > 0:
        colour, verdict = "#16a34a", f"✓ {GRADE_LABELS.get(relevance, f'relevant (grade {relevance})')}"
    elif judged:
        colour, verdict = "#9ca3af", "not judged relevant"
    else:
        colour, verdict = "#60a5fa", ""
    title = result.title
    if title and not result.section and " ".join(result.snippet.split()).startswith(" ".join(title.split())):
        title = ""  # a memory's title is the opening of its text: the snippet says it already
    heading = " › ".join(html.escape(part) for part in (title, result.section) if part)
    meta = [f"<code>{html.escape(result.doc_id)}</code>"] if heading else []
    heading = heading or f"<code>{html.escape(result.doc_id)}</code>"
    if result.tags:
        meta.append("tags " + ", ".join(html.escape(tag) for tag in result.tags))
    if result.updated_at:
        meta.append(html.escape(str(result.updated_at)[:10]))
    if verdict:
        meta.append(f'<b style="color:{colour}">{verdict}</b>')
    return (
        f'<div style="{CARD_STYLE.format(colour=colour)}">'
        f'<div><b>{result.rank}. {heading}</b> <span style="color:#6b7280">{" · ".join(meta)}</span></div>'
        f"<div>{mark_terms(result.snippet, query, tokenizer)}</div>"
        f'<div style="color:#6b7280;font-size:12px">{html.escape(breakdown(result.explain, result.score))}</div></div>'
    )


def hits_html(
    results: Sequence[Any],
    query: str,
    *,
    qrels: Mapping[str, int] | None = None,
    tokenizer: Tokenizer | None = None,
    heading: str | None = None,
) -> str:
    """One query's results as HTML: a heading (the query, and how many judged-relevant documents it
    has and found) and a card per hit (:func:`hit_card`). `qrels`: this query's `{doc_id: grade}`."""
    tokenizer = tokenizer or Tokenizer()
    relevant = {doc for doc, grade in (qrels or {}).items() if grade > 0}
    found = sum(1 for r in results if r.doc_id in relevant)
    note = (
        f" — {found} of {len(relevant)} relevant documents in the top {len(results)}"
        if qrels is not None
        else ""
    )
    title = html.escape(heading or query)
    cards = [
        hit_card(
            r, query, relevance=(qrels or {}).get(r.doc_id), judged=qrels is not None, tokenizer=tokenizer
        )
        for r in results
    ]
    empty = [] if results else ['<div style="font-family:sans-serif;color:#6b7280">no results</div>']
    return (
        f'<div><h4 style="font-family:sans-serif;margin:14px 0 4px">{title}'
        f'<span style="font-weight:normal;color:#6b7280">{html.escape(note)}</span></h4>'
        + "".join(cards + empty)
        + "</div>"
    )


def query_kinds(evalset: Any) -> dict[str, str]:
    """`{query id: kind}` of an evaluation set's queries (their `metadata.<evalset.kinds>`); empty
    for a set whose queries carry no kinds (the BEIR sets)."""
    return {
        qid: str(meta[evalset.kinds])
        for qid, meta in load_query_metadata(evalset.queries_path).items()
        if evalset.kinds in meta
    }


def pick_queries(
    queries: Mapping[str, str], kinds: Mapping[str, str], wanted: Sequence[str], fallback: int = 3
) -> list[tuple[str, str, str]]:
    """`(kind, query id, text)` of the first judged query (by id) of each `wanted` kind that the set
    has; when it has none of them (no kinds, e.g. a BEIR set), its first `fallback` queries, kind ''."""
    picked = []
    for kind in wanted:
        ids = sorted(q for q in queries if kinds.get(q) == kind)
        if ids:
            picked.append((kind, ids[0], queries[ids[0]]))
    return picked or [("", q, queries[q]) for q in list(queries)[:fallback]]


def query_box(
    index: Any,
    *,
    limit: int = 5,
    now: str | None = None,
    queries: Mapping[str, str] | None = None,
    qrels: Mapping[str, Mapping[str, int]] | None = None,
    value: str = "",
):
    """An ipywidgets box: type a query, press Enter (or Search), see :func:`hits_html` of its hits.
    A query that is one of the set's judged `queries` (same text) shows its judgements."""
    require("ipywidgets")
    import ipywidgets as widgets
    from IPython.display import HTML, display

    tokenizer = tokenizer_of(index)
    by_text = {text.strip().lower(): qid for qid, text in (queries or {}).items()}
    text = widgets.Text(value=value, placeholder="your query, then Enter", layout=widgets.Layout(width="60%"))
    depth = widgets.BoundedIntText(
        value=limit, min=1, max=100, description="results", layout=widgets.Layout(width="160px")
    )
    button = widgets.Button(description="Search", button_style="primary")
    output = widgets.Output()

    def search(_=None) -> None:
        query = text.value.strip()
        output.clear_output()
        if not query:
            return
        qid = by_text.get(query.lower())
        results = index.search(query, limit=depth.value, now=now, explain=True)
        with output:
            display(
                HTML(
                    hits_html(
                        results, query, qrels=(qrels or {}).get(qid) if qid else None, tokenizer=tokenizer
                    )
                )
            )

    text.on_submit(search)
    button.on_click(search)
    if value:
        search()
    return widgets.VBox([widgets.HBox([text, depth, button]), output])
