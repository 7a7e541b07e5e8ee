"""Query latency, one query at a time: vector, BM25, parallel hybrid and staged hybrid, with and
without a collection filter, split into query encoding and search.

End to end = wall time of `Index.search` (query vector cached) plus the time the index's encoder
takes for that query alone, measured in the same pass (encoding does not depend on the index, so
it is timed once per encoder rather than once per mode); search = `SearchResponse.timings["search_ms"]` (`Index.search_response`). Each
percentile is computed per repeat over the query set, then the median over repeats is reported.
`cpu_*` is the CPU time of the calling thread over the whole `Index.search` call (FAISS and BLAS run
single-threaded in it): unlike wall time it does not count waiting for a core on a shared machine.
Runs in a fresh subprocess per index, so the peak RSS is that of one opened index. Also times
opening the index: with every file hashed, and re-opened with unchanged files only stat-ed.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.common import make_row, median_summary, peak_rss_mb, worker_main

MODE_OPTIONS: dict[str, dict[str, Any]] = {
    "vector": {"mode": "vector"},
    "bm25": {"mode": "bm25"},
    "hybrid": {"mode": "hybrid", "staged": False},
    "staged": {"mode": "hybrid", "staged": True},
}
# None = the index's own query encoder (`Index.encoder`, whatever the engine picks by default)
ENCODERS = {
    "torch": "all-MiniLM-L6-v2",
    "default": None,
    "onnx-int8": "all-MiniLM-L6-v2-onnx-int8",
    "torch-1thread": "all-MiniLM-L6-v2",
}
WARMUP = 5


def mode_options(mode: str) -> dict[str, Any]:
    try:
        return dict(MODE_OPTIONS[mode])
    except KeyError:
        raise ValueError(f"unknown mode {mode!r}; choose from {sorted(MODE_OPTIONS)}") from None


def time_encoding(index, model: str, queries: Sequence[str], repeats: int) -> list[list[float]]:
    """Per repeat, the milliseconds the index's encoder takes for each query alone (a batch of one)."""
    encoder = index.query_models.encoder(index.snapshot(), model)
    for query in queries[:WARMUP]:
        encoder.encode_queries([query])
    runs = []
    for _ in range(repeats):
        samples = []
        for query in queries:
            started = time.perf_counter()
            encoder.encode_queries([query])
            samples.append((time.perf_counter() - started) * 1000)
        runs.append(samples)
    return runs


def time_queries(
    index,
    queries: Sequence[str],
    options: Mapping[str, Any],
    repeats: int,
    encode_runs: list[list[float]] | None,
) -> dict[str, dict[str, float]]:
    """{"e2e"|"search"|"encode": {p50, p95, p99}} over `repeats` passes of the queries.

    The query vectors are cached (encoded once up front), so `Index.search` wall time is search
    plus the call's own overhead (filters, fusion, snippets); end to end adds the encoding time
    measured for the same query in the same pass (`encode_runs`), which is what an uncached call
    spends in `Index.query_vector`."""
    for query in queries[:WARMUP]:
        index.search(query, **options)
    e2e_runs, search_runs, cpu_runs = [], [], []
    for r in range(repeats):
        e2e, search, cpu = [], [], []
        for i, query in enumerate(queries):
            cpu_started = time.thread_time()
            started = time.perf_counter()
            response = index.search_response(query, **options)
            wall = (time.perf_counter() - started) * 1000
            cpu.append((time.thread_time() - cpu_started) * 1000)
            e2e.append(wall + (encode_runs[r][i] if encode_runs else 0.0))
            search.append(response.timings.get("search_ms", 0.0))
        e2e_runs.append(e2e)
        search_runs.append(search)
        cpu_runs.append(cpu)
    return {
        "e2e": median_summary(e2e_runs),
        "search": median_summary(search_runs),
        "cpu": median_summary(cpu_runs),
        "encode": median_summary(encode_runs) if encode_runs else None,
    }


def time_opening(index_dir: Path, repeats: int) -> list[dict[str, Any]]:
    """Rows for opening the index in this process: with every file hashed (no verified record, what a
    first open or a changed file costs) and re-opened (files unchanged since their last clean hash)."""
    from hybridlab.index.format import layout
    from hybridlab.search.engine import open_index

    def seconds_to_open() -> float:
        started = time.perf_counter()
        open_index(index_dir).close()
        return time.perf_counter() - started

    record = index_dir / layout.VERIFIED_FILE
    hash_all = []
    for _ in range(repeats):
        record.unlink(missing_ok=True)
        hash_all.append(seconds_to_open())
    reopen = [seconds_to_open() for _ in range(repeats)]
    manifest = layout.read_manifest(index_dir)
    n_chunks = manifest.counts.chunks
    size_mb = sum(entry.bytes for entry in (manifest.files or {}).values()) / 1e6
    rows = []
    for variant, runs, note in (
        ("cold-start-open-hash-all", hash_all, "open_index, every file hashed (first open)"),
        ("cold-start-open-reopen", reopen, "open_index, unchanged files only stat-ed"),
    ):
        rows.append(
            make_row(
                "hybridlab",
                n_chunks,
                "hybrid",
                False,
                p50_ms=statistics.median(runs) * 1000,
                p99_ms=max(runs) * 1000,
                variant=variant,
                repeats=repeats,
                size_mb=round(size_mb, 1),
                note=note,
            )
        )
        print(
            f"  open {n_chunks:,} chunks ({size_mb:,.0f} MB), {variant}: median {statistics.median(runs):.3f} s",
            file=sys.stderr,
            flush=True,
        )
    return rows


def measure_index(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """Worker: every (encoder, mode, filtered) of one index; rows plus the peak RSS."""
    from hybridlab.encoders.registry import load_encoder
    from hybridlab.search.engine import open_index

    open_rows = time_opening(Path(arguments["index_dir"]), int(arguments["repeats"]))
    index = open_index(arguments["index_dir"])
    queries = list(arguments["queries"])
    n_chunks = index.n_chunks
    model = index.models[0]
    rows = []
    measured_encoding: dict[str, list[list[float]]] = {}
    for encoder in arguments.get("encoders", ["torch"]):
        if encoder == "torch-1thread":  # the default torch encoder, with one intra-op thread
            import torch

            torch.set_num_threads(1)
        if ENCODERS[encoder] is None:
            index.query_models._encoders.pop(model, None)
        else:
            index.query_models._encoders[model] = load_encoder(
                ENCODERS[encoder]
            )  # same MiniLM weights, another runtime
        runtime = getattr(
            getattr(index.query_models.encoder(index.snapshot(), model), "spec", None),
            "name",
            type(index.query_models.encoder(index.snapshot(), model)).__name__,
        )
        known = arguments.get("encode_runs") or {}
        encode_runs = known.get(encoder) or time_encoding(index, model, queries, int(arguments["repeats"]))
        measured_encoding[encoder] = encode_runs
        index.query_models._query_vectors.clear()
        index.query_models.encode_queries(index.snapshot(), model, queries)
        modes = arguments["modes"] if encoder == "torch" else [m for m in arguments["modes"] if m != "bm25"]
        for mode in modes:
            for filtered in [False, True] if encoder == "torch" else [False]:
                options = mode_options(mode)
                if filtered:
                    options["collection"] = arguments["filter_collection"]
                encoded = mode != "bm25"
                stats = time_queries(
                    index, queries, options, int(arguments["repeats"]), encode_runs if encoded else None
                )
                rows.append(
                    make_row(
                        "hybridlab",
                        n_chunks,
                        mode,
                        filtered,
                        p50_ms=stats["e2e"]["p50"],
                        p95_ms=stats["e2e"]["p95"],
                        p99_ms=stats["e2e"]["p99"],
                        search_p50_ms=stats["search"]["p50"],
                        search_p95_ms=stats["search"]["p95"],
                        search_p99_ms=stats["search"]["p99"],
                        cpu_p50_ms=stats["cpu"]["p50"],
                        cpu_p95_ms=stats["cpu"]["p95"],
                        cpu_p99_ms=stats["cpu"]["p99"],
                        encode_p50_ms=stats["encode"]["p50"] if encoded else None,
                        encoder=encoder if encoded else None,
                        dataset=arguments.get("dataset"),
                        queries=len(queries),
                        repeats=int(arguments["repeats"]),
                        **({"note": f"query encoder {runtime}"} if encoded else {}),
                    )
                )
                print(
                    f"  {arguments.get('dataset')} {n_chunks} {encoder} {mode} filtered={filtered}: "
                    f"e2e p95 {stats['e2e']['p95']:.2f} ms, search p95 {stats['search']['p95']:.2f} ms",
                    file=sys.stderr,
                    flush=True,
                )
    rss = peak_rss_mb()
    for row in rows:
        row["peak_rss_mb"] = round(rss, 1)
    rows += open_rows
    return {
        "rows": rows,
        "peak_rss_mb": rss,
        "n_chunks": n_chunks,
        "encode_runs": measured_encoding,
        "dense_index": index.manifest.index_config.dense_index,
    }


def run(
    index_dir,
    queries: Sequence[str],
    *,
    dataset: str,
    filter_collection: str,
    repeats: int,
    modes: Sequence[str] = tuple(MODE_OPTIONS),
    encoders: Sequence[str] = ("torch", "default", "onnx-int8", "torch-1thread"),
    encode_runs: Mapping[str, list[list[float]]] | None = None,
) -> dict[str, Any]:
    """Measure one index in a fresh subprocess; `encode_runs` (from an earlier call's result, same
    queries) reuses its per-query encoding times instead of encoding every query again."""
    from bench.common import run_worker

    return run_worker(
        "bench.latency",
        {
            "index_dir": str(index_dir),
            "queries": list(queries),
            "dataset": dataset,
            "filter_collection": filter_collection,
            "repeats": repeats,
            "modes": list(modes),
            "encoders": list(encoders),
            "encode_runs": dict(encode_runs or {}),
        },
    )


if __name__ == "__main__":
    if not worker_main(sys.argv[1:], measure_index):
        raise SystemExit("usage: python -m bench.latency --worker JSON (run `python -m bench`)")
