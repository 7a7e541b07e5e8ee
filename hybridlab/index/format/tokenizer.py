"""Lexical tokenisation for BM25 that keeps identifiers findable as a whole and by their parts.

`SelectEditor` -> `selecteditor`, `select`, `editor`; `ERR_TLS_CERT_ALTNAME_INVALID` -> the whole
identifier plus `err`, `tls`, `cert`, `altnam`, `invalid`. Whole identifiers are kept unstemmed;
plain words and identifier parts are lower-cased, stop-worded and stemmed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

from hybridlab.config import Bm25Config
from hybridlab.errors import InvalidValueError

WORD = re.compile(r"\w+", re.UNICODE)
CAMEL_PARTS = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+|[^\W\d_]+", re.UNICODE)


def identifier_parts(word: str) -> list[str]:
    """Split `add_filter`, `SelectEditor`, `HTTPServer2` into their parts (original case)."""
    parts: list[str] = []
    for piece in word.split("_"):
        if piece:
            parts.extend(CAMEL_PARTS.findall(piece) or [piece])
    return parts


@lru_cache(maxsize=8)
def _stopwords(name: str | None) -> frozenset[str]:
    if name is None:
        return frozenset()
    from bm25s.stopwords import STOPWORDS_EN

    if name != "en":
        raise InvalidValueError(f"unknown stopwords {name!r}; choose from ['en', None]")
    return frozenset(STOPWORDS_EN)


@dataclass
class Tokenizer:
    """Turns text into BM25 terms; built from the :class:`Bm25Config` saved with the index."""

    config: Bm25Config = field(default_factory=Bm25Config)

    def __post_init__(self) -> None:
        self.stopwords = _stopwords(self.config.stopwords)
        self._stemmer = None
        if self.config.stemmer:
            import Stemmer

            self._stemmer = Stemmer.Stemmer(self.config.stemmer)
        self._cache: dict[str, tuple[str, ...]] = {}

    def _stem(self, word: str) -> str:
        return self._stemmer.stemWord(word) if self._stemmer else word

    def _terms_of_word(self, word: str) -> tuple[str, ...]:
        cached = self._cache.get(word)
        if cached is not None:
            return cached
        lower = word.lower()
        if lower in self.stopwords:  # `iF`, `The`: a stop word whatever its case, never an identifier
            self._cache[word] = ()
            return ()
        parts = identifier_parts(word) if self.config.split_identifiers else [word]
        terms: list[str] = []
        if len(parts) > 1:
            terms.append(lower)
            for part in parts:
                part = part.lower()
                if len(part) > 1 and part not in self.stopwords:
                    terms.append(self._stem(part))
        elif len(lower) > 1 and lower not in self.stopwords:
            terms.append(self._stem(lower))
        result = tuple(terms)
        if len(self._cache) < 500_000:
            self._cache[word] = result
        return result

    def tokenize(self, text: str) -> list[str]:
        """The BM25 terms of one text, in order (repeats kept: they are term frequencies)."""
        return [term for word in WORD.findall(text) for term in self._terms_of_word(word)]

    def query_terms(self, text: str) -> list[str]:
        """Terms of a query, each once (BM25 sums over distinct query terms here)."""
        return list(dict.fromkeys(self.tokenize(text)))
