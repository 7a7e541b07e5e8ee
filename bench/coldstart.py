"""Cold start: wall time of a `hybridlab search` subprocess, and of an MCP server started over stdio
until its first search answer (from spawning the process to the tool result)."""

from __future__ import annotations

import asyncio
import importlib.util
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import bench_env, make_row


def hybridlab_command() -> list[str]:
    """The installed `hybridlab` script beside this Python, else `python -m hybridlab.cli`."""
    script = Path(sys.executable).with_name("hybridlab")
    if script.exists():
        return [str(script)]
    found = shutil.which("hybridlab")
    return (
        [found]
        if found
        else [sys.executable, "-c", "from hybridlab.cli import main; raise SystemExit(main())"]
    )


def cli_search_seconds(index_dir: Path, query: str) -> float:
    command = [*hybridlab_command(), "search", query, "--index", str(index_dir)]
    started = time.perf_counter()
    done = subprocess.run(command, check=False, capture_output=True, text=True, env=bench_env(), timeout=600)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"`{' '.join(command)}` failed: {done.stderr.strip()[-500:]}")
    return seconds


async def _mcp_first_answer(index_dir: Path, query: str) -> float:
    from mcp import Client, StdioServerParameters

    started = time.perf_counter()
    command = hybridlab_command()
    params = StdioServerParameters(
        command=command[0], args=[*command[1:], "mcp", "--index", str(index_dir)], env=bench_env()
    )
    async with Client(params) as client:
        result = await client.call_tool("search", {"query": query, "limit": 10})
        seconds = time.perf_counter() - started
        if result.is_error:
            raise RuntimeError(f"MCP search failed: {result.content}")
    return seconds


def mcp_available() -> bool:
    return importlib.util.find_spec("hybridlab.server.mcp") is not None


def run(index_dir: Path, query: str, repeats: int) -> dict[str, Any]:
    """Rows for the CLI (and the MCP server when present): median and max over `repeats` starts."""
    n_chunks = _count_chunks(index_dir)
    rows, notes = [], []
    cli = [cli_search_seconds(index_dir, query) for _ in range(repeats)]
    rows.append(
        make_row(
            "hybridlab",
            n_chunks,
            "hybrid",
            False,
            p50_ms=statistics.median(cli) * 1000,
            p99_ms=max(cli) * 1000,
            variant="cold-start-cli",
            repeats=repeats,
            note="`hybridlab search QUERY --index DIR` subprocess wall time",
        )
    )
    print(f"  cold start CLI: median {statistics.median(cli):.2f} s", file=sys.stderr, flush=True)
    if mcp_available():
        try:
            starts = [asyncio.run(_mcp_first_answer(index_dir, query)) for _ in range(repeats)]
            rows.append(
                make_row(
                    "hybridlab",
                    n_chunks,
                    "hybrid",
                    False,
                    p50_ms=statistics.median(starts) * 1000,
                    p99_ms=max(starts) * 1000,
                    variant="cold-start-mcp",
                    repeats=repeats,
                    note="stdio MCP server spawned until its first `search` tool result",
                )
            )
            print(f"  cold start MCP: median {statistics.median(starts):.2f} s", file=sys.stderr, flush=True)
        except Exception as error:  # noqa: BLE001 -- the MCP server is optional here
            notes.append(f"MCP cold start not measured: {type(error).__name__}: {str(error)[:300]}")
    else:
        notes.append("MCP cold start not measured: hybridlab.server.mcp is not installed")
    return {"rows": rows, "notes": notes}


def _count_chunks(index_dir: Path) -> int:
    import json

    return int(json.loads((Path(index_dir) / "manifest.json").read_text())["counts"]["chunks"])
