"""Query latency, one query at a time: vector, BM25, parallel hybrid and staged hybrid, with and
without a collection filter, split into query encoding and search.

End to end = wall time of `Index.search` with the query-vector cache emptied before every call
(so each query is encoded); `encode_ms` / `search_ms` come from `Index.last_timings`. Each
percentile is computed per repeat over the query set, then the median over repeats is reported.
Runs in a fresh subprocess per index, so the peak RSS is that of one opened index.
"""
from __future__ import annotations

import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from hybridlab.bench.common import make_row, median_summary, peak_rss_mb, worker_main

MODE_OPTIONS: dict[str, dict[str, Any]] = {
    "vector": {"mode": "vector"},
    "bm25": {"mode": "bm25"},
    "hybrid": {"mode": "hybrid", "staged": False},
    "staged": {"mode": "hybrid", "staged": True},
}
ENCODERS = {"torch": "all-MiniLM-L6-v2", "onnx-int8": "all-MiniLM-L6-v2-onnx-int8",
            "torch-1thread": "all-MiniLM-L6-v2"}
WARMUP = 5


def mode_options(mode: str) -> dict[str, Any]:
    try:
        return dict(MODE_OPTIONS[mode])
    except KeyError:
        raise ValueError(f"unknown mode {mode!r}; choose from {sorted(MODE_OPTIONS)}") from None


def time_queries(index, queries: Sequence[str], options: Mapping[str, Any], repeats: int) -> dict[str, dict[str, float]]:
    """{"e2e"|"search"|"encode": {p50, p95, p99}} over `repeats` passes of the queries."""
    for query in queries[:WARMUP]:
        index.search(query, **options)
    e2e_runs, search_runs, encode_runs = [], [], []
    for _ in range(repeats):
        e2e, search, encode = [], [], []
        for query in queries:
            index._query_vectors.clear()  # every query is encoded, as a fresh one would be
            started = time.perf_counter()
            index.search(query, **options)
            e2e.append((time.perf_counter() - started) * 1000)
            search.append(index.last_timings.get("search_ms", 0.0))
            encode.append(index.last_timings.get("encode_ms", 0.0))
        e2e_runs.append(e2e)
        search_runs.append(search)
        encode_runs.append(encode)
    return {"e2e": median_summary(e2e_runs), "search": median_summary(search_runs),
            "encode": median_summary(encode_runs)}


def measure_index(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """Worker: every (encoder, mode, filtered) of one index; rows plus the peak RSS."""
    from hybridlab.models import load_encoder
    from hybridlab.search import open_index

    index = open_index(arguments["index_dir"])
    queries = list(arguments["queries"])
    n_chunks = index.n_chunks
    model = index.models[0]
    rows = []
    for encoder in arguments.get("encoders", ["torch"]):
        if encoder == "torch-1thread":  # the default torch encoder, with one intra-op thread
            import torch

            torch.set_num_threads(1)
        index._encoders[model] = load_encoder(ENCODERS[encoder])  # same MiniLM weights, another runtime
        modes = arguments["modes"] if encoder == "torch" else [m for m in arguments["modes"] if m != "bm25"]
        for mode in modes:
            for filtered in ([False, True] if encoder == "torch" else [False]):
                options = mode_options(mode)
                if filtered:
                    options["collection"] = arguments["filter_collection"]
                stats = time_queries(index, queries, options, int(arguments["repeats"]))
                encoded = mode != "bm25"
                rows.append(make_row(
                    "hybridlab", n_chunks, mode, filtered,
                    p50_ms=stats["e2e"]["p50"], p95_ms=stats["e2e"]["p95"], p99_ms=stats["e2e"]["p99"],
                    search_p50_ms=stats["search"]["p50"], search_p95_ms=stats["search"]["p95"],
                    search_p99_ms=stats["search"]["p99"],
                    encode_p50_ms=stats["encode"]["p50"] if encoded else None,
                    encoder=encoder if encoded else None, dataset=arguments.get("dataset"),
                    queries=len(queries), repeats=int(arguments["repeats"]),
                ))
                print(f"  {arguments.get('dataset')} {n_chunks} {encoder} {mode} filtered={filtered}: "
                      f"e2e p95 {stats['e2e']['p95']:.2f} ms, search p95 {stats['search']['p95']:.2f} ms",
                      file=sys.stderr, flush=True)
    rss = peak_rss_mb()
    for row in rows:
        row["peak_rss_mb"] = round(rss, 1)
    return {"rows": rows, "peak_rss_mb": rss, "n_chunks": n_chunks,
            "dense_index": index.manifest["config"].get("dense_index", "Flat")}


def run(index_dir, queries: Sequence[str], *, dataset: str, filter_collection: str, repeats: int,
        modes: Sequence[str] = tuple(MODE_OPTIONS), encoders: Sequence[str] = ("torch", "onnx-int8", "torch-1thread")) -> dict[str, Any]:
    """Measure one index in a fresh subprocess."""
    from hybridlab.bench.common import run_worker

    return run_worker("hybridlab.bench.latency", {
        "index_dir": str(index_dir), "queries": list(queries), "dataset": dataset,
        "filter_collection": filter_collection, "repeats": repeats, "modes": list(modes), "encoders": list(encoders),
    })


if __name__ == "__main__":
    if not worker_main(sys.argv[1:], measure_index):
        raise SystemExit("usage: python -m hybridlab.bench.latency --worker JSON (run `python -m hybridlab.bench`)")
