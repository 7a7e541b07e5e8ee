"""The on-disk index. Three rooms over the format they share:

- `write/`: the write path in three stages: plan a change and build a segment (`write.build`),
  commit a generation (`write.commit`); merging segments (`write.merge`), the memory writer with its
  write-ahead log fold (`write.memory`) and imported vectors (`write.vectors_import`) call that API.
- `reader`: the read side, one snapshot of a generation (its segments plus the log's tail).
- `admin/`: checking and repairing an index (`admin.verify`), mirroring it into Qdrant (`admin.qdrant`).
- `format/`: the format modules: the manifest (`format.manifest`), the folder layout and its locks
  (`format.layout`), the DuckDB store (`format.store`, `format.rows`), segments and their
  signatures, the log's record format (`format.wal`), BM25 (`format.sparse`), FAISS
  (`format.dense`), the corpus graph (`format.graph`), the token vectors (`format.tokens`), the
  artifacts of one segment (`format.artifacts`) and the embeddings cache.

`admin` may import `write`, `write` the `reader`, all of them `format`, never the other way; a new
module goes into one of the four (an exhaustive import-linter layers contract in pyproject.toml).
"""
