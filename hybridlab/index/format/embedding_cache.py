"""Embeddings cache: vectors keyed by (model, sha256 of the exact text embedded), in DuckDB.
See docs/internals/index.md#embedding_cache."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from hybridlab.encoders.registry import MODELS, get_spec, settings_changes
from hybridlab.index.format.store import IndexError_, connect, registered


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def hashed_text(sha: str | None, text: str) -> tuple[str, str]:
    """(sha256, text) of a chunk's embedded text: its stored `embed_sha256`, or the hash computed for a
    store written before the hash was kept."""
    return (sha or text_sha256(text), text)


def cache_model(model: str) -> str:
    """The embeddings cache's key of model `model`: a registry preset's name as it is (existing
    caches stay valid); any other model's name with its spec revision (sha256 of a folder's weight,
    config and tokenizer files, or the hub commit) as `name@revision`, or its name when it has none;
    then `#` and a hash of the document prompt, max length and dtype when the encoder settings
    change them (`hybridlab.config.EncoderSettings`): other vectors, kept apart."""
    spec = get_spec(model)
    key = model if spec.name in MODELS or not spec.revision else f"{model}@{spec.revision}"
    changed = {field: value for field, value in settings_changes(model).items() if field != "query_prefix"}
    if not changed:
        return key
    return f"{key}#{hashlib.sha256(json.dumps(changed, sort_keys=True).encode()).hexdigest()[:12]}"


def _connect_patiently(path: Path, read_only: bool, wait_seconds: float = 120.0):
    """Open the cache, waiting while another process (a parallel sweep worker) holds it."""
    deadline = time.monotonic() + wait_seconds
    while True:
        try:
            return connect(path, read_only=read_only)
        except IndexError_:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


class EmbeddingCache:
    """Read and add vectors by (model, text hash). One writer process at a time (the index lock)."""

    def __init__(self, path: Path, read_only: bool = False) -> None:
        self.path = Path(path)
        self.read_only = read_only
        if read_only and not self.path.exists():
            self.con = None
            return
        if not read_only:
            self.path.parent.mkdir(parents=True, exist_ok=True)  # a user-level cache's first use
        self.con = _connect_patiently(self.path, read_only)
        if not read_only:
            self.con.execute(
                "CREATE TABLE IF NOT EXISTS embeddings (model VARCHAR NOT NULL, sha256 VARCHAR NOT NULL, "
                "dim INTEGER NOT NULL, vector BLOB NOT NULL)"
            )

    def close(self) -> None:
        if self.con is not None:
            self.con.close()
            self.con = None

    def get(self, model: str, hashes: Sequence[str], dim: int | None = None) -> dict[str, np.ndarray]:
        """Cached vectors of the given hashes (missing ones are absent from the result)."""
        if self.con is None or not hashes:
            return {}
        with registered(self.con, "wanted", {"sha256": list(dict.fromkeys(hashes))}):
            rows = self.con.execute(
                "SELECT e.sha256, e.dim, e.vector FROM embeddings e JOIN wanted w "
                "USING (sha256) WHERE e.model = ?",
                [model],
            ).fetchall()
        found = {}
        for sha, row_dim, blob in rows:
            if dim is not None and row_dim != dim:
                continue
            found[sha] = np.frombuffer(blob, dtype=np.float32)
        return found

    def missing(self, model: str, hashes: Sequence[str], dim: int | None = None) -> list[str]:
        """The given hashes that have no cached vector (of `dim`), in first-seen order; reads no vectors."""
        wanted = list(dict.fromkeys(hashes))
        if self.con is None or not wanted:
            return wanted
        with registered(self.con, "wanted", {"sha256": wanted, "pos": np.arange(len(wanted))}):
            rows = self.con.execute(
                "SELECT w.sha256 FROM wanted w WHERE NOT EXISTS (SELECT 1 FROM embeddings e WHERE e.model = ? "
                "AND e.sha256 = w.sha256 AND (? IS NULL OR e.dim = ?)) ORDER BY w.pos",
                [model, dim, dim],
            ).fetchall()
        return [row[0] for row in rows]

    def matrix(self, model: str, hashes: Sequence[str], dim: int, batch: int = 50_000) -> np.ndarray:
        """The cached vectors of `hashes` as one (len(hashes), dim) float32 matrix in that order,
        read in batches (no per-vector Python objects); KeyError when any is missing."""
        out = np.empty((len(hashes), dim), dtype=np.float32)
        if not len(hashes):
            return out
        if self.con is None:
            raise KeyError(f"{len(hashes)} vectors of {model!r} are missing from the embeddings cache")
        for start in range(0, len(hashes), batch):
            part = list(hashes[start : start + batch])
            with registered(self.con, "wanted", {"sha256": part, "pos": np.arange(len(part))}):
                rows = self.con.execute(
                    "SELECT w.pos, any_value(e.vector) FROM wanted w JOIN embeddings e USING (sha256) "
                    "WHERE e.model = ? AND e.dim = ? GROUP BY w.pos ORDER BY w.pos",
                    [model, dim],
                ).fetchall()
            if len(rows) != len(part):
                raise KeyError(
                    f"{len(part) - len(rows)} vectors of {model!r} are missing from the embeddings cache"
                )
            out[start : start + len(part)] = np.frombuffer(
                b"".join(row[1] for row in rows), dtype=np.float32
            ).reshape(-1, dim)
        return out

    def put(self, model: str, hashes: Sequence[str], vectors: np.ndarray, replace: bool = False) -> None:
        """Add vectors (one transaction); hashes already present are skipped, or with `replace`
        (imported vectors: the file wins) overwritten."""
        if not len(hashes):
            return
        assert self.con is not None  # a writable cache has its connection until closed
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        first: dict[str, int] = {}  # each hash once, at its first row
        for row, sha in enumerate(hashes):
            first.setdefault(sha, row)
        rows = list(first.values())
        columns = {
            "model": [model] * len(rows),
            "sha256": [hashes[i] for i in rows],
            "dim": [vectors.shape[1]] * len(rows),
            "vector": [vectors[i].tobytes() for i in rows],
        }
        with registered(self.con, "incoming", columns):
            self.con.execute("BEGIN TRANSACTION")
            if replace:
                self.con.execute(
                    "DELETE FROM embeddings e WHERE e.model = ? AND e.sha256 IN "
                    "(SELECT sha256 FROM incoming)",
                    [model],
                )
            self.con.execute(
                "INSERT INTO embeddings SELECT i.model, i.sha256, i.dim, i.vector FROM incoming i "
                "WHERE NOT EXISTS (SELECT 1 FROM embeddings e WHERE e.model = i.model AND e.sha256 = i.sha256)"
            )
            self.con.execute("COMMIT")

    def count(self, model: str | None = None) -> int:
        if self.con is None:
            return 0
        if model is None:
            return self.con.execute("SELECT count(*) FROM embeddings").fetchone()[0]
        return self.con.execute("SELECT count(*) FROM embeddings WHERE model = ?", [model]).fetchone()[0]

    def models(self) -> Iterable[str]:
        if self.con is None:
            return []
        return [row[0] for row in self.con.execute("SELECT DISTINCT model FROM embeddings").fetchall()]


class VectorBuffer:
    """The embeddings-cache interface over a dict in memory, for a write that does not open the
    cache (a memory store: its texts are new, and its vectors are kept in the segment's FAISS
    files): `missing` is every hash not put yet, `put` keeps the vectors for `matrix`."""

    read_only = False

    def __init__(self) -> None:
        self._vectors: dict[tuple[str, str], np.ndarray] = {}

    def close(self) -> None:
        self._vectors.clear()

    def missing(self, model: str, hashes: Sequence[str], dim: int | None = None) -> list[str]:
        return [sha for sha in dict.fromkeys(hashes) if (model, sha) not in self._vectors]

    def put(self, model: str, hashes: Sequence[str], vectors: np.ndarray, replace: bool = False) -> None:
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        for sha, vector in zip(hashes, vectors, strict=True):
            if replace:
                self._vectors[(model, sha)] = vector
            else:
                self._vectors.setdefault((model, sha), vector)

    def matrix(self, model: str, hashes: Sequence[str], dim: int) -> np.ndarray:
        out = np.empty((len(hashes), dim), dtype=np.float32)
        for row, sha in enumerate(hashes):
            vector = self._vectors.get((model, sha))
            if vector is None or len(vector) != dim:
                raise KeyError(f"the vector of {sha} ({model!r}) was not embedded by this write")
            out[row] = vector
        return out
