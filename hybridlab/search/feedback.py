"""Pseudo-relevance feedback for the dense side of a hybrid search: pure functions.
See docs/internals/search.md#feedback."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np


def rocchio(query: np.ndarray, feedback: np.ndarray, weight: float) -> np.ndarray:
    """`normalise(query + weight * mean(feedback rows))` as float32; the query itself when there
    are no feedback rows or the weight is 0 (vectors are L2-normalised, as the indexes store them)."""
    query = np.asarray(query, dtype=np.float32).reshape(-1)
    feedback = np.asarray(feedback, dtype=np.float32).reshape(-1, len(query))
    if weight <= 0 or not len(feedback):
        return query
    moved = query + np.float32(weight) * feedback.mean(axis=0)
    norm = float(np.linalg.norm(moved))
    return query if norm == 0.0 else (moved / norm).astype(np.float32)


def best_documents(rows: Iterable[int], doc_ids: Sequence[str], count: int) -> list[int]:
    """The first row of each of the first `count` distinct documents, in the given (ranked) order."""
    chosen: dict[str, int] = {}
    for row in rows:
        if len(chosen) >= count:
            break
        chosen.setdefault(doc_ids[row], row)
    return list(chosen.values())
