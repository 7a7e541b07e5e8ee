"""Deletes and updates of memories, commit-based vs tombstones in the write-ahead log (issue 32):
`python -m bench.memory_writes [--memories N] [--ops K] [--out DIR]`.

A memory index of N synthetic memories (default 5,000: sentences of the demo memories recombined,
as `bench.rare_word` makes them), embedded with `wordllama` (the fastest encoder: the build stays
short; an update re-embeds one memory with the index's model), copied once per way. K deletes and
K updates (default 40 each, alternating, of random memories of the build) through `MemoryWriter`:

- `commit`: `wal_records=0`, each delete and update a generation of its own (the path before
  tombstones, still taken by an index without a log);
- `tombstone`: `wal_records=64` (the default), each one append to the log, the log folded into a
  segment when it holds 64 records (the fold is part of the write that fills it).

Timed per operation: the writer's call (durable on return) and the reader's refresh after it (what
the MCP server does before answering), as P50 and P95. Results go to
`reports/bench/<date>-tombstones/` (`--out`): `memory_writes.json` and `README.md`.
"""

from __future__ import annotations

import argparse
import json
import random
import shlex
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.common import machine_info, percentile
from bench.rare_word import sentence_pool, synthetic_memory
from hybridlab.config import REPO_ROOT, apply_offline_environment

WAYS = {"commit": 0, "tombstone": 64}


def timed(call, *args, **kwargs) -> tuple[float, Any]:
    started = time.perf_counter()
    value = call(*args, **kwargs)
    return (time.perf_counter() - started) * 1000, value


def run_way(index_dir: Path, wal_records: int, targets: list[str], rng: random.Random) -> dict[str, Any]:
    """K deletes and K updates on `index_dir`, alternating; per kind, the write and refresh times (ms)."""
    from hybridlab.index.write.memory import MemoryWriter
    from hybridlab.search.engine import open_index

    sentences, tags = sentence_pool()
    writer = MemoryWriter(index_dir, wal_records=wal_records)
    times: dict[str, list[float]] = {"delete": [], "update": [], "delete_refresh": [], "update_refresh": []}
    with open_index(index_dir) as index:
        for i, doc_id in enumerate(targets):
            if i % 2:
                write_ms, _ = timed(writer.delete, [doc_id])
                kind = "delete"
            else:
                current = index.get_document(doc_id)
                content = synthetic_memory(rng, sentences, tags)[0] + f" ({rng.randrange(10**9)})"
                write_ms, _ = timed(writer.update, current, content=content)
                kind = "update"
            refresh_ms, _ = timed(index.refresh)
            times[kind].append(write_ms)
            times[f"{kind}_refresh"].append(refresh_ms)
        stats = index.stats()
    writer.close()
    summary = {
        name: {
            "p50_ms": round(percentile(values, 50), 2),
            "p95_ms": round(percentile(values, 95), 2),
            "max_ms": round(max(values), 2),
        }
        for name, values in times.items()
    }
    return {
        "summary": summary,
        "commits": writer.commits,
        "appends": writer.appends,
        "folds": writer.folds,
        "generation": stats.generation,
        "documents": stats.documents,
        "tombstones": stats.tombstones,
    }


def run(n: int, ops: int, seed: int, work: Path) -> dict[str, Any]:
    from hybridlab.config import IndexConfig
    from hybridlab.index.write.build import apply_changes
    from hybridlab.index.write.memory import MEMORY_SOURCE, make_memory

    rng = random.Random(seed)
    sentences, tags = sentence_pool()
    documents = [
        make_memory(*synthetic_memory(rng, sentences, tags), memory_id=f"base-{i:06d}") for i in range(n)
    ]
    built = work / "built"
    started = time.perf_counter()
    apply_changes(
        built, [(MEMORY_SOURCE, documents, False)], IndexConfig(models=("wordllama",)), progress=False
    )
    build_seconds = time.perf_counter() - started
    targets = rng.sample([d.doc_id for d in documents], 2 * ops)
    ways = {}
    for way, wal_records in WAYS.items():
        index_dir = work / way
        shutil.copytree(built, index_dir)
        ways[way] = run_way(index_dir, wal_records, targets, random.Random(seed + 1))
    if ways["commit"]["documents"] != ways["tombstone"]["documents"]:
        raise RuntimeError(
            f"the two ways disagree: {ways['commit']['documents']} vs {ways['tombstone']['documents']}"
        )
    speedup = {
        kind: round(
            ways["commit"]["summary"][kind]["p50_ms"] / ways["tombstone"]["summary"][kind]["p50_ms"], 1
        )
        for kind in ("delete", "update")
    }
    return {
        "memories": n,
        "ops": {"delete": ops, "update": ops},
        "seed": seed,
        "build_seconds": round(build_seconds, 1),
        "ways": ways,
        "speedup_p50": speedup,
    }


def readme(result: dict[str, Any]) -> str:
    rows = []
    for way, facts in result["ways"].items():
        s = facts["summary"]
        rows.append(
            f"| {way} | {s['delete']['p50_ms']} | {s['delete']['p95_ms']} | {s['update']['p50_ms']} | "
            f"{s['update']['p95_ms']} | {s['delete_refresh']['p50_ms']} | {s['update_refresh']['p50_ms']} | "
            f"{facts['commits']} | {facts['appends']} | {facts['folds']} |"
        )
    machine = result["machine"]
    return f"""# Deletes and updates of memories: commits vs write-ahead log tombstones ({result["date"]})

`{result["command"]}` ({result["seconds"]} s; machine: {machine["cpu_model"]}, {machine["cores"]} cores,
load {machine["load_average"][0]:.1f}; **a machine shared with other engineers' work**: absolute
figures are noisy, the ratio is what to read). {result["memories"]:,} memories embedded with
`wordllama`; {result["ops"]["delete"]} deletes and {result["ops"]["update"]} updates of random
memories, alternating, each followed by the reader's refresh (as the MCP server does).

| way | delete p50 ms | delete p95 ms | update p50 ms | update p95 ms | refresh after delete p50 ms | refresh after update p50 ms | commits | appends | folds |
|---|---|---|---|---|---|---|---|---|---|
{chr(10).join(rows)}

`commit`: `wal_records=0`, each delete and update commits a generation (the path before
tombstones); `tombstone`: each is one append (and fsync) to the write-ahead log, folded into a
segment with the write that fills the log to 64 records (in the p95). p50 speed-up of the write:
delete {result["speedup_p50"]["delete"]}x, update {result["speedup_p50"]["update"]}x. Both ways end
with the same {result["ways"]["tombstone"]["documents"]:,} documents.
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.memory_writes", description=__doc__.split("\n")[0])
    parser.add_argument("--memories", type=int, default=5_000)
    parser.add_argument("--ops", type=int, default=40, help="deletes, and as many updates")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="output folder (default reports/bench/<date>-tombstones)")
    args = parser.parse_args(argv)
    apply_offline_environment()
    date = datetime.now(UTC).strftime("%Y-%m-%d")
    out = Path(args.out) if args.out else REPO_ROOT / "reports" / "bench" / f"{date}-tombstones"
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="hybridlab-memory-writes-") as work:
        result = run(args.memories, args.ops, args.seed, Path(work))
    result.update(
        date=date,
        command="python -m bench.memory_writes " + shlex.join(argv or sys.argv[1:]),
        seconds=round(time.perf_counter() - started, 1),
        machine=machine_info(),
    )
    out.mkdir(parents=True, exist_ok=True)
    (out / "memory_writes.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    (out / "README.md").write_text(readme(result), encoding="utf-8")
    print(json.dumps({way: facts["summary"] for way, facts in result["ways"].items()}), result["speedup_p50"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
