"""Approximate dense search: the same synthetic index built with another FAISS factory string
(`IndexConfig.dense_index`, e.g. "HNSW32") against exact "Flat": search latency and recall@10 of
vector search (filtered and not; filters stay pushed down as an id selector, or exact subset
scoring below `dense.EXACT_SUBSET_MAX` allowed chunks)."""
from __future__ import annotations

import statistics
import sys
from collections.abc import Mapping
from typing import Any

from hybridlab.bench.common import make_row, median_summary, peak_rss_mb, worker_main


def recall_at(found: list[str], exact: list[str], k: int = 10) -> float:
    """Share of the exact top-k that the approximate top-k found."""
    truth = exact[:k]
    return len(set(found[:k]) & set(truth)) / len(truth) if truth else 1.0


def measure_ann(arguments: Mapping[str, Any]) -> dict[str, Any]:
    from hybridlab.search import open_index

    exact = open_index(arguments["flat_dir"])
    approx = open_index(arguments["ann_dir"])
    queries = list(arguments["queries"])
    model = exact.models[0]
    exact.encode_queries(model, queries)
    approx.encode_queries(model, queries)
    rows = []
    for mode in ("vector", "hybrid"):
        for filtered in (False, True):
            options: dict[str, Any] = {"mode": mode, "staged": False}
            if filtered:
                options["collection"] = arguments["filter_collection"]
            truth = {q: [r.doc_id for r in exact.search(q, **options)] for q in queries}
            runs, recalls = [], []
            for _ in range(int(arguments["repeats"])):
                samples = []
                for query in queries:
                    found = [r.doc_id for r in approx.search(query, **options)]
                    samples.append(approx.last_timings["search_ms"])
                    recalls.append(recall_at(found, truth[query]))
                runs.append(samples)
            stats = median_summary(runs)
            rows.append(make_row("hybridlab", approx.n_chunks, mode, filtered, search_p50_ms=stats["p50"],
                                 search_p95_ms=stats["p95"], search_p99_ms=stats["p99"], variant="dense-index",
                                 dense_index=arguments["dense_index"], **{"recall@10": statistics.mean(recalls)},
                                 queries=len(queries), repeats=int(arguments["repeats"])))
            print(f"  {arguments['dense_index']} {approx.n_chunks} {mode} filtered={filtered}: search p95 "
                  f"{stats['p95']:.2f} ms, recall@10 {statistics.mean(recalls):.3f}", file=sys.stderr, flush=True)
    rss = peak_rss_mb()
    for row in rows:
        row["peak_rss_mb"] = round(rss, 1)
    return {"rows": rows}


def run(flat_dir, ann_dir, queries, *, dense_index: str, filter_collection: str, repeats: int) -> dict[str, Any]:
    from hybridlab.bench.common import run_worker

    return run_worker("hybridlab.bench.ann", {"flat_dir": str(flat_dir), "ann_dir": str(ann_dir),
                                              "queries": list(queries), "dense_index": dense_index,
                                              "filter_collection": filter_collection, "repeats": repeats})


if __name__ == "__main__":
    if not worker_main(sys.argv[1:], measure_ann):
        raise SystemExit("usage: python -m hybridlab.bench.ann --worker JSON (run `python -m hybridlab.bench`)")
