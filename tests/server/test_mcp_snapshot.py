"""One snapshot per response (issue 40 item 3): the texts `search` returns (content="chunk" or
"full") come from the generation that ranked the hits, even when a writer commits a newer one while
the search runs. Driven by the SDK's client; the commit is made between ranking and texts by wrapping
the pipeline's hydrate step, the search's last step before the tool reads texts."""

from __future__ import annotations

import asyncio
import json

import pytest

#: longer than a snippet (240 characters): a chunk read from a newer generation that no longer holds it
#: fell back to the snippet, a cut text
OLD = "The walrus project deploys on Fridays. " + "It waits for the release notes, then for the review. " * 6
NEW = "The walrus project deploys on Mondays since the move."


@pytest.fixture
def server(tmp_path):
    from hybridlab.config import IndexConfig
    from hybridlab.index.write.build import index_paths
    from hybridlab.server.mcp import create_server

    source = tmp_path / "memories.jsonl"
    source.write_text(json.dumps({"id": "m1", "content": OLD, "tags": ["walrus"]}) + "\n", encoding="utf-8")
    index_paths([source], tmp_path / "index", IndexConfig(models=("wordllama",)), progress=False)
    return create_server(tmp_path / "index")


@pytest.mark.parametrize("content", ["chunk", "full"])
def test_search_texts_come_from_the_generation_that_ranked(server, monkeypatch, content):
    from mcp import Client

    from hybridlab.search.pipeline import hydrate as hydration

    hydrate, service = hydration.hydrate, server.service

    def hydrate_then_commit(snapshot, *args, **kwargs):
        results = hydrate(snapshot, *args, **kwargs)
        service.writer.update(service.index.get_document("m1"), content=NEW)  # a newer generation now
        return results

    async def session() -> dict:
        async with Client(server) as client:
            monkeypatch.setattr(hydration, "hydrate", hydrate_then_commit)
            found = await client.call_tool("search", {"query": "walrus deploys", "content": content})
            monkeypatch.setattr(hydration, "hydrate", hydrate)
            after = await client.call_tool("search", {"query": "walrus deploys", "content": content})
            assert not after.is_error and after.structured_content["results"][0]["text"] == NEW
            return found

    found = asyncio.run(session())
    assert not found.is_error, found.content[0].text
    (hit,) = found.structured_content["results"]
    assert hit["doc_id"] == "m1" and hit["text"] == OLD, (
        "ranked on one generation, text read from a newer one"
    )
