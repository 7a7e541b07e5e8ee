"""The bench tests reuse the package tests' fixtures (the tiny corpus and its index: tests/conftest.py).

Imported, not copied; in a run of both folders the tiny index is built once per folder.
"""

from tests.conftest import corpus_copy, data_dir, embedding_cache_path, tiny_corpus, tiny_index  # noqa: F401
