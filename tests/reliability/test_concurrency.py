"""Concurrent use: two writers (the second is refused clearly), readers during a commit, and the MCP
server under a bounded mixed load from a local client (nothing lost)."""

from __future__ import annotations

import asyncio
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .helpers import MODEL_ARGS, NOW, QUERIES, cli, env, record, write_corpus


def test_second_writer_gets_a_clear_lock_message(small_index, tmp_path):
    index = tmp_path / "index"
    shutil.copytree(small_index, index)
    corpus = tmp_path / "more"
    write_corpus(corpus, range(500, 560))
    first = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hybridlab.cli",
            "index",
            str(corpus),
            "--index",
            str(index),
            *MODEL_ARGS,
            "-q",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env(HYBRIDLAB_TRACE_STAGES="1", HYBRIDLAB_EMBED_BATCH="4"),
    )
    try:
        for line in first.stdout:
            if line.startswith("STAGE embedded-batch"):
                break  # holds the lock and has work left
        # a writer waits for the lock up to HYBRIDLAB_LOCK_WAIT seconds (default 30), then says who holds it
        second = cli(
            "index",
            str(corpus),
            "--index",
            str(index),
            *MODEL_ARGS,
            "-q",
            check=False,
            HYBRIDLAB_LOCK_WAIT="0",
        )
        assert second.returncode == 2
        assert f"index {index} is locked by PID {first.pid}" in second.stderr
        assert second.stderr.startswith("error: ")
        # a reader is never blocked by the writer
        searched = cli("search", "panel widget", "--index", str(index), "--json")
        assert searched.returncode == 0
    finally:
        first.stdout.read()
        first.wait(timeout=300)
        first.stdout.close()
    assert first.returncode == 0
    assert cli("verify", "--index", str(index)).stdout.startswith("OK")


def test_reader_sees_consistent_generations_while_a_writer_commits(small_index, tmp_path):
    """An open Index keeps answering (old generation) while another process commits, and refreshes."""
    from hybridlab.search.engine import open_index

    index_dir = tmp_path / "index"
    shutil.copytree(small_index, index_dir)
    corpus = tmp_path / "more"
    write_corpus(corpus, range(700, 740))
    index = open_index(index_dir)
    writer = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hybridlab.cli",
            "index",
            str(corpus),
            "--index",
            str(index_dir),
            *MODEL_ARGS,
            "-q",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env(HYBRIDLAB_EMBED_BATCH="4"),
    )
    answered = 0
    while writer.poll() is None:
        for query in QUERIES:
            assert index.run(query, now=NOW)  # never an error mid-commit
            answered += 1
        index.refresh()
        time.sleep(0.05)
    assert writer.returncode == 0, writer.stderr.read()[-3000:]
    writer.stderr.close()
    index.refresh()
    assert index.stats().documents == 160
    index.close()
    assert answered > 0


async def _mixed_load(server, calls: int, concurrency: int, seed: int) -> tuple[list[str], int]:
    """`calls` mixed tool calls, `concurrency` at a time; returns the stored memory ids and errors."""
    from mcp import Client

    rng = random.Random(seed)
    stored: list[str] = []
    errors = 0
    semaphore = asyncio.Semaphore(concurrency)

    async def one(n: int, client) -> None:
        nonlocal errors
        kind = rng.random()
        async with semaphore:
            if kind < 0.1:
                result = await client.call_tool(
                    "store_memory",
                    {
                        "content": f"Load memory {n}: the quokka{n} dashboard uses panel widgets",
                        "tags": ["load", f"n{n % 7}"],
                    },
                )
                if not result.is_error:
                    stored.append(result.structured_content["id"])
            elif kind < 0.7:
                result = await client.call_tool("search", {"query": rng.choice(QUERIES), "limit": 5})
            elif kind < 0.9:
                result = await client.call_tool(
                    "search_by_tag", {"tags": ["load"], "match": "any", "limit": 5}
                )
            else:
                result = await client.call_tool("stats", {})
            if result.is_error:
                errors += 1

    async with Client(server) as client:
        await asyncio.gather(*[one(n, client) for n in range(calls)])
    return stored, errors


def _check_all_found(index_dir: Path, stored: list[str]) -> None:
    from hybridlab.index.admin.verify import verify
    from hybridlab.search.engine import open_index

    assert verify(index_dir) == []
    index = open_index(index_dir)
    try:
        tagged = {d.doc_id for d in index.search_by_tag(["load"], limit=100_000)}
        assert set(stored) <= tagged
        for memory_id in stored:
            assert index.get_document(memory_id).doc_id == memory_id
    finally:
        index.close()


def _run_load(small_index: Path, tmp_path: Path, calls: int, concurrency: int) -> dict:
    pytest.importorskip("mcp")
    from hybridlab.server.mcp import create_server

    index_dir = tmp_path / "index"
    shutil.copytree(small_index, index_dir)
    server = create_server(index_dir)
    started = time.perf_counter()
    stored, errors = asyncio.run(_mixed_load(server, calls, concurrency, seed=calls))
    seconds = time.perf_counter() - started
    assert errors == 0
    assert stored
    _check_all_found(index_dir, stored)
    return {
        "calls": calls,
        "concurrency": concurrency,
        "stored": len(stored),
        "errors": errors,
        "seconds": round(seconds, 1),
    }


def test_mcp_mixed_load(small_index, tmp_path):
    record("mcp_load_small", _run_load(small_index, tmp_path, calls=300, concurrency=16))


@pytest.mark.soak
def test_mcp_mixed_load_soak(small_index, tmp_path):
    record("mcp_load_soak", _run_load(small_index, tmp_path, calls=2000, concurrency=32))
