"""Reading one index generation: its store, BM25 and FAISS files, checked, as one immutable object.

:func:`read_generation` opens the live generation that the manifest names (files checked against
their recorded checksums first) and returns a :class:`Generation`: the row table of its chunks
(row = position in ascending chunk-id order, which BM25 rows and FAISS ids align to), its tags, its
retrievers' files loaded, and its DuckDB store behind a lock. :func:`consistency_problems` checks
that DuckDB, BM25 and FAISS agree. The search engine wraps a Generation into its snapshot;
`hybridlab verify` uses the two functions directly.
"""
from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from hybridlab.errors import CorruptIndexError, StoreError
from hybridlab.index import layout, store
from hybridlab.index.dense import DenseIndex, single_threaded
from hybridlab.index.graph import load_graph
from hybridlab.index.sparse import SparseIndex


class StoreReader:
    """A read-only DuckDB connection shared by threads. A DuckDB connection must not run two
    queries at once, so every query holds a lock (the store is read on filter-cache misses and
    for documents, not per search)."""

    def __init__(self, con: Any) -> None:
        self._con = con
        self._lock = threading.Lock()

    def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        with self._lock:
            return self._con.execute(sql, list(params)).fetchall()

    def fetchone(self, sql: str, params: Sequence[Any] = ()) -> tuple | None:
        with self._lock:
            return self._con.execute(sql, list(params)).fetchone()

    @contextmanager
    def connection(self) -> Iterator[Any]:
        """The connection itself, for a helper that runs several queries (held for the block)."""
        with self._lock:
            yield self._con

    @property
    def raw(self) -> Any:
        """The DuckDB connection without the lock (single-threaded tools and tests only)."""
        return self._con

    def close(self) -> None:
        with self._lock:
            self._con.close()


def manifest_stamp(index_dir: Path) -> tuple[int, int] | None:
    """(mtime, inode) of the manifest: a writer's commit replaces it, so the stamp changes."""
    return file_stamp(Path(index_dir) / layout.MANIFEST)


def file_stamp(path: Path) -> tuple[int, int] | None:
    """(mtime, inode) of a file, None when it does not exist."""
    try:
        stat = os.stat(path)
        return (stat.st_mtime_ns, stat.st_ino)
    except FileNotFoundError:
        return None


@dataclass(frozen=True, eq=False)
class Generation:
    """One opened index generation, never changed after :func:`read_generation` built it. Row `r`
    of every per-chunk sequence is the chunk `chunk_ids[r]` (ascending)."""

    index_dir: Path
    manifest: Mapping[str, Any]
    stamp: tuple[int, int] | None  # manifest stamp taken before the manifest was read
    store: StoreReader
    chunk_ids: np.ndarray  # int64, ascending
    doc_ids: Sequence[str]
    sections: Sequence[str]
    chunk_types: Sequence[str]
    collections: Sequence[str]
    titles: Sequence[str]
    times: np.ndarray  # update (else creation) time of each chunk's document, epoch seconds; NaN = none
    known_chunk_types: Sequence[str]  # sorted
    known_collections: Sequence[str]  # sorted
    tag_rows: Mapping[str, np.ndarray]  # tag -> rows carrying it
    row_tags: Mapping[int, Sequence[str]]  # row -> its tags
    sparse: SparseIndex
    dense: Mapping[str, DenseIndex]  # model -> FAISS index
    graphs: Mapping[str, np.ndarray]  # model -> corpus graph (rows of that model's FAISS index)
    dense_rows_to_index: Mapping[str, np.ndarray]  # model -> row of each of its FAISS rows

    @property
    def number(self) -> int:
        """The generation number the manifest gives (grows by one per commit)."""
        return int(self.manifest["generation"])

    @property
    def folder(self) -> Path:
        return self.index_dir / self.manifest["path"]

    @property
    def n_chunks(self) -> int:
        return len(self.chunk_ids)

    def rows_of(self, chunk_ids: np.ndarray) -> np.ndarray:
        """Row positions of chunk ids (all must exist)."""
        return np.searchsorted(self.chunk_ids, chunk_ids)


def _readonly(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


def _damaged(path: Path, error: BaseException, index_dir: Path) -> CorruptIndexError:
    return CorruptIndexError(
        f"{path} cannot be read ({type(error).__name__}: {str(error)[:160]}); "
        f"run `hybridlab verify --repair --index {index_dir}`"
    )


def read_generation(index_dir: str | Path, *, check: bool = True) -> Generation:
    """Open the live generation of `index_dir` (checksums checked; with `check`, also that DuckDB,
    BM25 and FAISS agree). CorruptIndexError names the damaged file and the repair command."""
    single_threaded()
    index_dir = Path(index_dir)
    stamp = manifest_stamp(index_dir)  # before reading: a commit after this point changes it
    manifest = layout.read_manifest(index_dir)
    folder = index_dir / manifest["path"]
    damaged = layout.open_problems(index_dir, manifest)
    if damaged:
        raise CorruptIndexError(f"{damaged[0]}; {layout.repair_hint(index_dir)}")
    store_path = folder / layout.STORE_FILE
    try:
        con = store.connect(store_path, read_only=True)
    except StoreError as error:
        raise CorruptIndexError(f"{error}".replace("--index DIR", f"--index {index_dir}")) from None
    reader = StoreReader(con)
    try:
        generation = _read(index_dir, manifest, stamp, reader)
        if check:
            problems = consistency_problems(generation)
            if problems:
                raise CorruptIndexError(
                    f"index {index_dir} is inconsistent: {problems[0]}"
                    f"{f' (+{len(problems) - 1} more)' if len(problems) > 1 else ''}; "
                    f"run `hybridlab verify --repair --index {index_dir}`"
                )
    except BaseException:
        reader.close()
        raise
    return generation


def _read(index_dir: Path, manifest: dict[str, Any], stamp: tuple[int, int] | None, reader: StoreReader) -> Generation:
    folder = index_dir / manifest["path"]
    store_path = folder / layout.STORE_FILE
    try:
        rows = reader.fetchall(
            "SELECT c.chunk_id, c.doc_id, c.section, c.chunk_type, d.collection, d.title, "
            "epoch(COALESCE(d.updated_at, d.created_at)) FROM chunks c JOIN documents d USING (doc_id) "
            "ORDER BY c.chunk_id"
        )
    except Exception as error:  # noqa: BLE001 - any failure here means a truncated or damaged DuckDB file
        raise CorruptIndexError(
            f"{store_path} cannot be read ({str(error).splitlines()[0][:160]}); "
            f"run `hybridlab verify --repair --index {index_dir}`"
        ) from None
    chunk_ids = _readonly(np.asarray([r[0] for r in rows], dtype=np.int64))
    chunk_types = tuple(r[3] for r in rows)
    collections = tuple(r[4] for r in rows)
    by_tag: dict[str, list[int]] = {}
    for tag, chunk_id in reader.fetchall("SELECT tag, chunk_id FROM tags ORDER BY tag, chunk_id"):
        by_tag.setdefault(tag, []).append(chunk_id)
    tag_rows = {tag: _readonly(np.searchsorted(chunk_ids, np.asarray(ids, dtype=np.int64)))
                for tag, ids in by_tag.items()}
    row_tags: dict[int, list[str]] = {}
    for tag, rows_of_tag in tag_rows.items():
        for row in rows_of_tag:
            row_tags.setdefault(int(row), []).append(tag)
    try:
        sparse = SparseIndex.load(folder / layout.BM25_DIR)
    except Exception as error:  # noqa: BLE001 - whatever bm25s raises, the folder is damaged
        raise _damaged(folder / layout.BM25_DIR, error, index_dir) from None
    dense: dict[str, DenseIndex] = {}
    for model, info in manifest.get("models", {}).items():
        path = folder / info["file"]
        try:
            if not path.is_file():
                raise FileNotFoundError("missing")
            dense[model] = DenseIndex.load(path, model, ef_search=manifest["config"].get("hnsw_ef_search"))
        except Exception as error:  # noqa: BLE001 - whatever FAISS raises, the file is damaged
            raise _damaged(path, error, index_dir) from None
    graphs: dict[str, np.ndarray] = {}
    dense_rows_to_index: dict[str, np.ndarray] = {}
    for model, info in manifest.get("models", {}).items():
        dense_rows_to_index[model] = _readonly(np.searchsorted(chunk_ids, dense[model].ids))
        if info.get("graph"):
            path = folder / info["graph"]
            try:
                graphs[model] = load_graph(path, dense[model].size)
            except Exception as error:  # noqa: BLE001 - unreadable or mis-shaped: damaged
                raise _damaged(path, error, index_dir) from None
    return Generation(
        index_dir=index_dir, manifest=MappingProxyType(manifest), stamp=stamp, store=reader, chunk_ids=chunk_ids,
        doc_ids=tuple(r[1] for r in rows), sections=tuple(r[2] or "" for r in rows), chunk_types=chunk_types,
        collections=collections, titles=tuple(r[5] or "" for r in rows),
        times=_readonly(np.asarray([np.nan if r[6] is None else float(r[6]) for r in rows], dtype=np.float64)),
        known_chunk_types=tuple(sorted(set(chunk_types))), known_collections=tuple(sorted(set(collections))),
        tag_rows=MappingProxyType(tag_rows), row_tags=MappingProxyType({r: tuple(t) for r, t in row_tags.items()}),
        sparse=sparse, dense=MappingProxyType(dense), graphs=MappingProxyType(graphs),
        dense_rows_to_index=MappingProxyType(dense_rows_to_index),
    )


def consistency_problems(generation: Generation) -> list[str]:
    """Every chunk id in DuckDB is in BM25 and in its models' FAISS indexes, and vice versa;
    counts and models match the manifest."""
    problems = []
    manifest, folder = generation.manifest, generation.folder
    counts = manifest.get("counts", {})
    if counts.get("chunks") != generation.n_chunks:
        problems.append(f"manifest says {counts.get('chunks')} chunks, {folder / layout.STORE_FILE} has {generation.n_chunks}")
    if not np.array_equal(generation.sparse.chunk_ids, generation.chunk_ids):
        problems.append(f"BM25 rows in {folder / layout.BM25_DIR} do not match the chunk ids in DuckDB")
    assigned = dict(generation.store.fetchall("SELECT model, count(*) FROM chunk_vectors GROUP BY 1"))
    if set(assigned) != set(generation.dense):
        problems.append(f"models in DuckDB {sorted(assigned)} differ from FAISS indexes {sorted(generation.dense)}")
    for model, dense in generation.dense.items():
        expected = np.asarray([r[0] for r in generation.store.fetchall(
            "SELECT chunk_id FROM chunk_vectors WHERE model = ? ORDER BY chunk_id", [model])], dtype=np.int64)
        if not np.array_equal(dense.ids, expected):
            problems.append(f"FAISS ids of {model!r} ({folder / layout.dense_file(model)}) do not match DuckDB")
        if manifest["models"][model]["dim"] != dense.dim:
            problems.append(f"FAISS dimension of {model!r} is {dense.dim}, manifest says {manifest['models'][model]['dim']}")
    return problems
