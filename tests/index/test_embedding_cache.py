"""The embeddings cache: vectors keyed by (model, sha256 of the exact text embedded), so re-indexing
unchanged text, or re-chunking, embeds only text never embedded before by that model."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from hybridlab.config import ChunkConfig, IndexConfig
from hybridlab.encoders.registry import is_installed
from hybridlab.index.format.embedding_cache import EmbeddingCache, text_sha256

needs_wordllama = pytest.mark.skipif(not is_installed("wordllama"), reason="needs wordllama (the fast model)")
CONFIG = IndexConfig(models=("wordllama",))


def test_text_sha256_is_the_sha256_of_the_utf8_bytes():
    # sha256("abc"), the FIPS 180-2 test vector
    assert text_sha256("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    assert text_sha256("abc ") != text_sha256("abc")  # the exact text: one space is another key


def test_cache_is_keyed_by_model_and_hash(tmp_path):
    cache = EmbeddingCache(tmp_path / "cache.duckdb")
    a, b = text_sha256("a"), text_sha256("b")
    cache.put("m1", [a, b], np.array([[1, 0], [0, 1]], dtype=np.float32))
    cache.put("m2", [a], np.array([[0.5, 0.5, 0.5]], dtype=np.float32))
    cache.put("m1", [a], np.array([[9, 9]], dtype=np.float32))  # already there: kept as it was
    got = cache.get("m1", [a, b, text_sha256("c")])
    assert sorted(got) == sorted([a, b])
    np.testing.assert_array_equal(got[a], [1, 0])
    np.testing.assert_array_equal(cache.get("m2", [a])[a], [0.5, 0.5, 0.5])
    assert cache.get("m2", [a], dim=2) == {}  # another dimension is never returned
    assert cache.get("m3", [a]) == {}
    assert (cache.count("m1"), cache.count("m2"), cache.count()) == (2, 1, 3)
    cache.close()


def test_missing_and_matrix_read_in_order_without_per_vector_objects(tmp_path):
    """The indexer's bulk paths: which hashes lack a vector (no vectors read), and the vectors of
    many hashes as one matrix in the asked order, duplicates included, across read batches."""
    cache = EmbeddingCache(tmp_path / "cache.duckdb")
    hashes = [text_sha256(str(i)) for i in range(7)]
    vectors = np.arange(7 * 3, dtype=np.float32).reshape(7, 3)
    cache.put("m", hashes[:5], vectors[:5])
    cache.put("other", hashes[5:], vectors[5:])
    assert cache.missing("m", [hashes[6], hashes[0], hashes[5], hashes[6]]) == [hashes[6], hashes[5]]
    assert cache.missing("m", hashes[:2], dim=4) == hashes[:2]  # another dimension counts as missing
    order = [hashes[3], hashes[0], hashes[3], hashes[4]]
    np.testing.assert_array_equal(cache.matrix("m", order, 3, batch=3), vectors[[3, 0, 3, 4]])
    assert cache.matrix("m", [], 3).shape == (0, 3)
    with pytest.raises(KeyError, match="1 vectors of 'm' are missing"):
        cache.matrix("m", [hashes[1], hashes[6]], 3)
    cache.close()
    assert EmbeddingCache(tmp_path / "absent.duckdb", read_only=True).missing("m", hashes[:1]) == hashes[:1]


def section(title: str, words: int, seed: int) -> str:
    """A markdown section of `words` distinct-ish words (no dataset text)."""
    body = " ".join(f"w{seed}x{i}" for i in range(words))
    return f"## {title}\n\n{body}\n"


def write_corpus(root):
    """Documents with short sections (one chunk at 1500 and at 1000) and long ones (one at 1500,
    split at 1000)."""
    root.mkdir(parents=True)
    for d in range(4):
        short = section(f"Short {d}", 60, d)  # ~450 characters
        long = section(f"Long {d}", 170, 100 + d)  # ~1,300 characters
        (root / f"doc{d}.md").write_text(f"# Doc {d}\n\n{short}\n{long}", encoding="utf-8")
    return root


def chunk_hashes(index_dir) -> list[str]:
    from hybridlab.search.engine import open_index

    with open_index(index_dir) as index:
        return [
            row[0]
            for row in index._con.execute("SELECT embed_sha256 FROM chunks ORDER BY chunk_id").fetchall()
        ]


@needs_wordllama
def test_unchanged_reindex_embeds_nothing(tmp_path):
    from hybridlab.index.write.build import index_paths

    corpus = write_corpus(tmp_path / "corpus")
    index_dir, cache = tmp_path / "index", tmp_path / "cache.duckdb"
    first = index_paths([corpus], index_dir, CONFIG, progress=False, cache_path=cache)
    distinct = len(set(chunk_hashes(index_dir)))
    assert (first.embedded, first.cache_hits) == (distinct, 0)
    forced = index_paths([corpus], index_dir, CONFIG, progress=False, force=True, cache_path=cache)
    assert forced.committed and (forced.embedded, forced.cache_hits) == (0, distinct)
    noop = index_paths([corpus], index_dir, CONFIG, progress=False, cache_path=cache)
    assert not noop.committed and noop.embedded == 0 and noop.unchanged == 4


@needs_wordllama
def test_a_changed_document_embeds_only_its_new_text(tmp_path):
    from hybridlab.index.write.build import index_paths

    corpus = write_corpus(tmp_path / "corpus")
    index_dir, cache = tmp_path / "index", tmp_path / "cache.duckdb"
    index_paths([corpus], index_dir, CONFIG, progress=False, cache_path=cache)
    before = set(chunk_hashes(index_dir))
    text = (corpus / "doc0.md").read_text()
    (corpus / "doc0.md").write_text(text.replace("## Long 0", "## Long zero"), encoding="utf-8")
    report = index_paths([corpus], index_dir, CONFIG, progress=False, cache_path=cache)
    new_texts = set(chunk_hashes(index_dir)) - before
    # the long section's heading changed: its chunk is new; the short section's text is the same
    assert report.changed == 1 and report.embedded == len(new_texts) == 1


@needs_wordllama
def test_a_chunk_size_change_embeds_only_the_new_chunk_texts(tmp_path):
    from hybridlab.index.write.build import index_paths

    corpus = write_corpus(tmp_path / "corpus")
    index_dir, cache = tmp_path / "index", tmp_path / "cache.duckdb"
    index_paths([corpus], index_dir, CONFIG, progress=False, cache_path=cache)
    before = chunk_hashes(index_dir)
    assert len(before) == 8  # 4 documents x (short + long section)
    smaller = dataclasses.replace(CONFIG, chunk=ChunkConfig(chunk_size=1000, chunk_overlap=100))
    report = index_paths([corpus], index_dir, smaller, progress=False, cache_path=cache)
    after = chunk_hashes(index_dir)
    new_texts = set(after) - set(before)
    assert len(after) > len(before)  # the long sections were split
    assert len(set(after) & set(before)) == 4  # the short sections are the same texts: from the cache
    assert report.embedded == len(new_texts) and report.cache_hits == 4
    manifest = json.loads((index_dir / "manifest.json").read_text())
    assert manifest["config"]["chunk"]["chunk_size"] == 1000
    assert manifest["models"]["wordllama"]["vectors"] == len(after)
    # back to 1500: every text was embedded before
    back = index_paths([corpus], index_dir, CONFIG, progress=False, cache_path=cache)
    assert back.embedded == 0 and set(chunk_hashes(index_dir)) == set(before)
