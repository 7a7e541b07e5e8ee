"""Issue 40, store_memory's near-duplicate look-up: a memory of 10,001-20,000 characters (under the
20,000 the tool allows) stores and is found; the stored text is embedded once, for the look-up and
the write-ahead log together; `nearest_memory` returns a typed result whose similarity is the cosine
of the stored vectors (no debug dict read as an API). Driven by the SDK's client on a wordllama index
(static embeddings: fast, the look-up's logic is the same for every model)."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

MEMORIES = [
    {"id": "m1", "content": "The walrus project deploys on Fridays.", "tags": ["t"]},
    {"id": "m2", "content": "Lunch is at noon in the atrium.", "tags": ["t"]},
]


@pytest.fixture
def index_dir(tmp_path):
    from hybridlab.config import IndexConfig
    from hybridlab.index.write.build import index_paths

    source = tmp_path / "memories.jsonl"
    source.write_text("".join(json.dumps(m) + "\n" for m in MEMORIES), encoding="utf-8")
    index_paths([source], tmp_path / "index", IndexConfig(models=("wordllama",)), progress=False)
    return tmp_path / "index"


def data(result) -> dict:
    assert not result.is_error, result.content[0].text
    return result.structured_content


def long_memory(chars: int) -> str:
    words = " ".join(f"okapi{n} grazes near the river bank" for n in range(chars))
    return ("Zebrafinch ledger: " + words)[: chars - 1].rstrip() + "."


def test_a_20000_character_memory_stores_and_is_found(index_dir):
    from mcp import Client

    from hybridlab.server.mcp import create_server

    content = long_memory(20_000)
    assert len(content) > 19_990

    async def session(server) -> None:
        async with Client(server) as client:
            stored = data(await client.call_tool("store_memory", {"content": content, "tags": ["long"]}))
            assert stored["created"] is True and stored["near_duplicate_of"] is None
            hits = data(await client.call_tool("search", {"query": "zebrafinch ledger", "limit": 3}))[
                "results"
            ]
            assert hits[0]["doc_id"] == stored["id"]
            edit = data(
                await client.call_tool("store_memory", {"content": content[:-40] + ".", "tags": ["long"]})
            )
            assert edit["created"] is True and edit["near_duplicate_of"] == stored["id"]
            assert edit["similarity"] >= 0.95

    asyncio.run(session(create_server(index_dir)))


def test_a_stored_memory_is_embedded_once(index_dir, monkeypatch):
    """The near-duplicate look-up and the log's record share one document embedding of the text."""
    from mcp import Client

    from hybridlab.encoders.base import Encoder
    from hybridlab.server.mcp import create_server

    content = "The heron project moved its builds to a shared runner."
    calls: list[str] = []
    for method in ("encode_documents", "encode_queries"):
        original = getattr(Encoder, method)

        def spy(self, texts, *args, _original=original, _method=method, **kwargs):
            calls.extend(_method for text in texts if content in text)
            return _original(self, texts, *args, **kwargs)

        monkeypatch.setattr(Encoder, method, spy)

    async def session(server) -> None:
        async with Client(server) as client:
            stored = data(await client.call_tool("store_memory", {"content": content, "tags": ["ci"]}))
            assert stored["created"] is True
            hits = data(await client.call_tool("search", {"query": "heron builds", "limit": 1}))["results"]
            assert hits[0]["doc_id"] == stored["id"]

    asyncio.run(session(create_server(index_dir)))
    assert calls == ["encode_documents"]


def test_nearest_memory_returns_the_cosine_of_the_stored_vectors(index_dir):
    from hybridlab.index.write.memory import MemoryWriter, make_memory
    from hybridlab.search.engine import open_index
    from hybridlab.search.listing import NearestMemory, nearest_memory

    writer = MemoryWriter(index_dir)
    memory = writer.embed(make_memory("The walrus project deploys on Friday afternoons.", ["t"]))
    vector = memory.vectors["wordllama"]
    assert vector.shape == (256,) and np.isclose(np.linalg.norm(vector), 1.0, atol=1e-5)
    with open_index(index_dir) as index:
        snapshot = index.snapshot()
        dense = index.dense["wordllama"]
        rows = dict(index._con.execute("SELECT chunk_id, doc_id FROM chunks").fetchall())
        stored = {rows[int(i)]: np.asarray(v) for i, v in zip(dense.ids, dense.vectors, strict=True)}
        found = nearest_memory(snapshot, memory.vectors)
        assert isinstance(found, NearestMemory) and found.doc_id == "m1"
        assert found.similarity == pytest.approx(float(stored["m1"] @ vector), abs=1e-5)
        second = nearest_memory(snapshot, memory.vectors, exclude="m1")
        assert second == NearestMemory("m2", pytest.approx(float(stored["m2"] @ vector), abs=1e-5))
    writer.close()


def test_concurrent_stores_all_land(index_dir):
    """Stores of different memories at once embed side by side with the log's appends: each is
    stored once, with the vectors of its own text."""
    from mcp import Client

    from hybridlab.server.mcp import create_server

    contents = [
        f"Memory {n}: the {animal} project ships on {day}."
        for n, (animal, day) in enumerate(
            [("heron", "Mondays"), ("okapi", "Tuesdays"), ("badger", "Wednesdays"), ("lynx", "Thursdays")]
        )
    ]

    async def session(server) -> None:
        async with Client(server) as client:
            results = await asyncio.gather(
                *(client.call_tool("store_memory", {"content": c}) for c in contents)
            )
            ids = [data(r)["id"] for r in results]
            assert len(set(ids)) == 4
            for content, memory_id in zip(contents, ids, strict=True):
                hits = data(
                    await client.call_tool("search", {"query": content, "limit": 1, "mode": "vector"})
                )
                assert hits["results"][0]["doc_id"] == memory_id

    asyncio.run(session(create_server(index_dir)))


def test_vectors_embedded_under_another_config_are_embedded_again(index_dir, monkeypatch):
    """The log reuses an EmbeddedMemory's vectors only when the index still embeds as it did then."""
    import dataclasses

    from hybridlab.encoders.base import Encoder
    from hybridlab.index.write.memory import MemoryWriter, make_memory
    from hybridlab.search.engine import open_index

    writer = MemoryWriter(index_dir)
    same = writer.embed(make_memory("The lynx project ships on Thursdays."))
    other = writer.embed(make_memory("The badger project ships on Wednesdays."))
    other = dataclasses.replace(other, config=dataclasses.replace(other.config, embed_batch_size=7))
    embedded: list[str] = []
    original = Encoder.encode_documents
    monkeypatch.setattr(
        Encoder,
        "encode_documents",
        lambda self, texts, **kwargs: embedded.extend(texts) or original(self, texts, **kwargs),
    )
    writer.store_embedded(same)
    assert embedded == []
    writer.store_embedded(other)
    assert len(embedded) == 1 and "badger" in embedded[0]
    writer.close()
    with open_index(index_dir) as index:
        assert index.search("lynx Thursdays", limit=1)[0].doc_id == same.document.doc_id
