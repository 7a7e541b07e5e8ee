"""Projects in one memory store, driven by the SDK's client: a memory stored in one project is never
returned, listed, deduplicated against or deleted from another; project="*" covers them all; the
default project comes from `create_server(project=)` (`hybridlab mcp --project`) or
`HYBRIDLAB_PROJECT`; update_memory moves a memory; an unknown project reads nothing; a name that is
not a plain identifier is a tool error."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

#: indexed from a JSONL file: m1 in project "alpha" (`metadata.project`), m2 without a project
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


@pytest.fixture(scope="module")
def base_index(tmp_path_factory) -> Path:
    from hybridlab.index.write.build import index_paths

    folder = tmp_path_factory.mktemp("mcp-projects")
    source = folder / "memories.jsonl"
    source.write_text("".join(json.dumps(m) + "\n" for m in MEMORIES), encoding="utf-8")
    index_paths([source], folder / "index", progress=False)
    return folder / "index"


@pytest.fixture
def index_dir(base_index, tmp_path) -> Path:
    target = tmp_path / "index"
    shutil.copytree(base_index, target)
    return target


@pytest.fixture(autouse=True)
def _no_default_project(monkeypatch):
    monkeypatch.delenv("HYBRIDLAB_PROJECT", raising=False)


def data(result) -> dict:
    assert not result.is_error, result.content[0].text
    return result.structured_content


def error(result) -> str:
    assert result.is_error, result.structured_content
    return result.content[0].text


def ids(result) -> set[str]:
    return {hit["doc_id"] for hit in data(result)["results"]}


def test_a_project_never_sees_another_projects_memories(index_dir):
    from mcp import Client

    from hybridlab.server.mcp import create_server

    async def session() -> None:
        async with Client(create_server(index_dir)) as client:
            call = client.call_tool
            a = data(await call("store_memory", {"content": HERON, "tags": ["ci"], "project": "alpha"}))
            b = data(await call("store_memory", {"content": HERON, "tags": ["ci"], "project": "beta"}))
            # never deduplicated against another project: exact, then near (one character apart)
            assert a["created"] and b["created"] and a["id"] != b["id"]
            assert (a["project"], b["project"]) == ("alpha", "beta")
            again = data(await call("store_memory", {"content": HERON.upper(), "project": "beta"}))
            assert again["created"] is False and again["id"] == b["id"] and again["project"] == "beta"
            near = {"content": HERON + "!", "tags": ["ci"], "project": "gamma", "skip_near_duplicate": True}
            c = data(await call("store_memory", near))
            assert c["created"] and c["near_duplicate_of"] is None
            near_in_beta = data(await call("store_memory", {**near, "project": "beta"}))
            assert near_in_beta["created"] is False and near_in_beta["near_duplicate_of"] == b["id"]

            # never returned or listed from another project; "*" (or no default project) mixes them
            query = {"query": "heron wheels shared runner"}
            assert ids(await call("search", {**query, "project": "alpha"})) == {a["id"], "m1"}
            assert ids(await call("search", {**query, "project": "beta", "limit": 50})) == {b["id"]}
            everywhere = {a["id"], b["id"], c["id"], "m1", "m2"}
            assert ids(await call("search", {**query, "project": "*"})) == everywhere
            assert ids(await call("search", query)) == everywhere
            assert ids(await call("search", {**query, "collection": "gamma"})) == {c["id"]}
            assert ids(await call("search", {**query, "project": "alpha", "collection": "beta"})) == set()
            assert ids(await call("list_memories", {"project": "alpha"})) == {a["id"], "m1"}
            assert ids(await call("list_memories", {"project": "memories"})) == {"m2"}  # no project
            assert ids(await call("search_by_tag", {"tags": ["ci"], "project": "beta"})) == {b["id"]}
            tagged = {a["id"], b["id"], c["id"]}
            assert ids(await call("search_by_tag", {"tags": ["ci"], "project": "*"})) == tagged

            # never deleted from another project: by id or by tags
            by_id = data(await call("delete_memory", {"ids": [a["id"], "m1"], "project": "beta"}))
            assert by_id["count"] == 0 and by_id["not_found"] == [a["id"], "m1"]
            by_tag = data(await call("delete_memory", {"tags": ["ci"], "project": "beta"}))
            assert by_tag["ids"] == [b["id"]]
            assert ids(await call("search_by_tag", {"tags": ["ci"], "project": "*"})) == tagged - {b["id"]}
            assert ids(await call("list_memories", {"project": "alpha"})) == {a["id"], "m1"}

            # an unknown project reads nothing; it is no error
            for tool, arguments in [
                ("search", query),
                ("list_memories", {}),
                ("search_by_tag", {"tags": ["ci"]}),
                ("delete_memory", {"ids": [a["id"]], "dry_run": True}),
                ("delete_memory", {"tags": ["ci"]}),
            ]:
                assert data(await call(tool, {**arguments, "project": "nope"}))["count"] == 0, tool
            assert "in project 'nope'" in error(
                await call("update_memory", {"memory_id": a["id"], "tags": ["x"], "project": "nope"})
            )

            stats = data(await call("stats"))
            assert stats["projects"] == {"alpha": 2, "gamma": 1, "memories": 1}  # beta: emptied
            assert stats["default_project"] is None
            listed = data(await call("list_collections"))
            assert [c["name"] for c in listed["collections"]] == ["alpha", "gamma", "memories"]

    asyncio.run(session())


def test_a_queued_memory_is_a_duplicate_in_its_own_project_only(index_dir):
    """With a deferred commit (`commit_delay`) the queue is looked up per project too."""
    from mcp import Client

    from hybridlab.server.mcp import create_server

    async def session() -> None:
        async with Client(create_server(index_dir, commit_delay=60.0)) as client:
            call = client.call_tool
            a = data(await call("store_memory", {"content": HERON, "project": "alpha"}))
            b = data(await call("store_memory", {"content": HERON, "project": "beta"}))
            assert a["pending"] and b["pending"] and b["created"] and a["id"] != b["id"]
            again = data(await call("store_memory", {"content": HERON.lower(), "project": "alpha"}))
            assert again["pending"] and again["duplicate_of"] == a["id"] and again["project"] == "alpha"

    asyncio.run(session())


def test_the_default_project_from_the_option_or_the_environment(index_dir, monkeypatch):
    from mcp import Client

    from hybridlab.server.mcp import create_server

    async def session(server, project: str) -> str:
        async with Client(server) as client:
            call = client.call_tool
            stored = data(await call("store_memory", {"content": f"{HERON} ({project})"}))
            assert stored["project"] == project
            assert data(await call("stats"))["default_project"] == project
            assert data(await call("list_collections"))["default_project"] == project
            assert ids(await call("list_memories")) == {stored["id"], *(["m1"] if project == "alpha" else [])}
            assert ids(await call("search", {"query": "walrus deploys", "limit": 50})) <= {stored["id"], "m1"}
            assert "m2" in ids(await call("search", {"query": "editor", "project": "*"}))
            return stored["id"]

    monkeypatch.setenv("HYBRIDLAB_PROJECT", "alpha")
    in_alpha = asyncio.run(session(create_server(index_dir), "alpha"))
    in_beta = asyncio.run(session(create_server(index_dir, project="beta"), "beta"))  # the option wins
    assert in_alpha != in_beta


def test_update_moves_a_memory_to_another_project(index_dir):
    from mcp import Client

    from hybridlab.server.mcp import create_server

    async def session() -> None:
        async with Client(create_server(index_dir, project="alpha")) as client:
            call = client.call_tool
            assert data(await call("delete_memory", {"ids": ["m2"], "dry_run": True}))["not_found"] == ["m2"]
            assert "in project 'alpha'" in error(await call("update_memory", {"memory_id": "m2", "tags": []}))
            moved = data(await call("update_memory", {"memory_id": "m1", "move_to": "beta"}))
            assert moved["id"] == "m1" and moved["project"] == "beta"
            assert ids(await call("list_memories")) == set()
            assert ids(await call("list_memories", {"project": "beta"})) == {"m1"}
            found = data(await call("search", {"query": "walrus deploys", "project": "beta"}))
            assert [(r["doc_id"], r["collection"]) for r in found["results"]] == [("m1", "beta")]
            document = data(await call("get_document", {"doc_id": "m1"}))
            assert document["created_at"].startswith("2024-01-01") and document["tags"] == ["deploy"]
            # a memory without a project moves into one (and a project memory can be updated in place)
            data(await call("update_memory", {"memory_id": "m2", "project": "*", "move_to": "alpha"}))
            edited = data(await call("update_memory", {"memory_id": "m2", "tags": ["vim"]}))
            assert edited["project"] == "alpha"
            assert ids(await call("list_memories", {"project": "memories"})) == set()

    asyncio.run(session())


@pytest.mark.parametrize("name", ["", "a b", "../up", "-x", "*", "x" * 65, "naïve"])
def test_a_project_name_that_is_not_a_plain_identifier_is_a_tool_error(index_dir, name):
    from mcp import Client

    from hybridlab.server.mcp import create_server

    async def session() -> None:
        async with Client(create_server(index_dir)) as client:
            call = client.call_tool
            calls = [
                ("store_memory", {"content": "A fact.", "project": name}),
                ("update_memory", {"memory_id": "m1", "tags": [], "move_to": name}),
            ]
            if name != "*":  # "*" is every project, for a read
                calls += [
                    ("search", {"query": "walrus", "project": name}),
                    ("list_memories", {"project": name}),
                    ("search_by_tag", {"tags": ["deploy"], "project": name}),
                    ("delete_memory", {"ids": ["m1"], "project": name}),
                    ("update_memory", {"memory_id": "m1", "tags": [], "project": name}),
                ]
            for tool, arguments in calls:
                assert "project must be 1-64 letters" in error(await call(tool, arguments)), tool
            assert data(await call("stats"))["projects"] == {"alpha": 1, "memories": 1}

    asyncio.run(session())


def test_a_bad_default_project_stops_the_server_before_it_starts(index_dir, monkeypatch):
    from hybridlab.errors import InvalidValueError
    from hybridlab.server.mcp import create_server

    with pytest.raises(InvalidValueError, match="project must be") as raised:
        create_server(index_dir, project="my project")
    assert raised.value.field == "project"
    monkeypatch.setenv("HYBRIDLAB_PROJECT", "a/b")
    with pytest.raises(InvalidValueError, match="'a/b'"):
        create_server(index_dir)


@pytest.mark.slow
def test_hybridlab_mcp_project_sets_the_default_over_stdio(index_dir):
    """`hybridlab mcp --project NAME`, spawned as a client spawns it, serves NAME as the default."""
    import sys

    from mcp import Client, StdioServerParameters

    repo = Path(__file__).resolve().parents[2]
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "hybridlab.cli", "mcp", "--index", str(index_dir), "--project", "beta"],
        env={"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": str(repo)},
        cwd=str(repo),
    )

    async def session() -> None:
        async with Client(params) as client:
            assert data(await client.call_tool("list_collections"))["default_project"] == "beta"
            assert data(await client.call_tool("list_memories"))["count"] == 0  # beta has none yet
            stored = data(await client.call_tool("store_memory", {"content": HERON}))
            assert stored["project"] == "beta"
            assert ids(await client.call_tool("list_memories")) == {stored["id"]}

    asyncio.run(session())
