"""The query-side models one search uses, owned by one object the pipeline is given.
See docs/internals/search.md#query-models.

Dense query encoders, the cross-encoders of the rerank step, the late-interaction scorers of the
second stage, the learned fusion models and the query-vector cache: each loaded on first use and
kept for the life of the opened index. The pipeline asks this object, never the `Index`, so a search
enters the pipeline once and runs there to its end.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from hybridlab.encoders.cross_encoder import load_reranker
from hybridlab.encoders.late import canonical_late_name, get_late_spec, load_late_encoder
from hybridlab.encoders.registry import check_query_encoder, get_spec, load_query_encoder, register_recorded
from hybridlab.errors import InvalidValueError
from hybridlab.index.format.lru import LruCache
from hybridlab.index.format.tokens import TokenStore, store_folder
from hybridlab.search.late import LateScorer
from hybridlab.search.learned import Ranker, load_ranker, model_path
from hybridlab.search.snapshot import Snapshot

QUERY_CACHE_SIZE = 4096


class QueryModels:
    """Every model a query meets, loaded once per opened index (thread-safe: one lock guards loads
    and encodes, since HF tokenizers fail when two threads use one)."""

    def __init__(self) -> None:
        self._encoders: dict[str, Any] = {}
        self._rerankers: dict[str, Any] = {}
        self._rankers: dict[str, Ranker] = {}
        self._late: dict[tuple[str, str], LateScorer] = {}
        self._lock = threading.RLock()
        self._query_vectors: LruCache[tuple[str, str], np.ndarray] = LruCache(QUERY_CACHE_SIZE)
        self._late_queries: LruCache[tuple[str, str], np.ndarray] = LruCache(QUERY_CACHE_SIZE)

    # ---------------------------------------------------------------- dense query encoders
    def encoder(self, snapshot: Snapshot, model: str) -> Any:
        """The QUERY encoder of `model`: for MiniLM its ONNX fp32 twin (same vectors, no torch
        import) unless env HYBRIDLAB_QUERY_BACKEND=torch; see `models.load_query_encoder`. Refused
        when the model's encoder no longer matches the one the manifest records."""
        encoder = self._encoders.get(model)
        if encoder is not None:
            return encoder
        with self._lock:
            if model not in self._encoders:
                manifest = snapshot.generation.manifest
                register_recorded(manifest.encoders)  # imported vectors
                dim = get_spec(model).dim
                dense = snapshot.dense.get(model)
                if dense is not None and dim != dense.dim:
                    raise InvalidValueError(
                        f"model {model!r} now gives {dim}-d vectors but this index holds "
                        f"{dense.dim}-d ones; re-embed: hybridlab reindex --drop-model {model} "
                        f"(then --model {model})"
                    )
                recorded = manifest.encoders.get(model)
                if recorded:
                    check_query_encoder(model, recorded)
                self._encoders[model] = load_query_encoder(
                    model, overrides=(recorded or {}).get("settings") or {}
                )
            return self._encoders[model]

    def _encode(self, snapshot: Snapshot, model: str, queries: list[str]) -> np.ndarray:
        encoder = self.encoder(snapshot, model)
        with self._lock:
            return encoder.encode_queries(queries)

    def query_vector(self, snapshot: Snapshot, model: str, query: str) -> np.ndarray:
        """The query's embedding (an LRU cache keeps repeated queries free)."""
        return self._query_vectors.get_or_compute(
            (model, query), lambda: self._encode(snapshot, model, [query])[0]
        )

    def encode_queries(self, snapshot: Snapshot, model: str, queries: Sequence[str]) -> None:
        """Embed many queries at once into the query cache (faster than one by one)."""
        todo = [query for _, query in self._query_vectors.missing((model, q) for q in queries)]
        if todo:
            self._query_vectors.put_many(zip(((model, q) for q in todo), self._encode(snapshot, model, todo)))

    def put_query_vectors(self, model: str, vectors: Mapping[str, np.ndarray]) -> None:
        """Use these vectors (query text -> vector) for `model`'s queries; all kept while used."""
        self._query_vectors.put_many(
            ((model, query), np.asarray(vector, dtype=np.float32)) for query, vector in vectors.items()
        )

    # ---------------------------------------------------------------- learned fusion
    def learned_ranker(self, setting: str) -> Ranker:
        """The learned fusion model of a `learned_model` setting."""
        with self._lock:
            if setting not in self._rankers:
                self._rankers[setting] = load_ranker(model_path(setting))
            return self._rankers[setting]

    # ---------------------------------------------------------------- rerank (cross-encoder)
    def rerank_scores(self, model: str, query: str, passages: list[str]) -> np.ndarray:
        """Cross-encoder scores of (query, passage) pairs, one per passage."""
        if model not in self._rerankers:
            with self._lock:
                if model not in self._rerankers:
                    self._rerankers[model] = load_reranker(model)
        return self._rerankers[model].score(query, passages)

    # ---------------------------------------------------------------- late interaction
    def late_scorer(self, snapshot: Snapshot, name: str) -> LateScorer:
        """The second stage's scorer of late-interaction model `name` over this index's token store.
        The spec recorded in the manifest must equal the model's current one: vectors of two specs
        are never compared (another spec's store is simply another folder)."""
        name = canonical_late_name(name)
        index_dir = str(snapshot.generation.index_dir)
        scorer = self._late.get((index_dir, name))
        if scorer is not None:
            return scorer
        with self._lock:
            if (index_dir, name) not in self._late:
                spec = get_late_spec(name)
                recorded = snapshot.generation.manifest.late.get(name)
                if recorded is not None and recorded.get("key", spec.key) != spec.key:
                    raise InvalidValueError(
                        f"late-interaction model {name!r} was indexed with spec {recorded} but is now "
                        f"{spec.to_json()}; rebuild its token vectors: hybridlab verify --repair",
                        field="late_model",
                    )
                store = TokenStore(store_folder(index_dir, spec.key), spec.to_json())
                self._late[(index_dir, name)] = LateScorer(spec, store, lambda: load_late_encoder(spec))
            return self._late[(index_dir, name)]

    def warm_late(self, snapshot: Snapshot, queries: Sequence[str]) -> None:
        """Load the query encoder of every late-interaction model the index stores and encode
        `queries` with it, so the first search's second stage does not wait for the load."""
        for name in snapshot.generation.manifest.late:
            scorer = self.late_scorer(snapshot, name)
            for query in queries:
                self.late_query(scorer, query)

    def late_query(self, scorer: LateScorer, query: str) -> np.ndarray:
        """The query's token vectors (cached like dense query vectors)."""
        return self._late_queries.get_or_compute(
            (scorer.spec.key, query), lambda: scorer.query_vectors(query)
        )
