"""The MCP tools as plain functions (issue 40 item 3): each tool is a module-level function over a
`Service` (index, writer, settings), callable as it is; `create_server` registers `TOOLS` with the
service bound, so clients see neither the service argument nor a difference; `stats` has a typed
result whose schema the SDK publishes."""

from __future__ import annotations

import asyncio
import json

import pytest


@pytest.fixture
def server(tmp_path):
    from hybridlab.config import IndexConfig
    from hybridlab.index.write.build import index_paths
    from hybridlab.server.mcp import create_server

    source = tmp_path / "memories.jsonl"
    source.write_text(
        json.dumps({"id": "m1", "content": "The walrus project deploys on Fridays.", "tags": ["walrus"]})
        + "\n",
        encoding="utf-8",
    )
    index_paths([source], tmp_path / "index", IndexConfig(models=("wordllama",)), progress=False)
    return create_server(tmp_path / "index")


def test_a_tool_is_a_function_of_the_service_its_context_carries(server):
    """A tool finds the service where the SDK puts what the lifespan yields: a stand-in request
    context is all a direct call needs (the SDK fills `ctx`; the input schema leaves it out)."""
    from types import SimpleNamespace

    from hybridlab.server import mcp

    ctx = SimpleNamespace(request_context=SimpleNamespace(lifespan_context=server.service))
    found = mcp.search("walrus deploys", content="full", ctx=ctx)
    assert [hit.doc_id for hit in found.results] == ["m1"]
    assert (
        found.results[0].text == "The walrus project deploys on Fridays." and found.results[0].snippet == ""
    )
    assert mcp.get_document("m1", ctx=ctx).total_chars == len("The walrus project deploys on Fridays.")
    facts = mcp.stats(ctx=ctx)
    assert isinstance(facts, mcp.StatsResponse) and facts.documents == 1 and facts.server.backend == "local"
    # the index's other facts come through as they are
    assert facts.model_dump()["by_chunk_type"] == {"memory": 1} and facts.model_dump()["chunk_types"] == [
        "memory"
    ]


def test_clients_see_the_tools_without_the_service(server):
    from mcp import Client

    from hybridlab.server import mcp

    async def session():
        async with Client(server) as client:
            tools = (await client.list_tools()).tools
            stats = (await client.call_tool("stats", {})).structured_content
            return tools, stats

    tools, stats = asyncio.run(session())
    assert [tool.name for tool in tools] == [function.__name__ for function in mcp.TOOLS]
    # the service comes from the lifespan through the request Context, which the SDK keeps off the schema
    assert not any({"service", "ctx"} & set(tool.input_schema.get("properties", {})) for tool in tools)
    published = next(tool for tool in tools if tool.name == "stats").output_schema
    assert {"generation", "documents", "chunks", "search_config_sources", "server"} <= set(
        published["required"]
    )
    assert (
        stats["documents"] == 1
        and stats["server"]["memory_commits"] == 0
        and stats["by_collection"] == {"memories": 1}
    )
    assert stats["search_config_sources"]["alpha"] and stats["config_file"] is None
