"""`hybridlab memories list|update|delete` and `hybridlab export` (issue 32 item 2): the memory
lifecycle on the command line, and an export that `hybridlab index` reads back to an identical store."""

from __future__ import annotations

import json

import pytest

from hybridlab import cli

MEMORIES = [
    {
        "id": "m1",
        "content": "User's main editor is VS Code with the Vim extension.",
        "tags": ["editor", "tooling"],
        "created_at": "2024-01-05T09:00:00Z",
        "memory_type": "preference",
        "metadata": {"scope": "user"},
    },
    {
        "id": "m2",
        "content": "The walrus project deploys on Fridays.\n\nRollbacks go through Argo.",
        "tags": ["deploy"],
        "created_at": "2024-01-06T10:30:00Z",
        "updated_at": "2024-02-01T08:00:00Z",
        "metadata": {"project": "walrus"},
    },
    {
        "id": "m3",
        "content": "Scratch: try ruff's preview rules.",
        "tags": ["scratch"],
        "created_at": "2024-01-07T11:00:00Z",
    },
]
FIELDS = ("doc_id", "text", "tags", "created_at", "updated_at", "metadata", "collection", "title", "doc_type")


@pytest.fixture
def index_dir(tmp_path):
    from hybridlab.index.write.build import index_paths

    source = tmp_path / "memories.jsonl"
    source.write_text("".join(json.dumps(m) + "\n" for m in MEMORIES), encoding="utf-8")
    index_paths([source], tmp_path / "index", progress=False)
    return tmp_path / "index"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def documents(index_dir) -> dict[str, dict]:
    from hybridlab.search.engine import open_index

    with open_index(index_dir) as index:
        found, _ = index.list_documents(limit=1000)
        return {doc.doc_id: {k: doc.to_dict()[k] for k in FIELDS} for doc in found}


def test_list_update_delete(capsys, index_dir):
    code, out, err = run(capsys, "memories", "list", "--index", str(index_dir))
    assert (
        code == 0
        and [line.split()[0] for line in out.splitlines()] == ["m2", "m3", "m1"]
        and "3 memories" in err
    )
    code, out, _ = run(capsys, "memories", "list", "--index", str(index_dir), "--tag", "deploy", "--json")
    assert [doc["doc_id"] for doc in json.loads(out)] == ["m2"]
    code, out, _ = run(capsys, "memories", "list", "--index", str(index_dir), "--limit", "1")
    assert len(out.splitlines()) == 1

    code, out, _ = run(
        capsys, "memories", "update", "m1", "--index", str(index_dir), "--tags", "editor,vim", "--json"
    )
    assert code == 0 and json.loads(out)["id"] == "m1"
    after = documents(index_dir)["m1"]
    assert after["tags"] == ["editor", "vim"] and after["text"] == MEMORIES[0]["content"]
    assert after["metadata"]["memory_type"] == "preference" and after["created_at"] == "2024-01-05T09:00:00Z"

    code, out, err = run(
        capsys, "memories", "delete", "--index", str(index_dir), "--tag", "scratch", "--dry-run"
    )
    assert code == 0 and out.split() == ["m3"] and "dry run" in err and "m3" in documents(index_dir)
    code, out, err = run(capsys, "memories", "delete", "m3", "nope", "--index", str(index_dir))
    assert code == 0 and "deleted 1 memories" in out and "not found: nope" in err
    assert set(documents(index_dir)) == {"m1", "m2"}
    assert cli.main(["memories", "delete", "--index", str(index_dir)]) == 2  # neither ids nor filters
    assert "give ids" in capsys.readouterr().err


def test_export_indexes_back_to_an_identical_store(capsys, index_dir, tmp_path):
    from hybridlab.index.write.build import index_paths
    from hybridlab.index.write.memory import MemoryWriter
    from hybridlab.search.engine import open_index

    writer = MemoryWriter(index_dir)
    writer.store("A logged memory about the otter project, café ✓.", ["otter"], "decision")  # in the log
    with open_index(index_dir) as index:
        writer.update(index.get_document("m1"), content="User's main editor is Helix now.")
    writer.close()

    exported = tmp_path / "export.jsonl"
    code, out, err = run(capsys, "export", "--index", str(index_dir))
    assert code == 0 and "exported 4 memories" in err
    exported.write_text(out, encoding="utf-8")
    assert [json.loads(line)["id"] for line in out.splitlines()][:2] == ["m3", "m2"]  # oldest first
    index_paths([exported], tmp_path / "copy", progress=False)
    original, copy = documents(index_dir), documents(tmp_path / "copy")
    assert original == copy and len(copy) == 4
    assert copy["m1"]["updated_at"] > copy["m1"]["created_at"]

    code, _, _ = run(capsys, "export", "--index", str(tmp_path / "copy"), "-o", str(tmp_path / "again.jsonl"))
    assert (tmp_path / "again.jsonl").read_text(encoding="utf-8") == out  # a fixed point


def test_project_scopes_list_and_delete_and_update_moves(capsys, index_dir):
    """`--project` (a memory's collection) scopes list and delete, ids included; `--move-to` moves one."""
    index = ("--index", str(index_dir))
    code, out, _ = run(capsys, "memories", "list", *index, "--project", "walrus")
    assert code == 0 and [line.split()[0] for line in out.splitlines()] == ["m2"]
    code, out, err = run(capsys, "memories", "list", *index, "--project", "unknown")
    assert code == 0 and out == "" and "0 memories" in err  # an unknown project lists nothing
    code, _, err = run(capsys, "memories", "delete", "m1", "m2", *index, "--project", "walrus", "--dry-run")
    assert code == 0 and "not found: m1" in err and "1 memories would be deleted" in err
    code, out, _ = run(capsys, "memories", "update", "m1", *index, "--move-to", "walrus", "--json")
    assert code == 0 and documents(index_dir)["m1"]["collection"] == "walrus"
    assert cli.main(["memories", "list", *index, "--project", "no such"]) == 2
    assert "--project: project must be" in capsys.readouterr().err
