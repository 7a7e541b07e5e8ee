"""What a query itself says about how to fuse it: pure functions over signals known at query time.

Fusion with fixed weights trusts BM25 as much on a query whose words the corpus lacks as on one it
matches exactly; min-max normalisation then stretches a list of one-common-word matches to [0, 1]
(Bruch, Gai & Ingber 2023 show normalisation decides what a convex combination can do). The signals
here are cheap query-performance predictors in the sense of the QPP literature:

- ``lexical``: the share of the query's IDF mass that the best of BM25's top rows contains (the
  pre-retrieval IDF predictors of He & Ounis 2004, taken over the retrieved rows as a
  post-retrieval check, cf. the weighted information gain of Zhou & Croft 2007). Terms the index
  never saw count at the IDF of an unseen term, so a query worded unlike the corpus (a
  paraphrase) has little lexical evidence. It scales BM25's weight (:func:`lexical_factor`): a
  per-query alpha, as dynamic alpha tuning does with an LLM judge (Hsu & Tzeng 2025), from a
  signal that costs a set lookup per query term.
- ``agreement``: how many of the two retrievers' top rows are the same (shown in ``explain``).
- ``recency_intent``: the query asks for the latest state ("current", "now", "latest", "still",
  "anymore", ...): recency then weighs :attr:`SearchConfig.recency_intent_weight` instead of
  :attr:`SearchConfig.recency_weight`.

References:
    He & Ounis (2004), "Inferring query performance using pre-retrieval predictors", SPIRE.
    Zhou & Croft (2007), "Query performance prediction in web search environments", SIGIR.
    Bruch, Gai & Ingber (2023), "An Analysis of Fusion Functions for Hybrid Retrieval", ACM TOIS.
    Hsu & Tzeng (2025), "DAT: Dynamic Alpha Tuning for Hybrid Retrieval in Retrieval-Augmented
    Generation", arXiv:2503.23013.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

#: Rows of the BM25 run the lexical evidence is read from (the best of them counts).
EVIDENCE_DEPTH = 10

#: Words and phrases by which a query asks for the latest state of something.
RECENCY_CUES: tuple[str, ...] = (
    "current", "currently", "now", "nowadays", "latest", "newest", "most recent", "recent", "recently",
    "still", "anymore", "any more", "today", "these days", "at the moment", "right now", "up to date",
    "up-to-date", "as of",
)
_RECENCY = re.compile(r"\b(?:" + "|".join(re.escape(cue) for cue in RECENCY_CUES) + r")\b", re.IGNORECASE)


@dataclass(frozen=True)
class QueryEvidence:
    """The signals of one query (see the module docstring) and what they made of the weights."""

    lexical: float | None = None  # None: no BM25 run to read it from
    agreement: float | None = None  # None: not both runs
    recency_intent: bool = False
    lexical_factor: float = 1.0  # BM25's weight is multiplied by it
    recency_weight: float = 0.0  # the recency weight used

    def to_dict(self) -> dict[str, float | bool | None]:
        return {"lexical_evidence": self.lexical, "retriever_agreement": self.agreement,
                "recency_intent": self.recency_intent, "lexical_factor": self.lexical_factor,
                "recency_weight_used": self.recency_weight}


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
        raise ValueError(f"lexical_floor must be in [0, lexical_ceiling], got {floor} > {ceiling}")
    if lexical >= ceiling:
        return 1.0
    if lexical <= floor:
        return 0.0
    return (lexical - floor) / (ceiling - floor)


def top_agreement(a: Mapping[int, float], b: Mapping[int, float], depth: int = EVIDENCE_DEPTH) -> float | None:
    """Share of the `depth` best rows of run `a` that are also among the `depth` best of run `b`
    (ties by ascending row); None when either run is empty."""
    if not a or not b:
        return None
    return len(_top(a, depth) & _top(b, depth)) / min(depth, len(a), len(b))


def _top(run: Mapping[int, float], depth: int) -> set[int]:
    return set(sorted(run, key=lambda row: (-run[row], row))[:depth])


def best_rows(run: Mapping[int, float], depth: int = EVIDENCE_DEPTH) -> list[int]:
    """The `depth` best rows of a run, best first (ties by ascending row)."""
    return sorted(run, key=lambda row: (-run[row], row))[:depth]


def weights_with_evidence(weights: Mapping[str, float], factor: float) -> dict[str, float]:
    """The fusion weights with BM25's scaled by `factor` (the other signals keep theirs)."""
    return {name: weight * factor if name == "bm25" else weight for name, weight in weights.items()}

