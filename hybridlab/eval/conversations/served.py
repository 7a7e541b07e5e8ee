"""Served = measured (`hybridlab membench --via-mcp`): a memory benchmark through an MCP server, as
an assistant would use it. Per haystack, an empty index; every turn stored with `store_memory` (its
text as content, the speaker as tag, the session date as `created_at`, the turn before it as
`context`), every question asked with the `search` tool (the server's defaults; `HYBRIDLAB_NOW` set
to the question's date). The server comes from the caller (`serve`): evaluation sits below the
server, so the command that runs this hands it :func:`hybridlab.server.mcp.serving`."""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from hybridlab.eval.conversations.records import Haystack, Question
from hybridlab.eval.conversations.runner import BenchResult, BenchSettings, qualified, sessions_of
from hybridlab.index.write.build import index_paths

MCP_LIMIT = 50  # results per search (the tool allows up to 100)
#: index folder -> a context holding an MCP server over it (what the SDK's `Client` connects to),
#: which lets go of the folder's index and log on exit
Serve = Callable[[Path], AbstractContextManager[Any]]


def run_served(
    haystacks: Sequence[Haystack],
    settings: BenchSettings,
    work: str | Path,
    serve: Serve,
    *,
    progress: bool = True,
) -> BenchResult:
    """The hybrid system's rankings, through the MCP tools of a server per haystack (`serve`)."""
    from tqdm.auto import tqdm

    work = Path(work)
    rankings: dict[str, list[str]] = {}
    questions: dict[str, Question] = {}
    seconds = {"store": 0.0, "hybrid": 0.0}
    empty = work / "empty.jsonl"
    empty.parent.mkdir(parents=True, exist_ok=True)
    empty.write_text("", encoding="utf-8")
    for i, haystack in enumerate(tqdm(haystacks, desc="haystacks (via MCP)", disable=not progress)):
        folder = work / f"served-{settings.granularity}-{i}"
        if folder.exists():  # a fresh store each run: stores append
            shutil.rmtree(folder)
        index_paths([empty], folder, settings.index_config, progress=False)
        with serve(folder) as server:  # one server per haystack: its index and log let go before the next
            asyncio.run(_serve(server, haystack, settings, rankings, questions, seconds))
    session_of, session_turns = sessions_of(haystacks)
    return BenchResult(
        BenchSettings(
            settings.granularity,
            ("hybrid",),
            settings.depth,
            settings.options,
            settings.index_config,
            settings.context,
            settings.scoring,
        ),
        {"hybrid": rankings},
        questions,
        session_of,
        session_turns,
        seconds,
    )


def _error_text(result: Any) -> str:
    """The message of a failed tool call (the SDK reports a tool's error as one text content)."""
    from mcp.types import TextContent

    first = result.content[0]
    return first.text if isinstance(first, TextContent) else str(first)


async def _serve(
    server: Any,
    haystack: Haystack,
    settings: BenchSettings,
    rankings: dict[str, list[str]],
    questions: dict[str, Any],
    seconds: dict[str, float],
) -> None:
    from mcp import Client

    async with Client(server) as client:
        started = time.perf_counter()
        ids: dict[str, str] = {}  # the server's memory id -> the benchmark's id
        for memory in haystack.memories(settings.granularity, settings.context):
            arguments = {
                "content": memory["content"],
                "tags": memory["tags"],
                "memory_type": memory["memory_type"],
                "allow_duplicate": True,
                "near_threshold": None,
            }
            if memory.get("created_at"):
                arguments["created_at"] = memory["created_at"]
            if memory["metadata"].get("context"):
                arguments["context"] = memory["metadata"]["context"]
            result = await client.call_tool("store_memory", arguments)
            if result.is_error:
                raise RuntimeError(f"store_memory failed for {memory['id']}: {_error_text(result)}")
            ids[result.structured_content["id"]] = memory["id"]
        seconds["store"] += time.perf_counter() - started
        for question in haystack.questions:
            questions[question.question_id] = question
            now = question.date or haystack.last_date
            if now is not None:
                os.environ["HYBRIDLAB_NOW"] = now.isoformat()
            started = time.perf_counter()
            result = await client.call_tool(
                "search", {"query": question.text, "limit": min(settings.depth, MCP_LIMIT)}
            )
            seconds["hybrid"] += time.perf_counter() - started
            if result.is_error:
                raise RuntimeError(f"search failed for {question.question_id}: {_error_text(result)}")
            hits = result.structured_content["results"]
            rankings[question.question_id] = [qualified(haystack, ids[hit["doc_id"]]) for hit in hits]
    os.environ.pop("HYBRIDLAB_NOW", None)
