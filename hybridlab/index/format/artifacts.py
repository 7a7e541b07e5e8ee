"""A segment's artifacts: chunk texts embedded where the cache lacks them, BM25 postings and one
FAISS index per model written from its store."""

from __future__ import annotations

import functools
import os
import platform
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hybridlab.config import IndexConfig
from hybridlab.encoders import registry
from hybridlab.errors import InvalidValueError
from hybridlab.index.format import layout
from hybridlab.index.format.dense import DenseIndex
from hybridlab.index.format.embedding_cache import EmbeddingCache, VectorBuffer, cache_model
from hybridlab.index.format.faults import checkpoint
from hybridlab.index.format.manifest import SegmentModel
from hybridlab.index.format.report import IndexReport
from hybridlab.index.format.rows import SMALL_INSERT
from hybridlab.index.format.sparse import SparseIndex
from hybridlab.index.format.store import registered

EMBED_BATCH = 256
READ_BATCH = 20_000  # chunk ids per query when streaming chunk texts out of DuckDB


def document_batch_size(config: IndexConfig, encoder: Any) -> int:
    """Texts per encoder call: the encoder settings' (`--batch-size`, `HYBRIDLAB_BATCH_SIZE`), else the
    index config's `embed_batch_size`, else the encoder's own."""
    return registry.encoder_settings().batch_size or config.embed_batch_size or encoder.batch_size


def embed_missing(
    con,
    cache: EmbeddingCache | VectorBuffer,
    models: Sequence[str],
    report: IndexReport,
    config: IndexConfig,
    known_dims: dict[str, int],
    progress: bool,
    known_encoders: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, int]:
    """Embed every assigned chunk text not yet in the cache; returns each model's dimension.
    `known_encoders`: the encoder records of the current manifest; a model whose encoder no longer
    matches its record (`encoder_mismatch`) is refused, as a changed dimension is."""
    from tqdm.auto import tqdm

    dims: dict[str, int] = {}
    for model in models:
        spec = registry.get_spec(model)
        if model in known_dims and known_dims[model] != spec.dim:
            raise InvalidValueError(
                f"model {model!r} was indexed with dimension {known_dims[model]} but now has {spec.dim}; "
                f"drop its vectors first: hybridlab reindex --drop-model {model}"
            )
        recorded = (known_encoders or {}).get(model)
        if recorded and registry.encoder_mismatch(recorded, current := registry.encoder_record(model)):
            raise InvalidValueError(
                f"model {model!r} was indexed with encoder {recorded} but is now {current} (differs in "
                f"{registry.encoder_mismatch(recorded, current)}); give the encoder settings it was built "
                f"with again (--query-prompt, --document-prompt, --max-seq-length, --dtype or HYBRIDLAB_*), "
                f"or drop its vectors first: hybridlab reindex --drop-model {model}"
            )
        dims[model] = spec.dim
        hashes = [
            row[0]
            for row in con.execute(
                "SELECT DISTINCT embed_sha256 FROM chunk_vectors WHERE model = ?", [model]
            ).fetchall()
        ]
        key = cache_model(model)  # the current weights' vectors only (a folder's revision)
        todo = cache.missing(key, hashes, dim=spec.dim)
        report.cache_hits += len(hashes) - len(todo)
        del hashes
        if not todo:
            continue
        missing = _texts_of(con, todo)
        encoder = registry.load_document_encoder(model)
        batch_size = document_batch_size(config, encoder)
        missing.sort(key=lambda pair: len(pair[1]))
        started = time.perf_counter()
        bar = tqdm(
            total=len(missing), desc=f"embedding ({model})", unit="chunk", disable=not progress, leave=False
        )
        step = int(os.environ.get("HYBRIDLAB_EMBED_BATCH", EMBED_BATCH))  # small in fault-injection tests
        for start in range(0, len(missing), step):
            batch = missing[start : start + step]
            vectors = encoder.encode_documents([text for _, text in batch], batch_size=batch_size)
            if vectors.shape[1] != spec.dim:
                raise InvalidValueError(
                    f"model {model!r} returned dimension {vectors.shape[1]}, registry says {spec.dim}"
                )
            cache.put(key, [sha for sha, _ in batch], vectors)
            report.embedded += len(batch)
            bar.update(len(batch))
            checkpoint("embedded-batch")
        bar.close()
        report.embed_seconds += time.perf_counter() - started
    return dims


def _texts_of(con, hashes: Sequence[str]) -> list[tuple[str, str]]:
    """(sha, embed_text) of the given embedding-text hashes, one text per hash."""
    if len(hashes) <= SMALL_INSERT:  # a few: a list parameter, no registered table
        return con.execute(
            "SELECT c.embed_sha256, any_value(c.embed_text) FROM chunks c WHERE "
            "list_contains(?::VARCHAR[], c.embed_sha256) GROUP BY 1 ORDER BY 1",
            [list(hashes)],
        ).fetchall()
    with registered(con, "wanted_sha", {"sha": list(hashes)}):
        return con.execute(
            "SELECT w.sha, any_value(c.embed_text) FROM wanted_sha w "
            "JOIN chunks c ON c.embed_sha256 = w.sha GROUP BY w.sha ORDER BY w.sha"
        ).fetchall()


def _streamed_texts(con, ids: np.ndarray) -> Iterable[str]:
    """The embedding text of each chunk of `ids` (every chunk id, ascending), `READ_BATCH` ids per
    query: each query sorts one small range (one sort of all texts overruns a bounded buffer pool)."""
    step = READ_BATCH
    for start in range(0, len(ids), step):
        low, high = int(ids[start]), int(ids[min(start + step, len(ids)) - 1])
        rows = con.execute(
            "SELECT embed_text FROM chunks WHERE chunk_id BETWEEN ? AND ? ORDER BY chunk_id", [low, high]
        ).fetchall()
        for (text,) in rows:
            yield text


VectorSource = Callable[[str, dict[str, np.ndarray], int], np.ndarray]


def cache_vectors(cache: EmbeddingCache | VectorBuffer) -> VectorSource:
    """Vectors of (model, chunk_vectors rows, dim) from the embeddings cache (under `cache_model`'s key)."""

    def vectors(model: str, pairs: dict[str, np.ndarray], dim: int) -> np.ndarray:
        try:
            return cache.matrix(cache_model(model), pairs["embed_sha256"].tolist(), dim)
        except KeyError as error:
            raise RuntimeError(str(error).strip("'\"")) from None

    return vectors


def build_artifacts(
    con,
    vectors_of: VectorSource,
    folder: Path,
    config: IndexConfig,
    dims: dict[str, int],
    progress: bool = False,
) -> dict[str, SegmentModel]:
    """Write one segment's BM25 postings and one FAISS index per model into `folder` from its
    store; vectors come from `vectors_of`. Returns each model's FAISS file and vector count."""
    ids = (
        con.execute("SELECT chunk_id FROM chunks ORDER BY chunk_id").fetchnumpy()["chunk_id"].astype(np.int64)
    )
    sparse = SparseIndex.build(_streamed_texts(con, ids), ids, config.bm25, show_progress=progress)
    sparse.save(folder / layout.BM25_DIR)
    del sparse
    checkpoint("bm25-written")
    models: dict[str, SegmentModel] = {}
    for model, dim in dims.items():
        pairs = con.execute(
            "SELECT chunk_id, embed_sha256 FROM chunk_vectors WHERE model = ? ORDER BY chunk_id", [model]
        ).fetchnumpy()
        matrix = vectors_of(model, pairs, dim)
        dense = DenseIndex.build(matrix, pairs["chunk_id"].astype(np.int64), model, config.dense_index)
        del matrix  # FAISS holds its own copy
        dense.save(folder / layout.dense_file(model))
        models[model] = SegmentModel(layout.dense_file(model), len(pairs["chunk_id"]))
        checkpoint("faiss-written")
    return models


@functools.cache
def _versions() -> tuple[tuple[str, str], ...]:
    import importlib.metadata as md

    found = [("python", platform.python_version())]
    for package in ("hybridlab", "duckdb", "faiss-cpu", "bm25s", "sentence-transformers", "torch", "numpy"):
        try:
            found.append((package, md.version(package)))
        except md.PackageNotFoundError:
            pass
    return tuple(found)


def versions() -> dict[str, str]:
    """Python and the versions of the packages an index depends on (read once per process)."""
    return dict(_versions())
