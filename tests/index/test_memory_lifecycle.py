"""MemoryWriter's lifecycle below the server: an empty start, update and delete of memories in a
segment and in the write-ahead log (tombstones and re-puts in the log; `apply_changes`'s
`delete_ids` without one), before and after a restart and the fold."""

from __future__ import annotations

import json

import pytest

MEMORIES = [
    {
        "id": f"m{n}",
        "content": f"Memory number {n} about the {word} project.",
        "tags": ["t"],
        "created_at": f"2024-01-0{n}T09:00:00Z",
    }
    for n, word in [(1, "walrus"), (2, "heron"), (3, "badger")]
]


@pytest.fixture
def index_dir(tmp_path):
    from hybridlab.index.write.build import index_paths

    source = tmp_path / "memories.jsonl"
    source.write_text("".join(json.dumps(m) + "\n" for m in MEMORIES), encoding="utf-8")
    index_paths([source], tmp_path / "index", progress=False)
    return tmp_path / "index"


def test_empty_start_then_store(tmp_path):
    from hybridlab.index.write.memory import MemoryWriter, create_memory_index
    from hybridlab.search.engine import open_index

    assert create_memory_index(tmp_path / "fresh")
    assert not create_memory_index(tmp_path / "fresh")  # holds an index now: left as it is
    stored = MemoryWriter(tmp_path / "fresh").store("The first memory of an empty store.")
    with open_index(tmp_path / "fresh") as index:
        assert [r.doc_id for r in index.search("first memory empty store", limit=3)] == [stored.id]


def test_update_and_delete_in_segments_and_the_log(index_dir):
    from hybridlab.index.write.build import apply_changes
    from hybridlab.index.write.memory import MemoryWriter
    from hybridlab.search.engine import open_index

    writer = MemoryWriter(index_dir)
    logged = writer.store("A logged memory about the otter project.", ["t"])  # in the write-ahead log
    with open_index(index_dir) as index:
        updated = writer.update(index.get_document("m2"), content="Memory two now about the crane project.")
        assert (updated.created_at, updated.updated_at > updated.created_at) == ("2024-01-02T09:00:00Z", True)
        index.refresh()
        assert index.stats().documents == 4
        assert index.get_document("m2").text == "Memory two now about the crane project."
        deleted = writer.delete(["m1", logged.id, "nowhere"])
        assert (deleted.removed, deleted.ids) == (
            2,
            ("m1", logged.id, "nowhere"),
        )  # a segment's and a logged one
        index.refresh()
        assert sorted(d.doc_id for d in index.list_documents()[0]) == ["m2", "m3"]
        assert {r.doc_id for r in index.search("otter walrus project", limit=5, mode="bm25")} == {"m2", "m3"}
    with pytest.raises(ValueError, match="both written and deleted"):
        from hybridlab.index.write.memory import make_memory

        apply_changes(
            index_dir,
            [("x", [make_memory("again", memory_id="m3")], False)],
            progress=False,
            delete_ids=["m3"],
        )
    with pytest.raises(ValueError, match="ids must be a list"):
        writer.delete("m3")


def test_delete_drops_a_memory_still_in_the_log(index_dir):
    from hybridlab.index.write.memory import MemoryWriter
    from hybridlab.search.engine import open_index

    writer = MemoryWriter(index_dir)
    logged = writer.store("A logged memory about the otter project.", ["t"])
    kept = writer.store("Another logged memory about the lynx project.", ["t"])
    assert writer.delete([logged.id]).removed == 1  # only in the log: a tombstone, and counted
    assert (
        writer.delete([logged.id]).removed == 0 and writer.appends == 3
    )  # deleted already: nothing appended
    with open_index(index_dir) as index:
        assert sorted(d.doc_id for d in index.list_documents()[0]) == sorted(["m1", "m2", "m3", kept.id])
        assert index.stats().to_dict()["write_ahead_log"] | {"file": ""} == {
            "file": "",
            "memories": 1,
            "chunks": 1,
            "tombstones": 1,
        }


def _visible(index_dir, capsys) -> dict:
    """What every read path shows: documents listed, exported, searched (bm25 and vector), got, and
    the duplicate look-up of each memory's text."""
    from hybridlab import cli
    from hybridlab.index.write.memory import find_duplicate
    from hybridlab.search.engine import open_index

    capsys.readouterr()
    assert cli.main(["export", "--index", str(index_dir)]) == 0
    exported = {
        json.loads(line)["id"]: json.loads(line)["content"] for line in capsys.readouterr().out.splitlines()
    }
    with open_index(index_dir) as index:
        listed = {d.doc_id: d.text for d in index.list_documents()[0]}
        assert listed == exported == {doc_id: index.get_document(doc_id).text for doc_id in listed}
        found = {
            r.doc_id
            for mode in ("bm25", "vector", "hybrid")
            for text in listed.values()
            for r in index.search(text, limit=10, mode=mode)
        }
        assert found <= set(listed)
        dedupe = {
            text: find_duplicate(index.snapshot().generation.store, text)
            for text in [m["content"] for m in MEMORIES] + list(listed.values())
        }
        return {
            "listed": listed,
            "tagged": {d.doc_id for d in index.search_by_tag(["t"])},
            "dedupe": {text: doc_id for text, doc_id in dedupe.items() if doc_id},
            "tombstones": index.stats().tombstones,
            "m2": index.get_document("m2"),
        }


def test_deletes_and_updates_are_log_appends_that_hold_after_a_restart_and_the_fold(index_dir, capsys):
    """A delete (a segment's memory and a logged one) and an update (of a segment's memory) are each
    one append to the log, no commit: every read path stops returning the deleted memories and the
    old version at once, after a restart and after the fold; a deleted memory's content stored again
    is a new memory; stats count the tombstones."""
    from hybridlab.index.admin.verify import verify
    from hybridlab.index.format import layout
    from hybridlab.index.write.build import fold_log
    from hybridlab.index.write.memory import MemoryWriter
    from hybridlab.search.engine import open_index

    generation = layout.read_manifest(index_dir).generation
    writer = MemoryWriter(index_dir, wal_records=100)
    logged = writer.store("A logged memory about the otter project.", ["t"])
    with open_index(index_dir) as index:
        current = index.get_document("m2")
    updated = writer.update(current, content="Memory two now about the crane project.")
    assert writer.delete(["m1", logged.id]).removed == 2
    assert (writer.appends, writer.commits, writer.folds) == (3, 0, 0)  # one append each
    assert layout.read_manifest(index_dir).generation == generation == updated.generation
    expected = {"m2": "Memory two now about the crane project.", "m3": MEMORIES[2]["content"]}
    seen = _visible(index_dir, capsys)
    assert seen["listed"] == expected and seen["tagged"] == set(expected)
    assert seen["dedupe"] == {text: doc_id for doc_id, text in expected.items()}  # no deleted or old version
    assert seen["tombstones"] == 2 and seen["m2"].created_at == current.created_at
    assert verify(index_dir) == []
    writer.close()
    restarted = MemoryWriter(index_dir, wal_records=100)  # a new process: the log read back
    assert restarted.delete(["m1", logged.id]).removed == 0 and restarted.appends == 0
    assert _visible(index_dir, capsys) == seen
    again = restarted.store(MEMORIES[0]["content"], ["t"])  # the deleted memory's content: a new memory
    expected[again.id] = MEMORIES[0]["content"]
    assert _visible(index_dir, capsys)["listed"] == expected
    report = fold_log(index_dir)
    assert report.committed and report.generation == generation + 1
    seen = _visible(index_dir, capsys)
    assert seen["listed"] == expected and seen["tombstones"] == 2  # m1 and m2's old version, in their segment
    assert seen["m2"].created_at == current.created_at and seen["m2"].updated_at == updated.updated_at
    with open_index(index_dir) as index:
        assert index.stats().to_dict()["write_ahead_log"] | {"file": ""} == {
            "file": "",
            "memories": 0,
            "chunks": 0,
            "tombstones": 0,
        }
    assert verify(index_dir) == []
