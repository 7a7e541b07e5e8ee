"""Memory search latency at 10,000 memories, before and after a change, in one run on one machine.

    python -m bench.memory_latency [--before eb5dc6e] [--memories 10000] [--queries 500]
                                   [--out reports/bench/<date>-memory-latency]

The memories are sentences of the HoloViz docs (../shared/corpora/holoviz), each with the sentence
before it as `context` (a version before contexts existed indexes the sentence alone) and its project
as tag; the queries are the HoloViz and memories ground-truth queries, distinct (a repeat would hit
the query-vector cache). Each version (`--before`: a commit, checked out with `git worktree` into a
temporary folder; "after": this checkout) builds its own index in a subprocess (one embeddings
cache: texts both versions index are embedded once) and times `Index.search(query, limit=10)` with
its defaults (query encoding included; the first query warms the encoder and is not timed), then
the working tree's MCP `search` tool through the SDK's in-process client. Medians, p95 and the
after/before ratio go to `latency.md` / `latency.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path
from typing import Any

from bench.common import percentile
from hybridlab.config import REPO_ROOT, offline_environment
from hybridlab.eval.evalsets import corpora_dir

WORKER = r"""
import json, statistics, sys, time
from pathlib import Path
args = json.loads(sys.argv[1])
try:
    from hybridlab.index.write.build import index_paths
except ImportError:  # a version before index/ was grouped into write/, admin/ (e37bd4a)
    from hybridlab.index.build import index_paths
from hybridlab.search.engine import Index
started = time.perf_counter()
index_paths([args["memories"]], args["index"], progress=False, cache_path=args["cache"])
built = time.perf_counter() - started
queries = json.loads(Path(args["queries"]).read_text())
times = []
with Index(args["index"]) as index:
    index.search(queries[0], limit=10, now=args["now"])
    for q in queries:
        t = time.perf_counter(); index.search(q, limit=10, now=args["now"]); times.append((time.perf_counter() - t) * 1000)
    print(json.dumps({"build_s": built, "ms": times, "n_chunks": index.n_chunks}))
"""


def sentences(limit: int) -> list[dict[str, Any]]:
    """`limit` memories: HoloViz sentences (20-400 characters), each with the one before as context."""
    memories: list[dict[str, Any]] = []
    for path in sorted((corpora_dir() / "holoviz").rglob("*.md")):
        project = path.relative_to(corpora_dir() / "holoviz").parts[0]
        text = re.sub(r"```.*?```", " ", path.read_text(encoding="utf-8", errors="replace"), flags=re.DOTALL)
        previous = ""
        for sentence in re.split(r"(?<=[.!?])\s+|\n\s*\n", text):
            sentence = " ".join(sentence.split())
            if not 20 <= len(sentence) <= 400:
                continue
            n = len(memories)
            memory = {
                "id": f"m{n:05d}",
                "content": sentence,
                "tags": [project],
                "created_at": f"2026-{1 + n // 40000 % 12:02d}-01T00:00:00Z",
            }
            if previous:
                memory["metadata"] = {"context": previous}
            memories.append(memory)
            previous = sentence
            if len(memories) >= limit:
                return memories
    return memories


def queries(limit: int) -> list[str]:
    """Distinct queries (a repeated one would hit the engine's query-vector cache and time no
    encoding): the HoloViz and memories ground-truth queries."""
    texts: list[str] = []
    for name in ("holoviz", "memories"):
        path = REPO_ROOT / "ground_truth" / name / "queries.jsonl"
        texts += [
            json.loads(line)["text"] for line in path.read_text(encoding="utf-8").splitlines() if line.strip()
        ]
    return list(dict.fromkeys(texts))[:limit]


def run_version(
    label: str, root: Path, work: Path, memories: Path, query_file: Path, cache: Path
) -> dict[str, Any]:
    env = {**offline_environment(), "PYTHONPATH": str(root)}
    args = {
        "memories": str(memories),
        "index": str(work / f"index-{label}"),
        "cache": str(cache),
        "queries": str(query_file),
        "now": "2026-12-01T00:00:00Z",
    }
    done = subprocess.run(
        [sys.executable, "-c", WORKER, json.dumps(args)],
        env=env,
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode:
        raise RuntimeError(f"{label}: {done.stderr[-2000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    ms = result["ms"]
    return {
        "version": label,
        "n_chunks": result["n_chunks"],
        "build_s": round(result["build_s"], 1),
        "n": len(ms),
        "p50_ms": round(statistics.median(ms), 2),
        "p95_ms": round(percentile(ms, 95), 2),
    }


def mcp_latency(index_dir: Path, texts: list[str]) -> dict[str, Any]:
    import asyncio

    from mcp import Client

    from hybridlab.server.mcp import create_server

    os.environ["HYBRIDLAB_NOW"] = "2026-12-01T00:00:00Z"
    times: list[float] = []

    async def session() -> None:
        async with Client(create_server(index_dir)) as client:
            await client.call_tool("search", {"query": texts[0]})
            for text in texts:
                started = time.perf_counter()
                result = await client.call_tool("search", {"query": text})
                times.append((time.perf_counter() - started) * 1000)
                assert not result.is_error, result.content[0].text

    asyncio.run(session())
    return {
        "version": "after, MCP search tool (in-process client)",
        "n": len(times),
        "p50_ms": round(statistics.median(times), 2),
        "p95_ms": round(percentile(times, 95), 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="eb5dc6e", help="the commit to compare with (default eb5dc6e)")
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=500, help="at most this many distinct queries")
    parser.add_argument(
        "--out", default=str(REPO_ROOT / "reports" / "bench" / f"{date.today()}-memory-latency")
    )
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="hybridlab-latency-") as tmp:
        work = Path(tmp)
        memories = work / "memories.jsonl"
        rows = sentences(args.memories)
        if not rows:  # no corpus: a table of searches over nothing would look like a result
            raise SystemExit(
                f"no HoloViz sentences under {corpora_dir() / 'holoviz'} (set HYBRIDLAB_CORPORA)"
            )
        memories.write_text("".join(json.dumps(m) + "\n" for m in rows), encoding="utf-8")
        texts = queries(args.queries)
        (work / "queries.json").write_text(json.dumps(texts), encoding="utf-8")
        before_root = work / "before"
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(before_root), args.before],
            cwd=REPO_ROOT,
            check=True,
            capture_output=True,
        )
        try:
            results = [
                run_version(
                    f"before ({args.before})",
                    before_root,
                    work,
                    memories,
                    work / "queries.json",
                    work / "cache.duckdb",
                ),
                run_version(
                    "after (working tree)",
                    REPO_ROOT,
                    work,
                    memories,
                    work / "queries.json",
                    work / "cache.duckdb",
                ),
            ]
        finally:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(before_root)], cwd=REPO_ROOT, check=False
            )
        results.append(mcp_latency(work / "index-after (working tree)", texts))
    ratio = results[1]["p50_ms"] / results[0]["p50_ms"]
    report = {
        "memories": len(rows),
        "queries": len(texts),
        "results": results,
        "p50_ratio_after_before": round(ratio, 3),
    }
    (out / "latency.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    lines = [
        f"# Memory search latency at {len(rows):,} memories ({date.today()})",
        "",
        (
            "`python -m bench.memory_latency` — `Index.search(query, limit=10)` with the defaults, query encoding "
            f"included, {len(texts)} queries after one warm-up; 2-core CPU."
        ),
        "",
        "| version | memories | index build s | p50 ms | p95 ms |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['version']} | {r.get('n_chunks', len(rows))} | {r.get('build_s', '')} | {r['p50_ms']} | {r['p95_ms']} |"
        for r in results
    ]
    lines += ["", f"p50 after / before: {ratio:.2f}"]
    (out / "latency.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
