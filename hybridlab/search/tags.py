"""Tag extraction: which of the index's tags a query names.

Case-insensitive; `-`, `_` and spaces are interchangeable; multi-word tags match as phrases; stop
words are dropped from the query first.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

WORD = re.compile(r"[^\W_]+", re.UNICODE)


def normalize_tag(tag: str) -> str:
    """`Release_Process`, `release-process`, `release process` -> `release process`."""
    return " ".join(WORD.findall(tag.lower()))


@dataclass(frozen=True)
class TagMatch:
    """Tags found in a query, how many query words they cover, and how many words (stop words
    left out) the query has."""

    tags: tuple[str, ...]
    matched_terms: int
    query_terms: int = 0

    @property
    def coverage(self) -> float:
        """Share of the query's words that named tags (0.0 for a query without words)."""
        return min(1.0, self.matched_terms / self.query_terms) if self.query_terms else 0.0


class TagVocabulary:
    """The tags that exist in an index, normalised for matching."""

    def __init__(self, tags: Iterable[str], stopwords: Iterable[str] = ()) -> None:
        self.by_normal: dict[str, list[str]] = {}
        for tag in tags:
            normal = normalize_tag(tag)
            if normal:
                self.by_normal.setdefault(normal, []).append(tag)
        self.max_words = max((len(n.split()) for n in self.by_normal), default=1)
        self.stopwords = frozenset(stopwords)

    def __len__(self) -> int:
        return len(self.by_normal)

    def extract(self, query: str) -> TagMatch:
        """Longest-first n-gram match of the query's words against the tag vocabulary."""
        words = [w for w in WORD.findall(query.lower())]
        matched: list[str] = []
        covered = 0
        i = 0
        while i < len(words):
            for n in range(min(self.max_words, len(words) - i), 0, -1):
                gram = words[i : i + n]
                if n == 1 and gram[0] in self.stopwords:
                    continue
                phrase = " ".join(gram)
                candidates = self.by_normal.get(phrase)
                if candidates is None and n == 1 and phrase.endswith("s") and len(phrase) > 3:
                    candidates = self.by_normal.get(phrase[:-1])
                if candidates:
                    matched.extend(candidates)
                    covered += n
                    i += n
                    break
            else:
                i += 1
        content = sum(1 for w in words if w not in self.stopwords)
        return TagMatch(tuple(dict.fromkeys(matched)), covered, max(content, covered))


def resolve_tags(names: Sequence[str], vocabulary: TagVocabulary) -> tuple[str, ...]:
    """Explicit tags mapped to the index's spelling when a variant matches, else kept as given."""
    resolved: list[str] = []
    for name in names:
        resolved.extend(vocabulary.by_normal.get(normalize_tag(name), [name.strip().lower()]))
    return tuple(dict.fromkeys(resolved))
