"""The memory service used directly, without MCP: a store deduplicates within its own project,
exactly and near, and is found by the next read at once; update, list and delete stay in a project;
the results are typed records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

MEMORIES = [
    {
        "id": "m1",
        "content": "The walrus service deploys on Fridays.",
        "tags": ["deploy"],
        "created_at": "2024-01-01T09:00:00Z",
        "metadata": {"project": "alpha"},
    },
    {
        "id": "m2",
        "content": "User's main editor is VS Code with the Vim extension.",
        "tags": ["editor"],
        "created_at": "2024-01-02T09:00:00Z",
    },
]
HERON = "The heron pipeline caches wheels in the shared runner."


@pytest.fixture
def service(tmp_path: Path):
    from hybridlab.index.write.build import index_paths
    from hybridlab.memory import MemoryService

    source = tmp_path / "memories.jsonl"
    source.write_text("".join(json.dumps(m) + "\n" for m in MEMORIES), encoding="utf-8")
    index_paths([source], tmp_path / "index", progress=False)
    memories = MemoryService.open(tmp_path / "index", default_project="alpha")
    yield memories
    memories.close()


def test_store_dedupes_within_its_project_and_is_read_at_once(service):
    from hybridlab.memory import MemoryFilters, StoreOutcome

    stored = service.store(HERON, ["ci"])
    assert isinstance(stored, StoreOutcome) and stored.created and stored.project == "alpha"
    assert stored.generation is not None and stored.batch_size == 1

    again = service.store(HERON.upper().replace(" ", "  "))  # equal content: case and whitespace aside
    assert (again.created, again.id, again.duplicate_of, again.batch_size) == (False, stored.id, stored.id, 0)
    elsewhere = service.store(HERON, ["ci"], project="beta")  # another project: no duplicate of alpha's
    assert elsewhere.created and elsewhere.id != stored.id and elsewhere.project == "beta"

    near = service.store(HERON.replace(".", "!"), ["ci"], skip_near_duplicate=True)  # a light edit
    assert (near.created, near.id, near.near_duplicate_of) == (False, stored.id, stored.id)
    assert near.similarity is not None and near.similarity >= 0.95

    listed = [d.doc_id for d in service.memories(MemoryFilters())]  # the default project: alpha
    assert listed == [stored.id, "m1"]
    everywhere = service.memories(MemoryFilters(tags=("ci",)), project="*")
    assert {d.doc_id for d in everywhere} == {elsewhere.id, stored.id}


def test_update_and_delete_stay_in_a_project(service):
    from hybridlab.errors import DocumentNotFoundError
    from hybridlab.memory import Deletion, MemoryFilters

    with pytest.raises(DocumentNotFoundError, match="no memory 'm2' in project 'alpha'"):
        service.update("m2", tags=["vim"])
    updated = service.update("m2", tags=["vim"], project="*", move_to="alpha")
    assert updated.project == "alpha" and updated.stored.id == "m2"
    assert service.index.get_document("m2").collection == "alpha"

    dry = service.delete(["m1", "nope"], dry_run=True, project="beta")
    assert dry == Deletion(True, (), ("m1", "nope"), service.index.generation)
    deleted = service.delete(filters=MemoryFilters(tags=("vim",)))
    assert (deleted.ids, deleted.removed, deleted.dry_run) == (("m2",), 1, False)
    assert [d.doc_id for d in service.memories(MemoryFilters(), project="*")] == ["m1"]
