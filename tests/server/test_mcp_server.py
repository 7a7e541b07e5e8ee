"""The MCP server, driven over stdio by the SDK's own client (plus one raw-pipe check of stdout).

A small memories index (the first 30 ground-truth memories, MiniLM) is built once per module; tests
that write get their own copy.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MEMORIES = REPO / "ground_truth" / "memories" / "memories.jsonl"
ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
TOOLS = {
    "search",
    "get_document",
    "store_memory",
    "update_memory",
    "delete_memory",
    "list_memories",
    "search_by_tag",
    "list_collections",
    "list_documents",
    "stats",
}
NEW_MEMORIES = [  # content, tags, created_at (None = now)
    (
        "The quarterly backup drill restores the Postgres dump onto the spare Hetzner box.",
        ["backup", "drill"],
        "2026-05-01T09:00:00Z",
    ),
    (
        "Team lunch on Fridays is at the Vietnamese place near the canal.",
        ["lunch", "drill"],
        "2026-06-01T09:00:00Z",
    ),
    ("The flaky integration test in ledgerly is caused by a timezone-naive datetime.", ["flaky-test"], None),
]


@pytest.fixture(scope="module")
def base_index(tmp_path_factory) -> Path:
    from hybridlab.index.write.build import index_paths

    folder = tmp_path_factory.mktemp("mcp")
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


def server_params(index_dir: Path, *extra: str):
    from mcp import StdioServerParameters

    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "hybridlab.cli", "mcp", "--index", str(index_dir), *extra],
        env={**ENV, "PYTHONPATH": str(REPO)},
        cwd=str(REPO),
    )


async def call(client, tool: str, **arguments):
    return await client.call_tool(tool, arguments)


def doc_ids(result) -> list[str]:
    assert not result.is_error, result.content[0].text
    return [hit["doc_id"] for hit in result.structured_content["results"]]


BAD_CALLS = [
    ("search", {"query": "   "}, "empty query"),
    ("search", {"query": "editor", "limit": 0}, "greater than or equal to 1"),
    ("search", {"query": "editor", "limit": 101}, "less than or equal to 100"),
    ("search", {"query": "editor", "chunk_types": ["poem"]}, "unknown chunk type 'poem'"),
    ("search", {"query": "editor", "collection": "nowhere"}, "unknown collection 'nowhere'"),
    ("search", {"query": "editor", "tags": [1, 2]}, "valid string"),
    ("get_document", {"doc_id": "../../etc/passwd"}, "no document '../../etc/passwd'"),
    ("get_document", {"doc_id": "mem-9999"}, "no document 'mem-9999'"),
    ("store_memory", {"content": "x" * 20_001}, "at most 20000"),
    ("store_memory", {"content": ""}, "content must be a non-empty string"),
    ("store_memory", {"content": "fine", "tags": ["ok", 3]}, "valid string"),
    ("store_memory", {"content": "fine", "created_at": "yesterday"}, "not ISO-8601"),
    ("search_by_tag", {"tags": []}, "non-empty list"),
    ("search_by_tag", {"tags": ["editor"], "match": "some"}, "'all' or 'any'"),
    ("search_by_tag", {"tags": ["editor"], "limit": 500}, "less than or equal to 100"),
]


@pytest.mark.slow
def test_stdio_session_rejects_bad_input_stores_finds_and_survives_a_restart(index_dir):
    from mcp import Client

    async def first_session() -> list[str]:
        async with Client(server_params(index_dir, "--lock-wait", "0.5")) as client:
            listed = await client.list_tools()
            assert {tool.name for tool in listed.tools} == TOOLS
            search_tool = next(tool for tool in listed.tools if tool.name == "search")
            assert "Search the index" in search_tool.description
            assert search_tool.input_schema["properties"]["limit"]["maximum"] == 100
            await check_bad_input_and_lock(client, index_dir)
            ids = []
            for content, tags, created_at in NEW_MEMORIES:
                stored = await call(
                    client,
                    "store_memory",
                    content=content,
                    tags=tags,
                    memory_type="fact",
                    **({"created_at": created_at} if created_at else {}),
                )
                assert not stored.is_error, stored.content[0].text
                ids.append(stored.structured_content["id"])
            assert len(set(ids)) == 3
            # searchable by the very next call
            assert (
                doc_ids(await call(client, "search", query="quarterly backup drill Postgres", limit=3))[0]
                == ids[0]
            )
            assert (
                doc_ids(await call(client, "search", query="team lunch Vietnamese canal", limit=3))[0]
                == ids[1]
            )
            tagged = await call(client, "search_by_tag", tags=["drill"])
            assert doc_ids(tagged) == [ids[1], ids[0]]  # both carry "drill"; newest first
            assert doc_ids(await call(client, "search_by_tag", tags=["drill", "backup"], match="all")) == [
                ids[0]
            ]
            assert set(
                doc_ids(await call(client, "search_by_tag", tags=["lunch", "flaky-test"], match="any"))
            ) == {ids[1], ids[2]}
            document = await call(client, "get_document", doc_id=ids[2])
            assert document.structured_content["text"] == NEW_MEMORIES[2][0]
            assert document.structured_content["tags"] == ["flaky-test"]
            assert document.structured_content["metadata"]["memory_type"] == "fact"
            explained = await call(
                client, "search", query="flaky integration test timezone", limit=1, explain=True
            )
            assert doc_ids(explained) == [ids[2]]
            assert {"dense_rank", "bm25_rank", "alpha", "fusion"} <= set(
                explained.structured_content["results"][0]["explain"]
            )
            return ids

    async def second_session(ids: list[str]) -> None:
        async with Client(server_params(index_dir)) as client:
            assert (
                doc_ids(await call(client, "search", query="flaky integration test timezone", limit=3))[0]
                == ids[2]
            )
            assert set(doc_ids(await call(client, "search_by_tag", tags=["drill"]))) == {ids[0], ids[1]}
            stats = (await call(client, "stats")).structured_content
            assert stats["documents"] == 33
            assert stats["search_config_sources"]["alpha"] == "adaptive"

    ids = asyncio.run(first_session())
    asyncio.run(second_session(ids))


async def check_bad_input_and_lock(client, index_dir: Path) -> None:
    """Each bad input is a tool error with a clear message, the server keeps serving, and another
    process's writer lock makes store_memory a clear error (after --lock-wait), not a crash."""
    from hybridlab.index.format.layout import WriterLock

    for tool, arguments, message in BAD_CALLS:
        result = await client.call_tool(tool, arguments)
        assert result.is_error, (tool, arguments)
        assert message in result.content[0].text, (tool, arguments, result.content[0].text)
    assert doc_ids(await call(client, "search", query="which editor does the user use", limit=1)) == [
        "mem-0001"
    ]
    assert (await call(client, "stats")).structured_content["documents"] == 30  # nothing was stored
    with WriterLock(index_dir):  # as if `hybridlab index` were writing the index in another process
        locked = await call(client, "store_memory", content="written while another process holds the lock")
    assert locked.is_error
    assert f"is locked by PID {os.getpid()}" in locked.content[0].text
    assert "the memory was not stored" in locked.content[0].text
    assert (await call(client, "stats")).structured_content["documents"] == 30


def _rpc(method: str, params: dict, id_: int | None = None) -> bytes:
    message = {"jsonrpc": "2.0", "method": method, "params": params}
    if id_ is not None:
        message["id"] = id_
    return (json.dumps(message) + "\n").encode()


def test_stdout_carries_nothing_but_protocol_messages(index_dir):
    """Raw pipes, no client library: every stdout line must be a JSON-RPC message, even while the
    model loads (its progress bars), BM25 is rebuilt (bm25s logs) and a memory is committed."""
    process = subprocess.Popen(
        [sys.executable, "-m", "hybridlab.cli", "-vv", "mcp", "--index", str(index_dir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, **ENV, "HYBRIDLAB_TRACE_STAGES": "1"},
        cwd=str(REPO),
    )
    stderr_lines: list[bytes] = []
    threading.Thread(target=lambda: stderr_lines.extend(process.stderr), daemon=True).start()
    try:
        process.stdin.write(
            _rpc(
                "initialize",
                {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "raw", "version": "0"},
                },
                1,
            )
        )
        process.stdin.write(_rpc("notifications/initialized", {}))
        process.stdin.write(
            _rpc("tools/call", {"name": "store_memory", "arguments": {"content": "raw pipe memory"}}, 2)
        )
        process.stdin.flush()
        messages = []

        def read_until_reply(id_: int) -> None:
            while not any(m.get("id") == id_ for m in messages):
                line = process.stdout.readline()
                assert line, f"server closed stdout early; stderr: {b''.join(stderr_lines)[-2000:]!r}"
                messages.append(json.loads(line))  # a stray print would fail here
                assert messages[-1]["jsonrpc"] == "2.0"

        read_until_reply(2)  # requests are served concurrently: search only after the store is acknowledged
        process.stdin.write(
            _rpc("tools/call", {"name": "search", "arguments": {"query": "raw pipe memory"}}, 3)
        )
        process.stdin.flush()
        read_until_reply(3)
        replies = {m["id"]: m for m in messages if "id" in m}
        assert not replies[2]["result"]["isError"]
        assert replies[3]["result"]["structuredContent"]["results"][0]["title"] == "raw pipe memory"
    finally:
        process.stdin.close()
        process.wait(timeout=30)
    err = b"".join(stderr_lines).decode(errors="replace")
    assert "STAGE wal-synced" in err  # the writer's trace prints (its log append) went to stderr, not stdout
    assert process.returncode == 0


def test_concurrent_stores_are_all_committed(index_dir):
    """Stores arriving together are group-committed; every one is acknowledged and searchable."""
    from mcp import Client

    from hybridlab.server.mcp import create_server

    server = create_server(index_dir)

    async def session() -> list:
        async with Client(server) as client:
            results = await asyncio.gather(
                *[
                    call(
                        client,
                        "store_memory",
                        content=f"Concurrent memory number {n} about zebra crossings {n}",
                        tags=["zebra"],
                    )
                    for n in range(4)
                ]
            )
            assert not any(r.is_error for r in results)
            tagged = await call(client, "search_by_tag", tags=["zebra"], limit=10)
            assert sorted(doc_ids(tagged)) == sorted(r.structured_content["id"] for r in results)
            return [r.structured_content for r in results]

    stored = asyncio.run(session())
    writer = server.service.writer
    assert len({s["generation"] for s in stored}) == 1  # appended to the log of the one live generation
    assert sum(1 / s["batch_size"] for s in stored) == pytest.approx(writer.writes)


def test_deferred_commits_are_found_by_the_next_search(index_dir):
    """With a commit delay, stores return before committing; the next read commits them, in one generation."""
    from mcp import Client

    from hybridlab.server.mcp import create_server

    server = create_server(index_dir, commit_delay=600)

    async def session() -> None:
        async with Client(server) as client:
            first = await call(
                client, "store_memory", content="Deferred memory about the okapi enclosure", tags=["okapi"]
            )
            second = await call(
                client, "store_memory", content="Deferred memory about okapi feeding times", tags=["okapi"]
            )
            assert first.structured_content["pending"] and second.structured_content["pending"]
            assert server.service.writer.writes == 0
            found = doc_ids(await call(client, "search", query="okapi enclosure", limit=2))
            assert set(found) == {first.structured_content["id"], second.structured_content["id"]}
            assert server.service.writer.writes == 1
            assert (await call(client, "stats")).structured_content["documents"] == 32

    asyncio.run(session())


def test_stats_reports_the_config_in_force_and_where_each_setting_came_from(
    base_index, tmp_path, monkeypatch
):
    from mcp import Client

    from hybridlab.server.mcp import create_server

    config = tmp_path / "best.json"
    config.write_text(json.dumps({"search": {"alpha": 0.3, "fusion": "rrf", "rrf_k": 20}}), encoding="utf-8")
    monkeypatch.setenv("HYBRIDLAB_RRF_K", "7")
    monkeypatch.delenv("HYBRIDLAB_ALPHA", raising=False)
    monkeypatch.delenv("HYBRIDLAB_FUSION", raising=False)

    async def session() -> dict:
        async with Client(create_server(base_index, config)) as client:
            return (await call(client, "stats")).structured_content

    stats = asyncio.run(session())
    assert stats["config_file"] == str(config)
    assert (stats["search_config"]["alpha"], stats["search_config_sources"]["alpha"]) == (0.3, "config")
    assert (stats["search_config"]["fusion"], stats["search_config_sources"]["fusion"]) == ("rrf", "config")
    assert (stats["search_config"]["rrf_k"], stats["search_config_sources"]["rrf_k"]) == (7, "env")
    assert stats["documents"] == 30


def _collection_doc_ids(client, collection: str) -> set[str]:
    points, _ = client.scroll(collection, limit=10_000, with_payload=["doc_id"])
    return {point.payload["doc_id"] for point in points}


def test_qdrant_backend_serves_search_and_store_memory_in_process(index_dir, tmp_path):
    """Search answered by a Qdrant collection (local mode); a stored memory is upserted into the
    collection before store_memory returns (deferred ones before the next read), and found by search."""
    pytest.importorskip("qdrant_client")
    from mcp import Client

    from hybridlab.index.admin import qdrant as qdrant_mirror
    from hybridlab.search import qdrant
    from hybridlab.search.engine import open_index
    from hybridlab.server.mcp import create_server

    client = qdrant_mirror.connect(path=tmp_path / "qdrant")
    try:
        server = create_server(
            index_dir, backend=qdrant.qdrant_backend(client, "memories", sync=True), backend_name="qdrant"
        )
        assert isinstance(server.service.index.snapshot().sparse, qdrant.QdrantSparseRetriever)
        assert (
            qdrant_mirror.mirror_marker(client, "memories")["generation"] == 1
        )  # exported when the server opened

        async def session() -> None:
            async with Client(server) as mcp_client:
                query = "which editor does the user use"
                local = open_index(index_dir)
                try:
                    expected = [r.doc_id for r in local.search(query, limit=5)]
                finally:
                    local.close()
                assert doc_ids(await call(mcp_client, "search", query=query, limit=5)) == expected
                content, tags, created_at = NEW_MEMORIES[0]
                stored = await call(
                    mcp_client, "store_memory", content=content, tags=tags, created_at=created_at
                )
                assert not stored.is_error, stored.content[0].text
                memory_id = stored.structured_content["id"]
                assert memory_id in _collection_doc_ids(client, "memories")  # before the tool returned
                assert (
                    qdrant_mirror.mirror_marker(client, "memories")["generation"]
                    == stored.structured_content["generation"]
                )
                found = await call(mcp_client, "search", query="quarterly backup drill Postgres", limit=3)
                assert doc_ids(found)[0] == memory_id
                stats = (await call(mcp_client, "stats")).structured_content
                assert stats["server"]["backend"] == "qdrant" and stats["documents"] == 31

        asyncio.run(session())
        server.service.index.close()

        deferred = create_server(
            index_dir,
            commit_delay=600,
            backend=qdrant.qdrant_backend(client, "memories", sync=True),
            backend_name="qdrant",
        )

        async def deferred_session() -> None:
            async with Client(deferred) as mcp_client:
                content, tags, created_at = NEW_MEMORIES[1]
                stored = await call(
                    mcp_client, "store_memory", content=content, tags=tags, created_at=created_at
                )
                assert stored.structured_content["pending"]
                found = await call(mcp_client, "search", query="team lunch Vietnamese canal", limit=3)
                assert doc_ids(found)[0] == stored.structured_content["id"]
                assert stored.structured_content["id"] in _collection_doc_ids(client, "memories")

        asyncio.run(deferred_session())
        deferred.service.index.close()
    finally:
        client.close()


@pytest.mark.slow
def test_qdrant_backend_over_stdio(index_dir, tmp_path):
    """`hybridlab mcp --backend qdrant --qdrant-path DIR`: store then search through the real CLI."""
    pytest.importorskip("qdrant_client")
    from mcp import Client

    from hybridlab.index.admin import qdrant as qdrant_mirror

    backend = ["--backend", "qdrant", "--qdrant-path", str(tmp_path / "qdrant"), "--qdrant-collection", "mem"]

    async def session() -> str:
        async with Client(server_params(index_dir, *backend)) as client:
            content, tags, _ = NEW_MEMORIES[2]
            stored = await call(client, "store_memory", content=content, tags=tags)
            assert not stored.is_error, stored.content[0].text
            found = await call(client, "search", query="flaky integration test timezone", limit=3)
            assert doc_ids(found)[0] == stored.structured_content["id"]
            assert (await call(client, "stats")).structured_content["server"]["backend"].startswith("qdrant")
            return stored.structured_content["id"], stored.structured_content["generation"]

    memory_id, generation = asyncio.run(session())
    client = qdrant_mirror.connect(path=tmp_path / "qdrant")  # the server has exited and released the folder
    try:
        assert memory_id in _collection_doc_ids(client, "mem")
        assert qdrant_mirror.mirror_marker(client, "mem")["generation"] == generation  # the log's generation
    finally:
        client.close()


def test_mcp_backend_options_need_each_other(index_dir, capsys):
    from hybridlab.cli import main

    assert main(["mcp", "--index", str(index_dir), "--backend", "qdrant"]) == 2
    assert "--backend qdrant needs --qdrant-url URL or --qdrant-path DIR" in capsys.readouterr().err
    assert main(["mcp", "--index", str(index_dir), "--qdrant-path", "/tmp/nowhere"]) == 2
    assert "--qdrant-path needs --backend qdrant" in capsys.readouterr().err


def test_wal_records_setting_reaches_the_writer(index_dir):
    """`hybridlab mcp --wal-records N` sets how many memories the write-ahead log holds before its
    fold; 0 commits every store as a segment of its own."""
    from mcp import Client

    from hybridlab.cli import build_parser
    from hybridlab.server.mcp import create_server

    assert build_parser().parse_args(["mcp", "--index", "x", "--wal-records", "5"]).wal_records == 5
    assert build_parser().parse_args(["mcp", "--index", "x"]).wal_records is None
    server = create_server(index_dir, wal_records=0)

    async def session() -> None:
        async with Client(server) as client:
            stored = await call(
                client, "store_memory", content="A memory about the capybara pool", tags=["zoo"]
            )
            assert not stored.is_error
            facts = (await call(client, "stats")).structured_content
            assert facts["server"]["wal_records"] == 0 and facts["server"]["memory_commits"] == 1
            assert facts["server"]["memory_log_appends"] == 0 and facts["write_ahead_log"]["memories"] == 0

    asyncio.run(session())
