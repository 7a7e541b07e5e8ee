"""The lexical retriever: a bm25s index over chunk texts, rows aligned to sorted chunk ids.

Saved as bm25s's own files (no pickle) plus `ids.npy` (row -> chunk_id) and `tokenizer.json`
(the settings and stop words it was built with), so queries are tokenised like the documents.
"""
from __future__ import annotations

import json
import logging
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from pathlib import Path

import numpy as np

from hybridlab.config import Bm25Config
from hybridlab.index.tokenizer import Tokenizer


def _bm25s():
    """The bm25s module, its logger handed back to the application's logging configuration (bm25s
    sets it to DEBUG on import, which put its build messages into every configured output)."""
    import bm25s

    logging.getLogger("bm25s").setLevel(logging.NOTSET)
    return bm25s


class SparseIndex:
    """BM25 scores for a query over every row; filters arrive as a boolean row mask."""

    def __init__(self, retriever, chunk_ids: np.ndarray, tokenizer: Tokenizer) -> None:
        self.retriever = retriever
        self.chunk_ids = chunk_ids
        self.tokenizer = tokenizer
        self.vocab: dict[str, int] = retriever.vocab_dict

    @classmethod
    def build(cls, texts: Iterable[str], chunk_ids: np.ndarray, config: Bm25Config, show_progress: bool = False) -> SparseIndex:
        """Index `texts` (any iterable, e.g. streamed from the store; row i = chunk_ids[i])."""
        from bm25s.tokenization import Tokenized

        bm25s = _bm25s()

        tokenizer = Tokenizer(config)
        vocab: dict[str, int] = {}
        ids: list[array] = []  # int32 arrays: half the memory of lists of ints (bm25s only iterates them)
        for text in texts:
            ids.append(array("i", [vocab.setdefault(term, len(vocab)) for term in tokenizer.tokenize(text)]))
        if len(ids) != len(chunk_ids):
            raise ValueError(f"{len(ids)} texts for {len(chunk_ids)} chunk ids")
        retriever = bm25s.BM25(k1=config.k1, b=config.b, method=config.method)
        if ids:
            retriever.index(Tokenized(ids=ids, vocab=vocab), show_progress=show_progress)
        return cls(retriever, np.asarray(chunk_ids, dtype=np.int64), tokenizer)

    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        if len(self.chunk_ids):
            self.retriever.save(str(folder), show_progress=False)
        np.save(folder / "ids.npy", self.chunk_ids, allow_pickle=False)
        stopwords = sorted(self.tokenizer.stopwords)
        (folder / "tokenizer.json").write_text(json.dumps({"config": asdict(self.tokenizer.config), "stopwords": stopwords}))

    @classmethod
    def load(cls, folder: Path) -> SparseIndex:
        bm25s = _bm25s()

        settings = json.loads((folder / "tokenizer.json").read_text())
        config = Bm25Config(**settings["config"])
        chunk_ids = np.load(folder / "ids.npy", allow_pickle=False)
        if len(chunk_ids):
            retriever = bm25s.BM25.load(str(folder), mmap=False, load_vocab=True, show_progress=False)
        else:
            retriever = bm25s.BM25(k1=config.k1, b=config.b, method=config.method)
            retriever.vocab_dict = {}
        return cls(retriever, chunk_ids, Tokenizer(config))

    @property
    def size(self) -> int:
        return len(self.chunk_ids)

    def query_ids(self, query: str) -> list[int]:
        """Vocabulary ids of the query's terms (terms the index has never seen are dropped)."""
        return [self.vocab[t] for t in self.tokenizer.query_terms(query) if t in self.vocab]

    def scores(self, term_ids: list[int]) -> np.ndarray:
        """BM25 score of every row (0 where no query term occurs)."""
        if not term_ids or not self.size:
            return np.zeros(self.size, dtype=np.float32)
        return self.retriever.get_scores_from_ids(term_ids)

    def idf(self, term_ids: Sequence[int]) -> np.ndarray:
        """The IDF bm25s scored each term with (Lucene: ln(1 + (N - df + 0.5) / (df + 0.5)))."""
        indptr = np.asarray(self.retriever.scores["indptr"])
        ids = np.asarray(term_ids, dtype=np.int64)
        return lucene_idf(indptr[ids + 1] - indptr[ids], self.size)

    def matched_idf_share(self, query: str, rows: np.ndarray) -> np.ndarray:
        """For each of `rows`, the share of the query's IDF mass its text contains: Σ idf of the
        distinct query terms it has / Σ idf of all of them, terms the index never saw counted at
        the IDF of an unseen term (so a query the corpus lacks words for has little lexical
        evidence). All zeros for a query without terms."""
        rows = np.asarray(rows, dtype=np.int64)
        terms = self.tokenizer.query_terms(query)
        known = [self.vocab[term] for term in terms if term in self.vocab]
        if not terms or not self.size:
            return np.zeros(len(rows))
        unseen = (len(terms) - len(known)) * float(lucene_idf(np.zeros(1), self.size)[0])
        weights = self.idf(known)
        total = float(weights.sum()) + unseen
        if not len(rows) or total <= 0:
            return np.zeros(len(rows))
        scores = self.retriever.scores
        indptr, indices = scores["indptr"], scores["indices"]
        matched = np.zeros(len(rows))
        for term_id, weight in zip(known, weights.tolist()):
            postings = indices[indptr[term_id]:indptr[term_id + 1]]  # ascending rows
            matched += weight * np.isin(rows, postings, assume_unique=False)
        return matched / total

    def top(self, term_ids: list[int], depth: int, mask: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(rows, scores) of the best `depth` rows with a positive score, within `mask`."""
        scores = self.scores(term_ids)
        if mask is not None:
            scores = np.where(mask, scores, 0.0)
        return top_positive(scores, depth)


def lucene_idf(document_frequency: np.ndarray, n_documents: int) -> np.ndarray:
    """BM25 IDF as Lucene and bm25s's "lucene" method compute it: ln(1 + (N - df + 0.5) / (df + 0.5))."""
    df = np.asarray(document_frequency, dtype=np.float64)
    return np.log1p((n_documents - df + 0.5) / (df + 0.5))


def top_positive(scores: np.ndarray, depth: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices and values of the `depth` largest positive entries, best first (ties: lower index)."""
    positive = np.flatnonzero(scores > 0)
    if len(positive) > depth:
        part = np.argpartition(-scores[positive], depth - 1)[:depth]
        positive = positive[part]
    order = np.lexsort((positive, -scores[positive]))
    rows = positive[order]
    return rows, scores[rows]
