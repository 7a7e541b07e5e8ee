"""The memory lifecycle and document paging over both transports a client uses (issue 32 done-when):
a real `hybridlab mcp` process driven by the SDK's client over stdio and over streamable HTTP: an empty
start, store, a duplicate, update, search, list, time in words against a fixed now (and one refused),
delete, search (gone), get_document by offset and by section, then a restarted server (still gone);
and the Panel release notes paged section by section over both."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from tests.server.test_mcp_http_auth import start_server
from tests.server.test_mcp_sections import RELEASES
from tests.server.test_mcp_server import ENV, REPO, TOOLS

pytestmark = pytest.mark.slow  # starts servers that load the embedding model

GUIDE = "# Guide\n\nIntro text.\n\n" + "".join(
    f"## Part {n}\n\n" + f"Paragraph {n} about widgets. " * 40 + "\n\n" for n in range(6)
)


@pytest.fixture
def index_dir(tmp_path) -> Path:
    from hybridlab.index.write.build import index_paths

    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "guide.md").write_text(GUIDE, encoding="utf-8")
    memories = [
        {
            "id": "m1",
            "content": "The heron team reviews pull requests on Tuesdays.",
            "tags": ["heron"],
            "created_at": "2024-01-09T10:00:00Z",
        }
    ]
    (tmp_path / "memories.jsonl").write_text(
        "".join(json.dumps(m) + "\n" for m in memories), encoding="utf-8"
    )
    index_paths([tmp_path / "docs", tmp_path / "memories.jsonl"], tmp_path / "index", progress=False)
    return tmp_path / "index"


NOW = "2024-01-10T12:00:00Z"  # m1 is from "yesterday"


def stdio(index_dir: Path):
    from mcp import StdioServerParameters

    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "hybridlab.cli", "mcp", "--index", str(index_dir)],
        env={**ENV, "PYTHONPATH": str(REPO), "HYBRIDLAB_NOW": NOW},
        cwd=str(REPO),
    )


def data(result) -> dict:
    assert not result.is_error, result.content[0].text
    return result.structured_content


async def lifecycle(client) -> str:
    """Every new tool once; returns the id of the memory it deleted."""
    call = lambda tool, **arguments: client.call_tool(tool, arguments)
    assert {tool.name for tool in (await client.list_tools()).tools} == TOOLS
    stored = data(
        await call("store_memory", content="The kestrel service listens on port 7411.", tags=["kestrel"])
    )
    same = data(await call("store_memory", content="the KESTREL service listens on port 7411. "))
    assert same["created"] is False and same["id"] == stored["id"]
    updated = data(
        await call(
            "update_memory", memory_id=stored["id"], content="The kestrel service listens on port 7522."
        )
    )
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
    yesterday = data(await call("list_memories", time="yesterday"))
    assert [r["doc_id"] for r in yesterday["results"]] == ["m1"] and yesterday["time_range"][
        "since"
    ] == "2024-01-09T00:00:00Z"
    refused = await call("search", query="heron", time="when the heron sings")
    assert refused.is_error and "time" in refused.content[0].text
    collections = data(await call("list_collections"))["collections"]
    assert {c["name"] for c in collections} >= {"docs"}
    assert [d["doc_id"] for d in data(await call("list_documents", collection="docs"))["results"]] == [
        "guide.md"
    ]
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


async def empty_start(client) -> str:
    stored = data(await client.call_tool("store_memory", {"content": "The first memory of an empty store."}))
    found = data(await client.call_tool("search", {"query": "first memory empty store", "limit": 1}))
    assert found["results"][0]["doc_id"] == stored["id"]
    return stored["id"]


async def panel_pages(client) -> str:
    """The release notes section by section, 3,000 characters a page: joined, the document."""
    pages, section, offset = [], 0, 0
    while section is not None:
        page = data(
            await client.call_tool(
                "get_document",
                {"doc_id": "releases.md", "section": section, "offset": offset, "max_chars": 3_000},
            )
        )
        pages.append(page["text"])
        offset = page["next_offset"] or 0
        section = section if page["next_offset"] is not None else page["next_section"]
    assert (
        "".join(pages) == RELEASES.read_text(encoding="utf-8") and len("".join(pages)) == page["total_chars"]
    )
    return str(len(pages))


async def still_gone(client, deleted: str) -> None:
    found = data(await client.call_tool("search", {"query": "kestrel service port", "limit": 5}))
    assert deleted not in {r["doc_id"] for r in found["results"]}
    missing = await client.call_tool("get_document", {"doc_id": deleted})
    assert missing.is_error


def over_stdio(index_dir: Path, check, *args) -> str:
    from mcp import Client

    async def run() -> str:
        async with Client(stdio(index_dir)) as client:
            return await check(client, *args)

    return asyncio.run(run())


def over_http(index_dir: Path, check, *args) -> str:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async def run(port: int) -> str:
        async with Client(streamable_http_client(f"http://127.0.0.1:{port}/mcp")) as client:
            return await check(client, *args)

    process, port, _stderr = start_server(index_dir)
    try:
        return asyncio.run(run(port))
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.mark.parametrize("transport", [over_stdio, over_http], ids=["stdio", "streamable-http"])
def test_the_lifecycle_and_a_restart(index_dir, transport, monkeypatch):
    monkeypatch.setenv("HYBRIDLAB_NOW", NOW)  # the HTTP server inherits this process' environment
    deleted = transport(index_dir, lifecycle)
    transport(index_dir, still_gone, deleted)  # a restarted server


@pytest.mark.parametrize("transport", [over_stdio, over_http], ids=["stdio", "streamable-http"])
def test_an_empty_start(tmp_path, transport):
    stored = transport(tmp_path / "new-store", empty_start)
    assert stored.startswith("mem-") and (tmp_path / "new-store" / "manifest.json").is_file()


@pytest.fixture(scope="module")
def panel_index(tmp_path_factory) -> Path:
    if not RELEASES.is_file():
        pytest.skip(f"no HoloViz corpus at {RELEASES.parents[3]} (set HYBRIDLAB_CORPORA)")
    import shutil

    from hybridlab.config import IndexConfig
    from hybridlab.index.write.build import index_paths

    folder = tmp_path_factory.mktemp("panel")
    (folder / "docs").mkdir()
    shutil.copy(RELEASES, folder / "docs" / "releases.md")
    index_paths([folder / "docs"], folder / "index", IndexConfig(models=("wordllama",)), progress=False)
    return folder / "index"


@pytest.mark.parametrize("transport", [over_stdio, over_http], ids=["stdio", "streamable-http"])
def test_the_panel_release_notes_page_by_section(panel_index, transport):
    assert int(transport(panel_index, panel_pages)) > 103
