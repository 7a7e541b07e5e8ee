"""The memory lifecycle and document paging over both transports a client uses (issue 32 done-when):
a real `hybridlab mcp` process driven by the SDK's client over stdio and over streamable HTTP: store,
a duplicate, update, search, list, delete, search (gone), get_document by offset and by section, then a
restarted server (still gone)."""
from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tests.server.test_mcp_http_auth import start_server
from tests.server.test_mcp_server import TOOLS, server_params

pytestmark = pytest.mark.slow  # starts servers that load the embedding model

GUIDE = "# Guide\n\nIntro text.\n\n" + "".join(f"## Part {n}\n\n" + f"Paragraph {n} about widgets. " * 40 + "\n\n"
                                               for n in range(6))


@pytest.fixture
def index_dir(tmp_path) -> Path:
    from hybridlab.index.build import index_paths

    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "guide.md").write_text(GUIDE, encoding="utf-8")
    memories = [{"id": "m1", "content": "The heron team reviews pull requests on Tuesdays.", "tags": ["heron"]}]
    (tmp_path / "memories.jsonl").write_text("".join(json.dumps(m) + "\n" for m in memories), encoding="utf-8")
    index_paths([tmp_path / "docs", tmp_path / "memories.jsonl"], tmp_path / "index", progress=False)
    return tmp_path / "index"


def data(result) -> dict:
    assert not result.is_error, result.content[0].text
    return result.structured_content


async def lifecycle(client) -> str:
    """Every new tool once; returns the id of the memory it deleted."""
    call = lambda tool, **arguments: client.call_tool(tool, arguments)
    assert {tool.name for tool in (await client.list_tools()).tools} == TOOLS
    stored = data(await call("store_memory", content="The kestrel service listens on port 7411.", tags=["kestrel"]))
    same = data(await call("store_memory", content="the KESTREL service listens on port 7411. "))
    assert same["created"] is False and same["id"] == stored["id"]
    updated = data(await call("update_memory", memory_id=stored["id"], content="The kestrel service listens on port 7522."))
    assert updated["id"] == stored["id"] and updated["updated_at"] != updated["created_at"]
    found = data(await call("search", query="kestrel service port", limit=3))
    assert found["results"][0]["doc_id"] == stored["id"] and "7522" in found["results"][0]["snippet"]
    listed = data(await call("list_memories", tags=["kestrel"]))
    assert [r["doc_id"] for r in listed["results"]] == [stored["id"]]
    assert data(await call("delete_memory", ids=[stored["id"]], dry_run=True))["ids"] == [stored["id"]]
    assert data(await call("delete_memory", ids=[stored["id"]]))["count"] == 1
    gone = data(await call("search", query="kestrel service port", limit=5))
    assert stored["id"] not in {r["doc_id"] for r in gone["results"]}
    assert data(await call("list_memories", tags=["kestrel"]))["count"] == 0
    assert data(await call("list_memories"))["results"][0]["doc_id"] == "m1"
    collections = data(await call("list_collections"))["collections"]
    assert {c["name"] for c in collections} >= {"docs"}
    assert [d["doc_id"] for d in data(await call("list_documents", collection="docs"))["results"]] == ["guide.md"]
    pages, offset = [], 0
    while offset is not None:
        page = data(await call("get_document", doc_id="guide.md", offset=offset, max_chars=1_000))
        pages.append(page["text"])
        offset = page["next_offset"]
    by_section, section = [], 0
    while section is not None:
        page = data(await call("get_document", doc_id="guide.md", section=section, max_chars=100_000))
        by_section.append(page["text"])
        section = page["next_section"]
    assert "".join(pages) == "".join(by_section) and len("".join(pages)) == page["total_chars"]
    assert len(by_section) == page["section_count"] == 7 and by_section[2].startswith("## Part 1")
    return stored["id"]


async def still_gone(client, deleted: str) -> None:
    found = data(await client.call_tool("search", {"query": "kestrel service port", "limit": 5}))
    assert deleted not in {r["doc_id"] for r in found["results"]}
    missing = await client.call_tool("get_document", {"doc_id": deleted})
    assert missing.is_error


def test_stdio(index_dir):
    from mcp import Client

    async def run(check, *args) -> str:
        async with Client(server_params(index_dir)) as client:
            return await check(client, *args)

    deleted = asyncio.run(run(lifecycle))
    asyncio.run(run(still_gone, deleted))


def test_streamable_http(index_dir):
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async def run(port: int, check, *args) -> str:
        async with Client(streamable_http_client(f"http://127.0.0.1:{port}/mcp")) as client:
            return await check(client, *args)

    deleted = None
    for check in (lifecycle, still_gone):  # the second server is a restart
        process, port, _stderr = start_server(index_dir)
        try:
            deleted = asyncio.run(run(port, check, *([deleted] if deleted else [])))
        finally:
            process.terminate()
            process.wait(timeout=30)
