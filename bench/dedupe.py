"""The duplicate check of a memory store at scale (issue 32): `python -m bench.dedupe [--memories N]
[--lookups L] [--out DIR]`.

A memory index of N synthetic memories (default 20,000: sentences of the 274 demo memories
recombined, as `bench.rare_word` makes them), embedded with `wordllama` (the check reads no vector,
so the fastest encoder keeps the build short), then 70 stores through `MemoryWriter` (one fold of the
write-ahead log into a Parquet segment, six memories left in the log): a store of three kinds of
segment. L look-ups (default 200), half the content of a random stored memory re-spaced and
upper-cased (a duplicate), half a fresh text, each timed two ways on the same reader:

- `scan`: the check before the `content_key` column: every memory normalised by `regexp_replace`
  in one DuckDB query (linear in the store);
- `key`: :func:`hybridlab.index.write.memory.find_duplicate`, an equality look-up on `content_key`.

Both must agree on every answer. Results go to `reports/bench/<date>-dedupe/` (`--out`):
`dedupe.json` and `README.md`.
"""

from __future__ import annotations

import argparse
import json
import random
import shlex
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.common import machine_info, percentile
from bench.rare_word import sentence_pool, synthetic_memory
from hybridlab.config import REPO_ROOT, apply_offline_environment

SCAN = (
    "SELECT doc_id, text FROM documents WHERE doc_type = 'memory' AND length(text) >= ? "
    "AND lower(trim(regexp_replace(text, '[ \\t\\n\\r\\f\\v]+', ' ', 'g'), ' ')) = ? "
    "ORDER BY created_at NULLS LAST, doc_id"
)


def scan_duplicate(store: Any, content: str) -> str | None:
    """The duplicate check as it was: one regexp scan of every memory."""
    from hybridlab.index.write.memory import normalised_content

    wanted = normalised_content(content)
    rows = store.fetchall(SCAN, [len(wanted), wanted])
    return next((doc_id for doc_id, text in rows if normalised_content(text) == wanted), None)


def timed(call, *args) -> tuple[float, Any]:
    started = time.perf_counter()
    value = call(*args)
    return (time.perf_counter() - started) * 1000, value


def run(n: int, lookups: int, seed: int, work: Path) -> dict[str, Any]:
    from hybridlab.config import IndexConfig
    from hybridlab.index.write.build import apply_changes
    from hybridlab.index.write.memory import MEMORY_SOURCE, MemoryWriter, find_duplicate, make_memory
    from hybridlab.search.engine import open_index

    rng = random.Random(seed)
    sentences, tags = sentence_pool()
    index_dir = work / "index"
    documents = [
        make_memory(*synthetic_memory(rng, sentences, tags), memory_id=f"base-{i:06d}") for i in range(n)
    ]
    started = time.perf_counter()
    apply_changes(
        index_dir, [(MEMORY_SOURCE, documents, False)], IndexConfig(models=("wordllama",)), progress=False
    )
    build_seconds = time.perf_counter() - started
    writer = MemoryWriter(index_dir, wal_records=64)
    texts = [d.text for d in documents]
    for _ in range(70):
        text = synthetic_memory(rng, sentences, tags)[0] + f" ({rng.randrange(10**9)})"
        writer.store(text)
        texts.append(text)
    writer.close()
    index = open_index(index_dir)
    store = index.snapshot().generation.store
    timings: dict[str, list[float]] = {"scan": [], "key": []}
    found = 0
    for i in range(lookups):
        if i % 2:
            content = "  " + rng.choice(texts).upper().replace(" ", " \n ") + " "
        else:
            content = synthetic_memory(rng, sentences, tags)[0] + f" [{rng.randrange(10**9)}]"
        scan_ms, before = timed(scan_duplicate, store, content)
        key_ms, after = timed(find_duplicate, store, content)
        if before != after:
            raise RuntimeError(f"the two checks disagree on {content[:60]!r}: {before} vs {after}")
        found += after is not None
        timings["scan"].append(scan_ms)
        timings["key"].append(key_ms)
    index.close()
    summary = {
        name: {"p50_ms": round(percentile(values, 50), 3), "p95_ms": round(percentile(values, 95), 3)}
        for name, values in timings.items()
    }
    return {
        "memories": n + 70,
        "lookups": lookups,
        "duplicates_found": found,
        "seed": seed,
        "build_seconds": round(build_seconds, 1),
        "summary": summary,
        "speedup_p50": round(summary["scan"]["p50_ms"] / summary["key"]["p50_ms"], 1),
    }


def readme(result: dict[str, Any]) -> str:
    rows = "\n".join(f"| {name} | {s['p50_ms']} | {s['p95_ms']} |" for name, s in result["summary"].items())
    return f"""# Duplicate check at {result["memories"]:,} memories ({result["date"]})

`{result["command"]}` ({result["seconds"]} s; machine: {result["machine"]["cpu_model"]}, {result["machine"]["cores"]} cores,
load {result["machine"]["load_average"][0]:.1f}). {result["lookups"]} look-ups, {result["duplicates_found"]} of them
duplicates; both checks gave the same answer every time.

| check | p50 ms | p95 ms |
|---|---|---|
{rows}

`scan`: every memory normalised by `regexp_replace` (the check before `content_key`); `key`:
`find_duplicate`, an equality look-up on the `content_key` column. p50 speed-up: {result["speedup_p50"]}x.
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.dedupe", description=__doc__.split("\n")[0])
    parser.add_argument("--memories", type=int, default=20_000)
    parser.add_argument("--lookups", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="output folder (default reports/bench/<date>-dedupe)")
    args = parser.parse_args(argv)
    apply_offline_environment()
    date = datetime.now(UTC).strftime("%Y-%m-%d")
    out = Path(args.out) if args.out else REPO_ROOT / "reports" / "bench" / f"{date}-dedupe"
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="hybridlab-dedupe-") as work:
        result = run(args.memories, args.lookups, args.seed, Path(work))
    result.update(
        date=date,
        command="python -m bench.dedupe " + shlex.join(argv or sys.argv[1:]),
        seconds=round(time.perf_counter() - started, 1),
        machine=machine_info(),
    )
    out.mkdir(parents=True, exist_ok=True)
    (out / "dedupe.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    (out / "README.md").write_text(readme(result), encoding="utf-8")
    print(json.dumps(result["summary"]), result["speedup_p50"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
