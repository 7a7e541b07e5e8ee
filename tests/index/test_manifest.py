"""The typed manifest: its one reader and writer, and the older formats it still reads."""

from __future__ import annotations

import json

import pytest

from hybridlab.errors import CorruptIndexError
from hybridlab.index.format import layout
from hybridlab.index.format.manifest import (
    FORMAT_VERSION,
    FORMATS,
    FileRecord,
    Manifest,
    NotAManifest,
    Segment,
    SegmentModel,
    dumps,
    loads,
)

MODEL = "minilm"
ENCODER = {"name": MODEL, "source": "sentence-transformers/all-MiniLM-L6-v2", "revision": "abc", "dim": 384}
FILE = {"bytes": 10, "sha256": "0" * 64}


def _segment(name: str, **fields) -> dict:
    return {
        "name": name,
        "documents": 2,
        "chunks": 3,
        "rows": 4,
        "deleted": ["gone"],
        "first_chunk_id": 0,
        "last_chunk_id": 3,
        "vectors": {MODEL: 3},
        "models": {MODEL: {"file": "dense-minilm.faiss", "vectors": 3}},
        **fields,
    }


def _format_5() -> dict:
    """A manifest as format 5 writes it (every field, a corpus graph, a merge, file signatures)."""
    return {
        "format": 5,
        "generation": 7,
        "path": "gen-000007",
        "built_at": "2026-11-29T09:00:00+00:00",
        "build_seconds": 0.25,
        "config": {"models": [MODEL], "chunk": {"chunk_size": 800}},
        "store": "store.duckdb",
        "embedding_cache": "/tmp/embeddings.duckdb",
        "versions": {"python": "3.11.9"},
        "next_chunk_id": 12,
        "last_merge": {
            "at": "2026-11-29T09:00:00+00:00",
            "generation": 7,
            "segments": 2,
            "chunks": 3,
            "seconds": 0.1,
            "reason": "tiered policy",
        },
        "files": {"gen-000005/store.duckdb": FILE, "gen-000007/chunks.parquet": FILE},
        "counts": {"documents": 4, "chunks": 6},
        "segments": [_segment("gen-000005"), _segment("gen-000007", deleted=[])],
        "models": {
            MODEL: {
                "dim": 384,
                "vectors": 6,
                "file": "dense-minilm.faiss",
                "index": "Flat",
                "segments": 2,
                "encoder": ENCODER,
                "graph": "graph-minilm.npy",
                "graph_dir": "gen-000007",
                "graph_k": 16,
                "graph_build": "updated",
                "graph_reserve": "graph-minilm.reserve.npy",
                "graph_reserve_k": 8,
            }
        },
        "bm25": {"dir": "bm25", "rows": 6, "config": {"k1": 1.5}},
        "file_signatures": {"file": "gen-000007/file-signatures.json", "reader": 1, "sources": {"/notes": 4}},
    }


def test_format_5_round_trips_field_for_field():
    data = _format_5()
    manifest = loads(json.dumps(data))
    assert json.loads(dumps(manifest)) == data  # what it read is what it writes, no key lost or added
    assert manifest.segments[0].deleted == ("gone",)
    assert manifest.segments[0].models[MODEL] == SegmentModel("dense-minilm.faiss", 3)
    assert manifest.file("gen-000005/store.duckdb") == FileRecord(10, "0" * 64)
    assert manifest.file("gen-000099/store.duckdb") is None
    assert manifest.models[MODEL].graph_build == "updated" and manifest.encoders == {MODEL: ENCODER}
    assert manifest.dims == {MODEL: 384} and manifest.folders == {"gen-000005", "gen-000007"}
    assert manifest.last_merge.reason == "tiered policy" and manifest.file_signatures.sources == {"/notes": 4}
    assert manifest.index_config.chunk.chunk_size == 800  # settings added since take their old value
    assert manifest.has_segments and manifest.format == FORMAT_VERSION == max(FORMATS)


@pytest.mark.parametrize("version", [2, 3, 4])
def test_segmented_formats_before_5_still_read(version):
    """Formats 2-3 have no log and no `next_chunk_id` (the legacy store's meta holds it), format 4 a
    log of puts; none of them has graphs, merges, signatures or encoder records (all optional)."""
    data = _format_5()
    for key in ("next_chunk_id", "last_merge", "file_signatures"):
        data.pop(key)
    data["models"][MODEL] = {"dim": 384, "vectors": 6, "file": "dense-minilm.faiss", "index": "Flat"}
    data["segments"] = [
        {"name": "gen-000005", "documents": 4, "chunks": 6, "deleted": []}
    ]  # no rows, ids, models
    manifest = Manifest.from_json({**data, "format": version})
    assert manifest.format == version and manifest.next_chunk_id is None and manifest.last_merge is None
    assert manifest.segments == (Segment(name="gen-000005", documents=4, chunks=6, rows=6),)  # rows = chunks
    assert manifest.models[MODEL].encoder is None and manifest.models[MODEL].graph is None
    assert manifest.encoders == {MODEL: None}
    assert "encoder" not in manifest.to_json()["models"][MODEL]  # written back without one, as it was read


def test_format_1_is_one_legacy_segment_with_the_manifests_models():
    data = {
        "format": 1,
        "generation": 3,
        "path": "gen-000003",
        "config": {},
        "files": {"store.duckdb": FILE},
        "models": {MODEL: {"dim": 384, "vectors": 5, "file": "dense-minilm.faiss"}},
    }
    manifest = Manifest.from_json(data)
    assert not manifest.has_segments and manifest.segments is None
    (legacy,) = manifest.segment_list
    assert legacy.name == "gen-000003" and legacy.legacy
    assert manifest.segment_models(legacy) == {MODEL: SegmentModel("dense-minilm.faiss", 5)}
    assert "segments" not in manifest.to_json()  # written back as format 1 wrote it


def test_a_manifest_without_checksums_checks_nothing():
    data = _format_5()
    data.pop("files")
    manifest = Manifest.from_json(data)
    assert manifest.files is None and manifest.file("gen-000005/store.duckdb") is None
    assert "files" not in manifest.to_json()


@pytest.mark.parametrize(
    "data",
    [
        [],
        {"format": 6, "generation": 1, "path": "gen-000001"},
        {"format": 5, "path": "gen-000001"},
        {**_format_5(), "segments": [{"documents": 1}]},  # a segment without a name
        {**_format_5(), "counts": {"chunks": "many"}},
    ],
)
def test_what_is_not_a_manifest_is_refused(data):
    with pytest.raises(NotAManifest):
        Manifest.from_json(data)


def test_read_manifest_names_the_file_and_the_repair(tmp_path):
    (tmp_path / layout.MANIFEST).write_text(json.dumps({**_format_5(), "segments": "x"}))
    with pytest.raises(CorruptIndexError, match=r"not a hybridlab manifest.*verify --repair"):
        layout.read_manifest(tmp_path)


def test_write_then_read_is_the_same_manifest(tmp_path):
    manifest = Manifest.from_json(_format_5())
    for name in manifest.folders:
        (tmp_path / name).mkdir()
    layout.write_manifest(tmp_path, manifest)
    assert layout.read_manifest(tmp_path) == manifest
    assert (tmp_path / layout.MANIFEST).read_text() == dumps(manifest)


def test_a_private_build_folder_is_never_written():
    segment = Segment.from_json(_segment("gen-000009")).committed()
    building = Segment(name="gen-000009", folder="/index/gen-000009.tmp-42", masked=("x",))
    assert "folder" not in building.to_json() and "masked" not in building.to_json()
    assert building.committed().folder is None and building.committed().masked == ()
    assert segment.folder is None
