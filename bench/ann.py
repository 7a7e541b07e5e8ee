"""Approximate dense search: the same synthetic index built with another FAISS factory string
(`IndexConfig.dense_index`, e.g. "HNSW32") against exact "Flat", in the same process: search
latency (wall and CPU) and recall@10 against Flat, for vector and parallel hybrid search.
Unfiltered searches sweep HNSW's efSearch (`EF_SEARCH`; the index config's `hnsw_ef_search` is the
default); filtered searches are exact on either index (`dense.scan_plan`), so their recall is 1."""

from __future__ import annotations

import statistics
import sys
from collections.abc import Mapping
from typing import Any

from bench.common import make_row, median_summary, peak_rss_mb, worker_main

EF_SEARCH = (16, 64, 128, 256)


def recall_at(found: list[str], exact: list[str], k: int = 10) -> float:
    """Share of the exact top-k that the approximate top-k found."""
    truth = exact[:k]
    return len(set(found[:k]) & set(truth)) / len(truth) if truth else 1.0


def _timed(index, queries: list[str], options: Mapping[str, Any], repeats: int) -> tuple[dict, dict, dict]:
    """Per query, the doc ids found; and the median-over-passes search and CPU percentiles."""
    import time

    for query in queries[:5]:
        index.search(query, **options)
    found: dict[str, list[str]] = {}
    search_runs, cpu_runs = [], []
    for _ in range(repeats):
        search, cpu = [], []
        for query in queries:
            started = time.thread_time()
            response = index.search_response(query, **options)
            found[query] = [r.doc_id for r in response.results]
            cpu.append((time.thread_time() - started) * 1000)
            search.append(response.timings["search_ms"])
        search_runs.append(search)
        cpu_runs.append(cpu)
    return found, median_summary(search_runs), median_summary(cpu_runs)


def measure_ann(arguments: Mapping[str, Any]) -> dict[str, Any]:
    from hybridlab.search.engine import open_index

    exact = open_index(arguments["flat_dir"])
    approx = open_index(arguments["ann_dir"])
    queries = list(arguments["queries"])
    repeats = int(arguments["repeats"])
    model = exact.models[0]
    exact.query_models.encode_queries(exact.snapshot(), model, queries)
    approx.query_models.encode_queries(approx.snapshot(), model, queries)
    dense = approx.dense[model]
    default_ef = dense.ef_search
    rows = []

    def add(index_name: str, mode: str, filtered: bool, ef: int | None, stats, cpu, recall: float) -> None:
        rows.append(
            make_row(
                "hybridlab",
                approx.n_chunks,
                mode,
                filtered,
                search_p50_ms=stats["p50"],
                search_p95_ms=stats["p95"],
                search_p99_ms=stats["p99"],
                cpu_p50_ms=cpu["p50"],
                cpu_p95_ms=cpu["p95"],
                variant="dense-index",
                dense_index=index_name,
                ef_search=ef,
                **{"recall@10": recall},
                queries=len(queries),
                repeats=repeats,
            )
        )
        print(
            f"  {index_name} ef={ef} {approx.n_chunks} {mode} filtered={filtered}: search p50 {stats['p50']:.2f} "
            f"p95 {stats['p95']:.2f} ms (cpu p50 {cpu['p50']:.2f}), recall@10 {recall:.3f}",
            file=sys.stderr,
            flush=True,
        )

    for mode in ("vector", "hybrid"):
        for filtered in (False, True):
            options: dict[str, Any] = {"mode": mode, "staged": False}
            if filtered:
                options["collection"] = arguments["filter_collection"]
            truth, stats, cpu = _timed(exact, queries, options, repeats)
            add("Flat", mode, filtered, None, stats, cpu, 1.0)
            for ef in EF_SEARCH if not filtered and default_ef is not None else (default_ef,):
                if ef is not None:
                    dense.set_ef_search(ef)
                found, stats, cpu = _timed(approx, queries, options, repeats)
                recall = statistics.mean(recall_at(found[q], truth[q]) for q in queries)
                add(arguments["dense_index"], mode, filtered, ef, stats, cpu, recall)
            if default_ef is not None:
                dense.set_ef_search(default_ef)
    rss = peak_rss_mb()
    for row in rows:
        row["peak_rss_mb"] = round(rss, 1)
    return {"rows": rows, "default_ef_search": default_ef}


def run(
    flat_dir, ann_dir, queries, *, dense_index: str, filter_collection: str, repeats: int
) -> dict[str, Any]:
    from bench.common import run_worker

    return run_worker(
        "bench.ann",
        {
            "flat_dir": str(flat_dir),
            "ann_dir": str(ann_dir),
            "queries": list(queries),
            "dense_index": dense_index,
            "filter_collection": filter_collection,
            "repeats": repeats,
        },
    )


if __name__ == "__main__":
    if not worker_main(sys.argv[1:], measure_ann):
        raise SystemExit("usage: python -m bench.ann --worker JSON (run `python -m bench`)")
