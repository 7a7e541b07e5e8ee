"""Pseudo-relevance feedback for the dense side of a hybrid search: pure functions.

The fused ranking is better than either retriever alone, so its best documents are good evidence of
what the query is about. Rocchio's (1971) update moves the query vector toward their vectors,
`q' = normalise(q + weight * mean(v_1..v_k))`, and the dense retriever runs again with `q'`; the
new dense run is fused with the same BM25 and tag runs. Vector Rocchio is the simplest dense PRF
that works without training (Li et al. 2023, who also find it helps most with few feedback
documents); ANCE-PRF (Yu et al. 2021) learns the same update. Seeding it from the *fused* list is
what makes it a hybrid step: a lexical match BM25 put first pulls the dense query toward it, so
the dense side learns the query's vocabulary (a paraphrase's answer, a claim's topic).

References:
    Rocchio (1971), "Relevance feedback in information retrieval", The SMART Retrieval System.
    Yu, Xiong & Callan (2021), "Improving Query Representations for Dense Retrieval with Pseudo
    Relevance Feedback", CIKM.
    Li, Mourad, Zhuang, Koopman & Zuccon (2023), "Pseudo Relevance Feedback with Deep Language
    Models and Dense Retrievers: Successes and Pitfalls", ACM TOIS.
"""
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
    seen: set[str] = set()
    chosen = []
    for row in rows:
        if len(chosen) >= count:
            break
        doc_id = doc_ids[row]
        if doc_id not in seen:
            seen.add(doc_id)
            chosen.append(row)
    return chosen
