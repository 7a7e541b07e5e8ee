"""Latency before/after the middle-floors refactor, interleaved in one run: searches and writes,
by this checkout and by another commit (a git worktree), on copies of one index both can read.

Each round runs one fresh worker process per tree, before then after (the order alternates by
round), on its own copy of the base index (the repository's memories set, built without token
vectors so both trees run the same first stage). A worker times, one call at a time:

- `Index.search` (the engine, query vectors not cached across queries: each question asked once);
- the MCP `search` tool (adapter, service, engine), through the SDK's in-memory client;
- the MCP `store_memory` tool (exact and near dedupe, embed, write-ahead log, refresh), new memories.

Medians over rounds of each round's P50; the ratio after / before per round, and its median.

    python -m bench.middle_floors --before ee24b3d --out reports/bench/DATE-middle-floors-latency
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

WORKER = r"""
import asyncio, json, statistics, sys, time
from mcp import Client
from hybridlab.search.engine import open_index
from hybridlab.server.mcp import create_server

index_dir, queries, writes = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
NOW = "2026-11-01T00:00:00Z"


def clear(index):
    models = getattr(index, "query_models", index)
    for cache in ("_query_vectors", "_late_queries"):
        if getattr(models, cache, None) is not None:
            getattr(models, cache).clear()


index = open_index(index_dir)
for q in queries[:5]:
    index.search(q, now=NOW)
engine = []
for q in queries:
    clear(index)
    started = time.perf_counter()
    index.search(q, now=NOW)
    engine.append((time.perf_counter() - started) * 1000)
index.close()


async def session():
    server = create_server(index_dir)
    tool_search, stores = [], []
    async with Client(server) as client:
        for q in queries[:5]:
            await client.call_tool("search", {"query": q})
        for q in queries:
            started = time.perf_counter()
            found = await client.call_tool("search", {"query": q})
            tool_search.append((time.perf_counter() - started) * 1000)
            assert not found.is_error, found.content[0].text
        for i in range(writes):
            text = f"bench note {i}: the quokka relay {i * 7919 % 1000} moved to rack {i % 13} on floor {i % 5}"
            started = time.perf_counter()
            stored = await client.call_tool("store_memory", {"content": text, "tags": ["bench"]})
            stores.append((time.perf_counter() - started) * 1000)
            assert not stored.is_error, stored.content[0].text
    return tool_search, stores


tool_search, stores = asyncio.run(session())
p50 = lambda xs: statistics.median(xs)
print(json.dumps({"engine_search": p50(engine), "mcp_search": p50(tool_search), "mcp_store_memory": p50(stores)}))
"""

MEASURES = ("engine_search", "mcp_search", "mcp_store_memory")


def run_worker(tree: Path, index_dir: Path, queries: list[str], writes: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run(
        [sys.executable, "-c", WORKER, str(index_dir), json.dumps(queries), str(writes)],
        env=env,
        cwd=tree,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode:
        raise RuntimeError(f"worker in {tree} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def interleaved(
    trees: dict[str, Path], base: Path, work: Path, queries: list[str], writes: int, rounds: int
) -> dict[str, list[dict[str, float]]]:
    """Per tree, one measurement per round; before/after order alternates by round."""
    results: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    names = list(trees)
    for round_ in range(rounds):
        for name in names if round_ % 2 == 0 else names[::-1]:
            copy = work / f"{name}-{round_}"
            shutil.copytree(base, copy)
            results[name].append(run_worker(trees[name], copy, queries, writes))
            shutil.rmtree(copy)
            print(f"round {round_ + 1}/{rounds} {name}: {results[name][-1]}", flush=True)
    return results


def summary(results: dict[str, list[dict[str, float]]]) -> dict[str, dict[str, float]]:
    before, after = results["before"], results["after"]
    table = {}
    for measure in MEASURES:
        ratios = [a[measure] / b[measure] for b, a in zip(before, after)]
        table[measure] = {
            "before_p50_ms": statistics.median(r[measure] for r in before),
            "after_p50_ms": statistics.median(r[measure] for r in after),
            "ratio_median": statistics.median(ratios),
            "ratio_min": min(ratios),
            "ratio_max": max(ratios),
        }
    return table


def plot(results: dict[str, list[dict[str, float]]], out: Path) -> None:
    """One panel per measure: each round's P50, before and after, so a drift shows as a trend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(MEASURES), figsize=(4 * len(MEASURES), 3.2))
    for ax, measure in zip(axes, MEASURES):
        for name, marker in (("before", "o"), ("after", "s")):
            values = [row[measure] for row in results[name]]
            ax.plot(range(1, len(values) + 1), values, marker=marker, label=name)
        ax.set_title(measure.replace("_", " "))
        ax.set_xlabel("round")
        ax.set_ylabel("P50 ms")
        ax.set_ylim(bottom=0)
    axes[0].legend()
    figure.tight_layout()
    figure.savefig(out / "latency.png", dpi=120)
    plt.close(figure)


def to_markdown(table: dict[str, dict[str, float]], args: argparse.Namespace, n_queries: int) -> str:
    lines = [
        f"# The middle floors: latency before ({args.before}) and after (this checkout), interleaved",
        "",
        (
            f"{args.rounds} rounds, each a fresh worker per tree on its own copy of the memories index; "
            f"{n_queries} questions, {args.writes} new memories per worker; one call at a time, 2 cores. "
            "P50 per round, then the median over rounds; ratio = after / before per round."
        ),
        "",
        "| measure | before P50 ms | after P50 ms | ratio (median) | ratio range |",
        "|---|---|---|---|---|",
    ]
    for measure, row in table.items():
        lines.append(
            f"| {measure} | {row['before_p50_ms']:.2f} | {row['after_p50_ms']:.2f} | "
            f"{row['ratio_median']:.3f} | {row['ratio_min']:.3f}–{row['ratio_max']:.3f} |"
        )
    lines += [
        "",
        "![P50 per round, before and after](latency.png)",
        "",
        (
            f"Command: `python -m bench.middle_floors --before {args.before} --rounds {args.rounds} "
            f"--writes {args.writes}`"
        ),
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--writes", type=int, default=40)
    parser.add_argument("--queries", type=int, default=120)
    args = parser.parse_args(argv)
    here = Path(__file__).resolve().parents[1]
    from bench.late_latency import build, memories_and_questions

    memories, questions = memories_and_questions(None, 0)
    questions = questions[: args.queries]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        base, _ = build(work, memories, late=False)
        tree = work / "before"
        subprocess.run(
            ["git", "-C", str(here), "worktree", "add", "--detach", str(tree), args.before],
            check=True,
            capture_output=True,
        )
        try:
            results = interleaved(
                {"before": tree, "after": here}, base, work, questions, args.writes, args.rounds
            )
        finally:
            subprocess.run(["git", "-C", str(here), "worktree", "remove", "--force", str(tree)], check=False)
    table = summary(results)
    (out / "latency.json").write_text(json.dumps({"rounds": results, "summary": table}, indent=2))
    plot(results, out)
    text = to_markdown(table, args, len(questions))
    (out / "README.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
