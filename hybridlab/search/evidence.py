"""What a query itself says about how to fuse it: pure functions over signals known at query time.
See docs/internals/search.md#evidence."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from hybridlab.errors import InvalidValueError
from hybridlab.search.query_dates import QueryDates

#: Rows of the BM25 run the lexical evidence is read from (the best of them counts).
EVIDENCE_DEPTH = 10

#: Words and phrases by which a query asks for the latest state of something.
RECENCY_CUES: tuple[str, ...] = (
    "current",
    "currently",
    "now",
    "nowadays",
    "latest",
    "newest",
    "most recent",
    "recent",
    "recently",
    "still",
    "anymore",
    "any more",
    "today",
    "these days",
    "at the moment",
    "right now",
    "up to date",
    "up-to-date",
    "as of",
)
_RECENCY = re.compile(r"\b(?:" + "|".join(re.escape(cue) for cue in RECENCY_CUES) + r")\b", re.IGNORECASE)


@dataclass(frozen=True)
class QueryEvidence:
    """The signals of one query (docs/internals/search.md#evidence) and what they made of the weights."""

    lexical: float | None = None  # None: no BM25 run to read it from
    agreement: float | None = None  # None: not both runs
    recency_intent: bool = False
    lexical_factor: float = 1.0  # BM25's weight is multiplied by it
    recency_weight: float = 0.0  # the recency weight used
    rare_term: str | None = None  # the query's rarest term the index has (as tokenised); None: none
    rare_term_df: int | None = None  # chunks holding it
    rare_rows: frozenset[int] = frozenset()  # the chunks lifted above BM25-less hits (empty: no lift)
    dates: QueryDates | None = None  # the time the query names (search/query_dates.py); None: none
    date_weight: float = 0.0  # how much rows created outside that time lose (0: not applied)

    def to_dict(self) -> dict[str, object]:
        return {
            "query_dates": self.dates.to_dict() if self.dates else None,
            "date_weight_used": self.date_weight,
            "lexical_evidence": self.lexical,
            "retriever_agreement": self.agreement,
            "recency_intent": self.recency_intent,
            "lexical_factor": self.lexical_factor,
            "recency_weight_used": self.recency_weight,
            "rare_term": self.rare_term,
            "rare_term_df": self.rare_term_df,
            "rare_term_rows": len(self.rare_rows),
        }


def asks_for_latest(query: str) -> bool:
    """Whether the query asks for the latest state ("what is the current X", "do we still use Y")."""
    return _RECENCY.search(query) is not None


def without_recency_cues(query: str) -> str:
    """The query without its recency cues: they say when, not what, so they do not count as words
    the corpus should contain (lexical evidence is read from the rest)."""
    return _RECENCY.sub(" ", query)


def lexical_factor(lexical: float | None, floor: float, ceiling: float) -> float:
    """BM25's weight multiplier from the lexical evidence: 0 at or below `floor`, 1 at or above
    `ceiling`, linear between; 1.0 when there is no evidence or the ramp is off (`ceiling` <= 0)."""
    if lexical is None or ceiling <= 0:
        return 1.0
    if not 0.0 <= floor <= ceiling:
        raise InvalidValueError(
            f"lexical_floor must be in [0, lexical_ceiling], got {floor} > {ceiling}", field="lexical_floor"
        )
    if lexical >= ceiling:
        return 1.0
    if lexical <= floor:
        return 0.0
    return (lexical - floor) / (ceiling - floor)


def top_agreement(
    a: Mapping[int, float], b: Mapping[int, float], depth: int = EVIDENCE_DEPTH
) -> float | None:
    """Share of the `depth` best rows of run `a` that are also among the `depth` best of run `b`
    (ties by ascending row); None when either run is empty."""
    if not a or not b:
        return None
    return len(set(best_rows(a, depth)) & set(best_rows(b, depth))) / min(depth, len(a), len(b))


def best_rows(run: Mapping[int, float], depth: int = EVIDENCE_DEPTH) -> list[int]:
    """The `depth` best rows of a run, best first (ties by ascending row)."""
    return sorted(run, key=lambda row: (-run[row], row))[:depth]


def weights_with_evidence(weights: Mapping[str, float], factor: float) -> dict[str, float]:
    """The fusion weights with BM25's scaled by `factor` (the other signals keep theirs)."""
    return {name: weight * factor if name == "bm25" else weight for name, weight in weights.items()}


def rarest_term(frequencies: Mapping[str, int]) -> tuple[str | None, int | None]:
    """The term of `frequencies` (term -> chunks holding it) that the fewest chunks hold, ties by
    the term's first place in the mapping (query order); terms held by none are skipped."""
    held = [(df, position, term) for position, (term, df) in enumerate(frequencies.items()) if df > 0]
    if not held:
        return None, None
    df, _, term = min(held)
    return term, df


def rare_term_lift(scores: np.ndarray, rare: np.ndarray, lexical: np.ndarray, gap: float = 1e-6) -> float:
    """What to add to the scores of the `rare` rows (boolean mask) so that every one of them is
    above every row without lexical evidence (`~lexical`, rows BM25 did not return) by at least
    `gap`: `max(0, max(scores[unmatched]) - min(scores[rare]) + gap)`. One amount for all of them,
    so their order among themselves and with other rows above them stays; 0.0 when they are
    already above, or when there are no such rows."""
    unmatched = ~(lexical | rare)
    if not rare.any() or not unmatched.any():
        return 0.0
    return max(0.0, float(scores[unmatched].max()) - float(scores[rare].min()) + gap)
