"""The commit of a generation: merges by policy, corpus graphs updated, the manifest written from the
segment list, folders flushed and renamed, the manifest replaced, retired files removed."""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from hybridlab.config import IndexConfig
from hybridlab.encoders.registry import encoder_record
from hybridlab.index.format import layout, store
from hybridlab.index.format.artifacts import versions
from hybridlab.index.format.caches import WRITE_CACHES
from hybridlab.index.format.faults import checkpoint
from hybridlab.index.format.graph import (
    GRAPH_RESERVE,
    SegmentRows,
    build_corpus_graph,
    graph_size,
    load_graph,
    load_reserve,
    save_graph,
    update_corpus_graph,
)
from hybridlab.index.format.manifest import (
    FORMAT_VERSION,
    Bm25Record,
    Counts,
    FileRecord,
    FileSignaturesRecord,
    LastMerge,
    Manifest,
    ModelRecord,
    Segment,
    dumps,
)
from hybridlab.index.format.segments import dead_chunk_ids, load_dense, segment_folder
from hybridlab.index.format.signatures import SIGNATURES_FILE, Signatures, commit_signatures
from hybridlab.index.write.merge import build_merged, merge_plan
from hybridlab.index.write.tokens import spec_records

logger = logging.getLogger(__name__)


def _with_segments(
    base: Manifest,
    entries: list[Segment],
    old: Manifest | None,
    new_files: dict[str, dict[str, FileRecord]],
    config: IndexConfig,
    dims: dict[str, int],
    graphs: dict[str, _CorpusGraph],
    signatures: tuple[FileSignaturesRecord | None, FileRecord | None] = (None, None),
) -> Manifest:
    """`base` with the fields that follow from the segment list and the corpus graphs: files, counts,
    models, bm25 (`new_files`: the checksums of each new folder's files, by name)."""
    files: dict[str, FileRecord] = {}
    for folder_files in new_files.values():
        files.update({n: v for n, v in folder_files.items() if not _generation_wide(n)})
    for entry in entries:
        if entry.name in new_files:
            continue
        if old is not None:
            prefix = f"{entry.name}/"
            if entry.legacy:
                raise ValueError("a legacy segment cannot be kept in a segmented index")
            files.update(
                {
                    name: value
                    for name, value in (old.files or {}).items()
                    if name.startswith(prefix) and not _generation_wide(name)
                }
            )
    chunks = sum(entry.chunks for entry in entries)
    models: dict[str, ModelRecord] = {}
    for model, dim in dims.items():
        graph = graphs.get(model)
        if graph is not None:
            for file in (graph.file, graph.reserve):
                files[f"{graph.folder}/{file}"] = new_files[graph.folder][f"{graph.folder}/{file}"]
        models[model] = ModelRecord(
            dim=dim,
            vectors=sum(entry.vectors.get(model, 0) for entry in entries),
            file=layout.dense_file(model),
            index=config.dense_index,
            segments=len(entries),
            encoder=_encoder_record(model, old),
            **(graph.fields() if graph else {}),
        )
    signature_info, kept_file = signatures
    if signature_info:
        name = signature_info.file
        files[name] = kept_file or new_files[name.split("/")[0]][name]
    return base.replace(
        files=files,
        counts=Counts(sum(entry.documents for entry in entries), chunks),
        segments=tuple(entries),
        models=models,
        file_signatures=signature_info,
        bm25=Bm25Record(layout.BM25_DIR, chunks, dataclasses.asdict(config.bm25)),
    )


def _encoder_record(model: str, old: Manifest | None) -> Mapping[str, Any]:
    """The encoder record of `model`: the previous manifest's (the build checked it still matches,
    `embed_missing`), else the model's own (`encoder_record`; a registry model's without loading it)."""
    recorded = old.models[model].encoder if old is not None and model in old.models else None
    if recorded:
        return recorded
    return encoder_record(model)


def _generation_wide(name: str) -> bool:
    """Whether a file of a segment's folder belongs to the generation committed there (corpus
    graphs, file signatures), not to the segment: named in a manifest only while current."""
    base = Path(name).name
    return base.startswith("graph-") or base == SIGNATURES_FILE


def manifest_base(
    number: int, config: IndexConfig, cache_file: Path, seconds: float, old: Manifest | None, next_id: int
) -> Manifest:
    """The fields of a new generation's manifest known before its commit (the commit sets its
    number and folder again, and the segments, files, counts and models: `commit_generation`)."""
    return Manifest(
        format=FORMAT_VERSION,
        generation=number,
        path=layout.generation_name(number),
        built_at=datetime.now(UTC).isoformat(),
        build_seconds=round(seconds, 3),
        config=config.to_dict(),
        store=layout.STORE_FILE,
        embedding_cache=str(cache_file.resolve()),
        versions=versions(),
        next_chunk_id=next_id,
        last_merge=old.last_merge if old is not None else None,
        late=spec_records(config),
    )


@dataclass(frozen=True)
class _CorpusGraph:
    """A corpus graph a commit wrote: its `file` and `reserve` file in `folder` (the commit's),
    `k` neighbours a row (+ `reserve_k` in reserve), `build`: built or updated."""

    file: str
    folder: str
    k: int
    build: str
    reserve: str
    reserve_k: int

    def fields(self) -> dict[str, Any]:
        """The `ModelRecord` fields that record it."""
        return {
            "graph": self.file,
            "graph_dir": self.folder,
            "graph_k": self.k,
            "graph_build": self.build,
            "graph_reserve": self.reserve,
            "graph_reserve_k": self.reserve_k,
        }


class _LiveVectors:
    """The live vectors of a model in a list of segments, each segment's FAISS file and tombstoned
    chunk ids read once per commit (the new generation's and the previous one's lists share
    segments)."""

    def __init__(self, index_dir: Path) -> None:
        self.index_dir = index_dir
        self._dense: dict[tuple[str, str], Any] = {}
        self._dead: dict[tuple[str, tuple[str, ...]], np.ndarray] = {}

    def _dense_of(self, entry: Segment, folder: Path, file: str, model: str) -> Any:
        key = (entry.name, model)
        if key not in self._dense:
            self._dense[key] = load_dense(folder / file, model)
        return self._dense[key]

    def _dead_of(self, entry: Segment, folder: Path) -> np.ndarray:
        key = (entry.name, entry.deleted)
        if key not in self._dead:
            self._dead[key] = dead_chunk_ids(folder, entry)
        return self._dead[key]

    def of(
        self, manifest: Manifest | None, segs: Sequence[Segment], model: str, with_vectors: bool
    ) -> tuple[np.ndarray, SegmentRows | None]:
        """(the live chunk ids with vectors of `model`, in order; their vectors when `with_vectors`,
        None when not or when no segment has any). `manifest`: the one listing `segs` (None: the
        entries record their own models)."""
        ids_parts, kept = [], []
        for entry in segs:
            folder = segment_folder(self.index_dir, entry)
            info = (manifest.segment_models(entry) if manifest is not None else entry.models).get(model)
            if not info:
                continue
            dense = self._dense_of(entry, folder, info.file, model)
            dead = self._dead_of(entry, folder)
            keep = ~np.isin(dense.ids, dead) if len(dead) else None
            ids_parts.append(dense.ids if keep is None else dense.ids[keep])
            kept.append((dense, keep))
        ids = np.concatenate(ids_parts) if ids_parts else np.zeros(0, np.int64)
        if not with_vectors or not kept:
            return ids, None
        # each segment's vectors where they are, with its live rows: not copied into one array (an
        # O(index) copy per write; each new array of several MB also costs its fresh pages, ~4 ms a
        # 2 MB huge page on the benchmark's VM); a full build copies them (`SegmentRows.array`)
        return ids, SegmentRows(
            [(dense.vectors, None if keep is None else np.flatnonzero(keep)) for dense, keep in kept]
        )


def _reusable_graph(
    index_dir: Path, old: Manifest | None, model: str, k: int, ids: np.ndarray, live: _LiveVectors
) -> tuple[np.ndarray, np.ndarray] | None:
    """(the previous generation's graph of `model` with its reserve columns, the new dense row of
    each of its rows, -1: gone) when it has one of `k` neighbours that matches its checksum; None
    (a fresh build) on any doubt about it."""
    info = old.models.get(model) if old is not None else None
    if old is None or info is None or not info.graph or info.graph_k != k:
        return None
    folder = info.graph_dir or old.path
    recorded = old.file(f"{folder}/{info.graph}" if old.format >= 2 else info.graph)
    path = index_dir / folder / info.graph
    try:
        if recorded and layout.file_sha256(path) == recorded.sha256:
            old_ids, _ = live.of(old, old.segment_list, model, False)
            old_graph = load_graph(path, len(old_ids))
            old_graph = _with_reserve(index_dir, old, folder, info, old_graph, load_reserve)
            position = np.minimum(np.searchsorted(ids, old_ids), len(ids) - 1)
            return old_graph, np.where(ids[position] == old_ids, position, -1)
        logger.warning("not reusing %s: it does not match its checksum", path)
    except Exception as error:  # noqa: BLE001 - any doubt about the old graph means a fresh build
        logger.warning("not reusing the corpus graph %s: %s", path, error)
    return None


def _write_graph(
    model: str,
    k: int,
    vectors: SegmentRows,
    reuse: tuple[np.ndarray, np.ndarray] | None,
    tmp: Path,
    name: str,
    progress: bool,
) -> _CorpusGraph:
    """Build the corpus graph of `model` over `vectors` (or update `reuse`, the previous one), and
    save its `k` columns and its reserve columns into `tmp` (the folder becoming `name`)."""
    if reuse is None:
        graph, how = (
            build_corpus_graph(vectors.array(), k, progress=progress, reserve=GRAPH_RESERVE),
            "built",
        )
    else:
        graph, how = update_corpus_graph(vectors, *reuse, k, progress=progress, reserve=GRAPH_RESERVE)
    save_graph(np.ascontiguousarray(graph[:, :k]), tmp / layout.graph_file(model))
    save_graph(np.ascontiguousarray(graph[:, k:]), tmp / _reserve_file(model))
    return _CorpusGraph(layout.graph_file(model), name, k, how, _reserve_file(model), GRAPH_RESERVE)


def _corpus_graphs(
    index_dir: Path,
    old: Manifest | None,
    entries: Sequence[Segment],
    name: str,
    tmp: Path,
    config: IndexConfig,
    dims: dict[str, int],
    progress: bool,
) -> dict[str, _CorpusGraph]:
    """The corpus graph of each model over the live vectors of every segment (rows = the
    generation's dense rows, in chunk-id order), written into `tmp` (the folder becoming `name`):
    the previous generation's graph updated (`update_corpus_graph`: exactly the graph a full build
    gives), or built when there is none to reuse."""
    live = _LiveVectors(index_dir)
    graphs: dict[str, _CorpusGraph] = {}
    for model in dims:
        k = graph_size(config.graph_k, sum(e.vectors.get(model, 0) for e in entries))
        if not k:
            continue
        started = time.perf_counter()
        ids, vectors = live.of(None, entries, model, True)
        if vectors is None or len(ids) < 2:
            continue
        reuse = _reusable_graph(index_dir, old, model, k, ids, live)
        graphs[model] = _write_graph(model, k, vectors, reuse, tmp, name, progress)
        logger.info(
            "corpus graph of %s (%d vectors): %s in %.1f s",
            model,
            len(ids),
            graphs[model].build,
            time.perf_counter() - started,
        )
    checkpoint("graph-written")
    return graphs


def _reserve_file(model: str) -> str:
    """The file of a corpus graph's reserve columns (`graph.GRAPH_RESERVE` next nearest neighbours)."""
    return layout.graph_file(model).removesuffix(".npy") + ".reserve.npy"


def _with_reserve(
    index_dir: Path,
    old: Manifest,
    folder: str,
    info: ModelRecord,
    graph: np.ndarray,
    load_reserve: Callable[[Path, int], np.ndarray],
) -> np.ndarray:
    """An old corpus graph with its reserve columns appended when it has intact ones (else alone:
    its rows that lose a neighbour are then searched afresh)."""
    name = info.graph_reserve
    recorded = old.file(f"{folder}/{name}") if name else None
    if not name or not recorded:
        return graph
    path = index_dir / folder / name
    try:
        if layout.file_sha256(path) != recorded.sha256:
            raise ValueError("it does not match its checksum")
        return np.concatenate([graph, load_reserve(path, len(graph))], axis=1)
    except (OSError, ValueError) as error:
        logger.warning("not using the corpus graph reserve %s: %s", path, error)
        return graph


def _merge_segments(
    index_dir: Path,
    old: Manifest | None,
    entries: list[Segment],
    config: IndexConfig,
    dims: dict[str, int],
    progress: bool,
    policy: bool,
    reason: str | None,
    merge_range: tuple[int, int] | None,
) -> tuple[list[Segment], list[Path], dict[str, Any] | None]:
    """Merge `merge_range` of `entries`, then by the tiered policy (`policy`) until it plans no more:
    (the entries after the merges, the private folders the merges wrote, oldest first, the record of
    the last merge or None). A merged input built by this call is removed at once."""
    folders: list[Path] = []
    last_merge: dict[str, Any] | None = None
    while True:
        plan = merge_range or (merge_plan(entries) if policy else None)
        merge_range = None
        if plan is None:
            break
        started = time.perf_counter()
        start, end = plan
        inputs = entries[start:end]
        merged, folder = build_merged(index_dir, old, inputs, config, dims, progress)
        folders.append(folder)
        entries = entries[:start] + ([merged] if merged else []) + entries[end:]
        last_merge = {
            "segments": len(inputs),
            "chunks": merged.chunks if merged else 0,
            "seconds": round(time.perf_counter() - started, 3),
            "reason": reason or "tiered policy",
        }
        for entry in inputs:  # a segment built by this call and merged away already is never committed
            if entry.folder:
                shutil.rmtree(entry.folder, ignore_errors=True)
    return entries, folders, last_merge


def _kept_folders(folders: list[Path], entries: Sequence[Segment]) -> list[Path]:
    """The new folders the commit keeps (those of live segments; the write's own, `folders[0]`,
    when it exists or nothing else is kept), the others removed."""
    live = {Path(e.folder) for e in entries if e.folder}
    kept = [folder for folder in folders if folder in live or (folder == folders[0] and folder.exists())]
    if not kept:  # everything new was merged away into nothing: the write's folder holds the commit
        folders[0].mkdir(parents=True, exist_ok=True)
        kept = [folders[0]]
    for folder in folders:
        if folder not in kept:
            shutil.rmtree(folder, ignore_errors=True)
    return kept


def _committed_manifest(
    old: Manifest | None,
    base: Manifest,
    committed: list[Segment],
    kept: list[Path],
    commit_name: str,
    number: int,
    last_merge: dict[str, Any] | None,
    config: IndexConfig,
    dims: dict[str, int],
    graphs: dict[str, _CorpusGraph],
    signature_info: tuple[FileSignaturesRecord | None, FileRecord | None],
) -> Manifest:
    """The new generation's manifest: `base` numbered and placed in the commit folder, its last
    merge, and the fields of the committed segment list (the checksums of every kept folder's files)."""
    new_files = {
        folder.name.split(".")[0]: layout.generation_files(folder, prefix=f"{folder.name.split('.')[0]}/")
        for folder in kept
    }
    manifest_base = base.replace(generation=number, path=commit_name)
    if last_merge is not None:
        manifest_base = manifest_base.replace(
            last_merge=LastMerge(at=base.built_at, generation=number, **last_merge)
        )
    return _with_segments(manifest_base, committed, old, new_files, config, dims, graphs, signature_info)


def _cache_committed_documents(
    index_dir: Path, folders: Sequence[Path], manifest: Manifest, names: set[str]
) -> None:
    """Keep what each Parquet segment of this write that `manifest` commits (`names`) holds for the
    next write's look-ups (and drop the uncommitted copies of every folder of the write)."""
    for folder in folders:  # what a Parquet segment holds, for the next write's look-ups
        documents = WRITE_CACHES.uncommitted_documents.pop(str(folder))
        name = folder.name.split(".")[0]
        recorded = manifest.file(f"{name}/{store.parquet_file('documents')}")
        if documents is not None and name in names and recorded:
            WRITE_CACHES.small_documents.put((str(index_dir / name), recorded.sha256), documents)


def commit_generation(
    index_dir: Path,
    old: Manifest | None,
    entries: list[Segment],
    folders: list[Path],
    config: IndexConfig,
    dims: dict[str, int],
    base: Manifest,
    progress: bool,
    policy: bool,
    reason: str | None = None,
    merge_range: tuple[int, int] | None = None,
    signatures: Signatures | None = None,
) -> Manifest:
    """Merge by the tiered policy (`policy`) and/or the given `merge_range`, then commit `entries`
    as one new generation: every new folder (`folders`: private, oldest first; the first is the
    write's own) flushed and renamed, the corpus graphs and the manifest copy written into the
    newest, the manifest replaced. Readers see one new generation per call. `signatures`: the file
    signatures to record (None: the old generation's). Returns the manifest."""
    entries, merge_folders, last_merge = _merge_segments(
        index_dir, old, entries, config, dims, progress, policy, reason, merge_range
    )
    folders = list(folders) + merge_folders
    kept = _kept_folders(folders, entries)
    commit_folder = max(kept, key=lambda folder: folder.name)
    commit_name = commit_folder.name.split(".")[0]
    number = int(commit_name.split("-")[1])
    graphs = _corpus_graphs(index_dir, old, entries, commit_name, commit_folder, config, dims, progress)
    signature_info = commit_signatures(
        index_dir, old, signatures, commit_folder, commit_name, {entry.name for entry in entries}
    )
    committed = [entry.committed() for entry in entries]
    manifest = _committed_manifest(
        old,
        base,
        committed,
        kept,
        commit_name,
        number,
        last_merge,
        config,
        dims,
        graphs,
        signature_info,
    )
    text = dumps(manifest)
    (commit_folder / layout.MANIFEST).write_text(text, encoding="utf-8")
    for folder in kept:
        layout.fsync_tree(folder)
    checkpoint("generation-flushed")
    for folder in sorted(kept, key=lambda f: f.name):  # the commit folder (the newest) last
        os.rename(folder, index_dir / folder.name.split(".")[0])
    checkpoint("generation-renamed")
    layout.write_manifest(index_dir, manifest, text)
    checkpoint("manifest-committed")
    _cache_committed_documents(index_dir, folders, manifest, {entry.name for entry in committed})
    previous = index_dir / old.path if old is not None else None
    layout.remove_stale(
        index_dir, keep=index_dir / commit_name, previous=previous, copies=WRITE_CACHES.manifest_copies
    )
    return manifest
