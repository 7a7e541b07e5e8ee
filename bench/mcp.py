"""Benchmark of the MCP server over stdio: start-up to first answer, search and store latency.

    python -m bench.mcp [--index DIR] [--runs 5] [--stores 20] [--out reports/mcp]

Spawns `hybridlab mcp` N times and times spawn -> initialized and spawn -> first `search` result
(model loading included); then, in one session each, sequential `store_memory` calls (every one a new
index generation), concurrent stores (group-committed), searches, and stores with `--commit-delay`.
The index (default: the ground-truth memories, indexed afresh) lives in a temporary folder, so the
stores never touch a real one. Writes `startup-<date>.md` and `.json` into `--out`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.common import PERCENTILE_LABEL, percentile
from hybridlab.config import apply_offline_environment, offline_environment
from hybridlab.eval.datasets import REPO_ROOT


def summary(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "median": round(statistics.median(values), 4),
        "p95": round(percentile(values, 95), 4),
        "min": round(min(values), 4),
        "max": round(max(values), 4),
    }


def _params(index_dir: Path, *extra: str):
    from mcp import StdioServerParameters

    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "hybridlab.cli", "mcp", "--index", str(index_dir), *extra],
        env=offline_environment(),
    )


def _queries(limit: int) -> list[str]:
    path = REPO_ROOT / "ground_truth" / "memories" / "queries.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    texts = [json.loads(line)["text"] for line in lines if line.strip()]
    return texts[:limit] or ["which editor does the user use"]


async def _startup(index_dir: Path, query: str) -> dict[str, float]:
    from mcp import Client

    started = time.perf_counter()
    async with Client(_params(index_dir)) as client:
        connected = time.perf_counter() - started
        result = await client.call_tool("search", {"query": query, "limit": 5})
        first = time.perf_counter() - started
        if result.is_error:
            raise RuntimeError(result.content[0].text)
    return {"initialized_s": connected, "first_search_s": first}


async def _session(
    index_dir: Path, stores: int, queries: list[str], extra: tuple[str, ...] = ()
) -> dict[str, Any]:
    from mcp import Client

    out: dict[str, Any] = {}
    async with Client(_params(index_dir, *extra)) as client:
        await client.call_tool("search", {"query": "warm up", "limit": 1})
        times = []
        for n in range(stores):
            started = time.perf_counter()
            result = await client.call_tool(
                "store_memory",
                {
                    "content": f"Benchmark memory {n}: the build cache "
                    f"of runner {n} lives under /var/cache/ci-{n}.",
                    "tags": ["benchmark"],
                },
            )
            times.append(time.perf_counter() - started)
            if result.is_error:
                raise RuntimeError(result.content[0].text)
        out["store_s"] = summary(times)
        started = time.perf_counter()
        result = await client.call_tool(
            "search", {"query": f"build cache of runner {stores - 1}", "limit": 3}
        )
        out["search_after_stores_s"] = round(time.perf_counter() - started, 4)
        out["found_last_store"] = "runner" in json.dumps(result.structured_content)
        if not extra:
            times = []
            for query in queries:
                started = time.perf_counter()
                await client.call_tool("search", {"query": query, "limit": 10})
                times.append(time.perf_counter() - started)
            out["search_s"] = summary(times)
            started = time.perf_counter()
            results = await asyncio.gather(
                *[
                    client.call_tool(
                        "store_memory",
                        {
                            "content": f"Concurrent benchmark memory {n} about queue worker {n}",
                            "tags": ["benchmark"],
                        },
                    )
                    for n in range(10)
                ]
            )
            out["concurrent_10_stores_s"] = round(time.perf_counter() - started, 4)
            out["concurrent_batch_sizes"] = sorted(r.structured_content["batch_size"] for r in results)
        stats = await client.call_tool("stats", {})
        out["documents_after"] = stats.structured_content["documents"]
        out["commits"] = stats.structured_content["server"]["memory_commits"]
    return out


def _build_memories_index(folder: Path) -> Path:
    """A self-contained index (own embeddings cache) of the ground-truth memories: benchmark stores
    must not write into the shared evaluation cache, which other jobs hold open."""
    from hybridlab.eval.evalsets import get_evalset
    from hybridlab.index.write.build import index_paths

    index_paths(list(get_evalset("memories").sources), folder, progress=False)
    return folder


def _markdown(record: dict[str, Any]) -> str:
    s, d = record["startup"], record["durable"]
    lines = [
        f"# MCP server benchmark — {record['date']}",
        "",
        f"Command: `{record['command']}`  ",
        (
            f"Index: {record['index']['source']} ({record['index']['documents']} documents, "
            f"{record['index']['chunks']} chunks, models {record['index']['models']}), in a temporary folder.  "
        ),
        (
            f"Machine: {record['machine']['cpus']} CPUs, load average {record['machine']['loadavg']} at start "
            f"(shared with other jobs: absolute times vary)."
        ),
        "",
        "## Start-up (spawn → answer), stdio, N = " + str(s["first_search_s"]["n"]),
        "",
        f"| measure | median s | p95 s ({PERCENTILE_LABEL}) | min s | max s |",
        "|---|---|---|---|---|",
    ]
    for name in ("initialized_s", "first_search_s"):
        v = s[name]
        lines.append(
            f"| {name.removesuffix('_s').replace('_', ' ')} | {v['median']} | {v['p95']} | {v['min']} | {v['max']} |"
        )
    lines += [
        "",
        (
            "The server answers `initialize` before the embedding model is loaded (it warms in the "
            "background); the first `search` waits for it."
        ),
        "",
        "## One session",
        "",
        f"| measure | median s | p95 s ({PERCENTILE_LABEL}) | max s |",
        "|---|---|---|---|",
    ]
    lines.append(
        f"| store_memory, durable (one generation each) | {d['store_s']['median']} | {d['store_s']['p95']} | "
        f"{d['store_s']['max']} |"
    )
    lines.append(
        f"| search (warm, {d['search_s']['n']} ground-truth queries) | {d['search_s']['median']} | "
        f"{d['search_s']['p95']} | {d['search_s']['max']} |"
    )
    deferred = record["deferred"]
    lines.append(
        f"| store_memory, `--commit-delay {record['commit_delay']}` | {deferred['store_s']['median']} | "
        f"{deferred['store_s']['p95']} | {deferred['store_s']['max']} |"
    )
    lines += [
        "",
        (
            f"- 10 concurrent stores: {d['concurrent_10_stores_s']} s in all, batch sizes "
            f"{d['concurrent_batch_sizes']} (group commit)."
        ),
        (
            f"- Durable session: {d['commits']} commits for {d['store_s']['n'] + 10} stores; the search right after "
            f"the last store found it: {d['found_last_store']} ({d['search_after_stores_s']} s)."
        ),
        (
            f"- Deferred session: {deferred['commits']} commit(s) for {deferred['store_s']['n']} stores; the next "
            f"search committed the queue and found the last one: {deferred['found_last_store']} "
            f"({deferred['search_after_stores_s']} s, commit included)."
        ),
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.mcp", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--index",
        help="index to benchmark, copied first (default: the ground-truth memories, "
        "indexed into a temporary folder)",
    )
    parser.add_argument("--runs", type=int, default=5, help="server spawns for the start-up timing")
    parser.add_argument("--stores", type=int, default=20, help="sequential store_memory calls per session")
    parser.add_argument(
        "--commit-delay", type=float, default=1.0, help="delay of the deferred-commit session"
    )
    parser.add_argument("--out", default=str(REPO_ROOT / "reports" / "mcp"))
    args = parser.parse_args(argv)
    apply_offline_environment()
    from hybridlab.index.format.layout import read_manifest

    queries = _queries(20)
    load_at_start = [round(x, 2) for x in os.getloadavg()]
    with tempfile.TemporaryDirectory(prefix="bench-mcp-") as tmp:
        index_dir = Path(tmp) / "index"
        if args.index:
            source = str(args.index)
            shutil.copytree(args.index, index_dir, ignore=shutil.ignore_patterns(".lock"))
        else:
            source = "ground_truth/memories/memories.jsonl, indexed afresh (MiniLM)"
            _build_memories_index(index_dir)
        manifest = read_manifest(index_dir)
        runs = []
        for n in range(args.runs):
            runs.append(asyncio.run(_startup(index_dir, queries[n % len(queries)])))
            print(
                f"run {n + 1}: initialized {runs[-1]['initialized_s']:.2f}s, first search "
                f"{runs[-1]['first_search_s']:.2f}s",
                file=sys.stderr,
            )
        durable = asyncio.run(_session(index_dir, args.stores, queries))
        deferred = asyncio.run(
            _session(index_dir, args.stores, queries, ("--commit-delay", str(args.commit_delay)))
        )
    today = datetime.now(UTC).date().isoformat()
    record = {
        "date": today,
        "command": " ".join(["python -m bench.mcp", *(argv if argv is not None else sys.argv[1:])]),
        "index": {
            "source": source,
            "documents": manifest.counts.documents,
            "chunks": manifest.counts.chunks,
            "models": sorted(manifest.models),
        },
        "machine": {"cpus": os.cpu_count(), "loadavg": load_at_start, "python": platform.python_version()},
        "startup": {
            "initialized_s": summary([r["initialized_s"] for r in runs]),
            "first_search_s": summary([r["first_search_s"] for r in runs]),
            "runs": runs,
        },
        "durable": durable,
        "deferred": deferred,
        "commit_delay": args.commit_delay,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"startup-{today}.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    (out / f"startup-{today}.md").write_text(_markdown(record), encoding="utf-8")
    print(_markdown(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
