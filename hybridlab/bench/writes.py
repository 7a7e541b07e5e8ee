"""Write cost before/after segments: `python -m hybridlab.bench.writes [--before SRC]`.

Writes: N synthetic memories indexed with the static `wordllama` encoder (so what shows is the
write path, not encoding), then `--stores` single memories stored one after another through
`MemoryWriter` (durable on return); the median and the max seconds per store, for each N. Search:
SciFact (wordllama) P50/P95 of `Index.search` over its test queries on one segment and on ~10
segments (the corpus written in 10 commits without merges), with a check that both answer alike.

Each measurement runs in a fresh subprocess that imports `hybridlab` from the code under test:
this checkout ("after"), or with `--before SRC` a checkout of the code before (e.g. `git worktree
add --detach /tmp/before main~N`), which must have `apply_changes`, `MemoryWriter` and
`open_index` (the worker uses nothing else). Results go to `reports/bench/<date>-writes/`:
`writes.json`, `README.md` and `writes.png`.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

WORDS = ["panel", "holoviews", "bokeh", "widget", "plot", "layout", "stream", "param", "server", "notebook", "table", "chart", "slider", "data", "frame", "index", "vector", "search", "memory", "tag", "python", "async", "render", "cache", "tunnel", "deploy", "release", "config", "docs", "test", "build", "review", "design", "meeting", "decision", "bug", "fix", "user", "team", "project", "deadline", "api", "schema", "migration"]
TAGS = ("work", "home", "project-a", "project-b", "idea", "todo", "decision", "bug")
SIZES = (1_000, 10_000, 100_000)
STORES = 5
SEGMENTS = 10
PACKAGE_ROOT = Path(__file__).resolve().parents[2]


def synthetic_memory(i: int, rng: random.Random) -> dict[str, Any]:
    """Memory `i` of the synthetic set: 8-40 words, 0-3 tags, a creation day in 2026."""
    day = 1 + i % 300
    return {"id": f"syn-{i:07d}", "content": " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 40))),
            "tags": rng.sample(TAGS, rng.randint(0, 3)),
            "created_at": f"2026-{1 + (day - 1) // 28 % 12:02d}-{1 + (day - 1) % 28:02d}T12:00:00Z"}


def _writes_worker(arguments: dict[str, Any]) -> dict[str, Any]:
    """Index N memories, then store `stores` memories one by one; seconds of each."""
    from hybridlab.config import IndexConfig
    from hybridlab.index.build import apply_changes
    from hybridlab.index.memory import MEMORY_SOURCE, MemoryWriter, make_memory

    n, stores = int(arguments["n"]), int(arguments["stores"])
    rng = random.Random(n)
    documents = [make_memory(m["content"], m["tags"], created_at=m["created_at"], memory_id=m["id"])
                 for m in (synthetic_memory(i, rng) for i in range(n))]
    work = Path(tempfile.mkdtemp(prefix="hybridlab-bench-writes-"))
    index_dir = work / "index"
    started = time.perf_counter()
    apply_changes(index_dir, [(MEMORY_SOURCE, documents, False)], IndexConfig(models=("wordllama",)), progress=False,
                  cache_path=work / "embeddings.duckdb")
    build_seconds = time.perf_counter() - started
    writer = MemoryWriter(index_dir)
    seconds = []
    for i in range(stores):
        memory = synthetic_memory(n + i, rng)
        started = time.perf_counter()
        writer.store(memory["content"], memory["tags"])
        seconds.append(time.perf_counter() - started)
    size = sum(p.stat().st_size for p in index_dir.rglob("*") if p.is_file())
    subprocess.run(["rm", "-rf", str(work)], check=False)
    return {"n": n, "build_seconds": build_seconds, "store_seconds": seconds, "index_mb": size / 1e6}


def _search_worker(arguments: dict[str, Any]) -> dict[str, Any]:
    """SciFact (wordllama): search latency over the test queries, the index in `segments` commits."""
    from hybridlab.config import IndexConfig
    from hybridlab.eval.datasets import load_queries
    from hybridlab.eval.evalsets import get_evalset
    from hybridlab.index.build import apply_changes
    from hybridlab.ingest.sources import IngestReport, read_source
    from hybridlab.search.engine import open_index

    segments = int(arguments["segments"])
    evalset = get_evalset("scifact")
    documents = read_source(evalset.sources[0], IngestReport())
    queries = list(load_queries(evalset.judgements, "test").values())
    work = Path(tempfile.mkdtemp(prefix="hybridlab-bench-search-"))
    index_dir = work / "index"
    config = IndexConfig(models=("wordllama",))
    step = -(-len(documents) // segments)
    extra = {"merge": False} if segments > 1 else {}
    for start in range(0, len(documents), step):
        apply_changes(index_dir, [(documents[0].source, documents[start:start + step], False)], config, progress=False,
                      cache_path=work / "embeddings.duckdb", **extra)
    manifest = json.loads((index_dir / "manifest.json").read_text())
    with open_index(index_dir) as index:
        for query in queries:  # warm-up: query vectors cached, lazy state built
            index.search(query, limit=10)
        latencies = []
        for query in queries:
            started = time.perf_counter()
            index.search(query, limit=10)
            latencies.append(time.perf_counter() - started)
        runs = {query: index.run(query, limit=100) for query in queries}
    subprocess.run(["rm", "-rf", str(work)], check=False)
    return {"segments": len(manifest.get("segments", [manifest["path"]])), "latencies": latencies, "runs": runs}


def _run(source: Path, kind: str, arguments: dict[str, Any], timeout: float = 7200) -> Any:
    """Run a worker of this file with `hybridlab` imported from `source`; its JSON result."""
    from hybridlab.eval.datasets import data_dir

    # both sides read the same datasets (a checkout elsewhere does not find ../shared/datasets)
    env = {**os.environ, "PYTHONPATH": str(source), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "HYBRIDLAB_DATA": os.environ.get("HYBRIDLAB_DATA", str(data_dir()))}
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", kind, json.dumps(arguments)]
    done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=timeout, env=env,
                          cwd=tempfile.gettempdir())
    if done.returncode != 0:
        raise RuntimeError(f"{kind} worker ({source}) failed ({done.returncode}): {done.stderr.strip()[-3000:]}")
    return json.loads([line for line in done.stdout.splitlines() if line.strip()][-1])


def percentile(values: list[float], q: float) -> float:
    import numpy as np

    return float(np.percentile(np.asarray(values, dtype=np.float64), q, method="linear"))


def same_runs(first: dict[str, dict[str, float]], second: dict[str, dict[str, float]], tolerance: float = 1e-6) -> float:
    """Share of queries whose runs have the same documents with scores equal within `tolerance`."""
    same = sum(first[q].keys() == second[q].keys() and all(abs(s - second[q][d]) <= tolerance for d, s in first[q].items())
               for q in first)
    return same / max(len(first), 1)


def _plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(6, 4))
    for label in ("before", "after"):
        rows = results["writes"].get(label) or []
        if rows:
            axis.plot([r["n"] for r in rows], [statistics.median(r["store_seconds"]) for r in rows], marker="o",
                      label=label)
    axis.set_xscale("log")
    axis.set_yscale("log")
    axis.set_xlabel("memories in the index")
    axis.set_ylabel("median seconds per store_memory")
    axis.set_title("One MemoryWriter.store, wordllama encoder")
    axis.grid(True, which="both", alpha=0.3)
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def _report(results: dict[str, Any], command: str) -> str:
    lines = [f"# Write cost before/after segments ({results['date']})", "", f"Command: `{command}`", "",
             f"Machine: {results['machine']}. Before = {results['before_source']}; after = {results['after_source']}.",
             "", "## store_memory (N memories indexed, then single stores through MemoryWriter, wordllama)", "",
             ("| N | before median s/store | after median s/store | after max | speed-up | before build s | "
             "after build s | after index MB |"), "|---|---|---|---|---|---|---|---|"]
    before = {r["n"]: r for r in results["writes"].get("before") or []}
    for row in results["writes"]["after"]:
        old = before.get(row["n"])
        after_median = statistics.median(row["store_seconds"])
        old_median = statistics.median(old["store_seconds"]) if old else None
        old_text = f"{old_median:.3f}" if old else "—"
        speedup = f"{old_median / after_median:.1f}x" if old else "—"
        old_build = f"{old['build_seconds']:.1f}" if old else "—"
        lines.append(f"| {row['n']:,} | {old_text} | {after_median:.3f} | {max(row['store_seconds']):.3f} | "
                     f"{speedup} | {old_build} | {row['build_seconds']:.1f} | {row['index_mb']:.1f} |")
    search = results.get("search") or {}
    if search:
        lines += ["", "## Search latency, SciFact test queries (wordllama, `Index.search`, limit 10, default hybrid)",
                  "", "| variant | segments | P50 ms | P95 ms |", "|---|---|---|---|"]
        for name, row in search.items():
            if name == "identical":
                continue
            lines.append(f"| {name} | {row['segments']} | {row['p50_ms']:.2f} | {row['p95_ms']:.2f} |")
        if "identical" in search:
            lines.append("")
            lines.append(f"Same documents and scores (to 1e-6) on one and on {SEGMENTS} segments: "
                         f"{search['identical']:.1%} of the queries (top 100 per query).")
    lines += ["", ("Each figure is one run of a fresh subprocess on a shared 2-core machine; medians over "
              f"{results['stores']} stores per N."), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--worker"]:
        handler = {"writes": _writes_worker, "search": _search_worker}[argv[1]]
        sys.stdout.write("\n" + json.dumps(handler(json.loads(argv[2]))) + "\n")
        return 0
    parser = argparse.ArgumentParser(prog="python -m hybridlab.bench.writes", description=__doc__.split("\n")[0])
    parser.add_argument("--before", type=Path, help="a checkout of the code before (its folder holding hybridlab/)")
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--stores", type=int, default=STORES)
    parser.add_argument("--no-search", action="store_true", help="skip the SciFact search latency")
    parser.add_argument("--out", type=Path, help="default reports/bench/<date>-writes")
    args = parser.parse_args(argv)
    if args.before is not None and not (args.before / "hybridlab" / "__init__.py").is_file():
        parser.error(f"--before {args.before}: no hybridlab/ package there")
    date = datetime.now(UTC).strftime("%Y-%m-%d")
    out = args.out or PACKAGE_ROOT / "reports" / "bench" / f"{date}-writes"
    out.mkdir(parents=True, exist_ok=True)
    from hybridlab.bench.common import machine_info

    machine = machine_info()
    results: dict[str, Any] = {"date": date, "machine": f"{machine['cpu_model']}, {machine['cores']} cores",
                               "before_source": str(args.before) if args.before else None,
                               "after_source": str(PACKAGE_ROOT), "stores": args.stores, "writes": {}, "search": {}}
    sources = [("before", args.before)] if args.before else []
    sources.append(("after", PACKAGE_ROOT))
    for n in args.sizes:
        for label, source in sources:
            row = _run(source, "writes", {"n": n, "stores": args.stores})
            results["writes"].setdefault(label, []).append(row)
            (out / "writes.json").write_text(json.dumps(results, indent=2), encoding="utf-8")  # kept if a later step fails
            print(f"{label} N={n}: median {statistics.median(row['store_seconds']):.3f} s/store "
                  f"(build {row['build_seconds']:.1f} s)", flush=True)
    if not args.no_search:
        runs = {}
        variants = [("before, 1 generation", args.before, 1)] if args.before else []
        variants += [("after, 1 segment", PACKAGE_ROOT, 1), (f"after, {SEGMENTS} segments", PACKAGE_ROOT, SEGMENTS)]
        for name, source, segments in variants:
            row = _run(source, "search", {"segments": segments})
            runs[name] = row.pop("runs")
            results["search"][name] = {"segments": row["segments"], "p50_ms": 1000 * percentile(row["latencies"], 50),
                                       "p95_ms": 1000 * percentile(row["latencies"], 95)}
            print(f"search {name}: {results['search'][name]}", flush=True)
        results["search"]["identical"] = same_runs(runs["after, 1 segment"], runs[f"after, {SEGMENTS} segments"])
    (out / "writes.json").write_text(json.dumps(results, indent=2), encoding="utf-8")
    _plot(results, out / "writes.png")
    command = "python -m hybridlab.bench.writes " + " ".join(argv)
    (out / "README.md").write_text(_report(results, command.strip()), encoding="utf-8")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
