"""The papers' retrieval metrics, as their official code computes them.

LoCoMo (task_eval/evaluation.py): per question with evidence, the fraction of its evidence turns
(or their sessions) in the top k, averaged; evidence ids the conversation lacks count as missed.
LongMemEval (src/retrieval/eval_utils.py): `recall_any@k` (some evidence item in the top k),
`recall_all@k` (every one), `ndcg_any@k` (binary nDCG, the ideal from every evidence item of the
haystack); turn-level rankings scored at session level by mapping each turn to its session and
widening k until k distinct sessions are in it (`evaluate_retrieval_turn2session`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence


def fractional_recall(ranked: Sequence[str], relevant: Sequence[str], k: int) -> float:
    """LoCoMo's recall: |relevant ∩ top k| / |relevant| (0.0 with nothing relevant)."""
    if not relevant:
        return 0.0
    top = set(ranked[:k])
    return sum(1 for item in relevant if item in top) / len(relevant)


def recall_any(ranked: Sequence[str], relevant: Sequence[str], k: int) -> float:
    top = set(ranked[:k])
    return float(any(item in top for item in relevant))


def recall_all(ranked: Sequence[str], relevant: Sequence[str], k: int) -> float:
    top = set(ranked[:k])
    return float(bool(relevant) and all(item in top for item in relevant))


def ndcg_any(ranked: Sequence[str], relevant: Sequence[str], k: int, present: int | None = None) -> float:
    """Binary nDCG@k; the ideal ranking puts the `present` relevant items of the haystack first
    (default: all of `relevant`). log2(rank + 1) discounts, rank 1 undiscounted."""
    wanted = set(relevant)
    gains = [1.0 if item in wanted else 0.0 for item in ranked[:k]]
    dcg = sum(g / math.log2(i + 2) for i, g in enumerate(gains))
    ideal_n = min(k, len(wanted) if present is None else present)
    ideal = sum(1.0 / math.log2(i + 2) for i in range(ideal_n))
    return dcg / ideal if ideal else 0.0


def to_sessions(ranked_turns: Sequence[str], session_of: Mapping[str, str], k: int) -> list[str]:
    """The sessions of a turn ranking, as LongMemEval's turn2session scores them: the turns' sessions
    in rank order (repeats kept) up to the first k-distinct-session prefix (k widened until then)."""
    sessions = [session_of.get(turn, turn) for turn in ranked_turns]
    seen: set[str] = set()
    for end, session in enumerate(sessions, start=1):
        seen.add(session)
        if len(seen) >= k:
            return sessions[:end]
    return sessions


def unique(items: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(items))


Metric = Callable[[Sequence[str], Sequence[str], int], float]
METRICS: dict[str, Metric] = {
    "recall": fractional_recall,
    "recall_any": recall_any,
    "recall_all": recall_all,
    "ndcg_any": ndcg_any,
}
