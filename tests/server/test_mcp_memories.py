"""The memory lifecycle over MCP, driven by the SDK's client: an empty start, update, delete (also
after a restart), list with a cursor, and time in words pushed down as a filter."""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MEMORIES = REPO / "ground_truth" / "memories" / "memories.jsonl"
ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}

NOW = "2024-02-27T12:00:00Z"  # a Tuesday, the day after the 30th ground-truth memory


@pytest.fixture(scope="module")
def base_index(tmp_path_factory) -> Path:
    from hybridlab.index.write.build import index_paths

    folder = tmp_path_factory.mktemp("mcp-memories")
    source = folder / "memories.jsonl"
    source.write_text(
        "".join(MEMORIES.read_text(encoding="utf-8").splitlines(keepends=True)[:30]), encoding="utf-8"
    )
    index_paths([source], folder / "index", progress=False)
    return folder / "index"


@pytest.fixture
def index_dir(base_index, tmp_path) -> Path:
    target = tmp_path / "index"
    shutil.copytree(base_index, target)
    return target


def server_params(index_dir: Path):
    from mcp import StdioServerParameters

    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "hybridlab.cli", "mcp", "--index", str(index_dir)],
        env={**ENV, "PYTHONPATH": str(REPO)},
        cwd=str(REPO),
    )


async def call(client, tool: str, **arguments):
    return await client.call_tool(tool, arguments)


def doc_ids(result) -> list[str]:
    assert not result.is_error, result.content[0].text
    return [hit["doc_id"] for hit in result.structured_content["results"]]


def data(result) -> dict:
    assert not result.is_error, result.content[0].text
    return result.structured_content


@pytest.mark.slow
def test_empty_start_creates_a_memory_index_and_stores_at_once(tmp_path, caplog):
    """A missing folder (over stdio) and an empty one (in process) become empty memory indexes."""
    from mcp import Client

    from hybridlab.server.mcp import create_server

    missing = tmp_path / "new" / "memories"

    async def session() -> None:
        async with Client(server_params(missing)) as client:
            assert data(await call(client, "stats"))["documents"] == 0
            assert data(await call(client, "search", query="anything"))["results"] == []
            assert data(await call(client, "list_memories"))["results"] == []
            stored = data(
                await call(
                    client, "store_memory", content="The office plant is watered on Mondays.", tags=["office"]
                )
            )
            assert doc_ids(await call(client, "search", query="office plant watered", limit=1)) == [
                stored["id"]
            ]

    asyncio.run(session())
    manifest = json.loads((missing / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["config"]["models"] and set(manifest["models"]) == set(manifest["config"]["models"])

    empty = tmp_path / "empty"
    empty.mkdir()
    with caplog.at_level(logging.INFO, logger="hybridlab.server.mcp"):
        server = create_server(empty)
    assert "created an empty memory index" in caplog.text
    assert server.service.index.stats().documents == 0


@pytest.mark.slow
def test_update_delete_list_and_a_restart(index_dir, monkeypatch):
    """store -> update -> search -> list (paged) -> delete (dry run, then for real) -> search (gone) ->
    restart (still gone, the update kept); every operation keeps one document per id."""
    from mcp import Client

    async def first_session() -> dict:
        async with Client(server_params(index_dir)) as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
            assert {"update_memory", "delete_memory", "list_memories"} <= names
            stored = data(
                await call(
                    client,
                    "store_memory",
                    content="The staging deploy key is in the Ops vault.",
                    tags=["deploy"],
                    created_at="2024-02-27T08:00:00Z",
                )
            )
            scratch = [
                data(
                    await call(
                        client,
                        "store_memory",
                        content=f"Scratch note {n} about a yak shave.",
                        tags=["scratch"],
                    )
                )["id"]
                for n in range(2)
            ]
            updated = data(
                await call(
                    client,
                    "update_memory",
                    memory_id=stored["id"],
                    content="The staging deploy key moved to the Infra vault.",
                    tags=["deploy", "secrets"],
                )
            )
            assert updated["id"] == stored["id"] and updated["created_at"] == "2024-02-27T08:00:00Z"
            assert updated["updated_at"] > updated["created_at"]
            assert doc_ids(await call(client, "search", query="deploy key Infra vault", limit=1)) == [
                stored["id"]
            ]
            document = data(await call(client, "get_document", doc_id=stored["id"]))
            assert document["text"] == "The staging deploy key moved to the Infra vault."
            assert document["tags"] == ["deploy", "secrets"] and document["metadata"]["memory_type"] == "note"
            kept_type = data(await call(client, "update_memory", memory_id="mem-0001", memory_type="fact"))
            assert kept_type["tags"] == ["editor", "tooling"]
            assert data(await call(client, "stats"))["documents"] == 33  # one document per id

            seen, cursor = [], None
            while True:
                page = data(
                    await call(client, "list_memories", limit=7, **({"cursor": cursor} if cursor else {}))
                )
                seen += [hit["doc_id"] for hit in page["results"]]
                cursor = page["next_cursor"]
                if cursor is None:
                    break
            assert len(seen) == len(set(seen)) == 33
            assert seen[0] in {stored["id"], "mem-0001", *scratch}  # the newest: updated or stored just now
            assert seen[-1] == "mem-0002"  # the oldest untouched memory (mem-0001 was updated)

            dry = data(await call(client, "delete_memory", tags=["scratch"], dry_run=True))
            assert sorted(dry["ids"]) == sorted(scratch) and dry["dry_run"]
            assert len(doc_ids(await call(client, "search_by_tag", tags=["scratch"]))) == 2
            gone = data(await call(client, "delete_memory", tags=["scratch"]))
            assert sorted(gone["ids"]) == sorted(scratch) and not gone["dry_run"]
            by_id = data(await call(client, "delete_memory", ids=[stored["id"], "mem-nope"]))
            assert by_id["ids"] == [stored["id"]] and by_id["not_found"] == ["mem-nope"]
            assert stored["id"] not in doc_ids(await call(client, "search", query="deploy key Infra vault"))
            assert doc_ids(await call(client, "search_by_tag", tags=["scratch"])) == []
            assert (await call(client, "get_document", doc_id=stored["id"])).is_error
            assert (await call(client, "update_memory", memory_id=stored["id"], content="back")).is_error
            refused = await call(client, "delete_memory")
            assert refused.is_error and "give ids, or tags" in refused.content[0].text
            assert data(await call(client, "stats"))["documents"] == 30
            return {"deleted": [stored["id"], *scratch]}

    async def second_session(deleted: list[str]) -> None:
        async with Client(server_params(index_dir)) as client:
            listed = data(await call(client, "list_memories", limit=100))
            assert listed["count"] == 30 and not set(deleted) & {hit["doc_id"] for hit in listed["results"]}
            assert not set(deleted) & set(
                doc_ids(await call(client, "search", query="deploy key vault yak", limit=50))
            )
            assert (
                data(await call(client, "get_document", doc_id="mem-0001"))["metadata"]["memory_type"]
                == "fact"
            )

    state = asyncio.run(first_session())
    asyncio.run(second_session(state["deleted"]))


TIME_CASES = [  # time expression, the expected ids (newest first) among the 30 memories, now = NOW
    ("yesterday", ["mem-0030"]),
    ("since Monday", ["mem-0030"]),
    ("last week", ["mem-0029", "mem-0028"]),  # Monday 19 to Sunday 25 February 2024
    ("2 days ago", ["mem-0029"]),  # Sunday 25 February
    ("3 days ago", []),
]


def test_time_in_words_is_pushed_down_and_reported(index_dir, monkeypatch):
    pytest.importorskip("dateparser")
    from mcp import Client

    from hybridlab.server.mcp import create_server

    monkeypatch.setenv("HYBRIDLAB_NOW", NOW)
    server = create_server(index_dir)

    async def session() -> None:
        async with Client(server) as client:
            for expression, expected in TIME_CASES:
                listed = data(await call(client, "list_memories", time=expression))
                assert [hit["doc_id"] for hit in listed["results"]] == expected, expression
                found = data(
                    await call(client, "search", query="architecture docs ports", time=expression, limit=5)
                )
                assert sorted(hit["doc_id"] for hit in found["results"]) == sorted(expected), expression
                assert found["time_range"]["expression"] == expression
            week = data(await call(client, "search", query="project", time="last week"))
            assert week["time_range"] == {
                "expression": "last week",
                "since": "2024-02-19T00:00:00Z",
                "until": "2024-02-25T23:59:59.999999Z",
            }
            # pushed down: exactly `limit` results whenever that many match (February holds 16+ memories)
            february = data(
                await call(client, "search", query="user preferences", time="in February", limit=10)
            )
            assert february["count"] == 10
            assert all(hit["updated_at"].startswith("2024-02") for hit in february["results"])
            tagged = data(await call(client, "search_by_tag", tags=["ports"], time="since 2024-02-11"))
            assert [hit["doc_id"] for hit in tagged["results"]] == ["mem-0023"]
            iso = data(await call(client, "list_memories", since="2024-02-25", until="2024-02-26T23:59:59Z"))
            assert [hit["doc_id"] for hit in iso["results"]] == ["mem-0030", "mem-0029"]
            for arguments, message in [
                ({"time": "blah"}, "cannot read 'blah'"),
                ({"time": "yesterday", "since": "2024-01-01"}, "not both"),
                ({"since": "last tuesday"}, "not an ISO-8601 date"),
            ]:
                refused = await call(client, "list_memories", **arguments)
                assert refused.is_error and message in refused.content[0].text, arguments
            bad_cursor = await call(client, "list_memories", cursor="not-a-cursor")
            assert bad_cursor.is_error and "invalid cursor" in bad_cursor.content[0].text

    asyncio.run(session())


def test_deleting_the_only_memories_of_the_write_ahead_log_holds(tmp_path):
    """Found by the MCP load test with deletes: a memory held only by the write-ahead log, with no
    other record beside it, survived its delete (the commit found nothing else to write and left the
    log alone). The writer folds such a log first; the delete holds after a reopen."""
    from hybridlab.config import IndexConfig
    from hybridlab.index.write.build import index_paths
    from hybridlab.index.write.memory import MemoryWriter
    from hybridlab.search.engine import open_index

    source = tmp_path / "memories.jsonl"
    source.write_text(json.dumps({"id": "seed", "content": "A seed memory."}) + "\n", encoding="utf-8")
    index_paths([source], tmp_path / "index", IndexConfig(models=("wordllama",)), progress=False)
    writer = MemoryWriter(tmp_path / "index", wal_records=64)
    stored = [writer.store(f"Logged memory {n} zqlogged{n}.") for n in range(2)]
    deleted = writer.delete([m.id for m in stored])
    writer.close()
    assert deleted.removed == 2
    with open_index(tmp_path / "index") as index:
        assert list(index.snapshot().generation.doc_ids) == ["seed"]
        for memory in stored:
            with pytest.raises(KeyError):
                index.get_document(memory.id)
