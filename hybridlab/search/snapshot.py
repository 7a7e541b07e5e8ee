"""An immutable snapshot of one index generation, as a search sees it.
See docs/internals/search.md#snapshot."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from hybridlab.index.reader import Generation, SegmentCache, read_generation
from hybridlab.search.local import Bm25Retriever, DuckDBStore, FaissRetriever
from hybridlab.search.retrievers import DenseRetriever, MetadataStore, SparseRetriever
from hybridlab.search.tags import TagVocabulary


@dataclass(frozen=True, eq=False)
class Snapshot:
    """One generation: rows, retrievers, store and tag signals. Row `r` = chunk `generation.chunk_ids[r]`."""

    generation: Generation
    sparse: SparseRetriever
    dense: Mapping[str, DenseRetriever]  # model -> retriever
    store: MetadataStore
    tag_vocabulary: TagVocabulary  # the index's tags, for extracting them from queries
    collection_vocabulary: TagVocabulary  # collection names (empty with a single collection)
    tag_specificity: Mapping[str, float]  # tag -> 1 / sqrt(collections wearing it)
    collection_rows: Mapping[str, np.ndarray]  # collection -> its rows

    @property
    def number(self) -> int:
        """The generation number (grows by one per commit)."""
        return self.generation.number

    @property
    def n_chunks(self) -> int:
        return self.generation.n_chunks

    @property
    def models(self) -> list[str]:
        return sorted(self.dense)

    def close(self) -> None:
        """Close the store connection (searches still holding this snapshot fail after this)."""
        self.generation.store.close()


def snapshot_of(generation: Generation) -> Snapshot:
    """The snapshot of an opened generation, with today's local retrievers."""
    known_collections = generation.known_collections
    collection_array = np.asarray(generation.collections, dtype=object)
    stopwords = generation.sparse.tokenizer.stopwords
    return Snapshot(
        generation=generation,
        sparse=Bm25Retriever(generation.sparse),
        dense=MappingProxyType(
            {
                model: FaissRetriever(
                    dense,
                    generation.chunk_ids,
                    generation.dense_rows_to_index[model],
                    generation.graphs.get(model),
                )
                for model, dense in generation.dense.items()
            }
        ),
        store=DuckDBStore(generation),
        tag_vocabulary=TagVocabulary(generation.tag_rows, stopwords=stopwords),
        # a query naming a collection (a memory store's project) scopes the tag signal to it; only
        # meaningful when there is more than one collection
        collection_vocabulary=TagVocabulary(
            known_collections if len(known_collections) > 1 else (), stopwords=stopwords
        ),
        # a tag worn across many collections (`architecture` on ten projects) says less about which
        # chunk is meant than one worn by a single collection (`rathole`): weight = 1 / sqrt(collections)
        tag_specificity=MappingProxyType(
            {
                tag: len(set(collection_array[rows].tolist())) ** -0.5 if len(known_collections) > 1 else 1.0
                for tag, rows in generation.tag_rows.items()
            }
        ),
        collection_rows=MappingProxyType(
            {name: np.flatnonzero(collection_array == name) for name in known_collections}
        ),
    )


def open_snapshot(
    index_dir: str | os.PathLike,
    *,
    check: bool = True,
    backend: Callable[[Generation], Snapshot] = snapshot_of,
    cache: SegmentCache | None = None,
) -> Snapshot:
    """Open the live generation of `index_dir` as a snapshot (see :func:`~hybridlab.index.reader.read_generation`);
    `backend` builds it (the local retrievers by default, e.g. :func:`hybridlab.search.qdrant.qdrant_backend`);
    with a `cache`, only segments not loaded before are read."""
    generation = read_generation(index_dir, check=check, cache=cache)
    try:
        return backend(generation)
    except BaseException:
        generation.store.close()
        raise
