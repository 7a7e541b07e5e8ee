"""The hybrid search engine: dense + BM25 + tag signals, fused, with recency and pushed-down filters.

`Index` opens one index folder (read-only) and answers searches. Every knob of
:class:`~hybridlab.config.SearchConfig` can be passed per call; precedence and adaptive defaults are
resolved by :func:`~hybridlab.config.resolve_search_config`.

One search: filters -> a DuckDB row mask pushed into BM25 (score mask) and FAISS (exact: a row
bitmap scan, or gathered-subset scoring for small filters); runs `bm25` and `dense` (`depth` each)
and `tags`; fused by name (:func:`~hybridlab.search.fusion.fuse`, weights from
:func:`~hybridlab.search.fusion.alpha_weights`); recency scales the fused score. Staged mode scores only the BM25 top `candidates` (plus tagged rows, plus
`expand_hops` rounds of their corpus-graph neighbours: :mod:`hybridlab.index.graph`) with their stored
vectors; `fill_dense` gives BM25 candidates outside the dense top `depth` their exact cosine (both
auto settings turn on above `staged_threshold` chunks). Staged search falls back to parallel hybrid
when BM25 has fewer than `fallback_threshold` hits or cannot fill `limit`. If fewer than `limit`
results come back while more chunks are allowed, `depth` grows 4x and the search repeats, so rare
filters still fill `limit`.
"""
from __future__ import annotations

import json
import logging
import math
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Self

import numpy as np

from hybridlab.config import SearchConfig, load_config_file, resolve_auto, resolve_search_config
from hybridlab.index import layout, store
from hybridlab.index.graph import expand_by_graph, load_graph
from hybridlab.index.sparse import SparseIndex
from hybridlab.search.filters import Filters, parse_when
from hybridlab.search.fusion import alpha_weights, fuse
from hybridlab.search.tags import TagVocabulary, resolve_tags

logger = logging.getLogger(__name__)

MAX_QUERY_CHARS = 10_000
QUERY_CACHE_SIZE = 4096
FILTER_CACHE_SIZE = 64
TAG_TIEBREAK = 1e-3


@dataclass(frozen=True)
class SearchResult:
    """One hit: a document (best chunk) or a chunk, with its score and where it came from."""

    rank: int
    doc_id: str
    chunk_id: int
    title: str
    section: str
    score: float
    snippet: str
    collection: str
    chunk_type: str
    tags: tuple[str, ...] = ()
    updated_at: str | None = None
    explain: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["tags"] = list(self.tags)
        if self.explain is None:
            data.pop("explain")
        return data


@dataclass
class _Hit:
    row: int
    score: float
    fused: float
    recency: float


@dataclass
class _Outcome:
    hits: list[_Hit]
    runs: dict[str, dict[int, float]]
    mode: str
    alpha: float
    alpha_source: str
    config: SearchConfig
    model: str | None
    query_tags: tuple[str, ...]
    query_collections: tuple[str, ...]
    tag_boost: float
    tag_coverage: float
    timings: dict[str, float] = field(default_factory=dict)
    graph_added: int = 0  # staged: candidates the corpus graph added to the BM25 pool


def resolve_now(now: str | datetime | None) -> datetime:
    """Reference time for recency: argument > `HYBRIDLAB_NOW` > the clock."""
    if now is not None:
        return parse_when(now, "now")
    env = os.environ.get("HYBRIDLAB_NOW")
    if env:
        return parse_when(env, "HYBRIDLAB_NOW")
    return datetime.now(UTC)


def _tuple(values: str | Iterable[str] | None) -> tuple[str, ...]:
    if values is None:
        return ()
    if isinstance(values, str):
        return (values,)
    return tuple(values)


class Index:
    """An opened index: searches, documents, stats. Re-opens itself when a writer commits."""

    def __init__(self, index_dir: str | os.PathLike, config: str | os.PathLike | Mapping | None = None,
                 *, check: bool = True) -> None:
        self.index_dir = Path(index_dir)
        if isinstance(config, Mapping):
            self.config_file = dict(config)
        else:
            self.config_file = load_config_file(config)
        self.config_path = None if isinstance(config, Mapping) else config
        self._lock = threading.RLock()
        self._encoders: dict[str, Any] = {}
        self._query_vectors: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()
        self._check = check
        self._con = None
        self.last_timings: dict[str, float] = {}
        self.last_mode: str | None = None  # parallel / staged / fallback / vector / bm25 / tags
        self._load()

    # ---------------------------------------------------------------- loading
    def _load(self) -> None:
        from hybridlab.index.dense import DenseIndex, single_threaded

        single_threaded()

        manifest = layout.read_manifest(self.index_dir)
        generation = self.index_dir / manifest["path"]
        self.manifest = manifest
        self._manifest_stamp = self._stamp()
        damaged = layout.open_problems(self.index_dir, manifest)
        if damaged:
            raise layout.CorruptIndexError(f"{damaged[0]}; {layout.repair_hint(self.index_dir)}")
        if self._con is not None:
            self._con.close()
        store_path = generation / layout.STORE_FILE
        try:
            self._con = store.connect(store_path, read_only=True)
        except store.IndexError_ as error:
            raise layout.CorruptIndexError(f"{error}".replace("--index DIR", f"--index {self.index_dir}")) from None
        try:
            rows = self._con.execute(
                "SELECT c.chunk_id, c.doc_id, c.section, c.chunk_type, d.collection, d.title, "
                "epoch(COALESCE(d.updated_at, d.created_at)) FROM chunks c JOIN documents d USING (doc_id) "
                "ORDER BY c.chunk_id"
            ).fetchall()
        except Exception as error:  # noqa: BLE001 - any failure here means a truncated or damaged DuckDB file
            raise layout.CorruptIndexError(
                f"{store_path} cannot be read ({str(error).splitlines()[0][:160]}); "
                f"run `hybridlab verify --repair --index {self.index_dir}`"
            ) from None
        self.chunk_ids = np.asarray([r[0] for r in rows], dtype=np.int64)
        self.doc_ids = [r[1] for r in rows]
        self.sections = [r[2] or "" for r in rows]
        self.chunk_types = [r[3] for r in rows]
        self.collections = [r[4] for r in rows]
        self.titles = [r[5] or "" for r in rows]
        self.times = np.asarray([np.nan if r[6] is None else float(r[6]) for r in rows], dtype=np.float64)
        self.known_chunk_types = sorted(set(self.chunk_types))
        self.known_collections = sorted(set(self.collections))
        tag_rows = self._con.execute("SELECT tag, chunk_id FROM tags ORDER BY tag, chunk_id").fetchall()
        by_tag: dict[str, list[int]] = {}
        for tag, chunk_id in tag_rows:
            by_tag.setdefault(tag, []).append(chunk_id)
        self.tag_rows = {tag: self.rows_of(np.asarray(ids, dtype=np.int64)) for tag, ids in by_tag.items()}
        self.row_tags: dict[int, list[str]] = {}
        for tag, rows_of_tag in self.tag_rows.items():
            for row in rows_of_tag:
                self.row_tags.setdefault(int(row), []).append(tag)
        try:
            self.sparse = SparseIndex.load(generation / layout.BM25_DIR)
        except Exception as error:  # noqa: BLE001 - whatever bm25s raises, the folder is damaged
            raise layout.CorruptIndexError(
                f"{generation / layout.BM25_DIR} cannot be read ({type(error).__name__}: {str(error)[:160]}); "
                f"run `hybridlab verify --repair --index {self.index_dir}`"
            ) from None
        self.tag_vocabulary = TagVocabulary(self.tag_rows, stopwords=self.sparse.tokenizer.stopwords)
        collection_array = np.asarray(self.collections, dtype=object)
        self.collection_rows = {name: np.flatnonzero(collection_array == name) for name in self.known_collections}
        # a tag worn across many collections (`architecture` on ten projects) says less about which
        # chunk is meant than one worn by a single collection (`rathole`): weight = 1 / sqrt(collections)
        self.tag_specificity = {
            tag: len(set(collection_array[rows].tolist())) ** -0.5 if len(self.known_collections) > 1 else 1.0
            for tag, rows in self.tag_rows.items()
        }
        # a query naming a collection (a memory store's project) scopes the tag signal to it; only
        # meaningful when there is more than one collection
        self.collection_vocabulary = TagVocabulary(
            self.known_collections if len(self.known_collections) > 1 else (),
            stopwords=self.sparse.tokenizer.stopwords,
        )
        self.dense: dict[str, DenseIndex] = {}
        for model, info in manifest.get("models", {}).items():
            path = generation / info["file"]
            try:
                if not path.is_file():
                    raise FileNotFoundError("missing")
                self.dense[model] = DenseIndex.load(path, model, ef_search=manifest["config"].get("hnsw_ef_search"))
            except Exception as error:  # noqa: BLE001 - whatever FAISS raises, the file is damaged
                raise layout.CorruptIndexError(
                    f"{path} cannot be read ({type(error).__name__}: {str(error)[:160]}); "
                    f"run `hybridlab verify --repair --index {self.index_dir}`"
                ) from None
        self.graphs: dict[str, np.ndarray] = {}
        self.dense_rows_to_index: dict[str, np.ndarray] = {}
        for model, info in manifest.get("models", {}).items():
            self.dense_rows_to_index[model] = self.rows_of(self.dense[model].ids)
            if info.get("graph"):
                path = generation / info["graph"]
                try:
                    self.graphs[model] = load_graph(path, self.dense[model].size)
                except Exception as error:  # noqa: BLE001 - unreadable or mis-shaped: damaged
                    raise layout.CorruptIndexError(
                        f"{path} cannot be read ({type(error).__name__}: {str(error)[:160]}); "
                        f"run `hybridlab verify --repair --index {self.index_dir}`"
                    ) from None
        self._filter_cache: OrderedDict[Filters, np.ndarray | None] = OrderedDict()
        self._detail_cache = None
        if self._check:
            problems = self.consistency_problems()
            if problems:
                raise layout.CorruptIndexError(
                    f"index {self.index_dir} is inconsistent: {problems[0]}"
                    f"{f' (+{len(problems) - 1} more)' if len(problems) > 1 else ''}; "
                    f"run `hybridlab verify --repair --index {self.index_dir}`"
                )

    def consistency_problems(self) -> list[str]:
        """Every chunk id in DuckDB is in BM25 and in its models' FAISS indexes, and vice versa;
        counts and models match the manifest."""
        problems = []
        generation = self.index_dir / self.manifest["path"]
        counts = self.manifest.get("counts", {})
        if counts.get("chunks") != len(self.chunk_ids):
            problems.append(f"manifest says {counts.get('chunks')} chunks, {generation / layout.STORE_FILE} has {len(self.chunk_ids)}")
        if not np.array_equal(self.sparse.chunk_ids, self.chunk_ids):
            problems.append(f"BM25 rows in {generation / layout.BM25_DIR} do not match the chunk ids in DuckDB")
        assigned = dict(self._con.execute("SELECT model, count(*) FROM chunk_vectors GROUP BY 1").fetchall())
        if set(assigned) != set(self.dense):
            problems.append(f"models in DuckDB {sorted(assigned)} differ from FAISS indexes {sorted(self.dense)}")
        for model, dense in self.dense.items():
            expected = np.asarray([r[0] for r in self._con.execute(
                "SELECT chunk_id FROM chunk_vectors WHERE model = ? ORDER BY chunk_id", [model]).fetchall()], dtype=np.int64)
            if not np.array_equal(dense.ids, expected):
                problems.append(f"FAISS ids of {model!r} ({generation / layout.dense_file(model)}) do not match DuckDB")
            if self.manifest["models"][model]["dim"] != dense.dim:
                problems.append(f"FAISS dimension of {model!r} is {dense.dim}, manifest says {self.manifest['models'][model]['dim']}")
        return problems

    def _stamp(self) -> tuple[int, int] | None:
        try:
            stat = (self.index_dir / layout.MANIFEST).stat()
            return (stat.st_mtime_ns, stat.st_ino)
        except FileNotFoundError:
            return None

    def refresh(self) -> bool:
        """Re-open if another process committed a new generation; True when it did."""
        with self._lock:
            if self._stamp() != self._manifest_stamp:
                self._load()
                return True
            return False

    def close(self) -> None:
        with self._lock:
            if self._con is not None:
                self._con.close()
                self._con = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ---------------------------------------------------------------- basics
    @property
    def n_chunks(self) -> int:
        return len(self.chunk_ids)

    @property
    def models(self) -> list[str]:
        return sorted(self.dense)

    def rows_of(self, chunk_ids: np.ndarray) -> np.ndarray:
        """Row positions of chunk ids (all must exist)."""
        return np.searchsorted(self.chunk_ids, chunk_ids)

    def encoder(self, model: str):
        """The QUERY encoder of `model`: for MiniLM its ONNX fp32 twin (same vectors, no torch
        import) unless env HYBRIDLAB_QUERY_BACKEND=torch; see `models.load_query_encoder`."""
        if model not in self._encoders:
            from hybridlab.encoders.registry import get_spec, load_query_encoder

            dim = get_spec(model).dim
            if model in self.dense and dim != self.dense[model].dim:
                raise ValueError(
                    f"model {model!r} now gives {dim}-d vectors but this index holds "
                    f"{self.dense[model].dim}-d ones; re-embed: hybridlab reindex --drop-model {model} "
                    f"(then --model {model})"
                )
            self._encoders[model] = load_query_encoder(model)
        return self._encoders[model]

    def query_vector(self, model: str, query: str) -> np.ndarray:
        """The query's embedding (an LRU cache keeps repeated queries free)."""
        key = (model, query)
        vector = self._query_vectors.get(key)
        if vector is None:
            vector = self.encoder(model).encode_queries([query])[0]
            self._query_vectors[key] = vector
            if len(self._query_vectors) > QUERY_CACHE_SIZE:
                self._query_vectors.popitem(last=False)
        else:
            self._query_vectors.move_to_end(key)
        return vector

    def encode_queries(self, model: str, queries: Sequence[str]) -> None:
        """Embed many queries at once into the query cache (faster than one by one)."""
        todo = [q for q in dict.fromkeys(queries) if (model, q) not in self._query_vectors]
        if todo:
            vectors = self.encoder(model).encode_queries(todo)
            for query, vector in zip(todo, vectors):
                self._query_vectors[(model, query)] = vector

    def choose_model(self, embedding_model: str | None, language: str | None) -> str:
        """embedding_model > language (via the index's language table) > the index's single model."""
        if embedding_model:
            from hybridlab.encoders.registry import get_spec

            name = get_spec(embedding_model).name
            if name not in self.dense:
                raise ValueError(f"the index has no vectors of {name!r}; it has {self.models}")
            return name
        if language:
            table = dict(tuple(pair) for pair in self.manifest["config"].get("model_by_language", ()))
            table.update(self.config_file.get("language_models", {}))
            if language not in table:
                raise ValueError(f"no embedding model configured for language {language!r}; "
                                 f"known languages: {sorted(table)}; or pass embedding_model")
            return self.choose_model(table[language], None)
        if len(self.dense) == 1:
            return next(iter(self.dense))
        if not self.dense:
            raise ValueError("the index has no embedding vectors; use mode='bm25'")
        raise ValueError(
            f"the index holds vectors of several models {self.models}; choose one with "
            f"embedding_model=... (CLI --embedding-model) or language=... (CLI --language)"
        )

    # ---------------------------------------------------------------- filters
    def filter_rows(self, filters: Filters) -> np.ndarray | None:
        """Boolean row mask of the chunks the filters allow (None = all), resolved in DuckDB."""
        if filters.empty:
            return None
        if filters in self._filter_cache:
            self._filter_cache.move_to_end(filters)
            return self._filter_cache[filters]
        for chunk_type in filters.chunk_types:
            if chunk_type not in self.known_chunk_types:
                raise ValueError(f"unknown chunk type {chunk_type!r}; this index has {self.known_chunk_types}")
        for collection in filters.collections:
            if collection not in self.known_collections:
                raise ValueError(f"unknown collection {collection!r}; this index has {self.known_collections}")
        sql, params = filters.sql()
        with self._lock:
            ids = np.asarray([r[0] for r in self._con.execute(sql, params).fetchall()], dtype=np.int64)
        mask = np.zeros(self.n_chunks, dtype=bool)
        mask[self.rows_of(ids)] = True
        if mask.all():  # e.g. embedding_model of a single-model index: no restriction to push down
            mask = None
        self._filter_cache[filters] = mask
        if len(self._filter_cache) > FILTER_CACHE_SIZE:
            self._filter_cache.popitem(last=False)
        return mask

    # ---------------------------------------------------------------- search
    def _resolve(self, options: Mapping[str, Any]) -> tuple[SearchConfig, dict[str, str]]:
        return resolve_search_config(options, config_file=self.config_file, n_chunks=self.n_chunks)

    def _tag_run(self, query_tags: Sequence[str], query_collections: Sequence[str], mask: np.ndarray | None,
                 depth: int, model: str | None, vector: np.ndarray | None) -> dict[int, float]:
        """Rows carrying the query's tags (or in a collection the query names), scored by how many of
        them match: + the tag's specificity (1 / sqrt(number of collections wearing it)) per matching
        tag, +1 when the chunk's collection is named. With a `vector`
        (given for rank fusion only), equal counts are ordered by the chunk's cosine similarity to the
        query (added as `0.001 * (1 + cos) / 2`, which never outweighs one more matching tag), so RRF
        does not rank them by row id; score fusions see the plain counts."""
        if not query_tags and not query_collections:
            return {}
        counts = np.zeros(self.n_chunks, dtype=np.float64)
        for tag in query_tags:
            rows = self.tag_rows.get(tag)
            if rows is not None:
                counts[rows] += self.tag_specificity[tag]
        for name in query_collections:
            counts[self.collection_rows[name]] += 1.0
        if mask is not None:
            counts[~mask] = 0.0
        rows = np.flatnonzero(counts)
        if not len(rows):
            return {}
        scores = counts[rows]
        if model is not None and vector is not None:
            ids, cosine = self.dense[model].score_ids(vector, self.chunk_ids[rows])
            similarity = np.zeros(len(rows))
            similarity[np.isin(self.chunk_ids[rows], ids)] = (1.0 + cosine) / 2.0
            scores = scores + TAG_TIEBREAK * np.clip(similarity, 0.0, 1.0)
        if len(rows) > depth:
            keep = np.lexsort((rows, -scores))[:depth]
            rows, scores = rows[keep], scores[keep]
        return dict(zip(rows.tolist(), scores.tolist()))

    def _dense_run(self, model: str, vector: np.ndarray, depth: int, mask: np.ndarray | None) -> dict[int, float]:
        dense = self.dense[model]
        allowed = None if mask is None else self.chunk_ids[mask]
        ids, scores = dense.search(vector, depth, allowed)
        return dict(zip(self.rows_of(ids).tolist(), scores.tolist()))

    def _staged_dense_run(self, model: str, vector: np.ndarray, candidate_rows: np.ndarray, depth: int,
                          mask: np.ndarray | None, config: SearchConfig) -> tuple[dict[int, float], int]:
        """Exact dense scores of the staged candidates, grown along the corpus graph by
        `expand_hops` hops from the `expand_seeds` best; the top `depth` and how many rows the
        graph added."""
        dense = self.dense[model]
        rows = dense.rows_of(self.chunk_ids[candidate_rows])  # dense rows, scored once, no id round trip
        scores = dense.vectors[rows] @ np.asarray(vector, dtype=np.float32).reshape(-1)
        graph = self.graphs.get(model)
        added = 0
        if graph is not None and config.expand_hops > 0:
            to_index = self.dense_rows_to_index[model]
            keep = None if mask is None else (lambda dense_rows: mask[to_index[dense_rows]])
            grown_rows, scores = expand_by_graph(dense.vectors, graph, vector, rows, scores, hops=config.expand_hops,
                                                 seeds=config.expand_seeds, keep=keep)
            added = len(grown_rows) - len(rows)
            rows = grown_rows
        index_rows = self.dense_rows_to_index[model][rows]
        order = np.lexsort((index_rows, -scores))[:depth]
        return dict(zip(index_rows[order].tolist(), scores[order].tolist())), added

    def _fill_dense(self, model: str, vector: np.ndarray, dense_run: dict[int, float],
                    bm25_run: dict[int, float]) -> dict[int, float]:
        """The dense run plus the exact cosine of every BM25 candidate it lacks (from stored
        vectors): such a chunk then counts with what it really scores instead of as missing."""
        missing = np.fromiter((row for row in bm25_run if row not in dense_run), np.int64)
        if not len(missing):
            return dense_run
        ids, cosine = self.dense[model].score_ids(vector, self.chunk_ids[missing])
        return {**dense_run, **dict(zip(self.rows_of(ids).tolist(), cosine.tolist()))}

    def _retrieve(self, query: str, options: Mapping[str, Any], filters: Filters,
                  boost_tags: tuple[str, ...] | None, now: datetime) -> _Outcome:
        if not isinstance(query, str) or not query.strip():
            raise ValueError("empty query: give some words to search for")
        if len(query) > MAX_QUERY_CHARS:
            raise ValueError(f"query too long: {len(query)} characters (at most {MAX_QUERY_CHARS})")
        if not query.isascii():  # lone surrogates (possible from JSON "\ud800") break the encoders
            query = query.encode("utf-8", "replace").decode("utf-8")
        embedding_model = options.pop("embedding_model", None)
        language = options.pop("language", None)
        config, sources = self._resolve(options)
        config = resolve_auto(config, self.n_chunks)
        mask = self.filter_rows(filters)
        n_allowed = self.n_chunks if mask is None else int(mask.sum())
        mode = config.mode
        needs_dense = mode == "vector" or (mode == "hybrid" and config.alpha > 0)
        model = self.choose_model(embedding_model, language) if needs_dense else None
        timings: dict[str, float] = {}
        vector = None
        if model is not None:
            started = time.perf_counter()
            vector = self.query_vector(model, query)
            timings["encode_ms"] = (time.perf_counter() - started) * 1000
        started = time.perf_counter()
        if boost_tags is None:
            match = self.tag_vocabulary.extract(query)
            query_tags, matched_terms, coverage = match.tags, match.matched_terms, match.coverage
            query_collections = self.collection_vocabulary.extract(query).tags
        else:
            query_tags, matched_terms, coverage = resolve_tags(boost_tags, self.tag_vocabulary), len(boost_tags), 1.0
            query_collections = ()
        tag_boost = config.tag_boost if matched_terms >= config.tag_boost_min_terms else 1.0
        term_ids = self.sparse.query_ids(query) if mode in {"hybrid", "bm25"} else []
        staged = config.staged and mode == "hybrid" and model is not None
        depth = min(max(config.depth, config.limit), max(n_allowed, 1))
        run_mode = "staged" if staged else "parallel"
        candidates = max(config.candidates, config.limit)  # staged: BM25 rows whose vectors are scored
        expanded = 0
        while True:
            runs: dict[str, dict[int, float]] = {}
            if mode in {"hybrid", "bm25"}:
                width = candidates if run_mode == "staged" else depth
                rows, scores = self.sparse.top(term_ids, width, mask)
                runs["bm25"] = dict(zip(rows.tolist(), scores.tolist()))
                bm25_exhausted = len(rows) < width
            if mode in {"hybrid", "tags"}:
                runs["tags"] = self._tag_run(query_tags, query_collections, mask, depth, model,
                                             vector if config.fusion == "rrf" else None)
            if run_mode == "staged" and len(runs["bm25"]) < config.fallback_threshold:
                run_mode = "fallback"
                logger.info("staged search fell back to parallel hybrid: BM25 found %d < %d hits (query %r)",
                            len(runs["bm25"]), config.fallback_threshold, query[:80])
            if run_mode == "staged":
                candidate_rows = np.union1d(np.fromiter(runs["bm25"], np.int64, len(runs["bm25"])),
                                            np.fromiter(runs["tags"], np.int64, len(runs["tags"])))
                runs["dense"], expanded = self._staged_dense_run(model, vector, candidate_rows, depth, mask, config)
                if len(runs["bm25"]) > depth:
                    runs["bm25"] = dict(list(runs["bm25"].items())[:depth])
            elif model is not None:
                runs["dense"] = self._dense_run(model, vector, depth, mask)
            if config.fill_dense and mode == "hybrid" and model is not None and runs.get("bm25"):
                runs["dense"] = self._fill_dense(model, vector, runs["dense"], runs["bm25"])
            hits, n_scored = self._combine(runs, mode, config, tag_boost * coverage, now)
            found = len(self._group(hits, config)) if config.group_by_document else len(hits)
            if found >= config.limit or (n_scored >= config.limit and config.min_score is not None):
                break
            if run_mode == "staged" and bm25_exhausted:
                # BM25 has no more candidates to offer: only a parallel search can fill `limit`
                run_mode = "fallback"
                logger.info("staged search fell back to parallel hybrid: %d results < limit %d (query %r)",
                            found, config.limit, query[:80])
                continue
            if depth >= n_allowed and (run_mode != "staged" or candidates >= n_allowed):
                break
            depth, candidates = min(depth * 4, n_allowed), min(candidates * 4, n_allowed)
        timings["search_ms"] = (time.perf_counter() - started) * 1000
        return _Outcome(hits, runs, run_mode if mode == "hybrid" else mode, config.alpha, sources["alpha"], config,
                        model, query_tags, tuple(query_collections), tag_boost, coverage, timings,
                        expanded if run_mode == "staged" else 0)

    def _combine(self, runs: dict[str, dict[int, float]], mode: str, config: SearchConfig, tag_factor: float,
                 now: datetime) -> tuple[list[_Hit], int]:
        weights = alpha_weights(config.alpha, config.tag_weight * tag_factor) if mode == "hybrid" else {}
        active = [name for name, run in runs.items() if run and weights.get(name, 0.0) > 0]
        if len(active) > 1:
            fused = fuse(config.fusion, runs, weights, rrf_k=config.rrf_k, normalization=config.normalization)
        elif mode == "hybrid":
            # one signal left (alpha 1.0 = dense only; alpha 0.0 without tags = BM25 only): its raw
            # scores, so the ranking and scores are exactly those of mode="vector" / mode="bm25"
            fused = dict(runs[active[0]]) if active else {}
        else:
            fused = dict(next(iter(runs.values()), {}))
        if not fused:
            return [], 0
        rows = np.fromiter(fused.keys(), dtype=np.int64, count=len(fused))
        scores = np.fromiter(fused.values(), dtype=np.float64, count=len(fused))
        factors = np.ones(len(rows))
        if config.decay > 0 and config.recency_weight > 0:
            days = (now.timestamp() - self.times[rows]) / 86400.0
            decayed = np.exp(-config.decay * np.clip(days, 0.0, None))
            factors = np.where(np.isnan(decayed), 1.0, decayed)
        final = scores * (1.0 - config.recency_weight + config.recency_weight * factors) if config.decay > 0 else scores
        order = np.lexsort((rows, -final))
        hits = [_Hit(int(rows[i]), float(final[i]), float(scores[i]), float(factors[i])) for i in order]
        n_scored = len(hits)
        if config.min_score is not None:
            hits = [hit for hit in hits if hit.score >= config.min_score]
        return hits, n_scored

    def _group(self, hits: list[_Hit], config: SearchConfig) -> list[_Hit]:
        """Best chunk per document, in score order."""
        seen: set[str] = set()
        grouped = []
        for hit in hits:
            doc_id = self.doc_ids[hit.row]
            if doc_id not in seen:
                seen.add(doc_id)
                grouped.append(hit)
                if len(grouped) >= config.limit:
                    break
        return grouped

    def _explain(self, hit: _Hit, outcome: _Outcome) -> dict[str, Any]:
        def rank_and_score(name: str) -> tuple[int | None, float | None]:
            run = outcome.runs.get(name) or {}
            if hit.row not in run:
                return None, None
            score = run[hit.row]
            return 1 + sum(1 for other, s in run.items() if s > score or (s == score and other < hit.row)), score

        dense_rank, dense_score = rank_and_score("dense")
        bm25_rank, bm25_score = rank_and_score("bm25")
        chunk_tags = set(self.row_tags.get(hit.row, ()))
        return {
            "dense_score": dense_score, "dense_rank": dense_rank,
            "bm25_score": bm25_score, "bm25_rank": bm25_rank,
            "matched_tags": sorted(chunk_tags & set(outcome.query_tags)),
            "query_tags": list(outcome.query_tags), "query_collections": list(outcome.query_collections),
            "matched_collection": self.collections[hit.row] in outcome.query_collections,
            "tag_score": (outcome.runs.get("tags") or {}).get(hit.row), "tag_boost": outcome.tag_boost,
            "tag_coverage": outcome.tag_coverage,
            "recency_factor": hit.recency, "fused_score": hit.fused, "final_score": hit.score,
            "fusion": outcome.config.fusion, "rrf_k": outcome.config.rrf_k,
            "normalization": outcome.config.normalization, "alpha": outcome.alpha,
            "alpha_source": outcome.alpha_source, "mode": outcome.mode, "embedding_model": outcome.model,
            "fill_dense": outcome.config.fill_dense, "decay": outcome.config.decay,
            "recency_weight": outcome.config.recency_weight,
            "staged_pool": ({"candidates": outcome.config.candidates, "graph_added": outcome.graph_added,
                             "expand_hops": outcome.config.expand_hops, "expand_seeds": outcome.config.expand_seeds,
                             "graph": outcome.model in self.graphs}
                            if outcome.mode == "staged" else None),
        }

    def search(
        self,
        query: str,
        *,
        tags: Sequence[str] | None = None,
        tags_any: bool = False,
        chunk_types: Sequence[str] | str | None = None,
        collection: Sequence[str] | str | None = None,
        since: str | datetime | None = None,
        until: str | datetime | None = None,
        embedding_model: str | None = None,
        language: str | None = None,
        now: str | datetime | None = None,
        explain: bool = False,
        **options: Any,
    ) -> list[SearchResult]:
        """Search; keyword options are any :class:`SearchConfig` field (limit, mode, alpha, fusion,
        rrf_k, depth, decay, staged, candidates, min_score, ...).

        Tags: `tags=None` extracts the index's tags named in the query (case-insensitive, `-`/`_`/space
        variants, multi-word tags, stop words dropped) and a collection the query names; chunks
        carrying them form the tag run (score: matching tags + 1 for a named collection), fused with
        weight `(1 - alpha) * tag_weight * coverage` (coverage = share of the query's non-stop words
        that named tags, 1.0 for explicit tags; x `tag_boost` when `tag_boost_min_terms`+ query words
        matched), so one incidental tag word in a long query cannot outvote the text signals. No
        match leaves a dense+BM25 search, ranked
        exactly as with `tags=[]`, which turns tag signals off. `tags=[...]` are used as given: they
        drive the tag run AND filter the results to chunks carrying all of them (any of them with
        `tags_any=True`).

        Filters (`tags`, `chunk_types` any-of, `collection`, `since`/`until` on the update date,
        `embedding_model` = chunks having vectors of that model) are resolved in DuckDB to a row set
        pushed into both retrievers, so `limit` results come back whenever `limit` chunks match.
        `min_score` applies to the final score. Unknown chunk types/collections raise ValueError.

        Recency: final = fused * (1 - recency_weight + recency_weight * exp(-decay * days)), days since
        the update relative to `now` (argument > `HYBRIDLAB_NOW` > clock). The factor only scales
        the fused score by at most `recency_weight` (20%), so it reorders near-ties (the newest of
        near-identical memories wins) but cannot bury an old document that is the only relevant one
        under irrelevant new ones, which a full multiplication by the decay factor would.
        """
        self.refresh()
        tag_list = None if tags is None else _tuple(tags)
        if tag_list and not all(isinstance(t, str) and t.strip() for t in tag_list):
            raise ValueError(f"tags must be non-empty strings, got {list(tag_list)!r}")
        vectors_of = self.choose_model(embedding_model, None) if embedding_model else None
        filters = self.make_filters(tags=resolve_tags(tag_list, self.tag_vocabulary) if tag_list else (),
                                    tags_any=tags_any, chunk_types=chunk_types, collection=collection,
                                    since=since, until=until, embedding_model=vectors_of)
        options = {**options, "embedding_model": embedding_model, "language": language}
        outcome = self._retrieve(query, options, filters, tag_list, resolve_now(now))
        hits = self._group(outcome.hits, outcome.config) if outcome.config.group_by_document else outcome.hits[: outcome.config.limit]
        self.last_timings, self.last_mode = outcome.timings, outcome.mode
        return self._hydrate(hits, outcome, query, explain)

    def make_filters(self, *, tags: Sequence[str] = (), tags_any: bool = False, chunk_types=None, collection=None,
                     since=None, until=None, embedding_model: str | None = None) -> Filters:
        return Filters(
            chunk_types=_tuple(chunk_types), tags=tuple(tags), tags_any=tags_any, collections=_tuple(collection),
            since=parse_when(since, "since"), until=parse_when(until, "until"), embedding_model=embedding_model,
        )

    def run(self, query: str, *, now: str | datetime | None = None, filters: Filters | None = None,
            tags: Sequence[str] | None = None, **options: Any) -> dict[str, float]:
        """`{doc_id: score}` for evaluation: documents ranked by their best chunk, `limit` of them."""
        options.setdefault("limit", 100)
        outcome = self._retrieve(query, dict(options), filters or Filters(), None if tags is None else _tuple(tags),
                                 resolve_now(now))
        hits = self._group(outcome.hits, outcome.config) if outcome.config.group_by_document else outcome.hits
        self.last_timings, self.last_mode = outcome.timings, outcome.mode
        return {self.doc_ids[hit.row]: hit.score for hit in hits}

    def _hydrate(self, hits: list[_Hit], outcome: _Outcome, query: str, explain: bool) -> list[SearchResult]:
        if not hits:
            return []
        chunk_ids = [int(self.chunk_ids[hit.row]) for hit in hits]
        texts, doc_tags_of, when_of = self._details()
        results = []
        for rank, (hit, chunk_id) in enumerate(zip(hits, chunk_ids), start=1):
            text, doc_tags, when = texts[hit.row], doc_tags_of[hit.row], when_of[hit.row]
            results.append(SearchResult(
                rank=rank, doc_id=self.doc_ids[hit.row], chunk_id=chunk_id, title=self.titles[hit.row],
                section=self.sections[hit.row], score=round(hit.score, 6),
                snippet=make_snippet(text, query, outcome.config.snippet_chars),
                collection=self.collections[hit.row], chunk_type=self.chunk_types[hit.row],
                tags=tuple(doc_tags or ()), updated_at=iso_utc(when),
                explain=self._explain(hit, outcome) if explain else None,
            ))
        return results

    def _details(self) -> tuple[list[str], list[tuple[str, ...]], list[datetime | None]]:
        """Chunk texts, document tags and dates by row, read from DuckDB once and kept."""
        if self._detail_cache is None:
            with self._lock:
                rows = self._con.execute(
                    "SELECT c.text, d.tags, COALESCE(d.updated_at, d.created_at) FROM chunks c "
                    "JOIN documents d USING (doc_id) ORDER BY c.chunk_id"
                ).fetchall()
            self._detail_cache = ([r[0] for r in rows], [tuple(r[1] or ()) for r in rows], [r[2] for r in rows])
        return self._detail_cache

    # ---------------------------------------------------------------- documents and stats
    def get_document(self, doc_id: str) -> dict[str, Any]:
        """The full text and metadata of one document (KeyError when absent)."""
        if not isinstance(doc_id, str) or not doc_id:
            raise ValueError("doc_id must be a non-empty string")
        self.refresh()
        with self._lock:
            row = self._con.execute(
                "SELECT doc_id, source, collection, title, text, doc_type, created_at, updated_at, metadata, tags "
                "FROM documents WHERE doc_id = ?", [doc_id]
            ).fetchone()
        if row is None:
            raise KeyError(f"no document {doc_id!r} in the index")
        keys = ("doc_id", "source", "collection", "title", "text", "doc_type", "created_at", "updated_at", "metadata", "tags")
        document = dict(zip(keys, row))
        document["metadata"] = json.loads(document["metadata"] or "{}")
        document["tags"] = list(document["tags"] or [])
        for key in ("created_at", "updated_at"):
            document[key] = iso_utc(document[key])
        return document

    def search_by_tag(self, tags: Sequence[str], *, match: str = "all", limit: int = 10) -> list[dict[str, Any]]:
        """Documents carrying all (or any) of the tags, newest first."""
        if match not in {"all", "any"}:
            raise ValueError(f"unknown match {match!r}; choose from ['all', 'any']")
        if not tags or not all(isinstance(t, str) and t.strip() for t in tags):
            raise ValueError("tags must be a non-empty list of non-empty strings")
        self.refresh()
        wanted = resolve_tags(tags, self.tag_vocabulary)
        mask = self.filter_rows(self.make_filters(tags=wanted, tags_any=match == "any"))
        rows = np.arange(self.n_chunks) if mask is None else np.flatnonzero(mask)
        order = sorted(rows.tolist(), key=lambda r: (-(0 if math.isnan(self.times[r]) else self.times[r]), self.doc_ids[r]))
        seen: dict[str, int] = {}
        for row in order:
            seen.setdefault(self.doc_ids[row], row)
            if len(seen) >= limit:
                break
        return [{"rank": i + 1, **{k: v for k, v in self.get_document(doc_id).items() if k not in {"source"}}}
                for i, doc_id in enumerate(seen)]

    def stats(self) -> dict[str, Any]:
        """Counts per collection, chunk type and model, plus the manifest's build facts."""
        self.refresh()
        with self._lock:
            counts = store.counts(self._con)
        return {
            "index": str(self.index_dir), "generation": self.manifest["generation"],
            "built_at": self.manifest["built_at"], **counts,
            "models": {m: {"dim": info["dim"], "vectors": info["vectors"], "index": info.get("index")}
                       for m, info in self.manifest.get("models", {}).items()},
            "bm25": self.manifest.get("bm25", {}), "chunking": self.manifest["config"]["chunk"],
        }


def iso_utc(value: datetime | None) -> str | None:
    """ISO-8601 with a Z for the store's naive-UTC timestamps."""
    return None if value is None else value.replace(tzinfo=None).isoformat() + "Z"


def make_snippet(text: str, query: str, width: int) -> str:
    """A window of `text` around the first query word it contains, whitespace collapsed."""
    flat = " ".join(text.split())
    if len(flat) <= width:
        return flat
    lower = flat.lower()
    positions = [lower.find(w.lower()) for w in query.split() if len(w) > 2]
    positions = [p for p in positions if p >= 0]
    start = max(0, min(positions) - width // 4) if positions else 0
    snippet = flat[start:start + width]
    return ("…" if start else "") + snippet + ("…" if start + width < len(flat) else "")


def open_index(index_dir: str | os.PathLike, config: str | os.PathLike | Mapping | None = None) -> Index:
    """Open an index folder for searching (read-only; re-opens itself after writers commit)."""
    return Index(index_dir, config)
