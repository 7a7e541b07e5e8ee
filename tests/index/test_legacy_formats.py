"""Indexes written before segments are refused with the command that rebuilds them, and that
command (or `verify --repair`) rebuilds them (issue 29: one BM25 format)."""

from __future__ import annotations

import json

import pytest
from test_segments import CONFIG, SOURCE, _memory

from hybridlab.errors import IndexFormatError
from hybridlab.index.admin.verify import repair, verify
from hybridlab.index.format import layout
from hybridlab.index.format.sparse import SparseIndex
from hybridlab.index.write.build import apply_changes
from hybridlab.search.engine import open_index


def _index(tmp_path, embedding_cache_path):
    index_dir = tmp_path / "index"
    animals = ["okapi", "tapir", "quokka", "axolotl", "pangolin"]
    documents = [
        _memory(f"m{i}", f"a memory about the {animal}", 1 + i, ()) for i, animal in enumerate(animals)
    ]
    apply_changes(
        index_dir, [(SOURCE, documents, False)], CONFIG, progress=False, cache_path=embedding_cache_path
    )
    return index_dir


def test_a_pre_segment_bm25_folder_is_refused_with_the_rebuild_command(tmp_path, embedding_cache_path):
    index_dir = _index(tmp_path, embedding_cache_path)
    bm25 = index_dir / layout.read_manifest(index_dir).path / layout.BM25_DIR
    params = json.loads((bm25 / "params.index.json").read_text())
    del params["format"]  # what bm25s itself writes: a score matrix, no term-frequency postings
    (bm25 / "params.index.json").write_text(json.dumps(params))
    with pytest.raises(
        IndexFormatError, match=r"written before segments .* `hybridlab index PATHS --index DIR --force`"
    ):
        SparseIndex.load(bm25)


def test_a_format_1_index_is_refused_then_rebuilt_by_repair(tmp_path, embedding_cache_path):
    index_dir = _index(tmp_path, embedding_cache_path)
    manifest = layout.read_manifest(index_dir)
    old = manifest.replace(
        format=1,
        segments=None,
        files={
            name.split("/", 1)[1]: value
            for name, value in manifest.files.items()
            if name.startswith(manifest.path + "/")
        },
    )
    layout.write_manifest(index_dir, old)
    assert "segments" not in json.loads((index_dir / layout.MANIFEST).read_text())  # as format 1 wrote it
    assert layout.read_manifest(index_dir) == old
    with pytest.raises(IndexFormatError, match="manifest format 1"):
        open_index(index_dir)
    assert "manifest format 1" in verify(index_dir)[0]
    repair(index_dir)
    assert verify(index_dir) == []
    with open_index(index_dir) as index:
        assert index.search("axolotl", mode="bm25", limit=1)[0].doc_id == "m3"
