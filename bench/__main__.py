"""`python -m bench [--quick]`: run the benchmark parts and write reports/bench/<date>/."""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from bench.common import find_rows, machine_info, validate_rows
from hybridlab.config import apply_offline_environment

PARTS = ("latency", "staged", "indexing", "coldstart", "alternatives", "ann", "graph")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="10k synthetic chunks + SciFact, fewer queries and repeats (a few minutes)",
    )
    parser.add_argument(
        "--sizes",
        help="synthetic index sizes, comma-separated (default 10000 quick, "
        "10000,100000 full; 1000000 must be asked for)",
    )
    parser.add_argument("--queries", type=int, help="latency queries per pass (default 60 quick, 100 full)")
    parser.add_argument("--repeats", type=int, help="passes over the queries (default 2 quick, 3 full)")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated subset of {list(PARTS)}")
    parser.add_argument(
        "--dense-index", default="HNSW32", help="approximate FAISS factory string for the ann part"
    )
    parser.add_argument(
        "--index-docs",
        type=int,
        help="SciFact documents embedded by the torch indexing run (default 150 quick, 300 full)",
    )
    parser.add_argument("--out", help="output folder (default reports/bench/<date>[-quick])")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    apply_offline_environment()
    from bench import alternatives, ann, coldstart, corpus, graph, indexing, latency, report, staged
    from hybridlab.eval.datasets import REPO_ROOT
    from hybridlab.eval.evalsets import get_evalset

    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = set(parts) - set(PARTS)
    if unknown:
        raise SystemExit(f"unknown parts {sorted(unknown)}; choose from {list(PARTS)}")
    quick = args.quick
    sizes = (
        [int(s) for s in args.sizes.split(",")] if args.sizes else ([10_000] if quick else [10_000, 100_000])
    )
    n_queries = args.queries or (60 if quick else 100)
    repeats = args.repeats or (2 if quick else 3)
    started = time.perf_counter()
    date = datetime.now(UTC).strftime("%Y-%m-%d")
    out = (
        Path(args.out) if args.out else REPO_ROOT / "reports" / "bench" / (date + ("-quick" if quick else ""))
    )
    machine = machine_info()
    meta = {
        "date": date,
        "quick": quick,
        "command": "python -m bench " + shlex.join(sys.argv[1:] if argv is None else argv),
        "sizes": sizes,
        "queries": n_queries,
        "repeats": repeats,
        "parts": parts,
        "load_start": list(os.getloadavg()),
        "indexes": [],
        "build_seconds": {},
    }
    rows: list[dict] = []
    notes: list[str] = []

    def say(message: str) -> None:
        print(f"[{time.perf_counter() - started:7.1f} s] {message}", file=sys.stderr, flush=True)

    evalset = get_evalset("scifact")
    test = evalset.dataset("test")
    judged = dict(sorted(test.queries.items()))
    latency_queries = list(judged.values())[:n_queries]
    say("preparing benchmark indexes (SciFact vectors from the cached evaluation index)")
    source = corpus.scifact_source()
    scifact_dir, seconds = corpus.ensure_bench_index("scifact", source=source)
    meta["build_seconds"]["scifact"] = seconds
    meta["indexes"].append(
        f"SciFact: the BEIR corpus ({len(source.documents):,} documents, one chunk each) with the "
        "cached evaluation index's MiniLM vectors, built by `apply_changes`; filter = collection "
        f"`{corpus.SCIFACT_FILTER}` (about half the documents)"
    )
    synthetic = {}
    for size in sizes:
        say(f"synthetic index of {size:,} chunks")
        synthetic[size], seconds = corpus.ensure_bench_index("synthetic", size, source=source)
        meta["build_seconds"][f"synthetic-{size}"] = seconds
    if sizes:
        meta["indexes"].append(
            "synthetic "
            + ", ".join(f"{s:,}" for s in sizes)
            + " chunks: text drawn from SciFact's vocabulary (a "
            "random SciFact abstract with half its words replaced by unigram draws), the vector of that abstract plus "
            "Gaussian noise, built through `apply_changes` with a pre-filled embeddings cache (nothing embedded); "
            f"four collections, filter = `{corpus.SYNTHETIC_FILTER}` (a quarter)"
        )
    if 1_000_000 not in sizes:
        notes.append(
            "1M chunks not run here: its build took 20 min and ≈8 GB RSS on this machine (2026-11-23, "
            "no corpus graph); run "
            "`python -m bench --sizes 1000000 --parts latency` to add it."
        )
    del source

    if "latency" in parts:
        say("latency: SciFact")
        result = latency.run(
            scifact_dir,
            latency_queries,
            dataset="scifact",
            filter_collection=corpus.SCIFACT_FILTER,
            repeats=repeats,
        )
        rows += result["rows"]
        encode_runs = result["encode_runs"]
        for size, index_dir in synthetic.items():
            say(f"latency: {size:,} chunks")
            rows += latency.run(
                index_dir,
                latency_queries,
                dataset="synthetic",
                filter_collection=corpus.SYNTHETIC_FILTER,
                repeats=repeats,
                encode_runs=encode_runs,
            )["rows"]
        notes.append(
            "Query encoding is timed once per encoder (on the SciFact run, same queries) and added per "
            "query to each index's search wall time: encoding does not depend on the index."
        )
    if "staged" in parts:
        say("staged: SciFact")
        rows += staged.run(
            scifact_dir,
            latency_queries,
            dataset="scifact",
            repeats=repeats,
            qrels={q: dict(d) for q, d in test.qrels.items()},
            judged_queries=judged,
        )["rows"]
        big = max((s for s in sizes if s <= 100_000), default=None)
        if big:
            say(f"staged: {big:,} chunks")
            rows += staged.run(synthetic[big], latency_queries, dataset="synthetic", repeats=repeats)["rows"]
    if "ann" in parts and sizes:
        size = max(s for s in sizes if s <= 100_000) if quick or 1_000_000 not in sizes else max(sizes)
        say(f"ann: {args.dense_index} at {size:,} chunks")
        src = corpus.scifact_source()
        ann_dir, seconds = corpus.ensure_bench_index(
            "synthetic", size, dense_index=args.dense_index, source=src
        )
        meta["build_seconds"][f"synthetic-{size}-{args.dense_index}"] = seconds
        rows += ann.run(
            synthetic[size],
            ann_dir,
            latency_queries,
            dense_index=args.dense_index,
            filter_collection=corpus.SYNTHETIC_FILTER,
            repeats=repeats,
        )["rows"]
    if "graph" in parts and sizes:
        size = max((s for s in sizes if s <= 100_000), default=min(sizes))
        say(f"graph: full build and updates at {size:,} chunks")
        rows += graph.run(synthetic[size])["rows"]
    if "alternatives" in parts:
        say("alternatives on SciFact")
        encode = [
            r
            for r in find_rows(
                rows,
                system="hybridlab",
                n_chunks=report.SCIFACT_CHUNKS,
                mode="vector",
                filtered=False,
                encoder="torch",
            )
            if r.get("variant") is None
        ]
        with tempfile.TemporaryDirectory(prefix="hybridlab-bench-") as shared:
            result = alternatives.run(
                scifact_dir,
                Path(shared),
                latency_queries=latency_queries,
                judged=judged,
                qrels=test.qrels,
                filter_collection=corpus.SCIFACT_FILTER,
                repeats=repeats,
                encode_p50_ms=encode[0]["encode_p50_ms"] if encode else None,
                modes=list(latency.MODE_OPTIONS),
            )
        rows += result["rows"]
        notes += result["notes"]
        for row in rows:
            if (
                row["system"] == "hybridlab"
                and row["n_chunks"] == report.SCIFACT_CHUNKS
                and row.get("variant") is None
                and row["mode"] in latency.MODE_OPTIONS
            ):
                row["ndcg@10"] = round(result["quality"][f"{row['mode']}/{row['filtered']}"], 4)
    if "indexing" in parts:
        docs = args.index_docs or (150 if quick else 300)
        for model, n in (("all-MiniLM-L6-v2", docs), ("wordllama", 5183)):
            say(f"indexing: {model} on {n} SciFact documents")
            try:
                rows += indexing.run(model, n)["rows"]
            except Exception as error:  # noqa: BLE001 -- a failed part is reported, the rest still runs
                notes.append(f"indexing with {model} failed: {str(error)[-300:]}")
    if "coldstart" in parts:
        say("cold start")
        result = coldstart.run(scifact_dir, latency_queries[0], 3 if quick else 5)
        rows += result["rows"]
        notes += result["notes"]

    problems = validate_rows(rows)
    if problems:
        notes.append(f"row schema problems: {problems[:5]}")
    meta["seconds"] = time.perf_counter() - started
    meta["load_end"] = list(os.getloadavg())
    path = report.write(out, rows, machine, meta, notes)
    say(f"wrote {path} ({len(rows)} rows) in {meta['seconds'] / 60:.1f} min")
    print(json.dumps({"report": str(path), "rows": len(rows)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
