"""The index's format: what is on disk and how it is read and written, shared by the read side,
the write path and admin. The manifest (`manifest`), the folder layout and its locks (`layout`), the
DuckDB store (`store`, `rows`), segments and their signatures (`segments`, `signatures`), the log's
record format (`wal`), BM25 (`sparse`, `tokenizer`), FAISS (`dense`), the corpus graph (`graph`),
the token vectors of the second stage (`tokens`), the artifacts of one segment (`artifacts`), the
embeddings cache (`embedding_cache`), the write path's caches (`caches`, `lru`), the stages the kill
tests stop at (`faults`) and what one write did (`report`).

These modules import nothing of `reader`, `write` or `admin` (the layers contract in pyproject.toml).
"""
