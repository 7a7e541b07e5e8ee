"""BM25 terms: identifiers are findable as a whole and by their parts, through real BM25 searches."""

from __future__ import annotations

import numpy as np
import pytest

from hybridlab.config import Bm25Config
from hybridlab.index.format.sparse import SparseIndex
from hybridlab.index.format.tokenizer import Tokenizer, identifier_parts

# One identifier per document; no part of an identifier appears anywhere as a plain word.
DOCS = [
    "The column uses SelectEditor for its choices.",
    "Call add_filter on the table to hide rows.",
    "Large tables show page_size rows at once.",
    "The browser reports ERR_TLS_CERT_ALTNAME_INVALID for this host.",
    "A plain sentence about scatter plots and colours.",
]
IDENTIFIER_QUERIES = {
    0: ["SelectEditor", "selecteditor", "select", "Editor", "select editor"],
    1: ["add_filter", "filter", "filters", "add filter"],
    2: ["page_size", "page", "size", "page size"],
    3: [
        "ERR_TLS_CERT_ALTNAME_INVALID",
        "err_tls_cert_altname_invalid",
        "TLS",
        "cert",
        "altname",
        "invalid",
        "ERR",
    ],
}


@pytest.mark.parametrize(
    ("word", "parts"),
    [
        ("SelectEditor", ["Select", "Editor"]),
        ("add_filter", ["add", "filter"]),
        ("page_size", ["page", "size"]),
        ("ERR_TLS_CERT_ALTNAME_INVALID", ["ERR", "TLS", "CERT", "ALTNAME", "INVALID"]),
        ("HTTPServer2", ["HTTP", "Server", "2"]),
        ("plain", ["plain"]),
        ("__init__", ["init"]),
    ],
)
def test_identifier_parts(word, parts):
    assert identifier_parts(word) == parts


def test_identifiers_give_the_whole_lowercased_plus_stemmed_parts():
    tokenizer = Tokenizer()
    assert tokenizer.tokenize("SelectEditor") == ["selecteditor", "select", "editor"]
    assert tokenizer.tokenize("add_filter") == ["add_filter", "add", "filter"]
    assert tokenizer.tokenize("page_size") == ["page_size", "page", "size"]
    assert tokenizer.tokenize("ERR_TLS_CERT_ALTNAME_INVALID") == [
        "err_tls_cert_altname_invalid",
        "err",
        "tls",
        "cert",
        "altnam",
        "invalid",
    ]
    # plain words: lower-cased, stop words dropped, stemmed; repeats kept as term frequency
    assert tokenizer.tokenize("The filters and the Filters") == ["filter", "filter"]
    assert tokenizer.query_terms("filters Filters filter") == ["filter"]


def test_split_identifiers_off_keeps_only_the_whole_word():
    tokenizer = Tokenizer(Bm25Config(split_identifiers=False, stemmer=None, stopwords=None))
    assert tokenizer.tokenize("SelectEditor add_filter") == ["selecteditor", "add_filter"]


def test_unknown_stopwords_name_is_an_error():
    with pytest.raises(ValueError, match="unknown stopwords 'fr'"):
        Tokenizer(Bm25Config(stopwords="fr"))


@pytest.fixture(scope="module")
def sparse() -> SparseIndex:
    return SparseIndex.build(DOCS, np.arange(len(DOCS), dtype=np.int64) * 10, Bm25Config())


@pytest.mark.parametrize(
    ("doc", "query"), [(doc, q) for doc, queries in IDENTIFIER_QUERIES.items() for q in queries]
)
def test_bm25_finds_identifier_by_whole_and_by_part(sparse, doc, query):
    rows, scores = sparse.top(sparse.query_ids(query), depth=10)
    assert list(rows) == [doc], f"{query!r} matched rows {list(rows)}"
    assert scores[0] > 0


def test_whole_identifier_scores_above_a_part_only_match(sparse):
    # The whole identifier adds its own rare term, so it scores higher than one part alone.
    whole = sparse.scores(sparse.query_ids("SelectEditor"))[0]
    part = sparse.scores(sparse.query_ids("select"))[0]
    assert whole > part > 0


@pytest.mark.parametrize(
    ("query", "doc_id"),
    [
        ("SelectEditor", "panel/tabulator.md"),
        ("select", "panel/tabulator.md"),
        ("add_filter", "panel/tabulator.md"),
        ("page_size", "panel/tabulator.md"),
        ("ERR_TLS_CERT_ALTNAME_INVALID", "panel/deploy.rst"),
        ("altname", "panel/deploy.rst"),
    ],
)
def test_identifier_search_on_the_tiny_index(opened_tiny_index, query, doc_id):
    results = opened_tiny_index.search(query, mode="bm25", limit=3)
    assert results and results[0].doc_id == doc_id
