"""The on-disk index. Three rooms over the format modules they share:

- `write/`: the write path in three stages: plan a change and build a segment (`write.build`),
  commit a generation (`write.commit`); merging segments (`write.merge`), the memory writer with its
  write-ahead log fold (`write.memory`) and imported vectors (`write.vectors_import`) call that API.
- `reader`: the read side, one snapshot of a generation (its segments plus the log's tail).
- `admin/`: checking and repairing an index (`admin.verify`), mirroring it into Qdrant (`admin.qdrant`).
- the format modules, here at the top: the manifest (`manifest`), the folder layout and its locks
  (`layout`), the DuckDB store (`store`, `rows`), segments and their signatures, the log's record
  format (`wal`), BM25 (`sparse`), FAISS (`dense`), the corpus graph (`graph`), the artifacts of one
  segment (`artifacts`) and the embeddings cache.

`admin` may import `write`, `write` the `reader`, all of them the format modules, never the other
way (import-linter contracts in pyproject.toml).
"""
