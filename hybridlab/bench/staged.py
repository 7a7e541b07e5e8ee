"""Staged hybrid search: BM25 candidates re-scored by exact dense similarity, versus parallel hybrid.

For candidates in {50, 100, 200, 500}: search latency (query vectors pre-encoded, so encoding is
excluded), top-10 overlap with parallel hybrid on the same query, and, where judgements exist,
nDCG@10 beside parallel hybrid's.
"""
from __future__ import annotations

import statistics
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from hybridlab.bench.common import make_row, median_summary, overlap_at, peak_rss_mb, worker_main

CANDIDATES = (50, 100, 200, 500)


def measure_staged(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """Worker: one row per candidates value plus the parallel-hybrid reference row."""
    from hybridlab.search.engine import open_index

    index = open_index(arguments["index_dir"])
    queries = list(arguments["queries"])
    repeats = int(arguments["repeats"])
    model = index.models[0]
    index.encode_queries(model, queries)
    parallel = {q: [r.doc_id for r in index.search(q, mode="hybrid", staged=False)] for q in queries}
    qrels = arguments.get("qrels")
    ndcg = {}
    if qrels:
        from hybridlab.eval.evaluate import score

        judged = arguments["judged_queries"]
        index.encode_queries(model, list(judged.values()))

        def ndcg_of(**options: Any) -> float:
            run = {qid: index.run(text, **options) for qid, text in judged.items()}
            return score(qrels, run, ["ndcg@10"])["ndcg@10"]

        ndcg["parallel"] = ndcg_of(mode="hybrid", staged=False)
    rows = []
    for candidates in [None, *arguments.get("candidates", CANDIDATES)]:
        options = {"mode": "hybrid", "staged": candidates is not None}
        if candidates is not None:
            options["candidates"] = candidates
        runs = []
        overlaps = []
        for _ in range(repeats):
            samples = []
            for query in queries:
                results = index.search(query, **options)
                samples.append(index.last_timings["search_ms"])
                overlaps.append(overlap_at([r.doc_id for r in results], parallel[query], 10))
            runs.append(samples)
        stats = median_summary(runs)
        extra = {}
        if qrels:
            extra["ndcg@10"] = ndcg["parallel"] if candidates is None else ndcg_of(**options)
        rows.append(make_row(
            "hybridlab", index.n_chunks, "hybrid" if candidates is None else "staged", False,
            search_p50_ms=stats["p50"], search_p95_ms=stats["p95"], search_p99_ms=stats["p99"],
            candidates=candidates, **{"overlap@10": statistics.mean(overlaps)}, dataset=arguments.get("dataset"),
            variant="staged-sweep", queries=len(queries), repeats=repeats, **extra,
        ))
        print(f"  staged {arguments.get('dataset')} candidates={candidates}: search p95 {stats['p95']:.2f} ms, "
              f"overlap {statistics.mean(overlaps):.3f} {extra}", file=sys.stderr, flush=True)
    rss = peak_rss_mb()
    for row in rows:
        row["peak_rss_mb"] = round(rss, 1)
    return {"rows": rows}


def run(index_dir, queries: Sequence[str], *, dataset: str, repeats: int, qrels: dict | None = None,
        judged_queries: dict | None = None, candidates: Sequence[int] = CANDIDATES) -> dict[str, Any]:
    from hybridlab.bench.common import run_worker

    return run_worker("hybridlab.bench.staged", {
        "index_dir": str(index_dir), "queries": list(queries), "dataset": dataset, "repeats": repeats,
        "qrels": qrels, "judged_queries": judged_queries, "candidates": list(candidates),
    })


if __name__ == "__main__":
    if not worker_main(sys.argv[1:], measure_staged):
        raise SystemExit("usage: python -m hybridlab.bench.staged --worker JSON (run `python -m hybridlab.bench`)")
