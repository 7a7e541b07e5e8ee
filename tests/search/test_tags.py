"""Tag extraction from queries: case, `-`/`_`/space variants, multi-word tags, stop words."""

from __future__ import annotations

import pytest

from hybridlab.search.tags import TagVocabulary, normalize_tag, resolve_tags

TAGS = [
    "rathole",
    "Release_Process",
    "rate limiting",
    "rate-limiting",
    "ci",
    "project-structure",
    "the-end",
    "api",
]
STOPWORDS = {"the", "a", "of", "how", "it", "and", "end"}


@pytest.fixture
def vocabulary() -> TagVocabulary:
    return TagVocabulary(TAGS, stopwords=STOPWORDS)


@pytest.mark.parametrize(
    "text", ["Release_Process", "release-process", "release process", "  RELEASE   process "]
)
def test_normalize_tag_variants(text):
    assert normalize_tag(text) == "release process"


def test_case_insensitive_single_tag(vocabulary):
    match = vocabulary.extract("RATHOLE codebase")
    assert match.tags == ("rathole",) and match.matched_terms == 1


def test_hyphen_underscore_space_variants_all_match(vocabulary):
    for query in ("the release-process", "release_process docs", "Release Process"):
        assert vocabulary.extract(query).tags == ("Release_Process",)


def test_multi_word_tag_returns_every_spelling_and_counts_its_words(vocabulary):
    match = vocabulary.extract("how does rate limiting work")
    assert match.tags == ("rate limiting", "rate-limiting")
    assert match.matched_terms == 2


def test_longest_match_wins(vocabulary):
    # "project structure" is one two-word tag, not two single words
    match = vocabulary.extract("litesearch project structure and ci")
    assert match.tags == ("project-structure", "ci") and match.matched_terms == 3


def test_stop_words_are_not_tags_alone_but_may_sit_inside_a_multi_word_tag(vocabulary):
    assert vocabulary.extract("the end").tags == ("the-end",)  # the phrase matches
    assert vocabulary.extract("end of it").tags == ()  # "end" alone is a stop word


def test_plural_query_word_matches_a_singular_tag(vocabulary):
    assert vocabulary.extract("which apis exist").tags == ("api",)


def test_no_match_and_empty_vocabulary(vocabulary):
    assert vocabulary.extract("nothing to see here").tags == ()
    empty = TagVocabulary([])
    assert len(empty) == 0 and empty.extract("rathole").tags == ()


def test_tags_match_whole_words_only(vocabulary):
    assert vocabulary.extract("cinema apiary").tags == ()


def test_resolve_tags_maps_variants_to_the_index_spelling(vocabulary):
    assert resolve_tags(["release-process", "RATE_LIMITING", "Unknown Tag"], vocabulary) == (
        "Release_Process",
        "rate limiting",
        "rate-limiting",
        "unknown tag",
    )


def test_coverage_is_the_share_of_non_stop_words_that_named_tags(vocabulary):
    match = vocabulary.extract("how the rathole codebase works")  # how/the are stop words
    assert (match.matched_terms, match.query_terms) == (1, 3)
    assert match.coverage == pytest.approx(1 / 3)
    assert vocabulary.extract("rate limiting").coverage == 1.0
    assert vocabulary.extract("the").coverage == 0.0  # no content word at all
