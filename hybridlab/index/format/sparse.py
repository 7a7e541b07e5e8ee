"""The lexical retriever: BM25 over one or more segments, scored at query time with global statistics.
See docs/internals/index.md#sparse."""

from __future__ import annotations

import json
import logging
import math
import threading
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from hybridlab.config import Bm25Config
from hybridlab.errors import IndexFormatError, InvalidValueError
from hybridlab.index.format.tokenizer import Tokenizer

POSTINGS_FORMAT = "hybridlab-tf-postings"
POSTINGS_VERSION = 1


def _bm25s():
    """The bm25s module, its logger handed back to the application's logging configuration (bm25s
    sets it to DEBUG on import, which put its build messages into every configured output)."""
    import bm25s

    logging.getLogger("bm25s").setLevel(logging.NOTSET)
    return bm25s


# bm25s's IDF of each method (bm25s/scoring.py, after Kamphuis et al. ECIR 2020)
IDF: dict[str, Callable[[int, int], float]] = {
    "lucene": lambda df, n: math.log(1 + (n - df + 0.5) / (df + 0.5)),
    "robertson": lambda df, n: math.log(max((n - df + 0.5) / (df + 0.5), 1)),
    "atire": lambda df, n: math.log(n / df),
}


def _tfc(method: str, tf: np.ndarray, lengths: np.ndarray, avgdl: float, k1: float, b: float) -> np.ndarray:
    """bm25s's term-frequency component, operation for operation (float64, as bm25s computes it)."""
    norm = k1 * ((1 - b) + b * lengths.astype(np.float64) / np.float64(avgdl))
    tf = tf.astype(np.float64)
    if method == "atire":
        return tf * (k1 + 1) / (tf + norm)
    return tf / (norm + tf)


@dataclass(frozen=True, eq=False)
class Postings:
    """One segment's term frequencies: column `vocab[term]` lists (row, tf) pairs, rows ascending."""

    vocab: dict[str, int]
    indptr: np.ndarray  # int64, len(vocab) + 1
    indices: np.ndarray  # int32 rows
    tf: np.ndarray  # float32 term frequencies
    lengths: np.ndarray  # int32 terms per row

    @property
    def rows(self) -> int:
        return len(self.lengths)

    @classmethod
    def from_token_ids(cls, docs: Sequence[array], vocab: dict[str, int]) -> Postings:
        rows, cols, counts = array("i"), array("i"), array("f")
        lengths = np.fromiter((len(doc) for doc in docs), dtype=np.int32, count=len(docs))
        for row, doc in enumerate(docs):
            counter = Counter(doc)
            rows.extend([row] * len(counter))
            cols.extend(counter.keys())
            counts.extend(counter.values())
        rows_a = np.frombuffer(rows, dtype=np.int32) if rows else np.zeros(0, np.int32)
        cols_a = np.frombuffer(cols, dtype=np.int32) if cols else np.zeros(0, np.int32)
        tf = np.frombuffer(counts, dtype=np.float32) if counts else np.zeros(0, np.float32)
        order = np.lexsort((rows_a, cols_a))
        indptr = np.zeros(len(vocab) + 1, dtype=np.int64)
        np.cumsum(np.bincount(cols_a, minlength=len(vocab)), out=indptr[1:])
        return cls(vocab, indptr, rows_a[order].copy(), tf[order].copy(), lengths)

    @classmethod
    def concat(cls, parts: Sequence[Postings]) -> Postings:
        """The postings of `parts` as one CSC whose rows are theirs in order (part i's row r is row
        offset_i + r), with one vocabulary (the first part's terms first, then each new term as it
        first appears). Columns keep rows ascending, so a term's postings stay sorted. One part is
        returned as it is (no copy)."""
        if len(parts) == 1:
            return parts[0]
        vocab = dict(parts[0].vocab) if parts else {}
        maps = [np.arange(len(vocab), dtype=np.int64)] if parts else []
        for part in parts[1:]:
            maps.append(
                np.fromiter(
                    (vocab.setdefault(term, len(vocab)) for term in part.vocab), np.int64, len(part.vocab)
                )
            )
        counts = np.zeros(len(vocab), dtype=np.int64)
        for part, to_global in zip(parts, maps):
            counts[to_global] += np.diff(part.indptr)
        indptr = np.zeros(len(vocab) + 1, dtype=np.int64)
        np.cumsum(counts, out=indptr[1:])
        indices = np.empty(int(indptr[-1]), dtype=np.int32)
        tf = np.empty(int(indptr[-1]), dtype=np.float32)
        filled = indptr[:-1].copy()  # per column: where the next part's postings go
        offset = 0
        for part, to_global in zip(parts, maps):
            sizes = np.diff(part.indptr)
            destination = np.repeat(filled[to_global] - part.indptr[:-1], sizes) + np.arange(
                len(part.indices)
            )
            indices[destination] = part.indices + offset
            tf[destination] = part.tf
            filled[to_global] += sizes
            offset += part.rows
        lengths = np.concatenate([part.lengths for part in parts]) if parts else np.zeros(0, np.int32)
        return cls(vocab, indptr, indices, tf, lengths)

    def column(self, term: str) -> tuple[np.ndarray, np.ndarray]:
        """(rows, term frequencies) of `term` in this segment (empty when absent)."""
        col = self.vocab.get(term)
        if col is None:
            return np.zeros(0, np.int32), np.zeros(0, np.float32)
        start, end = self.indptr[col], self.indptr[col + 1]
        return self.indices[start:end], self.tf[start:end]

    def save(self, folder: Path, config: Bm25Config) -> None:
        np.save(folder / "data.csc.index.npy", self.tf, allow_pickle=False)
        np.save(folder / "indices.csc.index.npy", self.indices, allow_pickle=False)
        np.save(folder / "indptr.csc.index.npy", self.indptr, allow_pickle=False)
        np.save(folder / "lengths.npy", self.lengths, allow_pickle=False)
        (folder / "vocab.index.json").write_text(json.dumps(self.vocab, ensure_ascii=False), encoding="utf-8")
        params = {
            "format": POSTINGS_FORMAT,
            "version": POSTINGS_VERSION,
            "k1": config.k1,
            "b": config.b,
            "method": config.method,
            "rows": self.rows,
            "terms": len(self.vocab),
        }
        (folder / "params.index.json").write_text(json.dumps(params), encoding="utf-8")

    @classmethod
    def load(cls, folder: Path) -> Postings:
        params = json.loads((folder / "params.index.json").read_text(encoding="utf-8"))
        if params.get("version") != POSTINGS_VERSION:
            raise ValueError(
                f"{folder}: postings version {params.get('version')!r}, expected {POSTINGS_VERSION}"
            )
        vocab = json.loads((folder / "vocab.index.json").read_text(encoding="utf-8"))
        load = lambda name: np.load(folder / name, allow_pickle=False)
        postings = cls(
            vocab,
            load("indptr.csc.index.npy").astype(np.int64, copy=False),
            load("indices.csc.index.npy"),
            load("data.csc.index.npy"),
            load("lengths.npy"),
        )
        if (
            not isinstance(vocab, dict)
            or len(postings.indptr) != len(vocab) + 1
            or postings.rows != params["rows"]
            or len(postings.indices) != len(postings.tf)
            or postings.indptr[-1] != len(postings.tf)
            or (len(postings.indices) and int(postings.indices.max()) >= postings.rows)
        ):
            raise ValueError(f"{folder}: postings arrays do not agree with each other")
        return postings


GROUP_BASE = 16  # parts of 16^k to 16^(k+1) - 1 rows are combined into one group


def group_parts(parts: Sequence[Postings]) -> list[list[int]]:
    """Which parts are combined into one CSC: those of one size class (rows in [16^k, 16^(k+1))),
    largest class first, each group's parts in order. Segments of a tiered index fall into a few
    classes; a write's small segment joins the smallest class, so a reader's refresh rebuilds only
    that small group and reuses the others (:class:`GroupCache`); an index cut into N similar
    segments is searched as one CSC."""
    classes: dict[int, list[int]] = {}
    for i, part in enumerate(parts):
        classes.setdefault(int(math.log(max(part.rows, 1), GROUP_BASE)), []).append(i)
    return [classes[k] for k in sorted(classes, reverse=True)]


def global_rows(sizes: Sequence[int], live: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    """Per part of `sizes[i]` rows (`live[i]`: its live-row mask, None = all live), the global row of
    each of its rows, numbered over the live rows of every part in order (-1 = tombstoned)."""
    found, offset = [], 0
    for size, mask in zip(sizes, live):
        if mask is None:
            found.append(np.arange(offset, offset + size, dtype=np.int64))
            offset += size
        else:
            found.append(np.where(mask, np.cumsum(mask) - 1 + offset, -1).astype(np.int64))
            offset += int(mask.sum())
    return found


def _global_rows(local: np.ndarray, to_global: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
    """The global rows of a group's `local` rows, and the mask of the live ones (None: all live)."""
    if to_global is None:
        return local.astype(np.int64), None
    rows = to_global[local]
    keep = rows >= 0
    return rows, None if keep.all() else keep


class GroupCache:
    """Combined postings (:meth:`Postings.concat`) by the tuple of parts they combine, kept from one
    generation to the next by a reader (segments are immutable, so an unchanged group is reused)."""

    def __init__(self) -> None:
        self._groups: dict[tuple[Postings, ...], Postings] = {}
        self._lock = threading.Lock()

    def get(self, parts: tuple[Postings, ...]) -> Postings:
        with self._lock:
            found = self._groups.get(parts)
        if found is None:
            found = Postings.concat(parts)
            with self._lock:
                found = self._groups.setdefault(parts, found)
        return found

    def keep(self, keys: set[tuple[Postings, ...]]) -> None:
        with self._lock:
            for key in [k for k in self._groups if k not in keys]:
                del self._groups[key]


class SparseIndex:
    """BM25 scores for a query over every live row of its segments; filters arrive as a row mask.

    Global row `r` runs over the live rows of the segments in order (ascending chunk ids). `live[i]`
    is segment i's boolean row mask (None = every row live)."""

    def __init__(
        self,
        parts: Sequence[Postings],
        live: Sequence[np.ndarray | None],
        chunk_ids: np.ndarray,
        tokenizer: Tokenizer,
        groups: GroupCache | None = None,
    ) -> None:
        self.parts = tuple(parts)
        self.chunk_ids = chunk_ids
        self.tokenizer = tokenizer
        config = tokenizer.config
        if config.method not in IDF:
            raise InvalidValueError(
                f"BM25 method {config.method!r} is not supported by segmented indexes; "
                f"choose from {sorted(IDF)}"
            )
        rows_of = global_rows([part.rows for part in self.parts], live)
        lengths = [
            part.lengths if mask is None else part.lengths[mask] for part, mask in zip(self.parts, live)
        ]
        self.n_live = offset = sum(len(part_lengths) for part_lengths in lengths)
        if offset != len(chunk_ids):
            raise ValueError(f"{offset} live BM25 rows for {len(chunk_ids)} chunk ids")
        # the mean over the lengths in row order, as bm25s computes it over its corpus
        self.avgdl = float(np.concatenate(lengths).mean()) if offset else 0.0
        self._vocab: dict[str, int] | None = None
        self._terms: list[str] | None = None
        # The parts' postings as a few combined CSCs (parts of one size class each: `group_parts`),
        # so a query term is looked up once per group instead of once per segment. Per group, the
        # global row of each of its rows (-1 = tombstoned), or None when its rows are the global rows.
        cache = groups if groups is not None else GroupCache()
        plan = group_parts(self.parts)
        self._groups: list[Postings] = [cache.get(tuple(self.parts[i] for i in members)) for members in plan]
        self._group_rows: list[np.ndarray | None] = []
        for members in plan:
            if members == list(range(len(members))) and all(live[i] is None for i in members):
                self._group_rows.append(None)
            else:
                self._group_rows.append(np.concatenate([rows_of[i] for i in members]))
        if groups is not None:
            groups.keep({tuple(self.parts[i] for i in members) for members in plan})

    # ------------------------------------------------------------------ building and files (one segment)
    @classmethod
    def build(
        cls, texts: Iterable[str], chunk_ids: np.ndarray, config: Bm25Config, show_progress: bool = False
    ) -> SparseIndex:
        """Index `texts` as one segment (any iterable, e.g. streamed from the store; row i = chunk_ids[i])."""
        _bm25s()  # its logger follows the application's logging from the first build on
        tokenizer = Tokenizer(config)
        vocab: dict[str, int] = {}
        ids = [
            array("i", [vocab.setdefault(term, len(vocab)) for term in tokenizer.tokenize(text)])
            for text in texts
        ]  # int32 arrays: half the memory of lists of ints
        if len(ids) != len(chunk_ids):
            raise ValueError(f"{len(ids)} texts for {len(chunk_ids)} chunk ids")
        return cls(
            [Postings.from_token_ids(ids, vocab)], [None], np.asarray(chunk_ids, dtype=np.int64), tokenizer
        )

    def save(self, folder: Path) -> None:
        """Write a one-segment index (a segment's `bm25/` folder)."""
        if len(self.parts) != 1:
            raise ValueError("only a freshly built one-segment BM25 index can be saved")
        folder.mkdir(parents=True, exist_ok=True)
        self.parts[0].save(folder, self.tokenizer.config)
        np.save(folder / "ids.npy", self.chunk_ids, allow_pickle=False)
        stopwords = sorted(self.tokenizer.stopwords)
        (folder / "tokenizer.json").write_text(
            json.dumps({"config": asdict(self.tokenizer.config), "stopwords": stopwords})
        )

    @staticmethod
    def load_tokenizer(folder: Path) -> Tokenizer:
        settings = json.loads((folder / "tokenizer.json").read_text())
        return Tokenizer(Bm25Config(**settings["config"]))

    @classmethod
    def load(cls, folder: Path) -> SparseIndex:
        """One segment's `bm25/` folder, every row live (a pre-segment bm25s folder: IndexFormatError)."""
        tokenizer = cls.load_tokenizer(folder)
        chunk_ids = np.load(folder / "ids.npy", allow_pickle=False)
        if chunk_ids.dtype.kind not in "iu":
            raise ValueError(f"{folder / 'ids.npy'} does not hold integer chunk ids")
        params = folder / "params.index.json"  # an empty segment has none
        if (
            params.exists()
            and json.loads(params.read_text(encoding="utf-8")).get("format") != POSTINGS_FORMAT
        ):
            raise IndexFormatError(
                f"{folder} holds a BM25 index written before segments (a bm25s score matrix), which "
                "hybridlab no longer reads; rebuild the index: `hybridlab index PATHS --index DIR --force` "
                "(or `hybridlab verify --repair --index DIR`)"
            )
        if not len(chunk_ids) and not (folder / "params.index.json").exists():
            return cls(
                [
                    Postings(
                        {},
                        np.zeros(1, np.int64),
                        np.zeros(0, np.int32),
                        np.zeros(0, np.float32),
                        np.zeros(0, np.int32),
                    )
                ],
                [None],
                chunk_ids.astype(np.int64),
                tokenizer,
            )
        postings = Postings.load(folder)
        if postings.rows != len(chunk_ids):
            raise ValueError(f"{folder}: {postings.rows} BM25 rows for {len(chunk_ids)} chunk ids")
        return cls([postings], [None], chunk_ids.astype(np.int64), tokenizer)

    # ------------------------------------------------------------------ statistics
    @property
    def size(self) -> int:
        return len(self.chunk_ids)

    @property
    def k1(self) -> float:
        return self.tokenizer.config.k1

    @property
    def b(self) -> float:
        return self.tokenizer.config.b

    @property
    def method(self) -> str:
        return self.tokenizer.config.method

    def idf(self, term_ids: Sequence[int]) -> np.ndarray:
        """The IDF each term (ids of :attr:`vocab`) is scored with, over the live rows (float64)."""
        terms = self._terms_of(list(term_ids))
        fn = IDF[self.method]
        frequencies = [self.document_frequency(term) for term in terms]
        return np.asarray([fn(df, self.n_live) if df else 0.0 for df in frequencies], dtype=np.float64)

    def matched_idf_share(self, query: str, rows: np.ndarray) -> np.ndarray:
        """For each of `rows`, the share of the query's IDF mass its text contains: Σ idf of the
        distinct query terms it has / Σ idf of all of them, terms the index never saw counted at
        the IDF of an unseen term (so a query the corpus lacks words for has little lexical
        evidence). All zeros for a query without terms."""
        rows = np.asarray(rows, dtype=np.int64)
        terms = self.tokenizer.query_terms(query)
        # the groups' vocabularies: no global vocabulary built per generation
        known_terms = [term for term in terms if any(term in group.vocab for group in self._groups)]
        if not terms or not self.size:
            return np.zeros(len(rows))
        unseen = (len(terms) - len(known_terms)) * float(lucene_idf(np.zeros(1), self.size)[0])
        # each distinct term's live postings read once (per group: ascending rows), for its IDF and matches
        columns = {
            term: [found for found, _, _ in self._live_column(term, lengths=False)]
            for term in dict.fromkeys(known_terms)
        }
        fn = IDF[self.method]
        frequencies = {term: sum(len(found) for found in column) for term, column in columns.items()}
        weights = np.asarray(
            [fn(frequencies[t], self.n_live) if frequencies[t] else 0.0 for t in known_terms],
            dtype=np.float64,
        )
        total = float(weights.sum()) + unseen
        if not len(rows) or total <= 0:
            return np.zeros(len(rows))
        matched = np.zeros(len(rows))
        for term, weight in zip(known_terms, weights.tolist()):
            column = columns[term]
            has = contains(column[0], rows) if column else np.zeros(len(rows), dtype=bool)
            for found in column[1:]:
                has |= contains(found, rows)
            matched += weight * has
        return matched / total

    @property
    def vocab(self) -> dict[str, int]:
        """Term -> id over every segment (first segment's order first; built on first use)."""
        if self._vocab is None:
            if len(self._groups) == 1:  # one group: its vocabulary is built in the same order
                vocab = self._groups[0].vocab
            else:
                vocab = {}
                for part in self.parts:
                    for term in part.vocab:
                        vocab.setdefault(term, len(vocab))
            self._terms = [""] * len(vocab)
            for term, index in vocab.items():
                self._terms[index] = term
            self._vocab = vocab
        return self._vocab

    def _live_column(
        self, term: str, lengths: bool = True
    ) -> list[tuple[np.ndarray, np.ndarray, np.ndarray | None]]:
        """Per group of segments: (global rows ascending, tf, lengths or None) of the live rows containing `term`."""
        found = []
        for group, to_global in zip(self._groups, self._group_rows):
            local, tf = group.column(term)
            if not len(local):
                continue
            rows, keep = _global_rows(local, to_global)
            if keep is not None:
                local, tf, rows = local[keep], tf[keep], rows[keep]
            if len(rows):
                found.append((rows, tf, group.lengths[local] if lengths else None))
        return found

    def document_frequency(self, term: str) -> int:
        """Live rows containing `term`."""
        return sum(len(rows) for rows, _, _ in self._live_column(term, lengths=False))

    def term_idf(self, term: str) -> float:
        """The IDF BM25 gives `term` (method of the index; 0.0 for a term no live row contains)."""
        df = self.document_frequency(term)
        return float(np.float32(IDF[self.method](df, self.n_live))) if df else 0.0

    def query_terms(self, query: str) -> list[str]:
        """The query's terms the index has (tokenised as the documents were; repeats kept)."""
        return [
            t for t in self.tokenizer.query_terms(query) if any(t in group.vocab for group in self._groups)
        ]

    def query_idf(self, query: str) -> dict[str, float]:
        """For the query's in-vocabulary terms, the IDF of each (see :meth:`term_idf`); k1 and b are
        :attr:`k1` and :attr:`b`."""
        return {term: self.term_idf(term) for term in dict.fromkeys(self.query_terms(query))}

    # ------------------------------------------------------------------ scoring
    def score_terms(self, terms: Sequence[str]) -> np.ndarray:
        """BM25 score of every live row for the query terms (0 where none occurs): per term, in
        order, its float32 contributions are added, as bm25s does."""
        scores = np.zeros(self.size, dtype=np.float32)
        if not terms or not self.size:
            return scores
        distinct = list(dict.fromkeys(terms))
        rows, tf, lengths, term_of = self._postings_of(distinct)
        if not len(rows):
            return scores
        df = np.bincount(term_of, minlength=len(distinct))
        idf_of = IDF[self.method]
        idf = np.asarray([idf_of(int(n), self.n_live) if n else 0.0 for n in df], dtype=np.float32)
        contribution = (idf[term_of] * _tfc(self.method, tf, lengths, self.avgdl, self.k1, self.b)).astype(
            np.float32
        )
        # float32 additions term by term, in query order (repeats included), as bm25s adds them
        by_term = np.argsort(term_of, kind="stable")
        bounds = np.concatenate([[0], np.cumsum(df)])
        if len(distinct) == len(terms):
            order = by_term
        else:
            position = {term: i for i, term in enumerate(distinct)}
            order = np.concatenate([by_term[bounds[position[t]] : bounds[position[t] + 1]] for t in terms])
        np.add.at(scores, rows[order], contribution[order])
        return scores

    def _postings_of(self, terms: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(global rows, tf, lengths, index into `terms`) of every live posting of `terms`, all segments."""
        rows, tfs, lengths, term_of = [], [], [], []
        for group, to_global in zip(self._groups, self._group_rows):
            vocab, indptr = group.vocab, group.indptr
            slices = []
            for i, term in enumerate(terms):
                column = vocab.get(term)
                if column is not None and indptr[column + 1] > indptr[column]:
                    slices.append((i, int(indptr[column]), int(indptr[column + 1])))
            if not slices:
                continue
            if len(slices) == 1:
                _, start, end = slices[0]
                local, tf = group.indices[start:end], group.tf[start:end]
            else:
                local = np.concatenate([group.indices[start:end] for _, start, end in slices])
                tf = np.concatenate([group.tf[start:end] for _, start, end in slices])
            which = np.repeat(
                np.asarray([i for i, _, _ in slices], dtype=np.int64),
                [end - start for _, start, end in slices],
            )
            global_rows, keep = _global_rows(local, to_global)
            if keep is not None:
                local, tf, which, global_rows = local[keep], tf[keep], which[keep], global_rows[keep]
            rows.append(global_rows)
            tfs.append(tf)
            lengths.append(group.lengths[local])
            term_of.append(which)
        if not rows:
            empty = np.zeros(0, np.int64)
            return empty, np.zeros(0, np.float32), empty, empty
        if len(rows) == 1:
            return rows[0], tfs[0], lengths[0], term_of[0]
        return np.concatenate(rows), np.concatenate(tfs), np.concatenate(lengths), np.concatenate(term_of)

    def top_terms(
        self, terms: Sequence[str], depth: int, mask: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """(rows, scores) of the best `depth` rows with a positive score, within `mask`."""
        scores = self.score_terms(terms)
        if mask is not None:
            scores = np.where(mask, scores, 0.0)
        return top_positive(scores, depth)

    # the term-id interface (ids of :attr:`vocab`), for tools that keep ids
    def query_ids(self, query: str) -> list[int]:
        """Vocabulary ids of the query's terms (terms the index has never seen are dropped)."""
        vocab = self.vocab
        return [vocab[t] for t in self.tokenizer.query_terms(query) if t in vocab]

    def _terms_of(self, term_ids: Sequence[int]) -> list[str]:
        _ = self.vocab  # builds `_terms`
        assert self._terms is not None
        return [self._terms[i] for i in term_ids]

    def scores(self, term_ids: list[int]) -> np.ndarray:
        """BM25 score of every row (0 where no query term occurs)."""
        return self.score_terms(self._terms_of(term_ids))

    def top(
        self, term_ids: list[int], depth: int, mask: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """(rows, scores) of the best `depth` rows with a positive score, within `mask`."""
        return self.top_terms(self._terms_of(term_ids), depth, mask)

    def weights(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every live posting as (row, term id of :attr:`vocab`, BM25 weight: IDF folded in, global
        statistics), term by term in id order: the index as sparse vectors (the Qdrant export)."""
        rows, terms, values = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)], [np.zeros(0, np.float32)]
        for term, term_id in sorted(self.vocab.items(), key=lambda item: item[1]):
            column = self._live_column(term)
            df = sum(len(found) for found, _, _ in column)
            idf = np.float32(IDF[self.method](df, self.n_live)) if df else np.float32(0)
            for found, tf, lengths in column:
                assert lengths is not None  # `_live_column` with its lengths
                rows.append(found)
                terms.append(np.full(len(found), term_id, dtype=np.int64))
                values.append(
                    (idf * _tfc(self.method, tf, lengths, self.avgdl, self.k1, self.b)).astype(np.float32)
                )
        return np.concatenate(rows), np.concatenate(terms), np.concatenate(values)


def contains(postings: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """For each of `rows`, whether it is in `postings`: a binary search when the postings are
    ascending (as stored), else np.isin; a few rows against long postings is the hot case."""
    postings = np.asarray(postings)
    if not len(postings):
        return np.zeros(len(rows), dtype=bool)
    if len(postings) > 1 and not bool(np.all(postings[1:] >= postings[:-1])):
        return np.isin(rows, postings)
    found = np.minimum(np.searchsorted(postings, rows), len(postings) - 1)
    return postings[found] == rows


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
