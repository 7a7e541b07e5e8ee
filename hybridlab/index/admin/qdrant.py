"""The Qdrant mirror of an index, its write side: a generation exported to (or synced into) one
Qdrant collection, next to the index's other writers. The retrievers that search it are in
:mod:`hybridlab.search.qdrant` (whose docstring describes the collection, the BM25 weights and the
incremental sync).

Needs the `qdrant` extra (`pip install 'hybridlab[qdrant]'`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import math
import os
import time
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from hybridlab.errors import InvalidValueError
from hybridlab.index.format import store as index_store
from hybridlab.index.reader import Generation, read_generation

logger = logging.getLogger(__name__)

SPARSE = "bm25"
PAYLOAD_INDEXES = {
    "doc_id": "keyword",
    "collection": "keyword",
    "chunk_type": "keyword",
    "tags": "keyword",
    "time": "float",
}
BATCH = 256
MARKER = "hybridlab"  # the key of the collection metadata naming the generation it mirrors
MARKER_FORMAT = 1
TERM_INDEX = "blake2b-32"  # how a term becomes a sparse index (recorded in the marker)
SPARSE_MODES = ("folded", "idf")  # bm25s's IDF folded into the weights | Qdrant's IDF modifier
SYNC_HINT = "`hybridlab index PATHS --index DIR --backend qdrant ...` or qdrant.sync_index"
DEFAULT_SPARSE = "folded"  # exact after a sync on every engine (docs/scale-out.md#bm25-under-upserts)


def qdrant_models():
    try:
        from qdrant_client import models
    except ImportError:  # pragma: no cover - depends on the environment
        raise ImportError("the Qdrant backend needs qdrant-client: pip install 'hybridlab[qdrant]'") from None
    return models


def connect(url: str | None = None, path: str | os.PathLike | None = None) -> Any:
    """A QdrantClient for a server (`url`) or the local mode (`path`, or in memory when both are None)."""
    qdrant_models()  # the extra's message when qdrant-client is missing
    from qdrant_client import QdrantClient

    if url and path:
        raise InvalidValueError("give either a Qdrant url or a local path, not both")
    if url:
        return QdrantClient(url=url)
    return QdrantClient(path=str(path)) if path else QdrantClient(":memory:")


def is_local(client: Any) -> bool:
    """Whether `client` runs Qdrant's local mode (in process, brute force) rather than a server."""
    return type(getattr(client, "_client", None)).__name__ == "QdrantLocal"


def collection_name(generation: Generation) -> str:
    """The default collection of an index: its folder name."""
    return generation.index_dir.resolve().name


# ------------------------------------------------------------------ building (export of a local generation)
def term_index(term: str) -> int:
    """The sparse index of a term: the first 4 bytes of its blake2b digest (an unsigned 32-bit integer,
    the range of Qdrant's sparse indices), the same in every generation."""
    return int.from_bytes(hashlib.blake2b(term.encode("utf-8"), digest_size=4).digest(), "big")


def term_indices(sparse: Any) -> np.ndarray:
    """The sparse index of each bm25s vocabulary id of `sparse` (a SparseIndex), by position."""
    indices = np.zeros(len(sparse.vocab), dtype=np.int64)
    for term, position in sparse.vocab.items():
        indices[position] = term_index(term)
    return indices


def term_collisions(sparse: Any) -> int:
    """Vocabulary terms whose sparse index another term of the vocabulary already has (their weights
    would add up in Qdrant; a warning is logged when a collection is written with any)."""
    indices = term_indices(sparse)
    return int(len(indices) - len(np.unique(indices)))


def sparse_weights(
    generation: Generation, *, fold_idf: bool = True, rows: Sequence[int] | None = None
) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per row (all, or `rows`), (sparse indices, BM25 weights with the IDF folded in) from the
    index's weights (:meth:`SparseIndex.weights`); `fold_idf=False` divides the IDF back out (bm25s "lucene":
    ln(1 + (N - df + 0.5) / (df + 0.5)), Qdrant's IDF modifier formula) for a collection that applies
    Qdrant's own IDF at query time. Rows without terms map to empty arrays."""
    sparse = generation.sparse
    n = generation.n_chunks
    wanted = np.arange(n) if rows is None else np.asarray(sorted({int(r) for r in rows}), dtype=np.int64)
    empty = (np.zeros(0, np.int64), np.zeros(0, np.float32))
    if not n:
        return {int(r): empty for r in wanted}
    indices, terms, data = sparse.weights()  # rows, term ids, weights
    if not fold_idf:
        df = np.bincount(terms, minlength=len(sparse.vocab)).astype(np.float64)
        data = (data / np.log(1.0 + (n - df + 0.5) / (df + 0.5))[terms]).astype(np.float32)
    if rows is not None:
        keep = np.isin(indices, wanted)
        data, indices, terms = data[keep], indices[keep], terms[keep]
    hashed = term_indices(sparse)[terms]
    order = np.lexsort((hashed, indices))  # by row (chunk), then sparse index
    row_of, hashed, values = indices[order], hashed[order], data[order]
    bounds = np.searchsorted(row_of, np.concatenate([wanted, [n]]))
    out = {}
    for i, row in enumerate(wanted.tolist()):
        h, v = hashed[bounds[i] : bounds[i + 1]], values[bounds[i] : bounds[i + 1]]
        if len(h) > 1 and np.any(h[1:] == h[:-1]):  # two terms of the chunk share a hash: their weights add
            h, first = np.unique(h, return_index=True)
            v = np.add.reduceat(v, first).astype(np.float32)
        out[row] = (h, v)
    return out


def _document_hashes(generation: Generation) -> dict[str, str]:
    """`{doc_id: content sha256}` of the generation's documents (from its store)."""
    with generation.store.connection() as con:
        return {doc_id: sha for doc_id, (_, sha) in index_store.document_hashes(con).items()}


def _sparse_vector(weights: tuple[np.ndarray, np.ndarray], mode: str) -> Any | None:
    """The point's `bm25` vector; under the IDF modifier every point carries one (an empty one for a
    chunk without terms), since Qdrant's N counts the points that have the vector and bm25s's N is
    every chunk."""
    terms, values = weights
    if not len(terms) and mode != "idf":
        return None
    return qdrant_models().SparseVector(indices=terms.tolist(), values=values.astype(float).tolist())


def _points(
    generation: Generation,
    rows: Sequence[int],
    weights: Mapping[int, tuple[np.ndarray, np.ndarray]],
    hashes: Mapping[str, str],
    mode: str,
) -> list[Any]:
    models = qdrant_models()
    vectors_of = {}
    for model, dense in generation.dense.items():
        positions = np.full(generation.n_chunks, -1, dtype=np.int64)
        positions[generation.dense_rows_to_index[model]] = np.arange(
            len(generation.dense_rows_to_index[model])
        )
        vectors_of[model] = (positions, dense.vectors)
    points = []
    for row in rows:
        doc_id = generation.doc_ids[row]
        payload: dict[str, Any] = {
            "doc_id": doc_id,
            "doc_sha256": hashes.get(doc_id, ""),
            "collection": generation.collections[row],
            "chunk_type": generation.chunk_types[row],
            "tags": list(generation.row_tags.get(row, ())),
        }
        time_ = float(generation.times[row])
        if not math.isnan(time_):
            payload["time"] = time_
        vector: dict[str, Any] = {}
        sparse_vector = _sparse_vector(weights[row], mode)
        if sparse_vector is not None:
            vector[SPARSE] = sparse_vector
        for model, (positions, vectors) in vectors_of.items():
            if positions[row] >= 0:
                vector[model] = vectors[positions[row]].astype(float).tolist()
        points.append(models.PointStruct(id=int(generation.chunk_ids[row]), vector=vector, payload=payload))
    return points


def _config_digest(generation: Generation) -> str:
    """sha256 of the index configuration the generation was built with (chunking, BM25, models)."""
    config = json.dumps(dict(generation.manifest.config), sort_keys=True, default=str)
    return hashlib.sha256(config.encode("utf-8")).hexdigest()


def _marker(generation: Generation, mode: str) -> dict[str, Any]:
    return {
        "format": MARKER_FORMAT,
        "generation": generation.number,
        "index": generation.index_dir.resolve().name,
        "config_sha256": _config_digest(generation),
        "sparse": mode,
        "term_index": TERM_INDEX,
        "models": {model: dense.dim for model, dense in generation.dense.items()},
        "chunks": generation.n_chunks,
    }


def mirror_marker(client: Any, collection: str) -> dict[str, Any] | None:
    """What the collection mirrors (the marker in its metadata: generation, config digest, sparse
    mode, models), None when it has none or does not exist."""
    if not client.collection_exists(collection):
        return None
    metadata = getattr(client.get_collection(collection).config, "metadata", None) or {}
    marker = metadata.get(MARKER)
    return dict(marker) if isinstance(marker, Mapping) else None


def _check_mode(generation: Generation, mode: str) -> None:
    if mode not in SPARSE_MODES:
        raise InvalidValueError(f"unknown sparse mode {mode!r}; choose from {sorted(SPARSE_MODES)}")
    method = generation.sparse.tokenizer.config.method
    if mode == "idf" and method != "lucene":
        raise InvalidValueError(
            f"Qdrant's IDF modifier is the lucene IDF; this index's BM25 is {method!r}: export "
            "with the IDF folded in (idf_modifier=False)"
        )


def export_generation(
    generation: Generation,
    client: Any,
    collection: str | None = None,
    *,
    idf_modifier: bool = False,
    shard_number: int | None = None,
    replication_factor: int | None = None,
) -> str:
    """Write a local generation into a fresh Qdrant collection (dropped first if present), marked as
    its mirror; its name. `idf_modifier=True` stores IDF-free weights and lets Qdrant apply its IDF
    modifier (compared in :mod:`bench.qdrant`; the default folds bm25s's IDF into the
    weights); `shard_number` and `replication_factor` are passed to a server cluster's `create_collection`."""
    models = qdrant_models()
    mode = "idf" if idf_modifier else "folded"
    _check_mode(generation, mode)
    collisions = term_collisions(generation.sparse)
    if collisions:
        logger.warning(
            "%d terms of %s share a 32-bit sparse index with another term: their BM25 weights add up "
            "in Qdrant",
            collisions,
            generation.index_dir,
        )
    collection = collection or collection_name(generation)
    if client.collection_exists(collection):
        client.delete_collection(collection)
    client.create_collection(
        collection,
        vectors_config={
            model: models.VectorParams(size=dense.dim, distance=models.Distance.DOT)
            for model, dense in generation.dense.items()
        },
        sparse_vectors_config={
            SPARSE: models.SparseVectorParams(modifier=models.Modifier.IDF if idf_modifier else None)
        },
        shard_number=shard_number,
        replication_factor=replication_factor,
    )
    with warnings.catch_warnings():  # the local mode says payload indexes have no effect there
        warnings.simplefilter("ignore", UserWarning)
        for field, schema in PAYLOAD_INDEXES.items():
            client.create_payload_index(collection, field, field_schema=schema)
    _upsert_rows(generation, client, collection, range(generation.n_chunks), mode)
    client.update_collection(collection, metadata={MARKER: _marker(generation, mode)})
    return collection


@contextlib.contextmanager
def _live_generation(index_dir: str | os.PathLike) -> Iterator[Generation]:
    generation = read_generation(index_dir)
    try:
        yield generation
    finally:
        generation.store.close()


def export_index(
    index_dir: str | os.PathLike, client: Any, collection: str | None = None, *, idf_modifier: bool = False
) -> str:
    """Export the live generation of `index_dir` (see :func:`export_generation`); the collection's name."""
    with _live_generation(index_dir) as generation:
        return export_generation(generation, client, collection, idf_modifier=idf_modifier)


def _upsert_rows(generation: Generation, client: Any, collection: str, rows: Iterable[int], mode: str) -> int:
    rows = list(rows)
    weights = sparse_weights(generation, fold_idf=mode == "folded", rows=rows)
    hashes = _document_hashes(generation)
    for start in range(0, len(rows), BATCH):
        client.upsert(
            collection,
            points=_points(generation, rows[start : start + BATCH], weights, hashes, mode),
            wait=True,
        )
    return len(rows)


def reweight_rows(
    generation: Generation, client: Any, collection: str, rows: Iterable[int], mode: str
) -> int:
    """Rewrite only the sparse vectors of `rows` with the generation's BM25 weights (dense vectors and
    payload untouched); rows written."""
    models = qdrant_models()
    rows = list(rows)
    weights = sparse_weights(generation, fold_idf=mode == "folded", rows=rows)
    written = 0
    for start in range(0, len(rows), BATCH):
        points = [
            models.PointVectors(id=int(generation.chunk_ids[row]), vector={SPARSE: vector})
            for row in rows[start : start + BATCH]
            if (vector := _sparse_vector(weights[row], mode)) is not None
        ]
        if points:
            client.update_vectors(collection, points=points, wait=True)
            written += len(points)
    return written


def _collection_mode(client: Any, collection: str) -> str:
    sparse = client.get_collection(collection).config.params.sparse_vectors or {}
    modifier = getattr(sparse.get(SPARSE), "modifier", None)
    return "idf" if modifier == qdrant_models().Modifier.IDF else "folded"


def delete_documents(client: Any, collection: str, doc_ids: Sequence[str]) -> None:
    """Delete every chunk of the documents `doc_ids` (a payload filter on `doc_id`)."""
    models, doc_ids = qdrant_models(), list(doc_ids)
    for start in range(0, len(doc_ids), BATCH):
        batch = models.FieldCondition(key="doc_id", match=models.MatchAny(any=doc_ids[start : start + BATCH]))
        points = models.FilterSelector(filter=models.Filter(must=[batch]))
        client.delete(collection, points_selector=points, wait=True)


def upsert_documents(generation: Generation, client: Any, collection: str, doc_ids: Sequence[str]) -> int:
    """Replace the documents `doc_ids` in the collection by their chunks in `generation` (a newer local
    generation); documents absent from it are deleted. Chunks upserted. The other chunks keep the BM25
    statistics of their last write: :func:`sync_generation` re-weights them too."""
    delete_documents(client, collection, doc_ids)
    wanted = set(doc_ids)
    return _upsert_rows(
        generation,
        client,
        collection,
        [row for row, doc_id in enumerate(generation.doc_ids) if doc_id in wanted],
        _collection_mode(client, collection),
    )


def _scroll(client: Any, collection: str, with_payload: Any) -> Iterator[Any]:
    """Every point of the collection (`with_payload` as `client.scroll` takes it; no vectors)."""
    offset = None
    while True:
        points, offset = client.scroll(
            collection, limit=1024, offset=offset, with_payload=with_payload, with_vectors=False
        )
        yield from points
        if offset is None:
            return


def point_ids(client: Any, collection: str) -> np.ndarray:
    """Every point id of the collection, ascending (a scroll)."""
    return np.sort(np.asarray([int(p.id) for p in _scroll(client, collection, False)], dtype=np.int64))


def _collection_documents(client: Any, collection: str) -> tuple[dict[str, str], dict[str, list[int]]]:
    """`{doc_id: doc_sha256}` and `{doc_id: [point ids]}` of what the collection holds (a payload scroll)."""
    hashes: dict[str, str] = {}
    points_of: dict[str, list[int]] = {}
    for point in _scroll(client, collection, ["doc_id", "doc_sha256"]):
        payload = point.payload or {}
        doc_id = str(payload.get("doc_id"))
        hashes[doc_id] = str(payload.get("doc_sha256", ""))
        points_of.setdefault(doc_id, []).append(int(point.id))
    return hashes, points_of


@dataclasses.dataclass(frozen=True)
class SyncReport:
    """What :func:`sync_generation` did."""

    collection: str
    generation: int
    action: str  # "full" | "incremental" | "unchanged"
    reason: str
    upserted_documents: int = 0
    deleted_documents: int = 0
    points_upserted: int = 0
    points_reweighted: int = 0
    seconds: float = 0.0

    def summary(self) -> str:
        if self.action == "full":
            return (
                f"Qdrant collection {self.collection!r}: full export of generation {self.generation} "
                f"({self.points_upserted} points; {self.reason}) in {self.seconds:.1f}s"
            )
        if self.action == "unchanged":
            return f"Qdrant collection {self.collection!r} already mirrors generation {self.generation}"
        return (
            f"Qdrant collection {self.collection!r} -> generation {self.generation}: {self.upserted_documents} "
            f"documents upserted ({self.points_upserted} points), {self.deleted_documents} deleted, "
            f"{self.points_reweighted} points re-weighted, in {self.seconds:.1f}s"
        )


def _incompatibility(generation: Generation, marker: dict[str, Any] | None, mode: str) -> str | None:
    """Why the collection cannot be synced incrementally (None: it can)."""
    if marker is None:
        return "no hybridlab marker (new collection, or exported before markers)"
    if marker.get("format") != MARKER_FORMAT or marker.get("term_index") != TERM_INDEX:
        return "exported by another format"
    if marker.get("config_sha256") != _config_digest(generation):
        return "exported with another index configuration"
    if marker.get("models") != {model: dense.dim for model, dense in generation.dense.items()}:
        return "exported with other embedding models"
    if marker.get("sparse") != mode:
        return f"its sparse vectors are {marker.get('sparse')!r}, not {mode!r}"
    return None


def _sync_mode(marker: dict[str, Any] | None, idf_modifier: bool | None) -> str:
    """The sparse mode to sync in: the collection's recorded one (`idf_modifier=None`; the default
    when it records none), else "idf" or "folded" as asked."""
    if idf_modifier is None:
        recorded = (marker or {}).get("sparse")
        return recorded if isinstance(recorded, str) and recorded in SPARSE_MODES else DEFAULT_SPARSE
    return "idf" if idf_modifier else "folded"


@dataclasses.dataclass(frozen=True)
class _DocumentDiff:
    """How a generation's documents differ from a collection's: the `changed` (or new) and `removed`
    doc ids, sorted, and the `kept` ones (same content hash) with their generation rows, `kept_rows`;
    `rows_of`: each document's rows in the generation."""

    rows_of: dict[str, list[int]]
    changed: list[str]
    removed: list[str]
    kept: list[str]
    kept_rows: list[int]

    @classmethod
    def of(cls, generation: Generation, held: Mapping[str, str]) -> _DocumentDiff:
        """The diff of `generation` against `held` (`{doc_id: doc_sha256}` of the collection)."""
        wanted = _document_hashes(generation)
        rows_of: dict[str, list[int]] = {}
        for row, doc_id in enumerate(generation.doc_ids):
            rows_of.setdefault(doc_id, []).append(row)
        changed = sorted(doc_id for doc_id in rows_of if held.get(doc_id) != wanted.get(doc_id))
        removed = sorted(doc_id for doc_id in held if doc_id not in rows_of)
        changed_set = set(changed)
        kept = [doc_id for doc_id in rows_of if doc_id in held and doc_id not in changed_set]
        kept_rows = [row for doc_id in kept for row in rows_of[doc_id]]
        return cls(rows_of, changed, removed, kept, kept_rows)

    def kept_points_match(self, generation: Generation, points_of: Mapping[str, list[int]]) -> bool:
        """Whether the kept documents' points in the collection are exactly their chunks here."""
        return sorted(p for doc_id in self.kept for p in points_of[doc_id]) == sorted(
            int(generation.chunk_ids[r]) for r in self.kept_rows
        )


def _full_export(
    generation: Generation, client: Any, collection: str, mode: str, why: str, started: float
) -> SyncReport:
    """Export the whole generation into the collection (recreated) in sparse `mode`, for `why`."""
    export_generation(generation, client, collection, idf_modifier=mode == "idf")
    return SyncReport(
        collection,
        generation.number,
        "full",
        why,
        upserted_documents=len(set(generation.doc_ids)),
        points_upserted=generation.n_chunks,
        seconds=time.perf_counter() - started,
    )


def sync_generation(
    generation: Generation,
    client: Any,
    collection: str | None = None,
    *,
    idf_modifier: bool | None = None,
    reweight: bool = True,
) -> SyncReport:
    """Make the collection mirror `generation`: a full export when it is new or incompatible (another
    index configuration, model set or sparse mode; `idf_modifier=None` keeps the collection's mode),
    else upsert the documents whose content hash changed or that are new, delete the removed ones by
    doc id, and (`reweight`) rewrite the other points' sparse vectors with the new BM25 statistics so
    the collection ranks exactly like bm25s over the generation. The marker records the generation."""
    started = time.perf_counter()
    collection = collection or collection_name(generation)
    marker = mirror_marker(client, collection)
    mode = _sync_mode(marker, idf_modifier)
    _check_mode(generation, mode)
    reason = (
        _incompatibility(generation, marker, mode)
        if client.collection_exists(collection)
        else "new collection"
    )
    if reason is not None:
        return _full_export(generation, client, collection, mode, reason, started)
    assert marker is not None  # `_incompatibility` finds none only with a marker
    held, points_of = _collection_documents(client, collection)
    diff = _DocumentDiff.of(generation, held)
    changed, removed = diff.changed, diff.removed
    if not diff.kept_points_match(generation, points_of):
        why = "the unchanged documents' chunks differ from the collection's points"
        return _full_export(generation, client, collection, mode, why, started)
    if not changed and not removed and marker.get("generation") == generation.number:
        return SyncReport(
            collection, generation.number, "unchanged", "", seconds=time.perf_counter() - started
        )
    delete_documents(client, collection, [*removed, *(d for d in changed if d in held)])
    upserted = _upsert_rows(
        generation, client, collection, [row for d in changed for row in diff.rows_of[d]], mode
    )
    reweighted = (
        reweight_rows(generation, client, collection, diff.kept_rows, mode)
        if reweight and (changed or removed)
        else 0
    )
    client.update_collection(collection, metadata={MARKER: _marker(generation, mode)})
    return SyncReport(
        collection,
        generation.number,
        "incremental",
        "",
        upserted_documents=len(changed),
        deleted_documents=len(removed),
        points_upserted=upserted,
        points_reweighted=reweighted,
        seconds=time.perf_counter() - started,
    )


def sync_index(
    index_dir: str | os.PathLike, client: Any, collection: str | None = None, **options: Any
) -> SyncReport:
    """:func:`sync_generation` of the live generation of `index_dir`."""
    with _live_generation(index_dir) as generation:
        return sync_generation(generation, client, collection, **options)


# ------------------------------------------------------------------ filters
