"""Build and update an index: read sources, chunk, embed what is new, write a new generation.

Only changed documents are re-chunked; chunk text already embedded by a model is taken from the
embeddings cache. A run writes a complete new generation aside and commits it by replacing the
manifest, so a failed or interrupted run leaves the previous index intact and searchable.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from hybridlab.config import IndexConfig
from hybridlab.encoders.registry import canonical_name, register_recorded
from hybridlab.errors import InvalidValueError
from hybridlab.index.format import layout, store, wal
from hybridlab.index.format.artifacts import build_artifacts, cache_vectors, embed_missing
from hybridlab.index.format.caches import WRITE_CACHES
from hybridlab.index.format.embedding_cache import EmbeddingCache, VectorBuffer, cache_model
from hybridlab.index.format.faults import checkpoint
from hybridlab.index.format.manifest import Manifest, Segment, SegmentModel
from hybridlab.index.format.report import IndexReport
from hybridlab.index.format.rows import assign_vectors, insert_documents
from hybridlab.index.format.segments import (
    attach,
    copy_live_rows,
    detach,
    existing_documents,
    keep_newest_versions,
    new_segment,
    next_chunk_id,
    persist,
    small_write,
    store_counts,
    with_live_counts,
)
from hybridlab.index.format.signatures import next_signatures, recorded_signatures
from hybridlab.index.write.commit import commit_generation, manifest_base
from hybridlab.index.write.tokens import compact_token_stores, segment_texts, store_token_vectors
from hybridlab.ingest import sources
from hybridlab.ingest.sources import Document, FolderScan

logger = logging.getLogger(__name__)


def canonical_models(names: Iterable[str]) -> tuple[str, ...]:
    """Registry names, model folders' portable names and hub ids, each once (nothing is loaded)."""
    return tuple(dict.fromkeys(canonical_name(name) for name in names))


def _documents_from_store(con) -> list[Document]:
    rows = con.execute(
        "SELECT doc_id, source, collection, title, text, doc_type, created_at, updated_at, metadata, language, tags "
        "FROM documents ORDER BY doc_id"
    ).fetchall()
    return [
        Document(
            r[0],
            r[1],
            r[2],
            r[3],
            r[4],
            r[5],
            r[6],
            r[7],
            json.loads(r[8]) if r[8] else {},
            tuple(r[10] or ()),
            r[9],
        )
        for r in rows
    ]


Batch = tuple[str, list[Document], bool]  # (source, documents, remove_missing)


def last_versions(batches: Sequence[Batch]) -> list[Batch]:
    """The batches with each (source, doc id)'s last document only: a write that brings an id twice
    keeps its later version, exactly as two writes in a row would (the one rule of every write
    path: `apply_changes`, the memory writer's group commits and the write-ahead log's records)."""
    last: dict[tuple[str, str], tuple[int, int]] = {}
    total = 0
    for b, (source, documents, _) in enumerate(batches):
        total += len(documents)
        for i, document in enumerate(documents):
            last[(source, document.doc_id)] = (b, i)
    if len(last) == total:
        return list(batches)
    return [
        (
            source,
            [document for i, document in enumerate(documents) if last[(source, document.doc_id)] == (b, i)],
            remove_missing,
        )
        for b, (source, documents, remove_missing) in enumerate(batches)
    ]


def _plan(
    existing: dict[str, tuple[str, str]],
    batches: Sequence[tuple[str, list[Document], bool]],
    report: IndexReport,
    unchanged: dict[str, Iterable[str]] | None = None,
    delete_ids: Sequence[str] = (),
) -> tuple[list[Document], list[str]]:
    """Which documents to (re)insert and which doc ids to delete. `unchanged`: by source, the doc
    ids of files not read because their signature is the recorded one (kept as they are);
    `delete_ids`: documents to delete whatever their source (those not indexed are ignored)."""
    to_insert: list[Document] = []
    to_delete: list[str] = []
    seen: dict[str, str] = {}
    for source, documents, remove_missing in batches:
        ids_here = set()
        for doc_id in (unchanged or {}).get(source, ()):
            ids_here.add(doc_id)
            seen[doc_id] = source
            if existing.get(doc_id, ("",))[0] == source:
                report.unchanged += 1
            else:  # recorded but no longer indexed (removed by another write): read by the next run
                logger.warning("%s: %s has a recorded file signature but no indexed document", source, doc_id)
        for document in documents:
            if document.doc_id in seen and seen[document.doc_id] != source:
                raise InvalidValueError(
                    f"document id {document.doc_id!r} comes from two sources: {seen[document.doc_id]} and {source}"
                )
            seen[document.doc_id] = source
            ids_here.add(document.doc_id)
            old = existing.get(document.doc_id)
            if old is None:
                report.added += 1
                to_insert.append(document)
            elif old[1] != document.content_sha256 or old[0] != source:
                report.changed += 1
                to_delete.append(document.doc_id)
                to_insert.append(document)
            else:
                report.unchanged += 1
        if remove_missing:
            gone = [
                doc_id for doc_id, (src, _) in existing.items() if src == source and doc_id not in ids_here
            ]
            report.removed += len(gone)
            to_delete.extend(gone)
    for doc_id in dict.fromkeys(delete_ids):
        if doc_id in seen:
            raise InvalidValueError(f"document id {doc_id!r} is both written and deleted by one write")
        if doc_id in existing:
            report.removed += 1
            to_delete.append(doc_id)
    report.documents = len(seen)
    return to_insert, to_delete


def _logged_batches(records: Sequence[wal.WalRecord]) -> list[tuple[str, list[Document], bool]]:
    """The write-ahead log's documents (each id's last record, tombstoned ids left out) as write
    batches, one per source (nothing removed)."""
    by_source: dict[str, list[Document]] = {}
    for record in wal.latest_records(records):
        if record.document is not None:
            by_source.setdefault(record.document.source, []).append(record.document)
    return [(source, documents, False) for source, documents in by_source.items()]


def fold_log(
    index_dir: str | os.PathLike, *, progress: bool = False, lock_wait: float | None = None
) -> IndexReport | None:
    """Commit the live generation's write-ahead log as a segment (None: it holds nothing)."""
    index_dir = Path(index_dir)
    try:
        manifest = layout.read_manifest(index_dir)
    except FileNotFoundError:
        return None
    if wal.log_size(wal.wal_path(index_dir, manifest.generation)) <= len(wal.MAGIC):
        return None  # no log, or an empty one (apply_changes reads the records)
    report = apply_changes(
        index_dir,
        [],
        progress=progress,
        cache_path=layout.recorded_cache(index_dir, manifest),
        use_cache=False,
        lock_wait=lock_wait,
    )
    return report if report.committed else None


def optimize(index_dir: str | os.PathLike, *, progress: bool = False) -> IndexReport:
    """Merge every segment into one, dropping tombstoned rows (`hybridlab index --optimize`);
    readers keep answering from the generation they hold meanwhile. The write-ahead log is folded first."""
    index_dir = Path(index_dir)
    started = time.perf_counter()
    report = IndexReport(str(index_dir))
    fold_log(index_dir, progress=progress)
    with layout.WriterLock(index_dir):
        manifest = layout.read_manifest(index_dir)
        entries = list(manifest.segment_list)
        if len(entries) > 1 or any(e.deleted for e in entries) or any(e.legacy for e in entries):
            config = manifest.index_config
            cache_file = Path(manifest.embedding_cache or index_dir / layout.CACHE_FILE)
            base = manifest_base(0, config, cache_file, 0.0, manifest, next_chunk_id(index_dir, manifest))
            number = layout.next_generation_number(index_dir)
            tmp = index_dir / f"{layout.generation_name(number)}.tmp-{os.getpid()}"
            tmp.mkdir(parents=True)
            try:
                manifest = commit_generation(
                    index_dir,
                    manifest,
                    entries,
                    [tmp],
                    config,
                    manifest.dims,
                    base,
                    progress,
                    policy=False,
                    reason="optimize",
                    merge_range=(0, len(entries)),
                )
            finally:
                for leftover in index_dir.glob(f"gen-*.tmp-{os.getpid()}"):
                    shutil.rmtree(leftover, ignore_errors=True)
            report.committed = True
        compact_token_stores(index_dir, manifest)
        report.generation = manifest.generation
        report.documents = manifest.counts.documents
        report.chunks = manifest.counts.chunks
    report.seconds = time.perf_counter() - started
    return report


@dataclasses.dataclass(frozen=True)
class WriteRequest:
    """One `apply_changes` call's arguments as its stages read them (`started`: its perf_counter start)."""

    index_dir: Path
    batches: Sequence[Batch]
    config: IndexConfig | None  # None: the index's own (or the default); see `PreparedWrite.config`
    cache_file: Path
    started: float
    progress: bool = True
    force: bool = False
    merge: bool = True
    use_cache: bool = True
    scans: Sequence[FolderScan] = ()
    delete_ids: Sequence[str] = ()
    imported: Callable[[Any, Any], int] | None = None


@dataclasses.dataclass(frozen=True)
class PreparedWrite:
    """A write's starting point: the live manifest and segments, the config, and the log merged in."""

    request: WriteRequest
    manifest: Manifest | None  # None: a new index
    old_config: IndexConfig | None
    config: IndexConfig  # its models under their canonical names
    entries: tuple[Segment, ...]
    logged: wal.WalContents | None  # the live generation's write-ahead log
    batches: list[Batch]  # each id's last version, the log's documents first
    delete_ids: Sequence[str]  # the caller's, then the log's tombstones
    logged_deletions: frozenset[str]  # logged ids this write deletes or drops (see `_merge_logged`)


@dataclasses.dataclass(frozen=True)
class WritePlan:
    """What a write changes: the documents to insert, the ids to delete, and the segment layout."""

    request: WriteRequest
    manifest: Manifest | None
    config: IndexConfig
    entries: tuple[Segment, ...]
    logged: wal.WalContents | None
    existing: dict[str, tuple[str, str, int]]  # `existing_documents`: {doc_id: (source, sha256, segment)}
    to_insert: list[Document]
    to_delete: list[str]
    rechunk: bool  # the chunking changed: every live document is chunked again
    full: bool  # one segment holding every live document replaces the segments
    idle: bool  # nothing to write: no generation is committed


@dataclasses.dataclass(frozen=True)
class BuiltSegment:
    """A write's segment as built in its tmp folder (`counts`, `faiss_files` None: no segment)."""

    next_id: int  # the next free chunk id
    to_insert: list[Document]  # the documents the segment holds (a rechunk: every live one)
    counts: dict[str, Any] | None
    faiss_files: dict[str, SegmentModel] | None
    dims: dict[str, int]


def _canonical_config(config: IndexConfig, manifest: Manifest | None) -> IndexConfig:
    """`config` with each model under its canonical name (the manifest's external models registered first)."""
    register_recorded(manifest.encoders if manifest else {})  # imported vectors' external models
    return dataclasses.replace(
        config,
        models=canonical_models(config.models),
        model_by_collection=tuple((k, canonical_models([m])[0]) for k, m in config.model_by_collection),
        model_by_language=tuple((k, canonical_models([m])[0]) for k, m in config.model_by_language),
    )


def _merge_logged(
    logged: wal.WalContents | None, batches: list[Batch], delete_ids: Sequence[str]
) -> tuple[list[Batch], Sequence[str], frozenset[str]]:
    """The write-ahead log's memories go into this write's segment first: its documents as batches
    ahead of `batches`, its tombstones after `delete_ids`. A document this write brings again, or
    deletes, wins over its logged version; a source brought whole (remove_missing) drops the log's
    documents of that source. Returns (batches, delete_ids, the logged ids this write deletes or
    drops: deleted by this write even when no segment holds them)."""
    if logged is None or not logged.records:
        return batches, delete_ids, frozenset()
    incoming = {document.doc_id for _, documents, _ in batches for document in documents} | set(delete_ids)
    whole = {source for source, _, remove_missing in batches if remove_missing}  # their logged ones dropped
    dropped = {r.doc_id for r in logged.records if r.document is not None and r.document.source in whole}
    kept = [r for r in logged.records if r.doc_id not in incoming and r.doc_id not in dropped]
    batches = [*_logged_batches(kept), *batches]
    delete_ids = (*delete_ids, *sorted(logged.deleted - incoming - dropped))  # the log's tombstones
    return batches, delete_ids, frozenset((logged.doc_ids & set(delete_ids)) | (dropped - incoming))


def prepare_write(request: WriteRequest) -> PreparedWrite:
    """Stage 1a of a write, before its tmp folder exists: read the manifest, canonicalise the config's
    models, remove stale folders and merge the write-ahead log into the request.

    Contract: a missing manifest beside generation folders is a CorruptIndexError (nothing changed);
    otherwise the only change under index_dir is `layout.remove_stale` (crashed builds, retired
    generations and logs), after which checkpoint "start" is reached."""
    index_dir = request.index_dir
    manifest = None
    if (index_dir / layout.MANIFEST).exists():
        manifest = layout.read_manifest(index_dir)
    elif layout.generations(index_dir):
        raise layout.CorruptIndexError(
            f"{index_dir / layout.MANIFEST} is missing but generation folders exist; "
            f"{layout.repair_hint(index_dir)} before indexing into it"
        )
    old_config = manifest.index_config if manifest else None
    config = _canonical_config(request.config or old_config or IndexConfig(), manifest)
    old_generation = index_dir / manifest.path if manifest else None
    layout.remove_stale(
        index_dir,
        keep=old_generation,
        previous=layout.previous_generation(index_dir, old_generation),
        copies=WRITE_CACHES.manifest_copies,
    )
    checkpoint("start")
    entries = tuple(manifest.segment_list) if manifest else ()
    logged = wal.read_wal(wal.wal_path(index_dir, manifest.generation)) if manifest else None
    batches = last_versions(request.batches)  # an id brought twice: its last version
    batches, delete_ids, logged_deletions = _merge_logged(logged, batches, request.delete_ids)
    return PreparedWrite(
        request, manifest, old_config, config, entries, logged, batches, delete_ids, logged_deletions
    )


def plan_write(prepared: PreparedWrite, report: IndexReport) -> WritePlan:
    """Stage 1b of a write, once its tmp folder exists: find the live documents it may change, decide
    what to insert and delete (`_plan`) and whether everything is rewritten as one segment (`full`).

    Contract: reads the live segments only (nothing under index_dir changes) and reaches checkpoint
    "store-copied"; counts added/changed/removed/unchanged documents into `report`; a document id
    from two sources, or both written and deleted, is a ValueError. `idle`: nothing to commit."""
    request = prepared.request
    probes = [Document(doc_id, "", "", "", "", "memory") for doc_id in prepared.delete_ids]  # looked up by id
    existing = existing_documents(
        request.index_dir, prepared.manifest, prepared.entries, [*prepared.batches, ("", probes, False)]
    )
    # ids deleted while only in the log: dropped from the batches by `_merge_logged`, a change of their own
    only_logged = prepared.logged_deletions - set(existing)
    report.removed += len(only_logged)
    checkpoint("store-copied")
    old_config, config = prepared.old_config, prepared.config
    rechunk = old_config is not None and (old_config.chunk != config.chunk)
    relayout = old_config is None or rechunk or old_config != config
    to_insert, to_delete = _plan(
        {k: v[:2] for k, v in existing.items()},
        prepared.batches,
        report,
        {scan.source: scan.unchanged for scan in request.scans},
        prepared.delete_ids,
    )
    # a pre-segment (format 1) index is rewritten as one segment by its first change
    force = request.force or request.imported is not None
    full = relayout or force or any(entry.legacy for entry in prepared.entries)
    idle = not (to_insert or to_delete or relayout or force or only_logged)
    return WritePlan(
        request,
        prepared.manifest,
        config,
        prepared.entries,
        prepared.logged,
        existing,
        to_insert,
        to_delete,
        rechunk,
        full,
        idle,
    )


def _fill_store(
    con, plan: WritePlan, next_id: int, number: int, report: IndexReport
) -> tuple[int, list[Document]]:
    """Fill the new segment's store: with `full`, every segment's live rows first (chunked again on
    a rechunk), then the documents to insert. Returns (next free chunk id, the documents inserted)."""
    to_insert = plan.to_insert
    if plan.full:  # one segment holding every live document
        if plan.entries:
            aliases = attach(con, plan.request.index_dir, plan.entries)
            copy_live_rows(con, aliases, plan.entries, extra_deleted=plan.to_delete, vectors=False)
            detach(con, aliases)
            keep_newest_versions(con)
        if plan.rechunk:
            kept = _documents_from_store(con)
            con.execute(
                "DELETE FROM chunk_vectors; DELETE FROM tags; DELETE FROM chunks; DELETE FROM documents"
            )
            to_insert = kept + to_insert
    # The segment is private until the manifest names it, so its store may commit in steps:
    # each insert batch commits on its own (DuckDB keeps the frames registered in a
    # transaction, i.e. every chunk text of the build, alive until the transaction ends).
    next_id, report.new_chunks = insert_documents(con, to_insert, plan.config, next_id)
    con.execute("BEGIN TRANSACTION")
    store.set_meta(con, {"next_chunk_id": next_id, "generation": number})
    assign_vectors(con, plan.config)
    con.execute("COMMIT")
    return next_id, to_insert


def _embed(
    con, cache: EmbeddingCache | VectorBuffer, plan: WritePlan, known: dict[str, int], report: IndexReport
) -> dict[str, int]:
    """Embed the segment's chunk texts missing from `cache`, after putting the log's vectors and the
    imported ones into it; returns each model's dimension."""
    if plan.logged is not None and plan.logged.records:  # their vectors are in the log: not embedded again
        for model, (hashes, vectors) in wal.record_vectors(plan.logged.latest, plan.config).items():
            cache.put(cache_model(model), hashes, vectors)
    if plan.request.imported is not None:
        report.imported = plan.request.imported(con, cache)
    known_encoders = {m: e for m, e in (plan.manifest.encoders if plan.manifest else {}).items() if e}
    return embed_missing(
        con, cache, plan.config.all_models, report, plan.config, known, plan.request.progress, known_encoders
    )


def build_segment(plan: WritePlan, tmp: Path, number: int, report: IndexReport) -> BuiltSegment:
    """Stage 2 of a write: build its segment (store, BM25 postings, FAISS files) in `tmp`, embedding
    the chunk texts the embeddings cache lacks. A write that only deletes builds none.

    Contract: writes only under `tmp` (and into the embeddings cache), so nothing readers see
    changes; reaches checkpoint "store-committed" once the store is committed, segment or not; the
    store connection and cache it opens are closed before it returns or raises."""
    request = plan.request
    next_id = next_chunk_id(request.index_dir, plan.manifest)
    to_insert = plan.to_insert
    con = None
    cache = None
    try:
        if plan.full or not small_write(to_insert):
            con = store.connect(tmp / layout.STORE_FILE)
        elif to_insert:  # a small segment: built in memory, written as Parquet tables (`persist`)
            con = store.ScratchConnection()
        if con is not None:
            store.create_schema(con)
            next_id, to_insert = _fill_store(con, plan, next_id, number, report)
        checkpoint("store-committed")
        known = plan.manifest.dims if plan.manifest else {}
        if con is None:
            return BuiltSegment(next_id, to_insert, None, None, known)
        cache = EmbeddingCache(request.cache_file) if request.use_cache or plan.full else VectorBuffer()
        dims = _embed(con, cache, plan, known, report)
        store_token_vectors(request.index_dir, plan.config, segment_texts(con), progress=request.progress)
        faiss_files = build_artifacts(
            con, cache_vectors(cache), tmp, plan.config, dims, progress=request.progress
        )
        counts = store_counts(con)
        persist(con, tmp)
        con.close()
        con = None
        cache.close()
        cache = None
        return BuiltSegment(next_id, to_insert, counts, faiss_files, dims)
    finally:  # on a failure (else both were closed above, before the commit reads the segment)
        if con is not None:
            con.close()
        if cache is not None:
            cache.close()


def _next_segments(
    plan: WritePlan, built: BuiltSegment, tmp: Path, name: str, report: IndexReport
) -> list[Segment]:
    """The new generation's segments: the built one alone (`full`), else the live ones with this
    write's deletions tombstoned where they are, then the built one (if any)."""
    if plan.full:
        # a full write always builds a segment
        assert built.counts is not None and built.faiss_files is not None
        return [new_segment(name, built.counts, built.faiss_files, tmp)]
    entries = list(plan.entries)
    by_segment: dict[int, list[str]] = {}
    for doc_id in plan.to_delete:
        by_segment.setdefault(plan.existing[doc_id][2], []).append(doc_id)
    for i, doc_ids in by_segment.items():
        assert plan.manifest is not None  # documents to delete are in the live manifest's segments
        tombstoned = dataclasses.replace(entries[i], deleted=tuple(sorted({*entries[i].deleted, *doc_ids})))
        entries[i] = with_live_counts(plan.request.index_dir, plan.manifest, tombstoned)
    # vectors of the kept segments are reused as they are: counted with the cache hits
    report.cache_hits += sum(sum(entry.vectors.values()) for entry in entries)
    if built.to_insert:
        # documents to insert: a segment was built
        assert built.counts is not None and built.faiss_files is not None
        entries.append(new_segment(name, built.counts, built.faiss_files, tmp))
    return entries


def commit_write(
    plan: WritePlan, built: BuiltSegment, tmp: Path, number: int, report: IndexReport
) -> Manifest:
    """Stage 3 of a write: commit `tmp` as generation `number` and return its manifest.

    Contract: the only stage that changes what readers see, all at once: `commit_generation` merges
    by the tiered policy first (`merge`; merged segments are built aside too), fsyncs the new folders,
    renames them and replaces the manifest atomically; a failure before that replacement leaves the
    previous generation live (the next write removes folders no manifest names)."""
    request = plan.request
    entries = _next_segments(plan, built, tmp, layout.generation_name(number), report)
    base = manifest_base(
        number,
        plan.config,
        request.cache_file,
        time.perf_counter() - request.started,
        plan.manifest,
        built.next_id,
    )
    signatures = next_signatures(
        request.index_dir, plan.manifest, request.scans, built.to_insert, plan.to_delete, plan.existing
    )
    return commit_generation(
        request.index_dir,
        plan.manifest,
        entries,
        [tmp],
        plan.config,
        built.dims,
        base,
        request.progress,
        policy=request.merge,
        signatures=signatures,
    )


def _remove_private_folders(index_dir: Path) -> None:
    """Remove this process's private `gen-N.tmp-PID` folders left in `index_dir` (and forget the
    documents cached for them)."""
    for leftover in index_dir.glob(f"gen-*.tmp-{os.getpid()}"):
        WRITE_CACHES.uncommitted_documents.pop(str(leftover))
        shutil.rmtree(leftover, ignore_errors=True)


def _write_generation(prepared: PreparedWrite, report: IndexReport) -> None:
    """Stages 2 and 3 of a write, under the writer lock: plan the change once the private
    `gen-N.tmp-PID` folder exists, build its segment there and commit it as generation N, recording
    the outcome (and the write's seconds) in `report`. The folder is gone when this returns or
    raises: renamed by the commit, else removed."""
    request = prepared.request
    index_dir = request.index_dir
    number = layout.next_generation_number(index_dir)
    tmp = index_dir / f"{layout.generation_name(number)}.tmp-{os.getpid()}"
    tmp.mkdir(parents=True)
    try:
        plan = plan_write(prepared, report)
        if plan.idle:
            report.chunks = plan.manifest.counts.chunks if plan.manifest else 0
            report.generation = plan.manifest.generation if plan.manifest else None
            report.seconds = time.perf_counter() - request.started
            return
        built = build_segment(plan, tmp, number, report)
        new_manifest = commit_write(plan, built, tmp, number, report)
        report.chunks = new_manifest.counts.chunks
        report.generation = new_manifest.generation
        report.committed = True
    finally:
        _remove_private_folders(index_dir)
    report.seconds = time.perf_counter() - request.started


def apply_changes(
    index_dir: str | os.PathLike,
    batches: Sequence[tuple[str, list[Document], bool]],
    config: IndexConfig | None = None,
    *,
    progress: bool = True,
    force: bool = False,
    report: IndexReport | None = None,
    cache_path: str | os.PathLike | None = None,
    merge: bool = True,
    use_cache: bool = True,
    scans: Sequence[FolderScan] = (),
    lock_wait: float | None = None,
    delete_ids: Sequence[str] = (),
    imported: Callable[[Any, Any], int] | None = None,
) -> IndexReport:
    """Apply (source, documents, remove_missing) batches as one new generation of the index.

    A write adds one segment holding the new and changed documents and tombstones the changed and
    removed ones in the segments that hold them; nothing written before is rewritten. A first build,
    a changed config (chunking, models, ...) or `force` writes one segment holding everything. With
    `merge`, the tiered merge policy runs after the commit (:func:`merge_plan`). Without `use_cache`
    (the memory writer's stores: new texts), a write's new texts are embedded without opening the
    embeddings cache and their vectors live in the segment's FAISS files only.

    `scans`: the folder sources among the batches as `read_folder` read them (a batch's documents
    are a scan's `documents`); their files left unread (`unchanged`) keep their documents, and the
    write records the scans' file signatures for the next `index_paths` (`recorded_signatures`).

    A document id brought twice (in one batch or two of one source) keeps its last version
    (:func:`last_versions`). `lock_wait`: seconds to wait for another writer (None:
    `layout.lock_wait_seconds()`). `delete_ids`: documents deleted by this write whatever their source
    (tombstoned like removed ones, dropped from the write-ahead log; ids not indexed are ignored, an
    id both written and deleted is a ValueError): the memory writer's `delete` without a log. The
    log's tombstones are deleted the same way, its puts of indexed ids replace them (the fold).
    `imported(con, cache)`: vectors from a file put into the cache before embedding
    (`vectors_import.import_hook`; the whole index is rewritten as one segment, as with `force`).

    Under the writer lock, in three stages: plan the change (:func:`prepare_write`, then
    :func:`plan_write` once the private `gen-N.tmp-PID` folder exists), build its segment in that
    folder (:func:`build_segment`) and commit it as a generation (:func:`commit_write`). The folder
    is gone when this returns or raises: renamed by the commit, else removed (a killed write's by the
    next write's `layout.remove_stale`)."""
    index_dir = Path(index_dir)
    started = time.perf_counter()
    report = report or IndexReport(str(index_dir))
    with layout.WriterLock(index_dir, timeout=lock_wait):
        cache_file = Path(cache_path) if cache_path else index_dir / layout.CACHE_FILE
        request = WriteRequest(
            index_dir,
            batches,
            config,
            cache_file,
            started,
            progress=progress,
            force=force,
            merge=merge,
            use_cache=use_cache,
            scans=scans,
            delete_ids=delete_ids,
            imported=imported,
        )
        _write_generation(prepare_write(request), report)
        return report


def index_paths(
    paths: Sequence[str | os.PathLike],
    index_dir: str | os.PathLike,
    config: IndexConfig | None = None,
    *,
    progress: bool = True,
    force: bool = False,
    check_content: bool = False,
    cache_path: str | os.PathLike | None = None,
    imported: Callable[[Any, Any], int] | None = None,
) -> IndexReport:
    """Index (or update) folders, BEIR datasets and memories files into `index_dir`.

    Re-indexing a folder reads only the files that may have changed: a file whose signature (size,
    inode, mtime and ctime) is the one the index recorded when it last read the file is skipped, its
    document kept as it is. Every other file is read and its document compared by content hash
    (title, text, mtime as `updated_at`, ...), so only changed documents are written; files gone from
    the folder are deleted. Signatures are recorded by each write for the files it read, except those
    changed within `layout.SETTLED_NS` (2 s) before the scan (racy: a same-size edit in the same clock
    tick moves neither mtime nor ctime), which the next run reads again. `check_content` reads every
    file whatever its signature (`hybridlab index --check-content`); `force` does too and also
    rewrites the whole index as one segment (`--force`). `imported`: see `apply_changes`."""
    started = time.perf_counter()
    ingest = sources.IngestReport()
    batches = []
    scans = []
    recorded = {} if force or check_content else recorded_signatures(index_dir)
    for raw in paths:
        path = Path(raw)
        if sources.source_kind(path) == "folder":
            known = None if force or check_content else recorded.get(str(path.resolve()), {})
            scan = sources.read_folder(path, ingest, known, settled_ns=layout.SETTLED_NS)
            ingest.documents += len(scan.documents)
            scans.append(scan)
            batches.append((scan.source, scan.documents, True))
            continue
        documents = sources.read_source(path, ingest)
        batches.append((sources.source_id(path), documents, True))
    report = IndexReport(str(index_dir), skipped=ingest.skipped)
    report = apply_changes(
        index_dir,
        batches,
        config,
        progress=progress,
        force=force,
        report=report,
        cache_path=cache_path,
        scans=scans,
        imported=imported,
    )
    report.seconds = time.perf_counter() - started
    return report
