"""Vectors computed elsewhere (another machine, another encoder runtime): a vectors file read, checked
and handed to a build, so an index can be built where no encoder runs.
See docs/internals/index.md#vectors_import."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

from hybridlab.encoders.registry import external_spec, get_spec, register_external, register_recorded
from hybridlab.errors import InvalidValueError, PathNotFoundError
from hybridlab.index.format import layout
from hybridlab.index.format.embedding_cache import cache_model

__all__ = ["BY", "import_hook", "import_step", "read_vectors", "vectors_by_id"]

BY = ("document", "chunk")


def _sidecar_ids(path: Path) -> list[str]:
    for suffix, parse in ((".ids.txt", lambda text: text.splitlines()), (".ids.json", json.loads)):
        sidecar = path.with_name(path.name[: -len(".npy")] + suffix)
        if sidecar.exists():
            return [str(i) for i in parse(sidecar.read_text(encoding="utf-8"))]
    raise PathNotFoundError(f"{path}: no ids file beside it ({path.stem}.ids.txt or {path.stem}.ids.json)")


def read_vectors(path: str | Path) -> tuple[list[str], np.ndarray]:
    """(ids, L2-normalised float32 `(n, dim)` vectors) of a Parquet or `.npy` vectors file (dim = the
    first row's); ValueError naming the first bad row."""
    path = Path(path)
    if not path.exists():
        raise PathNotFoundError(f"vectors file not found: {path}")
    if path.suffix == ".npy":
        matrix = np.load(path, allow_pickle=False)
        if matrix.ndim != 2:
            raise InvalidValueError(f"{path}: expected a 2-d array (rows, dim), got shape {matrix.shape}")
        ids = _sidecar_ids(path)
        if len(ids) != len(matrix):
            raise InvalidValueError(f"{path}: {len(matrix)} vectors but {len(ids)} ids")
        rows = list(matrix)
    else:
        try:
            table = (
                duckdb.connect()
                .execute("SELECT id::VARCHAR AS id, vector FROM read_parquet(?)", [str(path)])
                .fetchnumpy()
            )
        except duckdb.Error as error:
            raise InvalidValueError(
                f"{path}: not a Parquet file with columns id and vector: {error}"
            ) from None
        ids, rows = [str(i) for i in table["id"]], list(table["vector"])
    if not rows:
        raise InvalidValueError(f"{path}: no vectors")
    dim, seen = len(rows[0]), set()
    for row, (key, vector) in enumerate(zip(ids, rows, strict=True)):
        values = np.asarray(vector if vector is not None else [], dtype=np.float64)
        problem = (
            f"{len(values)} values, expected {dim} (the first row's)"
            if len(values) != dim
            else "a value that is not finite (NaN or inf)"
            if not np.isfinite(values).all()
            else "an all-zero vector"
            if not values.any()
            else "an id given before"
            if key in seen
            else ""
        )
        if problem:
            raise InvalidValueError(f"{path}: row {row} (id {key!r}) has {problem}")
        seen.add(key)
    matrix = np.asarray(np.stack(rows), dtype=np.float32)
    return ids, np.ascontiguousarray(matrix / np.linalg.norm(matrix, axis=1, keepdims=True), dtype=np.float32)


def vectors_by_id(path: str | Path, wanted: list[str], what: str = "query") -> dict[str, np.ndarray]:
    """The vector of each of `wanted` (query ids) from a vectors file; ValueError naming the first
    missing one. Ids of the file that are not wanted are ignored (another split's queries)."""
    ids, matrix = read_vectors(path)
    row_of = {key: row for row, key in enumerate(ids)}
    missing = [key for key in wanted if key not in row_of]
    if missing:
        raise InvalidValueError(
            f"{path}: no vector for {what} {missing[0]!r} ({len(missing)} of {len(wanted)} lack one)"
        )
    return {key: matrix[row_of[key]] for key in wanted}


def import_hook(
    path: str | Path, ids: list[str], vectors: np.ndarray, model: str, by: str = "document"
) -> Callable[[Any, Any], int]:
    """A build step (`apply_changes(imported=...)`) that matches the file's rows to the chunks of
    `model` in the segment being built (`con`) and puts their vectors into the embeddings cache under
    the chunks' text hashes; returns the number of vectors put (distinct texts). Raises ValueError (the
    build then commits nothing) at the first unknown id, a document of several chunks, or a chunk
    left without a vector."""
    if by not in BY:
        raise InvalidValueError(f"unknown vectors id kind {by!r}; choose from {list(BY)}")

    def put(con, cache) -> int:
        chunks = con.execute(
            "SELECT c.chunk_id::VARCHAR, c.doc_id, v.embed_sha256 FROM chunk_vectors v JOIN chunks c USING (chunk_id) "
            "WHERE v.model = ? ORDER BY c.chunk_id",
            [model],
        ).fetchall()
        sha_of, several = {}, set()
        for chunk_id, doc_id, sha in chunks:
            key = chunk_id if by == "chunk" else doc_id
            if key in sha_of:
                several.add(key)
            sha_of[key] = sha
        for row, key in enumerate(ids):
            if key not in sha_of:
                raise InvalidValueError(
                    f"{path}: row {row} (id {key!r}) is not a {by} id of the index"
                    + (" (chunk ids are the index's integer chunk_id)" if by == "chunk" else "")
                )
            if key in several:
                raise InvalidValueError(
                    f"{path}: row {row} (id {key!r}) is a document of several chunks; give chunk "
                    f"vectors (--vectors-by chunk) or index with a --chunk-size that keeps it whole"
                )
        given = set(ids)
        missing = [key for key in sha_of if key not in given]
        if missing:
            raise InvalidValueError(
                f"{path}: no vector for {by} {missing[0]!r} ({len(missing)} of the index's "
                f"{len(sha_of)} {by}s of {model!r} lack one)"
            )
        cache.put(cache_model(model), [sha_of[key] for key in ids], vectors, replace=True)
        return len({sha_of[key] for key in ids})

    return put


def import_step(
    path: str | Path, model: str, index_dir: str | Path, by: str = "document", **given: Any
) -> Callable[[Any, Any], int]:
    """The build step importing vectors file `path` as model `model`'s (`import_hook`). A model that
    loads here (preset, folder, cached hub id) keeps its own spec and the file must have its
    dimension; any other name gets an external spec (`registry.external_spec`: the file's dimension,
    the rest from `given` spec fields, e.g. query_prefix, else "external"), or the one `index_dir`
    recorded for it."""
    if (Path(index_dir) / layout.MANIFEST).exists():
        register_recorded(layout.read_manifest(Path(index_dir)).encoders)
    ids, vectors = read_vectors(path)
    try:
        spec = get_spec(model)
    except (ValueError, ImportError):  # not a model that loads here: vectors made elsewhere
        spec = external_spec(model, vectors.shape[1], **{k: v for k, v in given.items() if v is not None})
        register_external(spec)
    if spec.dim != vectors.shape[1]:
        raise InvalidValueError(
            f"{path} holds {vectors.shape[1]}-d vectors but model {model!r} gives {spec.dim}-d ones"
        )
    return import_hook(path, ids, vectors, spec.name, by)
