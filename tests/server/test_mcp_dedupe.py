"""No duplicate memories over MCP (issue 32 item 4), driven by the SDK's client: a store whose
normalised content (whitespace collapsed, stripped, lowercased) equals a memory's returns that memory
unchanged; allow_duplicate=true stores a copy; equal stores at the same time keep one."""

from __future__ import annotations

import asyncio
import json

import pytest

MEMORIES = [
    {"id": f"m{n}", "content": text, "tags": ["t"], "created_at": f"2024-01-0{n}T09:00:00Z"}
    for n, text in [
        (1, "User's main editor is VS Code with the Vim extension."),
        (2, "The walrus project deploys on Fridays."),
    ]
]


@pytest.fixture
def index_dir(tmp_path):
    from hybridlab.index.write.build import index_paths

    source = tmp_path / "memories.jsonl"
    source.write_text("".join(json.dumps(m) + "\n" for m in MEMORIES), encoding="utf-8")
    index_paths([source], tmp_path / "index", progress=False)
    return tmp_path / "index"


def data(result) -> dict:
    assert not result.is_error, result.content[0].text
    return result.structured_content


def test_normalised_content():
    from hybridlab.index.write.memory import normalised_content

    assert normalised_content("  The  Walrus\tproject\n\nDEPLOYS ") == "the walrus project deploys"


class _Store:
    """A document store over one DuckDB connection (what `find_duplicate` reads)."""

    def __init__(self, con) -> None:
        self.con = con

    def fetchall(self, sql, params=()):
        return self.con.execute(sql, list(params)).fetchall()


@pytest.mark.parametrize("column", ["none", "null", "keyed"])
def test_find_duplicate_by_content_key_and_in_stores_written_before_it(column):
    """Memories written with `content_key` are found by it; rows of older segments (NULL, or no
    column at all) are normalised in SQL, so an old index still finds its duplicates."""
    import duckdb

    from hybridlab.index.format.rows import content_key
    from hybridlab.index.write.memory import find_duplicate, make_memory

    con = duckdb.connect()
    con.execute(
        "CREATE TABLE documents (doc_id VARCHAR, text VARCHAR, doc_type VARCHAR, created_at TIMESTAMP"
        + (", content_key VARCHAR)" if column != "none" else ")")
    )
    for doc_id, text, doc_type in [
        ("a", "The Walrus  project deploys.", "memory"),
        ("b", "Other text.", "memory"),
        ("c", "the walrus project deploys.", "markdown"),
    ]:
        key = content_key(make_memory(text)) if column == "keyed" and doc_type == "memory" else None
        con.execute(
            "INSERT INTO documents VALUES (?, ?, ?, NULL" + (", ?)" if column != "none" else ")"),
            [doc_id, text, doc_type] + ([key] if column != "none" else []),
        )
    store = _Store(con)
    assert find_duplicate(store, "the walrus\nPROJECT deploys. ") == "a"
    assert find_duplicate(store, "the walrus project") is None
    assert content_key(make_memory(" X  y")) == content_key(make_memory("x y"))


def test_a_duplicate_returns_the_existing_memory(index_dir):
    from mcp import Client

    from hybridlab.server.mcp import create_server

    async def session(server) -> str:
        async with Client(server) as client:
            variant = "  user's MAIN editor is VS Code\n with the   vim extension. "
            same = data(await client.call_tool("store_memory", {"content": variant, "tags": ["other"]}))
            assert same["created"] is False and same["duplicate_of"] == same["id"] == "m1"
            assert same["tags"] == ["t"] and same["created_at"] == "2024-01-01T09:00:00Z"  # unchanged
            document = data(await client.call_tool("get_document", {"doc_id": "m1"}))
            assert document["text"] == MEMORIES[0]["content"] and document["tags"] == ["t"]

            new = data(await client.call_tool("store_memory", {"content": "The heron project uses Poetry."}))
            assert new["created"] is True and new["duplicate_of"] is None
            again = data(
                await client.call_tool("store_memory", {"content": "the heron project uses poetry."})
            )
            assert again["created"] is False and again["id"] == new["id"]  # found in the write-ahead log
            forced = data(
                await client.call_tool(
                    "store_memory", {"content": "The heron project uses Poetry.", "allow_duplicate": True}
                )
            )
            assert forced["created"] is True and forced["id"] != new["id"]
            different = data(
                await client.call_tool("store_memory", {"content": "The heron project uses Poetry!"})
            )
            assert different["created"] is True

            # equal stores at the same time: one memory, the others return it
            results = await asyncio.gather(
                *(client.call_tool("store_memory", {"content": "Badger  notes, v2."}) for _ in range(4))
            )
            stored = [data(r) for r in results]
            assert len({s["id"] for s in stored}) == 1 and sum(s["created"] for s in stored) == 1
            assert data(await client.call_tool("stats"))["documents"] == 2 + 4
            return new["id"]

    heron = asyncio.run(session(create_server(index_dir)))

    async def restarted(server) -> None:
        async with Client(server) as client:
            same = data(await client.call_tool("store_memory", {"content": "THE HERON PROJECT USES POETRY."}))
            assert same["created"] is False and same["id"] in {heron}  # the oldest copy
            data(await client.call_tool("delete_memory", {"ids": ["m2"]}))
            back = data(await client.call_tool("store_memory", {"content": MEMORIES[1]["content"]}))
            assert back["created"] is True and back["id"] != "m2"  # a deleted memory is no duplicate

    asyncio.run(restarted(create_server(index_dir)))


def test_a_duplicate_of_a_deferred_memory_does_not_force_its_commit(index_dir):
    from mcp import Client

    from hybridlab.server.mcp import create_server

    server = create_server(index_dir, commit_delay=600)

    async def session() -> None:
        async with Client(server) as client:
            first = data(await client.call_tool("store_memory", {"content": "Deferred okapi memory."}))
            again = data(await client.call_tool("store_memory", {"content": "deferred  OKAPI memory."}))
            assert first["pending"] and again["pending"] and again["created"] is False
            assert again["id"] == first["id"] and server.service.writer.writes == 0
            old = data(await client.call_tool("store_memory", {"content": MEMORIES[1]["content"].upper()}))
            assert old["id"] == "m2" and server.service.writer.writes == 0  # found in the store, queue kept
            assert data(await client.call_tool("stats"))["documents"] == 3

    asyncio.run(session())


def test_a_near_duplicate_is_reported_and_stored_unless_asked(index_dir):
    """A light edit of a memory (cosine >= 0.95, the default near_threshold) is stored and its near
    neighbour reported; skip_near_duplicate returns that one instead; near_threshold=null turns the
    check off; an unrelated memory reports nothing."""
    from mcp import Client

    from hybridlab.server.mcp import create_server

    edit = {"content": "The walrus project deploys on Fridays only.", "tags": ["t"]}

    async def session(server) -> None:
        async with Client(server) as client:
            near = data(await client.call_tool("store_memory", edit))
            assert (
                near["created"] is True and near["near_duplicate_of"] == "m2" and near["similarity"] >= 0.95
            )
            other = data(
                await client.call_tool("store_memory", {"content": "Lunch is at noon in the atrium."})
            )
            assert (
                other["created"] is True
                and other["near_duplicate_of"] is None
                and other["similarity"] is None
            )
            skipped = data(
                await client.call_tool(
                    "store_memory",
                    {
                        **edit,
                        "content": "The walrus project deploys on Fridays, only.",
                        "skip_near_duplicate": True,
                    },
                )
            )
            assert skipped["created"] is False and skipped["duplicate_of"] in {"m2", near["id"]}
            off = data(
                await client.call_tool(
                    "store_memory",
                    {**edit, "content": "The walrus project deploys on Fridays!", "near_threshold": None},
                )
            )
            assert off["created"] is True and off["near_duplicate_of"] is None
            assert data(await client.call_tool("stats"))["documents"] == 2 + 3

    asyncio.run(session(create_server(index_dir)))


def test_an_index_written_before_content_key_reads_merges_and_finds_duplicates(tmp_path):
    """A segment without the `content_key` column (its store rewritten without it, the manifest's
    checksums updated) beside new segments: the views and merges union by name, and duplicates are
    found in old and new rows alike, before and after `optimize`."""
    import hashlib

    import duckdb

    from hybridlab.config import IndexConfig
    from hybridlab.index.write.build import index_paths, optimize
    from hybridlab.index.write.memory import MemoryWriter, find_duplicate
    from hybridlab.search.engine import open_index

    source = tmp_path / "m.jsonl"
    source.write_text(
        "".join(
            json.dumps({"id": f"m{i}", "content": f"Memory {i} about walruses."}) + "\n" for i in range(5)
        ),
        encoding="utf-8",
    )
    index_dir = tmp_path / "index"
    index_paths([source], index_dir, IndexConfig(models=("wordllama",)), progress=False)
    for store in index_dir.rglob("store.duckdb"):
        con = duckdb.connect(str(store))
        con.execute("ALTER TABLE documents DROP COLUMN content_key")
        con.close()
    manifest = json.loads((index_dir / "manifest.json").read_text())
    for name, info in manifest["files"].items():
        data = (index_dir / name).read_bytes()
        info.update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
    (index_dir / "manifest.json").write_text(json.dumps(manifest))

    def check() -> None:
        with open_index(index_dir) as index:
            store = index.snapshot().generation.store
            assert find_duplicate(store, "memory 3 ABOUT walruses.") == "m3"
            assert find_duplicate(store, "new  memory 4") == stored[4]
            assert find_duplicate(store, "memory 9 about walruses.") is None

    with open_index(index_dir) as index:
        assert find_duplicate(index.snapshot().generation.store, "memory 3 about walruses.") == "m3"
    writer = MemoryWriter(index_dir, wal_records=2)  # two folds (Parquet segments) and one logged memory
    stored = [writer.store(f"New memory {i}").id for i in range(5)]
    writer.close()
    check()
    optimize(index_dir)
    check()
