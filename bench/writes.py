"""Write cost before/after: `python -m bench.writes [--before SRC] [--parts ...]`.

Parts (each measurement runs in a fresh subprocess that imports `hybridlab` from the code under
test: this checkout, "after", or with `--before SRC` a checkout of the code before, e.g. `git
worktree add --detach /tmp/before main~N`; the workers use only `apply_changes`, `index_paths`,
`MemoryWriter` and `open_index`, present on both sides):

- `stores`: N synthetic memories indexed with the static `wordllama` encoder (what shows is the
  write path, not encoding), then `--stores` single memories stored one after another through
  `MemoryWriter` (durable on return; two warm-up stores first, not counted); P50/P95/P99 seconds per
  store (which stores committed a generation, e.g. folded the write-ahead log, is recorded), and per
  store the refresh of an open reader plus `get_document` of the new memory (searchable on return),
  then a search (three of its words) and the same search again: what "store, then search" costs.
  Then one write of `--batch` memories in one commit.
- `onnx`: the same at every N with the ONNX encoder (`all-MiniLM-L6-v2-onnx`, the ONNX
  export of the default model): the stored memories are encoded for real; the N base memories'
  vectors are random unit vectors put into the embeddings cache first (their encoding is not
  what is measured, and 100k real encodings would take most of an hour on 2 cores).
- `reindex`: a folder of `REINDEX_FILES` synthetic markdown files indexed in full (`REINDEX_SETTLE`
  seconds after they were written, as an existing folder), then 1% of them edited and the folder
  re-indexed (`index_paths`); the re-index's seconds apart from embedding, and an unchanged re-index
  (`gc.collect()` before each timed run, so no run pays for the garbage of the one before).
- `search`: P50/P95 of `Index.search` (limit 10, default hybrid) on one segment and on 10 unmerged
  segments of the same documents, SciFact (its test queries) and 100k synthetic memories (300
  synthetic queries), with a check that both answer alike (top 100, scores to 1e-6); with
  `--before`, per dataset the before side's two indexes are measured first, then the after side's.
- `disk` (after only): 10,000 memories written one at a time (the first by `apply_changes`, the
  rest by `MemoryWriter.store_document`: through the write-ahead log and its folds, merges included)
  vs a fresh build of the same memories: the index folder's size (embeddings cache excluded) and
  the per-write times.

Results go to `reports/bench/<date>-writes-2/` (`--out`): `writes.json`, `README.md`, `writes.png`.
"""

from __future__ import annotations

import argparse
import gc
import inspect
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

WORDS = [
    "panel",
    "holoviews",
    "bokeh",
    "widget",
    "plot",
    "layout",
    "stream",
    "param",
    "server",
    "notebook",
    "table",
    "chart",
    "slider",
    "data",
    "frame",
    "index",
    "vector",
    "search",
    "memory",
    "tag",
    "python",
    "async",
    "render",
    "cache",
    "tunnel",
    "deploy",
    "release",
    "config",
    "docs",
    "test",
    "build",
    "review",
    "design",
    "meeting",
    "decision",
    "bug",
    "fix",
    "user",
    "team",
    "project",
    "deadline",
    "api",
    "schema",
    "migration",
]
TAGS = ("work", "home", "project-a", "project-b", "idea", "todo", "decision", "bug")
SIZES = (1_000, 10_000, 100_000)
STORES = 200  # > 2 x the write-ahead log's 64 records: the stores that fold it are among those measured
WARMUP = 2
BATCH = 1_000
SEGMENTS = 10
SYNTHETIC_QUERIES = 300
REINDEX_FILES = 5_000
REINDEX_SETTLE = 2.5  # seconds between writing the folder and its first build (> layout.SETTLED_NS)
DISK_WRITES = 10_000
ONNX_MODEL = "all-MiniLM-L6-v2-onnx"
PARTS = ("stores", "onnx", "reindex", "search", "disk")
#: the search part's clock: memories carry dates and hybrid search weighs recency, so runs made
#: minutes apart (one index, then the other) would differ by the decay between them
SEARCH_NOW = "2026-12-01T00:00:00Z"
PACKAGE_ROOT = Path(__file__).resolve().parents[1]  # this checkout: bench/ beside hybridlab/


def synthetic_memory(i: int, rng: random.Random) -> dict[str, Any]:
    """Memory `i` of the synthetic set: 8-40 words, 0-3 tags, a creation day in 2026."""
    day = 1 + i % 300
    return {
        "id": f"syn-{i:07d}",
        "content": " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 40))),
        "tags": rng.sample(TAGS, rng.randint(0, 3)),
        "created_at": f"2026-{1 + (day - 1) // 28 % 12:02d}-{1 + (day - 1) % 28:02d}T12:00:00Z",
    }


def _write_module(name: str) -> Any:
    """`hybridlab.index.write.<name>` of the side being measured, or `hybridlab.index.<name>` on a
    side from before `index/` was grouped into `write/` and `admin/` (e37bd4a)."""
    import importlib

    try:
        return importlib.import_module(f"hybridlab.index.write.{name}")
    except ImportError:
        return importlib.import_module(f"hybridlab.index.{name}")


def _format_module(name: str) -> Any:
    """`hybridlab.index.format.<name>` of the side being measured, or `hybridlab.index.<name>` on a
    side from before the format modules moved into `format/`."""
    import importlib

    try:
        return importlib.import_module(f"hybridlab.index.format.{name}")
    except ImportError:
        return importlib.import_module(f"hybridlab.index.{name}")


def _memories(start: int, count: int, rng: random.Random) -> list[Any]:
    make_memory = _write_module("memory").make_memory

    return [
        make_memory(m["content"], m["tags"], created_at=m["created_at"], memory_id=m["id"])
        for m in (synthetic_memory(i, rng) for i in range(start, start + count))
    ]


def _folder_bytes(folder: Path, skip: tuple[str, ...] = ()) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.name.startswith(skip))


def _memory_write_options() -> dict[str, Any]:
    """What `MemoryWriter` passes to `apply_changes` beyond the documents, on this side's code."""
    apply_changes = _write_module("build").apply_changes

    return {"use_cache": False} if "use_cache" in inspect.signature(apply_changes).parameters else {}


def _prefill_cache(documents: list[Any], model: str, cache_path: Path, seed: int) -> None:
    """Random unit vectors for the documents' chunks under `model` in the embeddings cache, so a
    build takes them from there instead of encoding (the write path, not encoding, is measured)."""
    import importlib

    import numpy as np

    from hybridlab.config import IndexConfig
    from hybridlab.encoders.registry import get_spec

    embedding_cache = _format_module("embedding_cache")
    EmbeddingCache, text_sha256 = embedding_cache.EmbeddingCache, embedding_cache.text_sha256
    try:
        rows = _format_module("rows")
    except ImportError:  # a before-side checkout from when they lived in build
        rows = importlib.import_module("hybridlab.index.build")
    chunk_document, indexed_text = rows.chunk_document, rows.indexed_text

    config = IndexConfig(models=(model,))
    hashes = list(
        dict.fromkeys(
            text_sha256(indexed_text(chunk, document, config.chunk))
            for document in documents
            for chunk in chunk_document(document, config)
        )
    )
    vectors = (
        np.random.default_rng(seed).standard_normal((len(hashes), get_spec(model).dim)).astype(np.float32)
    )
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    cache = EmbeddingCache(cache_path)
    try:
        for start in range(0, len(hashes), 20_000):
            cache.put(get_spec(model).name, hashes[start : start + 20_000], vectors[start : start + 20_000])
    finally:
        cache.close()


def _stores_worker(arguments: dict[str, Any]) -> dict[str, Any]:
    """Index N memories, then store memories one by one (a reader refreshing after each), then
    write a batch in one commit; seconds of each."""
    from hybridlab.config import IndexConfig
    from hybridlab.search.engine import open_index

    apply_changes = _write_module("build").apply_changes
    memory = _write_module("memory")
    MEMORY_SOURCE, MemoryWriter = memory.MEMORY_SOURCE, memory.MemoryWriter

    n, stores, batch, model = (
        int(arguments["n"]),
        int(arguments["stores"]),
        int(arguments["batch"]),
        arguments["model"],
    )
    rng = random.Random(n)
    documents = _memories(0, n, rng)
    work = Path(tempfile.mkdtemp(prefix="hybridlab-bench-writes-"))
    index_dir, cache = work / "index", work / "embeddings.duckdb"
    if model != "wordllama":
        _prefill_cache(documents, model, cache, seed=n)
    started = time.perf_counter()
    apply_changes(
        index_dir,
        [(MEMORY_SOURCE, documents, False)],
        IndexConfig(models=(model,)),
        progress=False,
        cache_path=cache,
    )
    build_seconds = time.perf_counter() - started
    del documents
    writer = MemoryWriter(index_dir)
    store_seconds, refresh_seconds, cpu_seconds, first = [], [], [], []
    first_search, again_search = [], []
    with open_index(index_dir) as index:
        index.search("panel widget", limit=10)
        committed = []
        for i in range(WARMUP + stores):
            memory = synthetic_memory(n + i, rng)
            stamp = _manifest_stamp(index_dir)
            started, cpu = time.perf_counter(), time.process_time()
            stored = writer.store(memory["content"], memory["tags"])
            stored_at, cpu = time.perf_counter(), time.process_time() - cpu
            if i >= WARMUP:  # did this store commit a generation (a segment, or a fold of the log)?
                committed.append(_manifest_stamp(index_dir) != stamp)
            index.refresh()
            if index.get_document(stored.id).text != memory["content"]:
                raise RuntimeError(f"stored memory {stored.id} not found after a refresh")
            done = time.perf_counter()
            (first if i < WARMUP else store_seconds).append(stored_at - started)
            if i >= WARMUP:
                refresh_seconds.append(done - stored_at)
                cpu_seconds.append(cpu)
                # what an assistant pays for "store, then search": the first search after a store
                # (its details read for the new rows) against the same search again
                query = " ".join(memory["content"].split()[:3])
                started = time.perf_counter()
                index.search(query, limit=10, now=SEARCH_NOW)
                first_search.append(time.perf_counter() - started)
                started = time.perf_counter()
                index.search(query, limit=10, now=SEARCH_NOW)
                again_search.append(time.perf_counter() - started)
    batch_row = {}
    if batch:
        documents = _memories(10 * n + 1_000_000, batch, rng)
        started = time.perf_counter()
        report = apply_changes(
            index_dir,
            [(MEMORY_SOURCE, documents, False)],
            progress=False,
            cache_path=cache,
            **_memory_write_options(),
        )
        batch_row = {
            "batch": batch,
            "batch_seconds": time.perf_counter() - started,
            "batch_embed_seconds": report.embed_seconds,
            "batch_embedded": report.embedded,
        }
    size = _folder_bytes(index_dir)
    subprocess.run(["rm", "-rf", str(work)], check=False)
    return {
        "n": n,
        "model": model,
        "build_seconds": build_seconds,
        "warmup_seconds": first,
        "store_seconds": store_seconds,
        "committed": committed,
        "first_search_seconds": first_search,
        "again_search_seconds": again_search,
        "cpu_seconds": cpu_seconds,
        "refresh_seconds": refresh_seconds,
        "index_mb": size / 1e6,
        **batch_row,
    }


def _manifest_stamp(index_dir: Path) -> tuple[int, int]:
    stat = os.stat(index_dir / "manifest.json")
    return (stat.st_mtime_ns, stat.st_ino)


def _markdown(i: int, rng: random.Random, edit: int = 0) -> str:
    """Synthetic markdown file `i`: a title, three sections of 40-120 words (`edit` > 0: changed)."""
    sections = [f"# Note {i}\n"]
    for s in range(3):
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(40, 120)))
        sections.append(f"## Part {s} {rng.choice(WORDS)}\n\n{words}\n")
    if edit:
        sections.append(f"## Edit {edit}\n\n{' '.join(rng.choice(WORDS) for _ in range(30))}\n")
    return "\n".join(sections)


def _reindex_worker(arguments: dict[str, Any]) -> dict[str, Any]:
    """A folder of markdown files: full build, then 1% edited and re-indexed, then re-indexed unchanged."""
    from hybridlab.config import IndexConfig

    index_paths = _write_module("build").index_paths

    files, share = int(arguments["files"]), float(arguments["share"])
    rng = random.Random(files)
    work = Path(tempfile.mkdtemp(prefix="hybridlab-bench-reindex-"))
    folder, index_dir, cache = work / "docs", work / "index", work / "embeddings.duckdb"
    folder.mkdir()
    for i in range(files):
        (folder / f"note-{i:05d}.md").write_text(_markdown(i, rng), encoding="utf-8")
    written = time.time()
    config = IndexConfig(models=("wordllama",))
    from hybridlab.encoders.registry import load_encoder

    load_encoder(
        "wordllama"
    )  # loaded before either timed run: each then costs its indexing, not a model load
    # the folder exists before it is indexed, as a repository does: files written within the racy
    # window (2 s) before a scan are read again by the next one (their signature is not recorded)
    time.sleep(max(0.0, REINDEX_SETTLE - (time.time() - written)))
    gc.collect()  # each timed run starts with no garbage left by the setup (as timeit does), on both sides
    full = index_paths([folder], index_dir, config, progress=False, cache_path=cache)
    changed = rng.sample(range(files), max(1, int(files * share)))
    for i in changed:
        (folder / f"note-{i:05d}.md").write_text(_markdown(i, random.Random(i), edit=1), encoding="utf-8")
    gc.collect()  # the full build's garbage is not the update's cost (a collection of it took 50-100 ms)
    update = index_paths([folder], index_dir, progress=False, cache_path=cache)
    unchanged = index_paths([folder], index_dir, progress=False, cache_path=cache)
    subprocess.run(["rm", "-rf", str(work)], check=False)
    return {
        "files": files,
        "changed": len(changed),
        "full_seconds": full.seconds,
        "full_chunks": full.chunks,
        "full_embed_seconds": full.embed_seconds,
        "update_seconds": update.seconds,
        "update_embed_seconds": update.embed_seconds,
        "update_embedded": update.embedded,
        "update_new_chunks": update.new_chunks,
        "unchanged_seconds": unchanged.seconds,
    }


def _search_worker(arguments: dict[str, Any]) -> dict[str, Any]:
    """Search latency over a dataset's queries, the index written in `segments` commits without merges."""
    from hybridlab.config import IndexConfig
    from hybridlab.search.engine import open_index

    apply_changes = _write_module("build").apply_changes

    segments, dataset = int(arguments["segments"]), arguments["dataset"]
    if dataset == "scifact":
        from hybridlab.eval.datasets import load_queries
        from hybridlab.eval.evalsets import get_evalset
        from hybridlab.ingest.sources import IngestReport, read_source

        evalset = get_evalset("scifact")
        documents = read_source(evalset.sources[0], IngestReport())
        queries = list(load_queries(evalset.judgements, "test").values())
    else:
        rng = random.Random(int(arguments["n"]))
        documents = _memories(0, int(arguments["n"]), rng)
        queries = [" ".join(rng.sample(WORDS, rng.randint(2, 5))) for _ in range(SYNTHETIC_QUERIES)]
    work = Path(tempfile.mkdtemp(prefix="hybridlab-bench-search-"))
    index_dir = work / "index"
    config = IndexConfig(models=("wordllama",))
    step = -(-len(documents) // segments)
    extra = {"merge": False} if segments > 1 else {}
    for start in range(0, len(documents), step):
        apply_changes(
            index_dir,
            [(documents[0].source, documents[start : start + step], False)],
            config,
            progress=False,
            cache_path=work / "embeddings.duckdb",
            **extra,
        )
    manifest = json.loads((index_dir / "manifest.json").read_text())
    with open_index(index_dir) as index:
        for query in queries:  # warm-up: query vectors cached, lazy state built
            index.search(query, limit=10, now=SEARCH_NOW)
        latencies = []
        for _ in range(2):
            for query in queries:
                started = time.perf_counter()
                index.search(query, limit=10, now=SEARCH_NOW)
                latencies.append(time.perf_counter() - started)
        runs = {query: index.run(query, limit=100, now=SEARCH_NOW) for query in queries}
    subprocess.run(["rm", "-rf", str(work)], check=False)
    return {
        "segments": len(manifest.get("segments", [manifest["path"]])),
        "latencies": latencies,
        "runs": runs,
    }


def _disk_worker(arguments: dict[str, Any]) -> dict[str, Any]:
    """`writes` memories written one per commit into an empty index vs a fresh build of them."""
    from hybridlab.config import IndexConfig

    layout = _format_module("layout")
    apply_changes = _write_module("build").apply_changes
    memory = _write_module("memory")
    MEMORY_SOURCE, MemoryWriter = memory.MEMORY_SOURCE, memory.MemoryWriter

    writes = int(arguments["writes"])
    documents = _memories(0, writes, random.Random(writes))
    work = Path(tempfile.mkdtemp(prefix="hybridlab-bench-disk-"))
    written, fresh = work / "written", work / "fresh"
    config = IndexConfig(models=("wordllama",))
    seconds = []
    writer = None
    for i, document in enumerate(documents):
        started = time.perf_counter()
        if (
            writer is not None
        ):  # a store as the MCP server makes it (through the write-ahead log where there is one)
            writer.store_document(document)
        else:
            apply_changes(
                written,
                [(MEMORY_SOURCE, [document], False)],
                config if i == 0 else None,
                progress=False,
                cache_path=work / "written-embeddings.duckdb",
                **_memory_write_options(),
            )
        seconds.append(time.perf_counter() - started)
        if i == 0 and hasattr(MemoryWriter, "store_document"):
            writer = MemoryWriter(written)
    getattr(layout, "wait_for_trash", lambda: None)()
    manifest = layout.read_manifest(written)
    skip = (".verified", ".lock")
    written_mb, previous_segments = _folder_bytes(written, skip) / 1e6, len(layout.generations(written))
    # one more write: the previous generation (kept for `verify --repair`) is then the last one, and
    # the segments only it named (before a merge cascade: all of them) are removed
    extra = _memories(writes, 1, random.Random(-1))
    apply_changes(
        written,
        [(MEMORY_SOURCE, extra, False)],
        progress=False,
        cache_path=work / "written-embeddings.duckdb",
        **_memory_write_options(),
    )
    getattr(layout, "wait_for_trash", lambda: None)()
    next_mb = _folder_bytes(written, skip) / 1e6
    started = time.perf_counter()
    apply_changes(
        fresh,
        [(MEMORY_SOURCE, documents, False)],
        config,
        progress=False,
        cache_path=work / "fresh-embeddings.duckdb",
    )
    fresh_seconds = time.perf_counter() - started
    result = {
        "writes": writes,
        "write_seconds": seconds,
        "fresh_seconds": fresh_seconds,
        "written_mb": written_mb,
        "written_next_mb": next_mb,
        "fresh_mb": _folder_bytes(fresh, skip) / 1e6,
        "segments": len(manifest.segments or ()),
        "generation_folders": previous_segments,
    }
    subprocess.run(["rm", "-rf", str(work)], check=False)
    return result


WORKERS = {
    "stores": _stores_worker,
    "reindex": _reindex_worker,
    "search": _search_worker,
    "disk": _disk_worker,
}


def _run(source: Path, kind: str, arguments: dict[str, Any], timeout: float = 7200) -> Any:
    """Run a worker of this file with `hybridlab` imported from `source`; its JSON result. The file runs
    as a script, so the benchmark's code is this checkout's whatever the layout of `source` (with or
    without `bench/`, or the older `hybridlab/bench/`); the workers import nothing from `bench`."""
    from hybridlab.eval.datasets import data_dir

    # both sides read the same datasets (a checkout elsewhere does not find ../shared/datasets)
    env = {
        **os.environ,
        "PYTHONPATH": str(source),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "HYBRIDLAB_DATA": os.environ.get("HYBRIDLAB_DATA", str(data_dir())),
    }
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", kind, json.dumps(arguments)]
    done = subprocess.run(
        command,
        check=False,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=tempfile.gettempdir(),
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"{kind} worker ({source}) failed ({done.returncode}): {done.stderr.strip()[-3000:]}"
        )
    return json.loads([line for line in done.stdout.splitlines() if line.strip()][-1])


def same_runs(
    first: dict[str, dict[str, float]], second: dict[str, dict[str, float]], tolerance: float = 1e-6
) -> float:
    """Share of queries whose runs have the same documents with scores equal within `tolerance`."""
    same = sum(
        first[q].keys() == second[q].keys()
        and all(abs(s - second[q][d]) <= tolerance for d, s in first[q].items())
        for q in first
    )
    return same / max(len(first), 1)


def _ms(values: list[float], q: float) -> float:
    from bench.common import percentile

    return 1000 * percentile(values, q)


def _plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(6, 4))
    for label in ("before", "after"):
        rows = [r for r in results["stores"].get(label) or [] if r["model"] == "wordllama"]
        if rows:
            axis.plot(
                [r["n"] for r in rows],
                [_ms(r["store_seconds"], 50) for r in rows],
                marker="o",
                label=f"{label} P50",
            )
            axis.plot(
                [r["n"] for r in rows],
                [_ms(r["store_seconds"], 95) for r in rows],
                marker="x",
                linestyle="--",
                label=f"{label} P95",
            )
    axis.axhline(25, color="grey", linewidth=0.8, linestyle=":", label="target P50 25 ms")
    axis.set_xscale("log")
    axis.set_yscale("log")
    axis.set_xlabel("memories in the index")
    axis.set_ylabel("ms per store_memory")
    axis.set_title("One MemoryWriter.store, wordllama encoder")
    axis.grid(True, which="both", alpha=0.3)
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def _stores_table(results: dict[str, Any]) -> list[str]:
    lines = [
        (
            "| encoder | N | side | P50 ms/store | P95 ms | P99 ms | max ms | ratio P50 before/after | CPU ms/store P50 | "
            "stores that committed a generation: count, median ms | "
            "refresh + get_document P50 ms | P95 ms | next search P50 ms (same search again) | build s | index MB |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    before = {(r["model"], r["n"]): r for r in results["stores"].get("before") or []}
    for label in ("before", "after"):
        for row in results["stores"].get(label) or []:
            old = before.get((row["model"], row["n"]))
            ratio = (
                f"{_ms(old['store_seconds'], 50) / _ms(row['store_seconds'], 50):.1f}x"
                if old and label == "after"
                else ""
            )
            committing = [s for s, c in zip(row["store_seconds"], row.get("committed") or []) if c]
            commits = f"{len(committing)}, {_ms(committing, 50):.1f}" if committing else "0"
            lines.append(
                f"| {row['model']} | {row['n']:,} | {label} | {_ms(row['store_seconds'], 50):.1f} | "
                f"{_ms(row['store_seconds'], 95):.1f} | {_ms(row['store_seconds'], 99):.1f} | "
                f"{1000 * max(row['store_seconds']):.1f} | {ratio} | "
                f"{_ms(row['cpu_seconds'], 50):.1f} | {commits} | "
                f"{_ms(row['refresh_seconds'], 50):.1f} | {_ms(row['refresh_seconds'], 95):.1f} | "
                f"{_search_cell(row)} | "
                f"{row['build_seconds']:.1f} | {row['index_mb']:.1f} |"
            )
    return lines


def _search_cell(row: dict[str, Any]) -> str:
    if not row.get("first_search_seconds"):
        return ""
    return f"{_ms(row['first_search_seconds'], 50):.1f} ({_ms(row['again_search_seconds'], 50):.1f})"


def _batch_table(results: dict[str, Any]) -> list[str]:
    lines = [
        "| encoder | N | side | memories | seconds | of which embedding | seconds apart from embedding |",
        "|---|---|---|---|---|---|---|",
    ]
    for label in ("before", "after"):
        for row in results["stores"].get(label) or []:
            if row.get("batch"):
                lines.append(
                    f"| {row['model']} | {row['n']:,} | {label} | {row['batch']:,} | {row['batch_seconds']:.2f} | "
                    f"{row['batch_embed_seconds']:.2f} | {row['batch_seconds'] - row['batch_embed_seconds']:.2f} |"
                )
    return lines


def reindex_share(row: dict[str, Any]) -> float:
    """A re-index's seconds apart from embedding, as a share of the full build's seconds."""
    return (row["update_seconds"] - row["update_embed_seconds"]) / row["full_seconds"]


def _report(results: dict[str, Any]) -> str:
    commands = "; then ".join(f"`{command}`" for command in results["commands"])
    lines = [
        f"# Write cost before/after ({results['date']})",
        "",
        f"Commands: {commands}",
        "",
        (
            f"Machine: {results['machine']}, shared with other jobs while this ran. Before = "
            f"{results['before_source']}; after = {results['after_source']}. Percentiles: numpy linear."
        ),
        "",
    ]
    if results.get("stores"):
        lines += [
            "## store_memory: one MemoryWriter.store (durable on return), then a reader's refresh + get_document",
            "",
            f"{results['stores_per_n']} stores per row after {WARMUP} warm-up stores (not counted).",
            "",
            *_stores_table(results),
            "",
            "## One write of 1,000 memories (one commit)",
            "",
            *_batch_table(results),
            "",
        ]
    reindex = results.get("reindex") or {}
    if reindex:
        lines += [
            "## Re-indexing a folder with 1% of its files changed (wordllama)",
            "",
            (
                "| side | files | changed | full build s | re-index s | of which embedding s | re-index apart from "
                "embedding / full build | unchanged re-index s |"
            ),
            "|---|---|---|---|---|---|---|---|",
        ]
        for label, row in reindex.items():
            lines.append(
                f"| {label} | {row['files']:,} | {row['changed']} | {row['full_seconds']:.2f} | "
                f"{row['update_seconds']:.2f} | {row['update_embed_seconds']:.2f} | {reindex_share(row):.1%} | "
                f"{row['unchanged_seconds']:.2f} |"
            )
        lines.append("")
        if any(len(row.get("runs") or ()) > 1 for row in reindex.values()):
            lines += [
                (
                    "Each side's row is its median run by share; every run (sides alternating, each a fresh "
                    "process): "
                    + "; ".join(
                        f"{label} "
                        + ", ".join(
                            f"{reindex_share(run):.1%} ({run['full_seconds']:.1f} s full, "
                            f"{run['update_seconds']:.2f} s re-index, {run['unchanged_seconds']:.2f} s unchanged)"
                            for run in row["runs"]
                        )
                        for label, row in reindex.items()
                    )
                ),
                "",
            ]
    search = results.get("search") or {}
    if search:
        before = results.get("search_before") or {}
        lines += [
            "## Search latency: one segment vs 10 unmerged segments (wordllama, `Index.search`, limit 10, hybrid)",
            "",
            "| dataset | side | segments | P50 ms | P95 ms | P50 ratio | P95 ratio | same top-100 (scores 1e-6) |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for dataset in search:
            for label, rows in (("before", before.get(dataset)), ("after", search[dataset])):
                if not rows:
                    continue
                one, many = rows["one"], rows["many"]
                lines.append(
                    f"| {dataset} | {label} | {one['segments']} | {one['p50_ms']:.2f} | {one['p95_ms']:.2f} | | | |"
                )
                lines.append(
                    f"| {dataset} | {label} | {many['segments']} | {many['p50_ms']:.2f} | {many['p95_ms']:.2f} | "
                    f"{many['p50_ms'] / one['p50_ms']:.2f}x | {many['p95_ms'] / one['p95_ms']:.2f}x | "
                    f"{rows['identical']:.1%} |"
                )
        lines.append("")
    disk = results.get("disk")
    if disk:
        after_one = disk.get("written_next_mb")
        next_text = f"{after_one:.1f} ({after_one / disk['fresh_mb']:.2f}x)" if after_one else "—"
        lines += [
            "## Disk after 10,000 single-memory writes and their merges (after)",
            "",
            (
                "| writes | segments | folders | written index MB | fresh build MB | ratio | after one more write MB "
                "| write P50 ms | P95 ms | max ms | fresh build s |"
            ),
            "|---|---|---|---|---|---|---|---|---|---|---|",
            (
                f"| {disk['writes']:,} | {disk['segments']} | {disk['generation_folders']} | {disk['written_mb']:.1f} | "
                f"{disk['fresh_mb']:.1f} | {disk['written_mb'] / disk['fresh_mb']:.2f}x | {next_text} | "
                f"{_ms(disk['write_seconds'], 50):.1f} | "
                f"{_ms(disk['write_seconds'], 95):.1f} | {1000 * max(disk['write_seconds']):.1f} | "
                f"{disk['fresh_seconds']:.1f} |"
            ),
            "",
        ]
    return "\n".join(lines)


def _describe(source: Path) -> str:
    """A checkout as a report names it: its commit (no machine path), or its folder's name."""
    try:
        commit = subprocess.run(
            ["git", "-C", str(source), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return Path(source).name
    return f"a checkout of {commit}"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--worker"]:
        sys.stdout.write("\n" + json.dumps(WORKERS[argv[1]](json.loads(argv[2]))) + "\n")
        return 0
    parser = argparse.ArgumentParser(prog="python -m bench.writes", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--before", type=Path, help="a checkout of the code before (its folder holding hybridlab/)"
    )
    parser.add_argument(
        "--after",
        type=Path,
        default=PACKAGE_ROOT,
        help="the code after (default this checkout; e.g. a worktree of one commit, so that "
        "uncommitted work in this checkout is not measured)",
    )
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--stores", type=int, default=STORES)
    parser.add_argument(
        "--batch", type=int, default=BATCH, help="memories of the one-commit batch write (0: none)"
    )
    parser.add_argument("--disk-writes", type=int, default=DISK_WRITES)
    parser.add_argument("--reindex-files", type=int, default=REINDEX_FILES)
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="reindex: runs per side, before and after alternating; each side's median run by share "
        "is reported, every run kept in writes.json (a loaded machine varies by tens of percent)",
    )
    parser.add_argument("--out", type=Path, help="default reports/bench/<date>-writes-2")
    parser.add_argument(
        "--update",
        action="store_true",
        help="keep the figures of OUT/writes.json and replace only the parts run now",
    )
    args = parser.parse_args(argv)
    for name, source in (("--before", args.before), ("--after", args.after)):
        if source is not None and not (source / "hybridlab" / "__init__.py").is_file():
            parser.error(f"{name} {source}: no hybridlab/ package there")
    date = datetime.now(UTC).strftime("%Y-%m-%d")
    out = args.out or PACKAGE_ROOT / "reports" / "bench" / f"{date}-writes-2"
    out.mkdir(parents=True, exist_ok=True)
    from bench.common import machine_info

    machine = machine_info()
    results: dict[str, Any] = {
        "date": date,
        "machine": f"{machine['cpu_model']}, {machine['cores']} cores",
        "before_source": _describe(args.before) if args.before else None,
        "after_source": _describe(args.after),
        "stores_per_n": args.stores,
        "stores": {},
        "reindex": {},
        "search": {},
        "disk": None,
    }
    # the command as recorded: checkouts named by their commit, not by this machine's paths
    named = (
        {str(args.before): "<before>", str(args.after): "<after>"}
        if args.before
        else {str(args.after): "<after>"}
    )
    command = "python -m bench.writes " + " ".join(named.get(arg, arg) for arg in argv)
    results["commands"] = []
    if args.update and (out / "writes.json").is_file():  # keep what this run does not measure again
        kept = json.loads((out / "writes.json").read_text(encoding="utf-8"))
        rerun = {"wordllama"} if "stores" in args.parts else set()
        rerun |= {ONNX_MODEL} if "onnx" in args.parts else set()
        results["stores"] = {
            label: [row for row in rows if row["model"] not in rerun]
            for label, rows in (kept.get("stores") or {}).items()
        }
        for key in ("reindex", "search", "disk"):
            if key not in args.parts:
                results[key] = kept.get(key)
        if "search" not in args.parts and kept.get("search_before"):
            results["search_before"] = kept["search_before"]
        readme = out / "README.md"  # a run written before `commands` was recorded names its command there
        results["commands"] = kept.get("commands") or (
            re.findall(r"^Command: `([^`]+)`", readme.read_text(encoding="utf-8"), flags=re.MULTILINE)
            if readme.is_file()
            else []
        )
    results["commands"].append(command.strip())
    sources = ([("before", args.before)] if args.before else []) + [("after", args.after)]

    def save() -> None:  # after every step: kept if a later one fails
        (out / "writes.json").write_text(json.dumps(results, indent=2), encoding="utf-8")

    for part in args.parts:
        if part in ("stores", "onnx"):
            cases = [(n, "wordllama" if part == "stores" else ONNX_MODEL) for n in args.sizes]
            for n, model in cases:
                for label, source in sources:
                    row = _run(
                        source, "stores", {"n": n, "stores": args.stores, "batch": args.batch, "model": model}
                    )
                    results["stores"].setdefault(label, []).append(row)
                    save()
                    print(
                        f"{label} {model} N={n}: P50 {_ms(row['store_seconds'], 50):.1f} ms/store, "
                        f"P95 {_ms(row['store_seconds'], 95):.1f}, refresh P50 {_ms(row['refresh_seconds'], 50):.1f}",
                        flush=True,
                    )
        elif part == "reindex":
            runs: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in sources}
            for _ in range(max(1, args.repeats)):
                for label, source in sources:
                    runs[label].append(_run(source, "reindex", {"files": args.reindex_files, "share": 0.01}))
                    ordered = sorted(runs[label], key=reindex_share)
                    results["reindex"][label] = {**ordered[(len(ordered) - 1) // 2], "runs": runs[label]}
                    save()
                    print(f"reindex {label}: {runs[label][-1]}", flush=True)
        elif part == "search":  # with --before: both sides, one index after the other, back to back
            for dataset, extra in (("scifact", {}), ("synthetic-100k", {"n": max(args.sizes)})):
                for label, source in sources:
                    rows, runs = {}, {}
                    for name, segments in (("one", 1), ("many", SEGMENTS)):
                        row = _run(
                            source,
                            "search",
                            {"segments": segments, "dataset": dataset.split("-")[0], **extra},
                        )
                        runs[name] = row.pop("runs")
                        rows[name] = {
                            "segments": row["segments"],
                            "p50_ms": _ms(row["latencies"], 50),
                            "p95_ms": _ms(row["latencies"], 95),
                        }
                    rows["identical"] = same_runs(runs["one"], runs["many"])
                    if label == "after":
                        results["search"][dataset] = rows
                    else:
                        results.setdefault("search_before", {})[dataset] = rows
                    save()
                    print(f"search {dataset} {label}: {rows}", flush=True)
        elif part == "disk":
            results["disk"] = _run(args.after, "disk", {"writes": args.disk_writes})
            save()
            print(
                f"disk: {results['disk']['written_mb']:.1f} vs {results['disk']['fresh_mb']:.1f} MB",
                flush=True,
            )
    save()
    if results["stores"]:
        _plot(results, out / "writes.png")
    (out / "README.md").write_text(_report(results), encoding="utf-8")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
