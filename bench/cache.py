"""Benchmark the embeddings cache and the query encoder's cold start; writes a markdown report.

    python -m bench.cache --source ground_truth/memories/memories.jsonl \
        --source ../shared/corpora/holoviz/geoviews --out reports/encoding/cache-2026-11-22.md

Per source, into a fresh index with a fresh embeddings cache (default model): the first build,
an unchanged re-index that still writes a generation (`force=True`: every vector comes from the
cache), a no-op re-index (nothing changed: the index is left untouched), and a chunk-size change
(1500 -> 1000) showing the share of chunk texts that had to be embedded. Then the cold start of
`hybridlab search` (a subprocess, wall time, median of `--runs`) with each query backend.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hybridlab.config import ChunkConfig, IndexConfig, apply_offline_environment, offline_environment


def cache_rows(source: Path, workdir: Path, new_chunk_size: int) -> list[dict]:
    """The four indexing runs over one source, as report rows."""
    from hybridlab.index.write.build import index_paths

    index_dir, cache = workdir / "index", workdir / "embeddings.duckdb"
    base = IndexConfig()
    rows = []
    for label, config, force in (
        ("first build (empty cache)", base, False),
        ("unchanged re-index, new generation forced", base, True),
        ("unchanged re-index (no-op)", base, False),
        (
            f"chunk_size {base.chunk.chunk_size} -> {new_chunk_size}",
            dataclasses.replace(base, chunk=ChunkConfig(chunk_size=new_chunk_size)),
            False,
        ),
    ):
        report = index_paths([source], index_dir, config, progress=False, force=force, cache_path=cache)
        rows.append(
            {
                "source": source.name,
                "run": label,
                "seconds": report.seconds,
                "chunks": report.chunks,
                "new_chunks": report.new_chunks,
                "embedded": report.embedded,
                "cache_hits": report.cache_hits,
                "committed": report.committed,
            }
        )
    return rows


def cold_start(index_dir: Path, backend: str, runs: int) -> list[float]:
    """Wall seconds of `hybridlab search` in a fresh process, `runs` times."""
    env = {**os.environ, **offline_environment(), "HYBRIDLAB_QUERY_BACKEND": backend}
    command = [
        str(Path(sys.executable).with_name("hybridlab")),
        "search",
        "how to filter a table",
        "--index",
        str(index_dir),
        "-k",
        "3",
    ]
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(command, env=env, check=True, capture_output=True)
        times.append(time.perf_counter() - started)
    return times


def to_markdown(rows: list[dict], starts: dict[str, list[float]], load: str) -> str:
    lines = [
        "| source | run | seconds | chunks | new chunks | embedded | from cache | share embedded |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        share = r["embedded"] / r["chunks"] if r["chunks"] else 0.0
        lines.append(
            f"| {r['source']} | {r['run']}{'' if r['committed'] else ' (nothing written)'} | "
            f"{r['seconds']:.1f} | {r['chunks']} | {r['new_chunks']} | {r['embedded']} | "
            f"{r['cache_hits']} | {share:.1%} |"
        )
    lines += [
        "",
        f"`hybridlab search` cold start (subprocess wall time; load average at start: {load}):",
        "",
        "| query backend | median s | runs |",
        "|---|---:|---|",
    ]
    for backend, times in starts.items():
        lines.append(
            f"| {backend} | {statistics.median(times):.2f} | {', '.join(f'{t:.2f}' for t in times)} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--source", action="append", required=True, help="a folder or memories .jsonl (repeatable)"
    )
    parser.add_argument("--chunk-size", type=int, default=1000, help="the changed chunk size (default 1000)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", help="markdown file (default: print)")
    args = parser.parse_args(argv)
    apply_offline_environment()
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="bench-cache-") as tmp:
        for i, source in enumerate(args.source):
            rows += cache_rows(Path(source), Path(tmp) / f"s{i}", args.chunk_size)
            print(rows[-4:], flush=True)
        first = Path(tmp) / "s0" / "index"
        starts = {backend: cold_start(first, backend, args.runs) for backend in ("torch", "auto")}
    text = to_markdown(rows, starts, load)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
