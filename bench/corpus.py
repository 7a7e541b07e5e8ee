"""Benchmark indexes built through hybridlab's own indexer from vectors we already have.

No corpus is embedded here. `apply_changes` builds a real index (store, BM25, FAISS, manifest);
its embeddings cache is a private file pre-filled with the vectors, so the indexer finds every
chunk "already embedded" under the MiniLM model name and queries are encoded by the real MiniLM.

- SciFact: the documents of the BEIR corpus and the vectors of the cached evaluation index
  (`ensure_index(get_evalset("scifact"))`), with each document put in collection `scifact-a` or
  `scifact-b` by the parity of sha1(doc_id), so a collection filter keeps about half.
- Synthetic (10k, 100k, 1M chunks): each chunk derives from a random SciFact document: its words
  with half of them replaced by words drawn from the corpus's unigram distribution (so text comes
  from the real vocabulary, with realistic lengths), and that document's vector plus Gaussian noise,
  re-normalised (so text and vector stay related, as in a real corpus). Four collections `c0`..`c3`
  by position; a collection filter keeps a quarter.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from hybridlab.config import IndexConfig
from hybridlab.ingest.sources import Document

logger = logging.getLogger(__name__)

MODEL = "all-MiniLM-L6-v2"
RECIPE_VERSION = 1
NOISE = 0.35  # norm of the Gaussian noise added to a base vector (unit norm) before re-normalising
REPLACE_SHARE = 0.5  # share of a base document's words replaced by unigram draws
SCIFACT_FILTER = "scifact-a"
SYNTHETIC_FILTER = "c1"
BLOCK = 50_000  # rows per step when generating vectors and filling the embeddings cache


@dataclass(frozen=True)
class Source:
    """SciFact documents in corpus order, their embedding texts and vectors (row-aligned)."""

    documents: tuple[Document, ...]
    embed_texts: tuple[str, ...]
    vectors: np.ndarray


def bench_root() -> Path:
    from hybridlab.eval.evalsets import cache_root

    return cache_root() / "bench"


def embed_texts_of(documents: list[Document], config: IndexConfig) -> list[list[str]]:
    """The exact texts the indexer embeds for each document (its chunking, its heading rule)."""
    from hybridlab.index.format.rows import chunk_document, indexed_text

    return [
        [indexed_text(chunk, document, config.chunk) for chunk in chunk_document(document, config)]
        for document in documents
    ]


def scifact_source() -> Source:
    """SciFact documents with the MiniLM vectors of the cached evaluation index."""
    from hybridlab.eval.evalsets import ensure_index, get_evalset
    from hybridlab.index.format import layout, store
    from hybridlab.index.format.dense import DenseIndex
    from hybridlab.ingest.sources import IngestReport, read_source

    evalset = get_evalset("scifact")
    index_dir = ensure_index(evalset, IndexConfig(), progress=False)
    manifest = layout.read_manifest(index_dir)
    generation = index_dir / manifest.path
    con = store.connect(generation / layout.STORE_FILE, read_only=True)
    try:
        by_sha = dict(con.execute("SELECT embed_sha256, chunk_id FROM chunks").fetchall())
    finally:
        con.close()
    dense = DenseIndex.load(generation / manifest.models[MODEL].file, MODEL)
    vectors = dense.vectors
    row_of = {int(cid): row for row, cid in enumerate(dense.ids)}
    documents = read_source(evalset.sources[0], IngestReport())
    texts, rows, kept = [], [], []
    for document, chunk_texts in zip(documents, embed_texts_of(documents, IndexConfig())):
        if len(chunk_texts) != 1:
            continue  # BEIR documents are single chunks; an empty one has none
        sha = hashlib.sha256(chunk_texts[0].encode("utf-8")).hexdigest()
        if sha not in by_sha:
            raise RuntimeError(f"SciFact chunk of {document.doc_id!r} is not in the cached index {index_dir}")
        kept.append(document)
        texts.append(chunk_texts[0])
        rows.append(row_of[int(by_sha[sha])])
    return Source(tuple(kept), tuple(texts), np.ascontiguousarray(vectors[np.asarray(rows)]))


def split_collection(doc_id: str) -> str:
    """`scifact-a` or `scifact-b` by the parity of sha1(doc_id)."""
    return "scifact-a" if int(hashlib.sha1(doc_id.encode()).hexdigest(), 16) % 2 == 0 else "scifact-b"


def synthetic_parts(source: Source, n: int, seed: int = 0) -> tuple[list[Document], np.ndarray]:
    """`n` synthetic single-chunk documents and their vectors (see the module docstring)."""
    rng = np.random.default_rng(seed)
    vocabulary: dict[str, int] = {}
    token_ids = [
        np.asarray([vocabulary.setdefault(w, len(vocabulary)) for w in d.text.split()], dtype=np.int32)
        for d in source.documents
    ]
    words = np.asarray(list(vocabulary), dtype=object)
    unigram = np.concatenate(token_ids)
    bases = rng.integers(0, len(source.documents), size=n)
    documents = []
    for i, base in enumerate(bases):
        ids = token_ids[base].copy()
        swap = rng.random(len(ids)) < REPLACE_SHARE
        ids[swap] = unigram[rng.integers(0, len(unigram), size=int(swap.sum()))]
        title = source.documents[base].title
        documents.append(
            Document(
                f"syn-{i:07d}",
                "synthetic",
                f"c{i % 4}",
                title,
                " ".join(words[ids].tolist()),
                "beir",
                None,
                None,
                {},
                (),
                "text",
            )
        )
    dim = source.vectors.shape[1]
    vectors = np.empty((n, dim), dtype=np.float32)
    for start in range(0, n, BLOCK):  # in blocks: the same random stream, without n x dim float64 temporaries
        stop = min(start + BLOCK, n)
        block = source.vectors[bases[start:stop]] + rng.normal(
            0.0, NOISE / np.sqrt(dim), size=(stop - start, dim)
        ).astype(np.float32)
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        vectors[start:stop] = block
    return documents, vectors


def cache_path_of(index_dir: Path) -> Path:
    return index_dir.with_name(index_dir.name + "-embeddings.duckdb")


def build_from_vectors(
    index_dir: Path, documents: list[Document], vectors: np.ndarray, config: IndexConfig
) -> None:
    """Index `documents` (one chunk each) with `vectors` as their MiniLM embeddings, through
    `apply_changes` and a private pre-filled embeddings cache."""
    fill_cache(index_dir, documents, vectors, config)
    index_documents(index_dir, documents, config)


def index_documents(index_dir: Path, documents: list[Document], config: IndexConfig) -> None:
    """`apply_changes` over `documents`, every vector found in the pre-filled cache."""
    from hybridlab.index.write.build import apply_changes

    apply_changes(
        index_dir,
        [(documents[0].source, documents, True)],
        replace(config, models=(MODEL,)),
        progress=False,
        cache_path=cache_path_of(index_dir),
    )


def fill_cache(index_dir: Path, documents: list[Document], vectors: np.ndarray, config: IndexConfig) -> None:
    """Store `vectors` as the MiniLM embeddings of the documents' chunk texts in the index's private cache."""
    from hybridlab.index.format.embedding_cache import EmbeddingCache, text_sha256

    cache = EmbeddingCache(cache_path_of(index_dir))
    try:
        for start in range(0, len(documents), BLOCK):  # texts exist for one block at a time
            texts = embed_texts_of(documents[start : start + BLOCK], config)
            if any(len(t) != 1 for t in texts):
                raise ValueError("benchmark documents must be single chunks")
            cache.put(MODEL, [text_sha256(t[0]) for t in texts], vectors[start : start + BLOCK])
    finally:
        cache.close()


def _ready(index_dir: Path, key: dict) -> bool:
    stamp = index_dir / "bench-recipe.json"
    return (index_dir / "manifest.json").exists() and stamp.exists() and json.loads(stamp.read_text()) == key


def ensure_bench_index(
    kind: str, n: int | None = None, dense_index: str = "Flat", source: Source | None = None
) -> tuple[Path, float | None]:
    """A cached benchmark index ('scifact' or 'synthetic' of n chunks) and its build seconds
    (None when it was reused)."""
    import time

    key = {
        "kind": kind,
        "n": n,
        "dense_index": dense_index,
        "recipe": RECIPE_VERSION,
        "noise": NOISE,
        "replace": REPLACE_SHARE,
    }
    name = f"{kind}-{n or 'all'}-{dense_index.replace(',', '_')}"
    index_dir = bench_root() / name
    if _ready(index_dir, key):
        return index_dir, None
    shutil.rmtree(index_dir, ignore_errors=True)
    cache_path_of(index_dir).unlink(missing_ok=True)
    index_dir.parent.mkdir(parents=True, exist_ok=True)
    source = source or scifact_source()
    started = time.perf_counter()
    config = IndexConfig(dense_index=dense_index)
    if kind == "scifact":
        documents = [replace(d, collection=split_collection(d.doc_id)) for d in source.documents]
        build_from_vectors(index_dir, documents, source.vectors, config)
    elif kind == "synthetic":
        if not n:
            raise ValueError("synthetic indexes need a size n")
        documents, vectors = synthetic_parts(source, n)
        fill_cache(index_dir, documents, vectors, config)
        del vectors  # 1.5 KB a chunk that the build does not need (the cache has them)
        index_documents(index_dir, documents, config)
    else:
        raise ValueError(f"unknown benchmark index kind {kind!r}; choose from ['scifact', 'synthetic']")
    seconds = time.perf_counter() - started
    (index_dir / "bench-recipe.json").write_text(json.dumps(key))
    logger.info("built %s in %.1f s", index_dir, seconds)
    return index_dir, seconds
