"""MemoryWriter's lifecycle below the server: an empty start, update and delete (`apply_changes`'s
`delete_ids`) of memories in a segment and in the write-ahead log."""
from __future__ import annotations

import json

import pytest

MEMORIES = [{"id": f"m{n}", "content": f"Memory number {n} about the {word} project.", "tags": ["t"],
             "created_at": f"2024-01-0{n}T09:00:00Z"} for n, word in [(1, "walrus"), (2, "heron"), (3, "badger")]]


@pytest.fixture
def index_dir(tmp_path):
    from hybridlab.index.build import index_paths

    source = tmp_path / "memories.jsonl"
    source.write_text("".join(json.dumps(m) + "\n" for m in MEMORIES), encoding="utf-8")
    index_paths([source], tmp_path / "index", progress=False)
    return tmp_path / "index"


def test_empty_start_then_store(tmp_path):
    from hybridlab.index.memory import MemoryWriter, create_memory_index
    from hybridlab.search.engine import open_index

    assert create_memory_index(tmp_path / "fresh")
    assert not create_memory_index(tmp_path / "fresh")  # holds an index now: left as it is
    stored = MemoryWriter(tmp_path / "fresh").store("The first memory of an empty store.")
    with open_index(tmp_path / "fresh") as index:
        assert [r.doc_id for r in index.search("first memory empty store", limit=3)] == [stored.id]


def test_update_and_delete_in_segments_and_the_log(index_dir):
    from hybridlab.index.build import apply_changes
    from hybridlab.index.memory import MemoryWriter
    from hybridlab.search.engine import open_index

    writer = MemoryWriter(index_dir)
    logged = writer.store("A logged memory about the otter project.", ["t"])  # in the write-ahead log
    with open_index(index_dir) as index:
        updated = writer.update(index.get_document("m2"), content="Memory two now about the crane project.")
        assert (updated.created_at, updated.updated_at > updated.created_at) == ("2024-01-02T09:00:00Z", True)
        index.refresh()
        assert index.stats()["documents"] == 4
        assert index.get_document("m2")["text"] == "Memory two now about the crane project."
        deleted = writer.delete(["m1", logged.id, "nowhere"])
        assert (deleted.removed, deleted.ids) == (2, ("m1", logged.id, "nowhere"))  # the update folded the log
        index.refresh()
        assert sorted(d["doc_id"] for d in index.list_documents()[0]) == ["m2", "m3"]
        assert {r.doc_id for r in index.search("otter walrus project", limit=5, mode="bm25")} == {"m2", "m3"}
    with pytest.raises(ValueError, match="both written and deleted"):
        from hybridlab.index.memory import make_memory

        apply_changes(index_dir, [("x", [make_memory("again", memory_id="m3")], False)], progress=False,
                      delete_ids=["m3"])
    with pytest.raises(ValueError, match="ids must be a list"):
        writer.delete("m3")


def test_delete_drops_a_memory_still_in_the_log(index_dir):
    from hybridlab.index.memory import MemoryWriter
    from hybridlab.search.engine import open_index

    writer = MemoryWriter(index_dir)
    logged = writer.store("A logged memory about the otter project.", ["t"])
    kept = writer.store("Another logged memory about the lynx project.", ["t"])
    assert writer.delete([logged.id]).removed == 1  # only in the log: dropped from it, and counted
    with open_index(index_dir) as index:
        assert sorted(d["doc_id"] for d in index.list_documents()[0]) == sorted(["m1", "m2", "m3", kept.id])
        assert index.stats()["write_ahead_log"]["memories"] == 0
