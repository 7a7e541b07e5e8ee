"""Responses and a tool list that fit a context window (issue 32 items 5 and 7), driven by the SDK's
client: list_memories and search_by_tag under ~10k characters by default (their texts share a
max_chars budget), explain shows the parsed time range, and the tool list's size in tokens."""

from __future__ import annotations

import asyncio
import json

import pytest

RESPONSE_CHARS = 10_000
#: the tool list's size bound, in tokens: tiktoken's cl100k_base when installed, else characters / 4
TOOL_LIST_TOKENS = 5_000
NOW = "2026-11-27T12:00:00Z"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from hybridlab.index.write.build import index_paths
    from hybridlab.server.mcp import create_server

    folder = tmp_path_factory.mktemp("mcp-budgets")
    memories = [
        {
            "id": f"m{n:02d}",
            "content": f"Memory {n} about the otter project. " + "Detail. " * 250,
            "tags": ["otter"],
            "created_at": f"2026-11-{10 + n % 15:02d}T09:00:00Z",
        }
        for n in range(30)
    ]
    (folder / "memories.jsonl").write_text("".join(json.dumps(m) + "\n" for m in memories), encoding="utf-8")
    index_paths([folder / "memories.jsonl"], folder / "index", progress=False)
    return create_server(folder / "index")


def fits(result) -> dict:
    assert not result.is_error, result.content[0].text
    assert len(result.content[0].text) < RESPONSE_CHARS
    return result.structured_content


def tokens(text: str) -> tuple[int, str]:
    try:
        import tiktoken

        return len(tiktoken.get_encoding("cl100k_base").encode(text)), "tiktoken cl100k_base"
    except Exception:  # noqa: BLE001 - not installed, or its vocabulary not on this machine
        return len(text) // 4, "characters / 4"


def test_lists_fit_by_default_and_explain_shows_the_time_range(server, monkeypatch):
    from mcp import Client

    monkeypatch.setenv("HYBRIDLAB_NOW", NOW)

    async def session() -> None:
        async with Client(server) as client:
            listed = fits(await client.call_tool("list_memories", {}))  # the defaults: 10 memories
            assert listed["count"] == 10 and all(r["truncated"] for r in listed["results"])
            tagged = fits(await client.call_tool("search_by_tag", {"tags": ["otter"]}))
            assert tagged["count"] == 10 and all(r["truncated"] for r in tagged["results"])
            for tool, arguments in [("list_memories", {}), ("search_by_tag", {"tags": ["otter"]})]:
                many = (await client.call_tool(tool, {**arguments, "limit": 30})).structured_content
                assert many["count"] == 30 and sum(len(r["text"]) for r in many["results"]) <= 5_000
            wide = (
                await client.call_tool("list_memories", {"limit": 2, "max_chars": 20_000})
            ).structured_content
            assert (
                not any(r["truncated"] for r in wide["results"]) and len(wide["results"][0]["text"]) > 2_000
            )
            found = (
                await client.call_tool(
                    "search", {"query": "otter project", "time": "last week", "explain": True, "limit": 3}
                )
            ).structured_content  # not a default
            assert (
                fits(await client.call_tool("search", {"query": "otter project", "content": "full"}))["count"]
                == 10
            )
            assert found["count"] == 3 and found["time_range"]["expression"] == "last week"
            assert all(r["explain"]["time_range"] == found["time_range"] for r in found["results"])

    asyncio.run(session())


def test_the_tool_list_is_small_and_every_tool_has_one_example(server):
    from mcp import Client

    async def session() -> None:
        async with Client(server) as client:
            tools = (await client.list_tools()).tools
            listing = json.dumps([t.model_dump(mode="json", exclude_none=True, by_alias=True) for t in tools])
            size, counted_by = tokens(listing)
            print(f"tool list: {len(tools)} tools, {len(listing)} characters, {size} tokens ({counted_by})")
            assert size < TOOL_LIST_TOKENS, (size, counted_by)
            for tool in tools:
                assert tool.description.count("Example:") == 1, tool.name
                assert len(tool.description) <= 700, (tool.name, len(tool.description))

    asyncio.run(session())
