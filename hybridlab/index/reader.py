"""Reading one index generation: its segments' stores, BM25 and FAISS files, checked, as one immutable object.
See docs/internals/index.md#reader."""

from __future__ import annotations

import dataclasses
import functools
import itertools
import operator
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from hybridlab.errors import CorruptIndexError, IndexFormatError, StoreError
from hybridlab.index.format import layout, store, wal
from hybridlab.index.format.dense import DenseIndex, SegmentedDense, single_threaded
from hybridlab.index.format.graph import load_graph
from hybridlab.index.format.manifest import Manifest
from hybridlab.index.format.manifest import Segment as SegmentRecord
from hybridlab.index.format.sparse import GroupCache, Postings, SparseIndex, global_rows
from hybridlab.index.format.tokenizer import Tokenizer


class StoreReader:
    """A read-only DuckDB connection shared by threads. A DuckDB connection must not run two
    queries at once, so every query holds a lock (the store is read on filter-cache misses and
    for documents, not per search)."""

    def __init__(self, con: Any, prefixes: Sequence[str] = ("",)) -> None:
        self._con = con
        self._lock = threading.Lock()
        #: per file segment (in the generation's order), the prefix of its own tables in this
        #: connection ("s_3." -> `s_3.chunks`): every row, tombstoned or not, as the segment wrote it
        self.prefixes = tuple(prefixes)

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
    try:
        stat = os.stat(Path(index_dir) / layout.MANIFEST)
    except FileNotFoundError:
        return None
    return (stat.st_mtime_ns, stat.st_ino)


def index_stamp(index_dir: Path, generation: int) -> tuple[Any, int]:
    """What a reader of generation `generation` compares to know whether to refresh: the manifest's
    stamp and the size of that generation's write-ahead log (two stats)."""
    return manifest_stamp(index_dir), wal.log_size(wal.wal_path(index_dir, generation))


@dataclass(frozen=True, eq=False)
class Generation:
    """One opened index generation, never changed after :func:`read_generation` built it. Row `r`
    of every per-chunk sequence is the chunk `chunk_ids[r]` (ascending)."""

    index_dir: Path
    manifest: Manifest
    stamp: tuple[Any, int]  # (manifest stamp taken before the manifest was read, bytes of its log read)
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
    dense: Mapping[str, DenseIndex | SegmentedDense]  # model -> FAISS index (or one per segment)
    graphs: Mapping[str, np.ndarray]  # model -> corpus graph (rows of that model's FAISS index)
    dense_rows_to_index: Mapping[str, np.ndarray]  # model -> row of each of its FAISS rows
    segments: Sequence[Segment] = ()  # oldest first
    live: Sequence[np.ndarray | None] = ()  # per segment: its live rows (None = all)
    logged_records: int = 0  # memories from the write-ahead log (the last segment, in memory)
    logged_chunks: int = 0
    logged_deletes: int = 0  # ids the log's tombstones delete
    masked_chunks: int = 0  # segment chunks the log hides (deleted or updated there)

    @property
    def number(self) -> int:
        """The generation number the manifest gives (grows by one per commit)."""
        return self.manifest.generation

    @property
    def folder(self) -> Path:
        return self.index_dir / self.manifest.path

    @property
    def n_chunks(self) -> int:
        return len(self.chunk_ids)

    @functools.cached_property
    def memory_share(self) -> float:
        """The share of the rows that are memories (a memory store's alpha prior,
        :func:`hybridlab.config.adaptive_alpha`): counted once per generation, not per search."""
        return self.chunk_types.count("memory") / self.n_chunks if self.n_chunks else 0.0

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


@dataclass(frozen=True, eq=False)
class Segment:
    """One immutable segment folder as loaded: its rows (ascending chunk ids), tags, BM25 postings,
    and per model its FAISS index. Shared by every generation that names it."""

    name: str
    folder: Path
    chunk_ids: np.ndarray
    doc_ids: tuple[str, ...]
    sections: tuple[str, ...]
    chunk_types: tuple[str, ...]
    collections: tuple[str, ...]
    titles: tuple[str, ...]
    times: np.ndarray
    tags: tuple[tuple[str, int], ...]  # (tag, local row), by tag then chunk id
    bm25_ids: np.ndarray  # row -> chunk id as BM25 recorded it
    postings: Postings
    tokenizer: Tokenizer
    dense: Mapping[str, DenseIndex]
    pinned: store.PinnedFiles | None = None  # a Parquet segment's table files, held open
    tag_locals: Mapping[str, np.ndarray] = field(default_factory=dict)  # tag -> its local rows (ascending)
    assigned: Mapping[str, np.ndarray] = field(
        default_factory=dict
    )  # model -> chunk ids DuckDB assigns it (ascending)
    #: per-row details read on first need and kept with the segment (immutable, so across refreshes):
    #: "rows" -> (chunk texts, document tags, document dates), by local row
    details: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def rows(self) -> int:
        return len(self.chunk_ids)


class SegmentCache:
    """Segments already loaded, by folder and store checksum: a reader that opens the next
    generation loads only the segments it has not seen (thread-safe; `keep` drops the others)."""

    def __init__(self) -> None:
        self._segments: OrderedDict[tuple[str, str], Segment] = OrderedDict()
        self._lock = threading.Lock()
        self.postings = GroupCache()  # the segments' postings combined per size class, for the next open

    def get_or_load(self, key: tuple[str, str], load: Callable[[], Segment]) -> Segment:
        """The segment cached under `key`, else `load()` (outside the lock) cached under it."""
        with self._lock:
            segment = self._segments.get(key)
        if segment is None:
            segment = load()
            with self._lock:
                self._segments[key] = segment
        return segment

    def keep(self, keys: set[tuple[str, str]]) -> None:
        with self._lock:
            for key in [k for k in self._segments if k not in keys]:
                del self._segments[key]


#: how long a reader keeps starting over while commits retire the generation it is opening
RETIRED_WAIT_SECONDS = 60.0


def read_generation(
    index_dir: str | os.PathLike, *, check: bool = True, cache: SegmentCache | None = None
) -> Generation:
    """Open the live generation of `index_dir` (checksums checked; with `check`, also that DuckDB,
    BM25 and FAISS agree). CorruptIndexError names the damaged file and the repair command. With a
    `cache`, segments loaded before are reused and only new ones are read.

    The reader holds the index's files while it opens them (`layout.reading`: writers leave retired
    generations in place meanwhile, as Lucene's deletion policy keeps a commit a reader holds), so
    a stream of commits cannot pull files from under it. Where the hold cannot be taken (a read-only
    folder) and a read fails after the manifest changed, it starts over from the new manifest, for
    up to `RETIRED_WAIT_SECONDS`: CorruptIndexError only when the failure repeats on an unchanged
    manifest (real damage)."""
    single_threaded()
    index_dir = Path(index_dir)
    deadline = time.monotonic() + RETIRED_WAIT_SECONDS
    while True:
        stamp = manifest_stamp(index_dir)  # before reading: a commit after this point changes it
        try:
            with layout.reading(index_dir):
                return _read_generation(index_dir, stamp, check, cache)
        except (CorruptIndexError, OSError):
            if time.monotonic() > deadline or manifest_stamp(index_dir) == stamp:
                raise


def _read_generation(
    index_dir: Path, stamp: tuple[int, int] | None, check: bool, cache: SegmentCache | None
) -> Generation:
    manifest = layout.read_manifest(index_dir)
    if not manifest.has_segments:
        raise IndexFormatError(
            f"index {index_dir} was written before segments (manifest format 1), which hybridlab "
            f"no longer reads; rebuild it: `hybridlab index PATHS --index {index_dir} --force` "
            f"(or `hybridlab verify --repair --index {index_dir}`)"
        )
    log = wal.wal_path(index_dir, manifest.generation)
    logged = wal.read_wal(log) if manifest.next_chunk_id is not None else wal.WalContents(log)
    damaged = layout.open_problems(index_dir, manifest)
    if damaged:
        raise CorruptIndexError(f"{damaged[0]}; {layout.repair_hint(index_dir)}")
    entries = list(manifest.segment_list)
    keys = [_segment_key(manifest, entry.name) for entry in entries]
    cache = SegmentCache() if cache is None else cache  # a fresh one: every segment loaded
    segments = [
        cache.get_or_load(key, functools.partial(_load_segment, index_dir, manifest, entry))
        for entry, key in zip(entries, keys)
    ]
    cache.keep(set(keys))
    rows = None
    touched = logged.doc_ids  # deleted or put again by the log: the segments' versions are hidden
    if touched:
        entries = [_mask_logged(entry, segment, touched) for entry, segment in zip(entries, segments)]
    puts = logged.puts
    if puts:
        rows = wal.logged_rows(puts, manifest.index_config, manifest.next_chunk_id or 0, logged.path)
        try:
            segments.append(_logged_segment(index_dir, rows, manifest, segments))
        except BaseException:
            rows.con.close()
            raise
        entries = [*entries, SegmentRecord(name=wal.WAL_PREFIX.rstrip("-"))]
    reader = _open_store(index_dir, segments, entries, rows)
    try:
        generation = _combine(
            index_dir,
            manifest,
            (stamp, logged.size),
            reader,
            segments,
            entries,
            cache,
            logged=(len(puts), rows.chunks if rows else 0, len(logged.deleted)),
        )
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


def _mask_logged(entry: SegmentRecord, segment: Segment, touched: set[str]) -> SegmentRecord:
    """`entry` with the ids the log touches that `segment` holds added to its tombstones (and
    listed as `masked`); the entry itself when there are none. The segment's id set is kept
    with it (segments never change), the masks are not: they belong to this generation."""
    held = segment.details.get("ids")
    if held is None:
        held = segment.details["ids"] = frozenset(segment.doc_ids)
    hit = tuple(sorted((touched & held) - set(entry.deleted)))
    return dataclasses.replace(entry, deleted=(*entry.deleted, *hit), masked=hit) if hit else entry


def _cut_graph(graph: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """The corpus graph without the rows `keep` leaves out: rows renumbered, edges to them -1."""
    renumbered = np.where(keep, np.cumsum(keep) - 1, -1).astype(graph.dtype)
    kept = graph[keep]
    return np.where(kept >= 0, renumbered[np.maximum(kept, 0)], -1).astype(graph.dtype)


def _segment_key(manifest: Manifest, name: str) -> tuple[str, str]:
    recorded = next(
        (
            record
            for key in (*(f"{name}/{f}" for f in store.STORE_FILES), layout.STORE_FILE)
            if (record := manifest.file(key)) is not None
        ),
        None,
    )
    return name, recorded.sha256 if recorded else ""


def _open_store(
    index_dir: Path,
    segments: Sequence[Segment],
    entries: Sequence[SegmentRecord],
    logged: wal.LoggedRows | None = None,
) -> StoreReader:
    """The generation's store; `logged`: the log's rows (the last segment), whose in-memory tables
    the store's views take over (and drop when it closes)."""
    files = segments[:-1] if logged is not None else segments
    paths = [segment.folder / layout.STORE_FILE for segment in files]
    deleted = [list(entry.deleted) for entry in entries[: len(files)]]
    try:
        if (
            logged is None
            and len(paths) == 1
            and not deleted[0]
            and not store.is_parquet_segment(segments[0].folder)
        ):
            con = store.connect(paths[0], read_only=True)
            prefixes = [""]
        else:
            con = store.connect_segments(
                paths,
                deleted,
                [segment.pinned for segment in files],
                inline=logged.con if logged is not None else None,
            )
            prefixes = [f"{store.segment_alias(con, i)}." for i in range(len(paths))]
    except StoreError as error:
        if logged is not None:
            logged.con.close()
        raise CorruptIndexError(f"{error}".replace("--index DIR", f"--index {index_dir}")) from None
    return StoreReader(con, prefixes)


def _load_segment(index_dir: Path, manifest: Manifest, entry: SegmentRecord) -> Segment:
    folder = index_dir / entry.name
    store_path = folder / layout.STORE_FILE
    try:
        pinned = store.PinnedFiles(folder) if store.is_parquet_segment(folder) else None
        con = store.open_segment(folder, pinned)
    except StoreError as error:
        raise CorruptIndexError(f"{error}".replace("--index DIR", f"--index {index_dir}")) from None
    except OSError as error:
        raise _damaged(folder, error, index_dir) from None
    try:
        tables = _segment_tables(con)
    except Exception as error:  # noqa: BLE001 - any failure here means a truncated or damaged DuckDB file
        raise CorruptIndexError(
            f"{store_path} cannot be read ({str(error).splitlines()[0][:160]}); "
            f"run `hybridlab verify --repair --index {index_dir}`"
        ) from None
    finally:
        con.close()
    bm25 = folder / layout.BM25_DIR
    try:
        sparse = SparseIndex.load(bm25)
    except IndexFormatError:
        raise
    except Exception as error:  # noqa: BLE001 - whatever the parser raises, the folder is damaged
        raise _damaged(bm25, error, index_dir) from None
    ef_search = manifest.index_config.hnsw_ef_search
    dense: dict[str, DenseIndex] = {}
    for model, info in entry.models.items():
        path = folder / info.file
        try:
            if not path.is_file():
                raise FileNotFoundError("missing")
            dense[model] = DenseIndex.load(path, model, ef_search=ef_search)
        except Exception as error:  # noqa: BLE001 - whatever FAISS raises, the file is damaged
            raise _damaged(path, error, index_dir) from None
    return _segment(entry.name, folder, tables, sparse, dense, pinned)


def _segment_tables(con: Any) -> tuple[list[tuple], list[tuple], list[tuple]]:
    """A segment's chunk rows (with their documents' fields), tag rows and vector assignments."""
    rows = con.execute(
        "SELECT c.chunk_id, c.doc_id, c.section, c.chunk_type, d.collection, d.title, "
        "epoch(COALESCE(d.updated_at, d.created_at)) FROM chunks c JOIN documents d USING (doc_id) "
        "ORDER BY c.chunk_id"
    ).fetchall()
    tag_rows = con.execute("SELECT tag, chunk_id FROM tags ORDER BY tag, chunk_id").fetchall()
    assigned_rows = con.execute(
        "SELECT model, chunk_id FROM chunk_vectors ORDER BY model, chunk_id"
    ).fetchall()
    return rows, tag_rows, assigned_rows


def _segment(
    name: str,
    folder: Path,
    tables: tuple[list[tuple], list[tuple], list[tuple]],
    sparse: SparseIndex,
    dense: Mapping[str, DenseIndex],
    pinned: store.PinnedFiles | None,
) -> Segment:
    rows, tag_rows, assigned_rows = tables
    chunk_ids = _readonly(np.asarray([r[0] for r in rows], dtype=np.int64))
    tags = tuple((tag, int(np.searchsorted(chunk_ids, chunk_id))) for tag, chunk_id in tag_rows)
    return Segment(
        name=name,
        folder=folder,
        chunk_ids=chunk_ids,
        doc_ids=tuple(r[1] for r in rows),
        sections=tuple(r[2] or "" for r in rows),
        chunk_types=tuple(r[3] for r in rows),
        collections=tuple(r[4] for r in rows),
        titles=tuple(r[5] or "" for r in rows),
        times=_readonly(
            np.asarray([np.nan if r[6] is None else float(r[6]) for r in rows], dtype=np.float64)
        ),
        tags=tags,
        bm25_ids=sparse.chunk_ids,
        postings=sparse.parts[0],
        tokenizer=sparse.tokenizer,
        dense=MappingProxyType(dict(dense)),
        pinned=pinned,
        tag_locals=MappingProxyType(_grouped(tags)),
        assigned=MappingProxyType(_grouped(assigned_rows)),
    )


def _grouped(pairs: Iterable[tuple[str, int]]) -> dict[str, np.ndarray]:
    """`{key: its values as a read-only int64 array}` of (key, value) pairs ordered by key."""
    return {
        key: _readonly(np.asarray([value for _, value in group], dtype=np.int64))
        for key, group in itertools.groupby(pairs, key=operator.itemgetter(0))
    }


def _logged_segment(
    index_dir: Path, logged: wal.LoggedRows, manifest: Manifest, segments: Sequence[Segment]
) -> Segment:
    """The write-ahead log's rows as the generation's last segment, held in memory: BM25 postings
    and exact (flat) FAISS indexes built from its records; its chunk ids follow every segment's
    (`_combine` checks that they do)."""
    con = logged.con
    texts = [text for (text,) in con.execute("SELECT embed_text FROM chunks ORDER BY chunk_id").fetchall()]
    sparse = SparseIndex.build(texts, logged.chunk_ids, manifest.index_config.bm25)
    dense = {model: DenseIndex.build(vectors, ids, model) for model, (ids, vectors) in logged.vectors.items()}
    segment = _segment(wal.WAL_PREFIX.rstrip("-"), index_dir, _segment_tables(con), sparse, dense, None)
    segment.details["rows"] = segment_details(con)  # its tables live in the generation's store, unnamed
    return segment


def segment_details(con: Any, prefix: str = "") -> tuple[list[str], list[tuple[str, ...]], list[Any]]:
    """Every row's chunk text, document tags and date (updated, else created) of the segment whose
    tables are `<prefix>chunks` and `<prefix>documents` in `con`, in chunk-id order."""
    rows = con.execute(
        f"SELECT c.text, d.tags, COALESCE(d.updated_at, d.created_at) FROM {prefix}chunks c "
        f"JOIN {prefix}documents d USING (doc_id) ORDER BY c.chunk_id"
    ).fetchall()
    return [r[0] for r in rows], [tuple(r[1] or ()) for r in rows], [r[2] for r in rows]


class RowTags(Mapping):
    """row -> its tags (sorted), the inverse of `tag_rows`, as one CSR table built in numpy (no
    dict of every tagged row: building that was most of a 100k-chunk generation's refresh)."""

    def __init__(self, tag_rows: Mapping[str, np.ndarray]) -> None:
        names = sorted(tag_rows)
        rows = np.concatenate([tag_rows[name] for name in names]) if names else np.zeros(0, np.int64)
        tags = (
            np.concatenate([np.full(len(tag_rows[name]), i, np.int64) for i, name in enumerate(names)])
            if names
            else np.zeros(0, np.int64)
        )
        order = np.lexsort((tags, rows))
        self._names = names
        self._rows, self._tags = rows[order], tags[order]
        self._keys: np.ndarray | None = None  # the tagged rows, computed on first iteration

    def __getitem__(self, row: int) -> tuple[str, ...]:
        start, end = np.searchsorted(self._rows, [row, row + 1])
        if start == end:
            raise KeyError(row)
        return tuple(self._names[i] for i in self._tags[start:end])

    def _tagged(self) -> np.ndarray:
        if self._keys is None:
            self._keys = np.unique(self._rows)
        return self._keys

    def __iter__(self) -> Iterator[int]:
        return iter(int(row) for row in self._tagged())

    def __len__(self) -> int:
        return len(self._tagged())


def _live_masks(
    segments: Sequence[Segment], entries: Sequence[SegmentRecord]
) -> tuple[list[np.ndarray | None], np.ndarray]:
    """Per segment, its live rows (None: every row is) after the entry's tombstones, and the chunk
    ids live in the committed generation that the write-ahead log hides (the entries' "masked" ids)."""
    live: list[np.ndarray | None] = []
    hidden = []  # chunk ids live in the committed generation that the log hides
    for segment, entry in zip(segments, entries):
        deleted = entry.deleted
        if deleted:
            gone = set(deleted)
            live.append(_readonly(np.asarray([d not in gone for d in segment.doc_ids], dtype=bool)))
        else:
            live.append(None)
        if entry.masked:
            masked = set(entry.masked)
            hidden.append(segment.chunk_ids[np.asarray([d in masked for d in segment.doc_ids], dtype=bool)])
    hidden_ids = np.concatenate(hidden) if hidden else np.zeros(0, np.int64)
    return live, hidden_ids


def _pick(segments: Sequence[Segment], live: Sequence[np.ndarray | None], attribute: str) -> tuple:
    """The live rows' values of a per-row tuple attribute of the segments, concatenated in order."""
    return tuple(
        itertools.chain.from_iterable(
            getattr(s, attribute) if m is None else itertools.compress(getattr(s, attribute), m)
            for s, m in zip(segments, live)
        )
    )


def _live_array(
    segments: Sequence[Segment], live: Sequence[np.ndarray | None], attribute: str, empty: np.ndarray
) -> np.ndarray:
    """The live rows of a per-row array attribute of the segments, concatenated (`empty` when
    there are no segments), read-only."""
    return _readonly(
        np.concatenate(
            [getattr(s, attribute) if m is None else getattr(s, attribute)[m] for s, m in zip(segments, live)]
        )
        if segments
        else empty
    )


def _live_chunk_ids(
    index_dir: Path, segments: Sequence[Segment], live: Sequence[np.ndarray | None]
) -> np.ndarray:
    """The generation's live chunk ids, checked to ascend strictly across its segments."""
    chunk_ids = _live_array(segments, live, "chunk_ids", np.zeros(0, np.int64))
    if len(chunk_ids) > 1 and not np.all(chunk_ids[1:] > chunk_ids[:-1]):
        raise CorruptIndexError(
            f"segments of {index_dir} overlap in chunk ids; "
            f"run `hybridlab verify --repair --index {index_dir}`"
        )
    return chunk_ids


def _live_tag_rows(segments: Sequence[Segment], live: Sequence[np.ndarray | None]) -> dict[str, np.ndarray]:
    """tag -> the generation's live rows that carry it (tags with none left out), by tag."""
    by_tag: dict[str, list[np.ndarray]] = {}
    for segment, rows_of in zip(
        segments, global_rows([s.rows for s in segments], live)
    ):  # one numpy step a tag
        for tag, local in segment.tag_locals.items():
            rows = rows_of[local]
            by_tag.setdefault(tag, []).append(rows[rows >= 0])
    tag_rows = {tag: _readonly(np.concatenate(parts)) for tag, parts in sorted(by_tag.items())}
    return {tag: rows for tag, rows in tag_rows.items() if len(rows)}


def _live_dense(
    model: str, parts: Sequence[tuple[Segment, np.ndarray | None]]
) -> DenseIndex | SegmentedDense:
    """The model's FAISS index over the live rows of the segments (`parts`: those with vectors of
    the model, and their live masks): a lone whole segment's own, else a masked concatenation."""
    if len(parts) == 1 and parts[0][1] is None:
        return parts[0][0].dense[model]
    masks = [None if m is None else _readonly(np.isin(s.dense[model].ids, s.chunk_ids[m])) for s, m in parts]
    return SegmentedDense(model, [s.dense[model] for s, _ in parts], masks)


def _live_graph(
    path: Path,
    index_dir: Path,
    model: str,
    segments: Sequence[Segment],
    parts: Sequence[tuple[Segment, np.ndarray | None]],
    dense: DenseIndex | SegmentedDense,
    hidden_ids: np.ndarray,
    logged_records: int,
) -> np.ndarray:
    """One graph over the generation's live vectors of `model`, in its dense rows: the graph file
    at `path`, built over the committed rows, less the rows the log hides, plus the log's rows."""
    unlinked = len(segments[-1].dense[model].ids) if logged_records and model in segments[-1].dense else 0
    committed = dense.ids[: dense.size - unlinked]  # the graph's rows when it was built
    cut = (
        hidden_ids[np.isin(hidden_ids, np.concatenate([s.dense[model].ids for s, _ in parts]))]
        if len(hidden_ids)
        else hidden_ids
    )
    try:
        graph = load_graph(path, len(committed) + len(cut))
    except Exception as error:  # noqa: BLE001 - unreadable or mis-shaped: damaged
        raise _damaged(path, error, index_dir) from None
    if len(cut):  # rows the log hides: out of the graph, edges to them cut
        graph = _cut_graph(graph, ~np.isin(np.union1d(committed, cut), cut))
    if unlinked:  # the log's rows are in no neighbour list and have none (-1: nothing to expand)
        graph = np.concatenate([graph, np.full((unlinked, graph.shape[1]), -1, dtype=graph.dtype)])
    return graph


def _live_vectors(
    index_dir: Path,
    manifest: Manifest,
    segments: Sequence[Segment],
    live: Sequence[np.ndarray | None],
    hidden_ids: np.ndarray,
    logged_records: int,
) -> tuple[dict[str, DenseIndex | SegmentedDense], dict[str, np.ndarray]]:
    """Per model of the manifest, its FAISS index over the live rows, and its graph where it has one."""
    dense: dict[str, DenseIndex | SegmentedDense] = {}
    graphs: dict[str, np.ndarray] = {}
    for model, info in manifest.models.items():
        parts = [(s, m) for s, m in zip(segments, live) if model in s.dense]
        dense[model] = _live_dense(model, parts)
        if info.graph:  # one graph over the generation's live vectors, in its dense rows
            path = index_dir / (info.graph_dir or manifest.path) / info.graph
            graphs[model] = _live_graph(
                path, index_dir, model, segments, parts, dense[model], hidden_ids, logged_records
            )
    return dense, graphs


def _combine(
    index_dir: Path,
    manifest: Manifest,
    stamp: tuple[Any, int],
    reader: StoreReader,
    segments: Sequence[Segment],
    entries: Sequence[SegmentRecord],
    cache: SegmentCache | None = None,
    logged: tuple[int, int, int] = (0, 0, 0),
) -> Generation:
    """The generation's row table and retrievers over its segments' live rows. `logged`: (records,
    chunks, tombstones) of the write-ahead log, whose segment is the last; an entry's "masked" ids:
    those the log hides (see `_mask_logged`)."""
    live, hidden_ids = _live_masks(segments, entries)
    chunk_ids = _live_chunk_ids(index_dir, segments, live)
    chunk_types, collections = _pick(segments, live, "chunk_types"), _pick(segments, live, "collections")
    tag_rows = _live_tag_rows(segments, live)
    sparse = SparseIndex(
        [s.postings for s in segments],
        live,
        chunk_ids,
        segments[0].tokenizer,
        groups=cache.postings if cache is not None else None,
    )
    dense, graphs = _live_vectors(index_dir, manifest, segments, live, hidden_ids, logged[0])
    dense_rows_to_index = {
        model: _readonly(np.searchsorted(chunk_ids, index.ids)) for model, index in dense.items()
    }
    known_chunk_types, known_collections = tuple(sorted(set(chunk_types))), tuple(sorted(set(collections)))
    return Generation(
        index_dir=index_dir,
        manifest=manifest,
        stamp=stamp,
        store=reader,
        chunk_ids=chunk_ids,
        doc_ids=_pick(segments, live, "doc_ids"),
        sections=_pick(segments, live, "sections"),
        chunk_types=chunk_types,
        collections=collections,
        titles=_pick(segments, live, "titles"),
        times=_live_array(segments, live, "times", np.zeros(0)),
        known_chunk_types=known_chunk_types,
        known_collections=known_collections,
        tag_rows=MappingProxyType(tag_rows),
        row_tags=RowTags(tag_rows),
        sparse=sparse,
        dense=MappingProxyType(dense),
        graphs=MappingProxyType(graphs),
        dense_rows_to_index=MappingProxyType(dense_rows_to_index),
        segments=tuple(segments),
        live=tuple(live),
        logged_records=logged[0],
        logged_chunks=logged[1],
        logged_deletes=logged[2],
        masked_chunks=len(hidden_ids),
    )


def _assigned_ids(generation: Generation) -> dict[str, np.ndarray]:
    """model -> the live chunk ids DuckDB assigns it, ascending (from each segment's assignments,
    read once when the segment was loaded; tombstoned chunks left out)."""
    if not generation.segments:  # a generation built by hand (tests): ask the store
        return _grouped(
            generation.store.fetchall("SELECT model, chunk_id FROM chunk_vectors ORDER BY model, chunk_id")
        )
    parts: dict[str, list[np.ndarray]] = {}
    for segment, mask in zip(generation.segments, generation.live or [None] * len(generation.segments)):
        dead = segment.chunk_ids[~mask] if mask is not None else None
        for model, ids in segment.assigned.items():
            parts.setdefault(model, []).append(
                ids if dead is None or not len(dead) else ids[~np.isin(ids, dead)]
            )
    return {model: np.concatenate(chunks) for model, chunks in parts.items()}


def consistency_problems(generation: Generation) -> list[str]:
    """Every chunk id in DuckDB is in BM25 and in its models' FAISS indexes, and vice versa;
    counts and models match the manifest."""
    problems = []
    manifest, folder = generation.manifest, generation.folder
    counts = manifest.counts
    if counts.chunks + generation.logged_chunks - generation.masked_chunks != generation.n_chunks:
        logged = f" plus {generation.logged_chunks} logged" if generation.logged_chunks else ""
        logged += f" less {generation.masked_chunks} hidden by the log" if generation.masked_chunks else ""
        problems.append(
            f"manifest says {counts.chunks} chunks{logged}, {folder / layout.STORE_FILE} has "
            f"{generation.n_chunks}"
        )
    for segment in generation.segments:
        if not np.array_equal(segment.bm25_ids, segment.chunk_ids):
            problems.append(
                f"BM25 rows in {segment.folder / layout.BM25_DIR} do not match the chunk ids in DuckDB"
            )
    if not np.array_equal(generation.sparse.chunk_ids, generation.chunk_ids):
        problems.append(f"BM25 rows in {folder / layout.BM25_DIR} do not match the chunk ids in DuckDB")
    expected_ids = _assigned_ids(generation)
    assigned = {model: len(ids) for model, ids in expected_ids.items() if len(ids)}
    if set(assigned) - set(generation.dense):
        problems.append(
            f"models in DuckDB {sorted(assigned)} differ from FAISS indexes {sorted(generation.dense)}"
        )
    if set(generation.dense) != set(manifest.models):
        problems.append(
            f"models in the manifest {sorted(manifest.models)} differ from FAISS indexes "
            f"{sorted(generation.dense)}"
        )
    for model, dense in generation.dense.items():
        expected = expected_ids.get(model, np.zeros(0, np.int64))
        if not np.array_equal(dense.ids, expected):
            problems.append(
                f"FAISS ids of {model!r} ({folder / layout.dense_file(model)}) do not match DuckDB"
            )
        if model in manifest.models and manifest.models[model].dim != dense.dim:
            problems.append(
                f"FAISS dimension of {model!r} is {dense.dim}, manifest says {manifest.models[model].dim}"
            )
    return problems
