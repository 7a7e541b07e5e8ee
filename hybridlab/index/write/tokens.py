"""Token vectors of the index's late-interaction models, stored as a write adds chunks.
See docs/internals/index.md#token-vectors.

Every write path calls :func:`store_token_vectors` with the texts it embeds (a segment's chunks, a
logged memory's pieces) before its commit or log append: texts whose vectors are stored already are
not encoded again, and vectors stored by a write that then fails are simply unused (content-addressed).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from hybridlab.config import IndexConfig
from hybridlab.encoders.late import LateSpec, canonical_late_name, get_late_spec, load_late_encoder
from hybridlab.index.format.embedding_cache import hashed_text, text_sha256
from hybridlab.index.format.manifest import Manifest
from hybridlab.index.format.rows import chunk_document, indexed_text
from hybridlab.index.format.tokens import TokenStore, store_folder
from hybridlab.index.reader import read_generation
from hybridlab.ingest.sources import Document

#: texts per shard written while a large write encodes (an interrupted build keeps what it stored)
SHARD_TEXTS = 2048


#: a folder of token stores shared by many indexes (one per spec key below it), read before encoding
#: and filled with what is encoded: the evaluation sets' builds share one per user, as they share the
#: embeddings cache (`hybridlab.eval.evalsets`)
_SHARED: contextvars.ContextVar[Path | None] = contextvars.ContextVar("shared_token_stores", default=None)


@contextlib.contextmanager
def shared_token_stores(folder: str | os.PathLike | None) -> Iterator[None]:
    """Within the block, builds take token vectors from (and add new ones to) the stores under `folder`."""
    token = _SHARED.set(None if folder is None else Path(folder))
    try:
        yield
    finally:
        _SHARED.reset(token)


def late_specs(config: IndexConfig) -> dict[str, LateSpec]:
    """The config's late-interaction models, by canonical name, with their current specs."""
    return {canonical_late_name(name): get_late_spec(name) for name in config.late_models}


def spec_records(config: IndexConfig) -> dict[str, dict[str, Any]]:
    """What the manifest records of each late-interaction model: its full spec and store key."""
    return {name: {**spec.to_json(), "key": spec.key} for name, spec in late_specs(config).items()}


def token_store(index_dir: str | os.PathLike, spec: LateSpec) -> TokenStore:
    return TokenStore(store_folder(index_dir, spec.key), spec.to_json())


def store_token_vectors(
    index_dir: str | os.PathLike,
    config: IndexConfig,
    texts: Iterable[tuple[str, str]] | Iterable[str],
    *,
    progress: bool = False,
) -> dict[str, int]:
    """Encode and store the token vectors of the texts (or (sha256, text) pairs) each late-interaction
    model of `config` lacks; returns model -> texts encoded. The caller holds the writer lock."""
    specs = late_specs(config)
    if not specs:
        return {}
    pairs = dict(_hashed(texts))
    encoded: dict[str, int] = {}
    for name, spec in specs.items():
        store = token_store(index_dir, spec)
        todo = store.missing(pairs)
        encoded[name] = len(todo)
        if not todo:
            continue
        shared = _SHARED.get()
        shared_store = TokenStore(shared / spec.key, spec.to_json()) if shared is not None else None
        if shared_store is not None:
            todo = _copy_shared(store, shared_store, todo)
        if not todo:
            continue
        encoder = load_late_encoder(spec)
        todo.sort(key=lambda sha: len(pairs[sha]))
        with tqdm(total=len(todo), desc=f"token vectors ({name})", unit="chunk", disable=not progress) as bar:
            for start in range(0, len(todo), SHARD_TEXTS):
                hashes = todo[start : start + SHARD_TEXTS]
                vectors = []
                for sha in hashes:
                    vectors.extend(encoder.encode_documents([pairs[sha]]))
                    bar.update(1)
                store.add(hashes, vectors)
                if shared_store is not None:
                    shared_store.add(hashes, vectors)
    return encoded


def _copy_shared(store: TokenStore, shared: TokenStore, todo: list[str]) -> list[str]:
    """Copy the vectors `shared` has of `todo` into `store`; returns the hashes still to encode."""
    found = shared.get(todo)
    have = [(sha, vectors) for sha, vectors in zip(todo, found) if vectors is not None]
    if have:
        store.add([sha for sha, _ in have], [vectors for _, vectors in have])
    return [sha for sha, vectors in zip(todo, found) if vectors is None]


def _hashed(texts: Iterable[tuple[str, str]] | Iterable[str]) -> Iterable[tuple[str, str]]:
    for item in texts:
        yield (text_sha256(item), item) if isinstance(item, str) else item


def segment_texts(con: Any) -> list[tuple[str, str]]:
    """(sha256, text) of every chunk a segment's store holds, as it was embedded."""
    return [
        hashed_text(sha, text)
        for sha, text in con.execute(
            "SELECT DISTINCT embed_sha256, COALESCE(embed_text, text) FROM chunks"
        ).fetchall()
    ]


def missing_counts(
    index_dir: str | os.PathLike, config: IndexConfig, hashes: Sequence[str]
) -> Mapping[str, int]:
    """Per late-interaction model, how many of the live chunks' hashes have no stored vectors."""
    return {
        name: len(token_store(index_dir, spec).missing(hashes)) for name, spec in late_specs(config).items()
    }


def memory_texts(documents: Sequence[Document], config: IndexConfig) -> list[str]:
    """The texts the index embeds of these documents' chunks (as a log record or a segment cuts them)."""
    return [
        indexed_text(chunk, document, config.chunk)
        for document in documents
        for chunk in chunk_document(document, config)
    ]


def compact_token_stores(index_dir: str | os.PathLike, manifest: Manifest) -> dict[str, int]:
    """Fold each recorded late-interaction model's shards into one holding only the live chunks'
    texts (`optimize`); returns model -> texts kept. A reader still on an older generation encodes
    the few candidates whose vectors went (`hybridlab.search.late.LateScorer`)."""
    if not manifest.late:
        return {}
    generation = read_generation(index_dir, check=False)
    try:
        live = {
            sha for (sha,) in generation.store.fetchall("SELECT DISTINCT embed_sha256 FROM chunks") if sha
        }
    finally:
        generation.store.close()
    return {
        name: TokenStore(store_folder(index_dir, str(record.get("key")))).compact(live)
        for name, record in manifest.late.items()
    }
