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
import platform
import shutil
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from hybridlab.config import IndexConfig
from hybridlab.index import layout, store
from hybridlab.index.embedding_cache import EmbeddingCache, text_sha256
from hybridlab.ingest.chunking import Chunk, chunk_text, embedding_text, single_chunk
from hybridlab.ingest.sources import Document, IngestReport, read_source

logger = logging.getLogger(__name__)

EMBED_BATCH = 256
INSERT_BATCH = 10_000  # documents per DuckDB insert (bounds the chunk texts held in Python)
READ_BATCH = 20_000  # chunk ids per query when streaming chunk texts out of DuckDB
# Test hook for fault injection: called with a stage name at each step of a build.
_CHECKPOINT: Callable[[str], None] | None = None


def _checkpoint(stage: str) -> None:
    hook = _CHECKPOINT
    if hook is None and os.environ.get("HYBRIDLAB_TRACE_STAGES"):
        print(f"STAGE {stage}", flush=True)
    elif hook is not None:
        hook(stage)


@dataclass
class IndexReport:
    """What one indexing run did, with its timing."""

    index_dir: str
    generation: int | None = None
    documents: int = 0
    added: int = 0
    changed: int = 0
    removed: int = 0
    unchanged: int = 0
    chunks: int = 0
    new_chunks: int = 0
    embedded: int = 0
    cache_hits: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)
    seconds: float = 0.0
    embed_seconds: float = 0.0
    committed: bool = False

    @property
    def chunks_per_second(self) -> float:
        return self.new_chunks / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "chunks_per_second": round(self.chunks_per_second, 1)}

    def summary(self) -> str:
        state = f"generation {self.generation}" if self.committed else "no change (index untouched)"
        return (
            f"{self.documents} documents: {self.added} added, {self.changed} changed, {self.removed} removed, "
            f"{self.unchanged} unchanged; {self.chunks} chunks ({self.new_chunks} new), {self.embedded} embedded, "
            f"{self.cache_hits} from cache; {len(self.skipped)} files skipped; {self.seconds:.1f} s, "
            f"{self.chunks_per_second:.1f} chunks/s; {state}"
        )


def chunk_document(document: Document, config: IndexConfig) -> list[Chunk]:
    """The chunks of one document, by its type: header chunking for markdown/reST/notebooks."""
    if document.doc_type == "memory":
        return single_chunk(document.text, chunk_type="memory", language=document.language)
    if document.doc_type == "beir" or config.chunk.strategy == "whole":
        chunk_type = "memory" if document.doc_type == "memory" else "text"
        return single_chunk(document.text or document.title, section=document.title, chunk_type=chunk_type,
                            language=document.language)
    fmt = {"markdown": "markdown", "notebook": "markdown", "rst": "rst"}.get(document.doc_type, "text")
    default_language = "markdown" if document.doc_type == "notebook" else document.language
    return chunk_text(document.text, config.chunk, fmt=fmt, title=document.title, language=default_language)


def canonical_models(names: Iterable[str]) -> tuple[str, ...]:
    from hybridlab.encoders.registry import get_spec

    return tuple(dict.fromkeys(get_spec(name).name for name in names))


def _documents_from_store(con) -> list[Document]:
    rows = con.execute(
        "SELECT doc_id, source, collection, title, text, doc_type, created_at, updated_at, metadata, language, tags "
        "FROM documents ORDER BY doc_id"
    ).fetchall()
    import json

    return [
        Document(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], json.loads(r[8]) if r[8] else {}, tuple(r[10] or ()), r[9])
        for r in rows
    ]


def _insert_documents(con, documents: Sequence[Document], config: IndexConfig, next_id: int) -> tuple[int, int]:
    """Insert documents, their chunks and tags, `INSERT_BATCH` documents at a time (so chunk texts
    exist in Python for one batch only); returns (next free chunk id, chunks inserted)."""
    inserted = 0
    for start in range(0, len(documents), INSERT_BATCH):
        con.execute("BEGIN TRANSACTION")
        next_id, count = _insert_batch(con, documents[start:start + INSERT_BATCH], config, next_id)
        con.execute("COMMIT")
        inserted += count
    return next_id, inserted


def _insert_batch(con, documents: Sequence[Document], config: IndexConfig, next_id: int) -> tuple[int, int]:
    docs: dict[str, list] = {k: [] for k in ("doc_id", "source", "collection", "title", "text", "doc_type",
                                               "created_at", "updated_at", "metadata", "language", "tags", "content_sha256")}
    chunks: dict[str, list] = {k: [] for k in ("chunk_id", "doc_id", "chunk_index", "section", "chunk_type", "text",
                                                 "start_char", "end_char", "language", "embed_text", "embed_sha256")}
    tags: dict[str, list] = {"chunk_id": [], "doc_id": [], "tag": []}
    for document in documents:
        for key, value in (("doc_id", document.doc_id), ("source", document.source), ("collection", document.collection),
                           ("title", document.title), ("text", document.text), ("doc_type", document.doc_type),
                           ("created_at", document.created_at), ("updated_at", document.updated_at),
                           ("metadata", store.metadata_json(document.metadata)), ("language", document.language),
                           ("tags", list(document.tags)), ("content_sha256", document.content_sha256)):
            docs[key].append(value)
        for chunk in chunk_document(document, config):
            text = embedding_text(chunk, document.title if document.doc_type != "memory" else "")
            for key, value in (("chunk_id", next_id), ("doc_id", document.doc_id), ("chunk_index", chunk.chunk_index),
                               ("section", chunk.section), ("chunk_type", chunk.chunk_type), ("text", chunk.text),
                               ("start_char", chunk.start_char), ("end_char", chunk.end_char),
                               ("language", chunk.language), ("embed_text", text), ("embed_sha256", text_sha256(text))):
                chunks[key].append(value)
            for tag in document.tags:
                tags["chunk_id"].append(next_id)
                tags["doc_id"].append(document.doc_id)
                tags["tag"].append(tag)
            next_id += 1
    if docs["doc_id"]:
        import pandas as pd

        frame = pd.DataFrame(docs)
        for column in ("created_at", "updated_at"):
            frame[column] = pd.to_datetime(frame[column], utc=True).dt.tz_localize(None)
        con.register("incoming_docs", frame)
        con.execute(f"INSERT INTO documents ({', '.join(docs)}) SELECT {', '.join(docs)} FROM incoming_docs")
        con.unregister("incoming_docs")
    store.insert_rows(con, "chunks", chunks)
    store.insert_rows(con, "tags", tags)
    return next_id, len(chunks["chunk_id"])


def _assign_vectors(con, config: IndexConfig) -> None:
    """(Re)derive which chunks each model embeds, from the config's per-collection/language table."""
    con.execute("DELETE FROM chunk_vectors")
    if not config.model_by_collection and not config.model_by_language:  # every chunk, every model: in SQL
        for model in config.models:
            con.execute("INSERT INTO chunk_vectors SELECT chunk_id, ?, embed_sha256 FROM chunks", [model])
        return
    rows = con.execute(
        "SELECT c.chunk_id, d.collection, c.language, c.embed_sha256 FROM chunks c JOIN documents d USING (doc_id) ORDER BY c.chunk_id"
    ).fetchall()
    assignment: dict[str, list] = {"chunk_id": [], "model": [], "embed_sha256": []}
    for chunk_id, collection, language, sha in rows:
        for model in config.model_for(collection, language):
            assignment["chunk_id"].append(chunk_id)
            assignment["model"].append(model)
            assignment["embed_sha256"].append(sha)
    store.insert_rows(con, "chunk_vectors", assignment)


def _embed_missing(con, cache: EmbeddingCache, models: Sequence[str], report: IndexReport, config: IndexConfig,
                   known_dims: dict[str, int], progress: bool) -> dict[str, int]:
    """Embed every assigned chunk text not yet in the cache; returns each model's dimension."""
    from hybridlab.encoders.registry import get_spec, load_encoder

    dims: dict[str, int] = {}
    for model in models:
        spec = get_spec(model)
        if model in known_dims and known_dims[model] != spec.dim:
            raise ValueError(
                f"model {model!r} was indexed with dimension {known_dims[model]} but now has {spec.dim}; "
                f"drop its vectors first: hybridlab reindex --drop-model {model}"
            )
        dims[model] = spec.dim
        hashes = [row[0] for row in con.execute(
            "SELECT DISTINCT embed_sha256 FROM chunk_vectors WHERE model = ?", [model]).fetchall()]
        todo = cache.missing(model, hashes, dim=spec.dim)
        report.cache_hits += len(hashes) - len(todo)
        del hashes
        if not todo:
            continue
        missing = _texts_of(con, todo)
        encoder = load_encoder(model)
        missing.sort(key=lambda pair: len(pair[1]))
        started = time.perf_counter()
        bar = _progress(total=len(missing), desc=f"embedding ({model})", enabled=progress, unit="chunk")
        step = int(os.environ.get("HYBRIDLAB_EMBED_BATCH", EMBED_BATCH))  # small in fault-injection tests
        for start in range(0, len(missing), step):
            batch = missing[start:start + step]
            vectors = encoder.encode_documents([text for _, text in batch], batch_size=config.embed_batch_size)
            if vectors.shape[1] != spec.dim:
                raise ValueError(f"model {model!r} returned dimension {vectors.shape[1]}, registry says {spec.dim}")
            cache.put(model, [sha for sha, _ in batch], vectors)
            report.embedded += len(batch)
            bar.update(len(batch))
            _checkpoint("embedded-batch")
        bar.close()
        report.embed_seconds += time.perf_counter() - started
    return dims


def _texts_of(con, hashes: Sequence[str]) -> list[tuple[str, str]]:
    """(sha, embed_text) of the given embedding-text hashes, one text per hash."""
    import pandas as pd

    con.register("wanted_sha", pd.DataFrame({"sha": list(hashes)}))
    try:
        return con.execute("SELECT w.sha, any_value(c.embed_text) FROM wanted_sha w "
                           "JOIN chunks c ON c.embed_sha256 = w.sha GROUP BY w.sha ORDER BY w.sha").fetchall()
    finally:
        con.unregister("wanted_sha")


def _streamed_texts(con, ids: np.ndarray) -> Iterable[str]:
    """The embedding text of each chunk of `ids` (every chunk id, ascending), `READ_BATCH` ids per
    query: each query sorts one small range (one sort of all texts overruns a bounded buffer pool)."""
    step = READ_BATCH
    for start in range(0, len(ids), step):
        low, high = int(ids[start]), int(ids[min(start + step, len(ids)) - 1])
        rows = con.execute("SELECT embed_text FROM chunks WHERE chunk_id BETWEEN ? AND ? ORDER BY chunk_id",
                           [low, high]).fetchall()
        for (text,) in rows:
            yield text


def _progress(total: int, desc: str, enabled: bool, unit: str = "it"):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=unit, disable=not enabled, leave=False)


def _previous_graph(previous: tuple[Path, dict[str, Any]] | None, model: str, graph_k: int,
                    pairs: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray] | None:
    """The previous generation's corpus graph of `model` and, per old row, the new row of the same
    chunk with the same embedded text (-1 when deleted or changed); None when it cannot be reused
    (no graph, another `graph_k`, or its file does not match its checksum)."""
    from hybridlab.index.graph import load_graph

    if previous is None:
        return None
    folder, manifest = previous
    entry = (manifest.get("models") or {}).get(model) or {}
    name = entry.get("graph")
    expected = (manifest.get("files") or {}).get(name or "")
    if not name or entry.get("graph_k") != graph_k or not expected:
        return None
    try:
        if layout.file_sha256(folder / name) != expected["sha256"]:
            logger.warning("not reusing %s: it does not match its checksum", folder / name)
            return None
        con = store.connect(folder / layout.STORE_FILE, read_only=True)
        try:
            old = con.execute("SELECT chunk_id, embed_sha256 FROM chunk_vectors WHERE model = ? ORDER BY chunk_id",
                              [model]).fetchnumpy()
        finally:
            con.close()
        old_graph = load_graph(folder / name, len(old["chunk_id"]))
    except Exception as error:  # noqa: BLE001 - any doubt about the old graph means a fresh build
        logger.warning("not reusing the corpus graph of %s: %s", folder, error)
        return None
    new_ids = pairs["chunk_id"].astype(np.int64)
    old_ids = old["chunk_id"].astype(np.int64)
    if not len(new_ids):
        return old_graph, np.full(len(old_ids), -1, dtype=np.int64)
    position = np.minimum(np.searchsorted(new_ids, old_ids), len(new_ids) - 1)
    new_texts = np.asarray(pairs["embed_sha256"], dtype=object)
    same = (new_ids[position] == old_ids) & (new_texts[position] == np.asarray(old["embed_sha256"], dtype=object))
    return old_graph, np.where(same, position, -1)


def build_artifacts(con, cache: EmbeddingCache, folder: Path, config: IndexConfig, dims: dict[str, int],
                    progress: bool = False, previous: tuple[Path, dict[str, Any]] | None = None) -> dict[str, Any]:
    """Write BM25 and one FAISS index per model into `folder` from the store and the cache; the
    corpus graph is updated from the `previous` (generation folder, manifest) when it has one."""
    from hybridlab.index.dense import DenseIndex
    from hybridlab.index.graph import build_corpus_graph, graph_size, save_graph, update_corpus_graph
    from hybridlab.index.sparse import SparseIndex

    ids = con.execute("SELECT chunk_id FROM chunks ORDER BY chunk_id").fetchnumpy()["chunk_id"].astype(np.int64)
    sparse = SparseIndex.build(_streamed_texts(con, ids), ids, config.bm25, show_progress=progress)
    sparse.save(folder / layout.BM25_DIR)
    del sparse
    _checkpoint("bm25-written")
    models: dict[str, Any] = {}
    for model, dim in dims.items():
        pairs = con.execute(
            "SELECT chunk_id, embed_sha256 FROM chunk_vectors WHERE model = ? ORDER BY chunk_id", [model]
        ).fetchnumpy()
        try:
            matrix = cache.matrix(model, pairs["embed_sha256"].tolist(), dim)
        except KeyError as error:
            raise RuntimeError(str(error).strip("'\"")) from None
        dense = DenseIndex.build(matrix, pairs["chunk_id"].astype(np.int64), model, config.dense_index)
        del matrix  # FAISS holds its own copy
        dense.save(folder / layout.dense_file(model))
        models[model] = {"dim": dim, "vectors": len(pairs["chunk_id"]), "file": layout.dense_file(model),
                         "index": config.dense_index}
        _checkpoint("faiss-written")
        graph_k = graph_size(config.graph_k, dense.size)
        if graph_k:
            started = time.perf_counter()
            reuse = _previous_graph(previous, model, graph_k, pairs)
            if reuse is None:
                graph, how = build_corpus_graph(dense.vectors, graph_k, progress=progress), "built"
            else:
                graph, how = update_corpus_graph(dense.vectors, *reuse, graph_k, progress=progress)
            save_graph(graph, folder / layout.graph_file(model))
            models[model].update(graph=layout.graph_file(model), graph_k=graph_k, graph_build=how)
            logger.info("corpus graph of %s (%d vectors): %s in %.1f s", model, dense.size, how,
                     time.perf_counter() - started)
            del graph
    return {"models": models, "bm25": {"dir": layout.BM25_DIR, "rows": len(ids), "config": dataclasses.asdict(config.bm25)}}


def versions() -> dict[str, str]:
    import importlib.metadata as md

    found = {"python": platform.python_version()}
    for package in ("hybridlab", "duckdb", "faiss-cpu", "bm25s", "sentence-transformers", "torch", "numpy"):
        try:
            found[package] = md.version(package)
        except md.PackageNotFoundError:
            pass
    return found


def _plan(existing: dict[str, tuple[str, str]], batches: Sequence[tuple[str, list[Document], bool]],
          report: IndexReport) -> tuple[list[Document], list[str]]:
    """Which documents to (re)insert and which doc ids to delete."""
    to_insert: list[Document] = []
    to_delete: list[str] = []
    seen: dict[str, str] = {}
    for source, documents, remove_missing in batches:
        ids_here = set()
        for document in documents:
            if document.doc_id in seen and seen[document.doc_id] != source:
                raise ValueError(
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
            gone = [doc_id for doc_id, (src, _) in existing.items() if src == source and doc_id not in ids_here]
            report.removed += len(gone)
            to_delete.extend(gone)
    report.documents = len(seen)
    return to_insert, to_delete


def apply_changes(
    index_dir: str | os.PathLike,
    batches: Sequence[tuple[str, list[Document], bool]],
    config: IndexConfig | None = None,
    *,
    progress: bool = True,
    force: bool = False,
    report: IndexReport | None = None,
    cache_path: str | os.PathLike | None = None,
) -> IndexReport:
    """Apply (source, documents, remove_missing) batches as one new generation of the index."""
    index_dir = Path(index_dir)
    started = time.perf_counter()
    report = report or IndexReport(str(index_dir))
    with layout.WriterLock(index_dir):
        manifest = None
        cache_file = Path(cache_path) if cache_path else index_dir / layout.CACHE_FILE
        if (index_dir / layout.MANIFEST).exists():
            manifest = layout.read_manifest(index_dir)
        elif layout.generations(index_dir):
            raise layout.CorruptIndexError(
                f"{index_dir / layout.MANIFEST} is missing but generation folders exist; "
                f"{layout.repair_hint(index_dir)} before indexing into it"
            )
        old_config = IndexConfig.from_dict(manifest["config"]) if manifest else None
        config = config or old_config or IndexConfig()
        config = dataclasses.replace(
            config, models=canonical_models(config.models),
            model_by_collection=tuple((k, canonical_models([m])[0]) for k, m in config.model_by_collection),
            model_by_language=tuple((k, canonical_models([m])[0]) for k, m in config.model_by_language),
        )
        old_generation = index_dir / manifest["path"] if manifest else None
        layout.remove_stale(index_dir, keep=old_generation,
                            previous=layout.previous_generation(index_dir, old_generation))
        _checkpoint("start")
        number = layout.next_generation_number(index_dir)
        tmp = index_dir / f"{layout.generation_name(number)}.tmp-{os.getpid()}"
        tmp.mkdir(parents=True)
        cache = None
        con = None
        try:
            if old_generation is not None:
                shutil.copy2(old_generation / layout.STORE_FILE, tmp / layout.STORE_FILE)
            con = store.connect(tmp / layout.STORE_FILE)
            store.create_schema(con)
            _checkpoint("store-copied")
            existing = store.document_hashes(con)
            rechunk = old_config is not None and (old_config.chunk != config.chunk)
            relayout = old_config is None or rechunk or old_config != config
            to_insert, to_delete = _plan(existing, batches, report)
            if not (to_insert or to_delete or relayout or force):
                report.chunks = store.counts(con)["chunks"]
                report.generation = manifest["generation"] if manifest else None
                report.seconds = time.perf_counter() - started
                return report
            con.execute("BEGIN TRANSACTION")
            if rechunk:
                kept = [d for d in _documents_from_store(con) if d.doc_id not in set(to_delete)]
                con.execute("DELETE FROM chunk_vectors; DELETE FROM tags; DELETE FROM chunks; DELETE FROM documents")
                to_insert = kept + to_insert
            else:
                store.delete_documents(con, to_delete)
            next_id = int(store.get_meta(con, "next_chunk_id", "0"))
            con.execute("COMMIT")
            # The generation is private until the manifest names it, so its store may commit in steps:
            # each insert batch commits on its own (DuckDB keeps the frames registered in a
            # transaction, i.e. every chunk text of the build, alive until the transaction ends).
            next_id, report.new_chunks = _insert_documents(con, to_insert, config, next_id)
            con.execute("BEGIN TRANSACTION")
            store.set_meta(con, "next_chunk_id", next_id)
            _assign_vectors(con, config)
            store.set_meta(con, "generation", number)
            con.execute("COMMIT")
            _checkpoint("store-committed")
            cache = EmbeddingCache(cache_file)
            known = {m: v["dim"] for m, v in (manifest or {}).get("models", {}).items()}
            dims = _embed_missing(con, cache, config.all_models, report, config, known, progress)
            artifacts = build_artifacts(con, cache, tmp, config, dims, progress=progress,
                                        previous=(old_generation, manifest) if manifest else None)
            counts = store.counts(con)
            con.execute("CHECKPOINT")
            con.close()
            con = None
            cache.close()
            cache = None
            final = index_dir / layout.generation_name(number)
            report.chunks = counts["chunks"]
            report.seconds = time.perf_counter() - started
            new_manifest = {
                "format": layout.FORMAT_VERSION,
                "generation": number,
                "path": final.name,
                "built_at": datetime.now(UTC).isoformat(),
                "build_seconds": round(report.seconds, 3),
                "config": config.to_dict(),
                "counts": {"documents": counts["documents"], "chunks": counts["chunks"]},
                "store": layout.STORE_FILE,
                "embedding_cache": str(cache_file.resolve()),
                "versions": versions(),
                "files": layout.generation_files(tmp),
                **artifacts,
            }
            # a copy inside the generation lets `verify --repair` rebuild a lost or corrupt manifest
            (tmp / layout.MANIFEST).write_text(json.dumps(new_manifest, indent=2, sort_keys=True, default=str),
                                               encoding="utf-8")
            layout.fsync_tree(tmp)
            _checkpoint("generation-flushed")
            os.rename(tmp, final)
            _checkpoint("generation-renamed")
            layout.write_manifest(index_dir, new_manifest)
            _checkpoint("manifest-committed")
            report.generation = number
            report.committed = True
            layout.remove_stale(index_dir, keep=final, previous=old_generation)
            return report
        finally:
            if con is not None:
                con.close()
            if cache is not None:
                cache.close()
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)


def index_paths(
    paths: Sequence[str | os.PathLike],
    index_dir: str | os.PathLike,
    config: IndexConfig | None = None,
    *,
    progress: bool = True,
    force: bool = False,
    cache_path: str | os.PathLike | None = None,
) -> IndexReport:
    """Index (or update) folders, BEIR datasets and memories files into `index_dir`."""
    started = time.perf_counter()
    ingest = IngestReport()
    batches = []
    for raw in paths:
        path = Path(raw)
        documents = read_source(path, ingest)
        batches.append((str(path.resolve()), documents, True))
    report = IndexReport(str(index_dir), skipped=ingest.skipped)
    report = apply_changes(index_dir, batches, config, progress=progress, force=force, report=report,
                           cache_path=cache_path)
    report.seconds = time.perf_counter() - started
    return report
