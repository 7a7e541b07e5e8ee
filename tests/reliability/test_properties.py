"""Property-based tests (hypothesis) that complement tests/ingest/test_chunking.py and tests/search/test_fusion.py:
the chunker on empty, huge and deeply nested input, the BM25 query tokeniser, tag extraction, fusion
invariance under re-ordering and monotone rescaling, and whole searches on arbitrary query text."""

from __future__ import annotations

import math
import shutil
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hybridlab.config import Bm25Config, ChunkConfig
from hybridlab.index.format.tokenizer import Tokenizer
from hybridlab.ingest.chunking import chunk_text
from hybridlab.search.fusion import FUSERS, fuse
from hybridlab.search.tags import TagVocabulary, normalize_tag

from .helpers import NOW, record

EXAMPLES: Counter = Counter()
ANY_TEXT = st.text(st.characters(codec="utf-8"), max_size=400)


def _covered(text: str, chunks) -> None:
    """Every non-blank character of the text is in some chunk, at its offsets, once per chunk."""
    for chunk in chunks:
        assert text[chunk.start_char : chunk.end_char] == chunk.text
    covered = [False] * len(text)
    for chunk in chunks:
        for i in range(chunk.start_char, chunk.end_char):
            covered[i] = True
    assert all(covered[i] or text[i].isspace() for i in range(len(text)))


# Chunker ========================================================================================
@settings(max_examples=40, deadline=None)
@given(depth=st.integers(1, 60), body=st.text(st.characters(codec="utf-8"), min_size=0, max_size=80))
def test_chunker_deeply_nested_headers(depth, body):
    EXAMPLES["chunker"] += 1
    text = "".join(f"{'#' * min(level, 6)} H{level}\n\n{body}\n\n" for level in range(1, depth + 1))
    chunks = chunk_text(text, ChunkConfig(header_levels=(1, 2, 3, 4, 5, 6), min_chunk_size=0))
    _covered(text, chunks)


@settings(
    max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(unit=st.text(st.characters(codec="utf-8"), min_size=1, max_size=20), repeat=st.integers(1000, 20_000))
def test_chunker_huge_input_is_bounded_and_lossless(unit, repeat):
    EXAMPLES["chunker"] += 1
    text = unit * repeat
    config = ChunkConfig(chunk_size=1500, chunk_overlap=150)
    chunks = chunk_text(text, config)
    assert all(len(c.text) <= config.chunk_size for c in chunks)
    if text.strip():
        _covered(text, chunks)
    else:
        assert chunks == []


@pytest.mark.parametrize(
    "text", ["", " ", "\n\n\n", "\x00", "#", "# ", "######", "```", "\ufeff", "\u2028\u2029"]
)
def test_chunker_degenerate_inputs(text):
    chunks = chunk_text(text)
    if text.strip():
        _covered(text, chunks)
    else:
        assert chunks == []


# Query tokeniser ================================================================================
TOKENIZER = Tokenizer(Bm25Config())


@settings(max_examples=300, deadline=None)
@given(text=ANY_TEXT)
def test_query_terms_are_distinct_lowercase_and_free_of_stopwords(text):
    EXAMPLES["tokenizer"] += 1
    terms = TOKENIZER.query_terms(text)
    assert len(terms) == len(set(terms))
    assert set(terms) <= set(TOKENIZER.tokenize(text))
    assert all(term and term == term.lower() for term in terms)
    assert not [
        t
        for t in terms
        if t in TOKENIZER.stopwords and " " not in t and len(t) > 1 and t in [w.lower() for w in text.split()]
    ]


@settings(max_examples=200, deadline=None)
@given(words=st.lists(st.text(st.characters(codec="utf-8"), max_size=15), max_size=20))
def test_tokenize_is_word_local(words):
    """Terms of text = concatenation of the terms of its space-separated words."""
    EXAMPLES["tokenizer"] += 1
    words = [w for w in words if w and not any(c.isspace() for c in w)]
    joined = TOKENIZER.tokenize(" ".join(words))
    assert joined == [t for w in words for t in TOKENIZER.tokenize(w)]


# Tag extraction =================================================================================
TAG = st.lists(
    st.sampled_from(["release", "process", "python", "ci", "Docker", "k8s", "data-science", "é"]),
    min_size=1,
    max_size=3,
).map(lambda parts: "-".join(parts))


@settings(max_examples=300, deadline=None)
@given(tags=st.lists(TAG, max_size=8), query=ANY_TEXT)
def test_tag_extraction_finds_only_known_tags(tags, query):
    EXAMPLES["tags"] += 1
    vocabulary = TagVocabulary(tags, stopwords=TOKENIZER.stopwords)
    match = vocabulary.extract(query)
    assert set(match.tags) <= set(tags)
    assert 0 <= match.matched_terms <= len(query.split()) * 4 + 1
    assert len(match.tags) == len(set(match.tags))


@settings(max_examples=200, deadline=None)
@given(
    tags=st.lists(TAG, min_size=1, max_size=8),
    pick=st.integers(0, 7),
    noise=st.sampled_from(["", "how to ", "about the "]),
)
def test_a_query_naming_a_tag_finds_it(tags, pick, noise):
    EXAMPLES["tags"] += 1
    tag = tags[pick % len(tags)]
    vocabulary = TagVocabulary(tags)
    match = vocabulary.extract(f"{noise}{tag.replace('-', ' ')}")
    normal = normalize_tag(tag)
    assert any(
        normalize_tag(found) == normal or normal in normalize_tag(found) or normalize_tag(found) in normal
        for found in match.tags
    )


# Fusion =========================================================================================
SCORES = st.dictionaries(st.integers(0, 30), st.integers(-1000, 1000).map(lambda i: i / 10), max_size=20)


@settings(max_examples=150, deadline=None)
@given(dense=SCORES, bm25=SCORES, method=st.sampled_from(sorted(FUSERS)), alpha=st.floats(0, 1))
def test_fusion_ignores_the_order_runs_are_given_in(dense, bm25, method, alpha):
    EXAMPLES["fusion"] += 1
    weights = {"dense": alpha, "bm25": 1 - alpha}
    forward = fuse(method, {"dense": dense, "bm25": bm25}, weights)
    backward = fuse(
        method, {"bm25": dict(reversed(bm25.items())), "dense": dict(reversed(dense.items()))}, weights
    )
    assert forward.keys() == backward.keys()
    assert all(math.isclose(forward[k], backward[k], rel_tol=1e-12, abs_tol=1e-12) for k in forward)


@settings(max_examples=150, deadline=None)
@given(dense=SCORES, bm25=SCORES, scale=st.floats(0.01, 100), shift=st.floats(-50, 50))
def test_rrf_depends_only_on_ranks(dense, bm25, scale, shift):
    """RRF is unchanged by any increasing transform of a run's scores."""
    EXAMPLES["fusion"] += 1
    weights = {"dense": 0.5, "bm25": 0.5}
    moved = {k: v * scale + shift for k, v in bm25.items()}
    ranks_kept = sorted(bm25, key=lambda k: (-bm25[k], k)) == sorted(moved, key=lambda k: (-moved[k], k))
    if ranks_kept:  # float rounding can merge close values; only compare when it did not
        assert fuse("rrf", {"dense": dense, "bm25": bm25}, weights) == fuse(
            "rrf", {"dense": dense, "bm25": moved}, weights
        )


# Whole searches on arbitrary text ================================================================
@pytest.fixture(scope="module")
def opened(small_index, tmp_path_factory):
    from hybridlab.search.engine import open_index

    target = tmp_path_factory.mktemp("prop") / "index"
    shutil.copytree(small_index, target)
    index = open_index(target)
    yield index
    index.close()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    query=st.text(st.characters(codec="utf-8"), min_size=1, max_size=300),
    mode=st.sampled_from(["hybrid", "vector", "bm25"]),
    fusion=st.sampled_from(sorted(FUSERS)),
)
def test_any_query_text_is_answered_or_refused_clearly(opened, query, mode, fusion):
    EXAMPLES["search"] += 1
    try:
        results = opened.search(query, now=NOW, mode=mode, fusion=fusion, limit=10)
    except ValueError as error:  # a clear refusal (e.g. an empty query) is allowed
        assert str(error)
        return
    assert len(results) <= 10
    assert all(math.isfinite(r.score) for r in results)
    assert [r.rank for r in results] == list(range(1, len(results) + 1))
    assert len({r.doc_id for r in results}) == len(results)


def test_zz_record_example_counts():
    """Hypothesis examples run by this module (for reports/reliability.md)."""
    record("hypothesis_examples", dict(EXAMPLES))
    assert sum(EXAMPLES.values()) > 0
