"""Parity of the Qdrant backend (client's local mode) with the local backend on SciFact.

`python -m hybridlab.bench.qdrant [--dataset scifact] [--split test]` exports the evaluation set's
cached index (same MiniLM vectors: nothing is re-embedded) into an in-memory Qdrant collection,
runs bm25, vector, the default hybrid and parallel hybrid (`staged=False`) on both backends, and
writes `reports/bench/<date>-qdrant/results.json` and `report.md`: nDCG@10 of each, the difference,
and the search latency of both (P50/P95 of `RunResponse.timings["search_ms"]`, query vectors
encoded once up front). The local mode is brute force in pure Python: a correctness path, not a
speed claim. A benchmark, not a test: nothing here asserts.
"""
from __future__ import annotations

import argparse
import json
import platform
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hybridlab.bench.common import percentile
from hybridlab.config import REPO_ROOT
from hybridlab.eval.evaluate import score

TOLERANCE = 0.002
CONDITIONS = {"bm25": {"mode": "bm25"}, "vector": {"mode": "vector"}, "hybrid (default)": {},
              "hybrid parallel (staged=False)": {"staged": False}}


def measure(index, queries: dict[str, str], qrels, options: dict[str, Any]) -> dict[str, Any]:
    """nDCG@10 and search-latency percentiles of one condition on one backend."""
    run, samples = {}, []
    for qid, text in queries.items():
        response = index.run_response(text, limit=100, **options)
        run[qid] = response.run
        samples.append(response.timings["search_ms"])
    return {"ndcg@10": score(qrels, run, ["ndcg@10"])["ndcg@10"], "p50_ms": percentile(samples, 50),
            "p95_ms": percentile(samples, 95)}


def idf_comparison(local, client, index_dir: Path, queries: dict[str, str], qrels) -> dict[str, Any]:
    """BM25 on Qdrant with bm25s's IDF folded into the weights against Qdrant's IDF modifier over
    IDF-free weights: nDCG@10, queries whose top 10 equals bm25s's, largest score difference."""
    import numpy as np

    from hybridlab.index.reader import read_generation
    from hybridlab.search import qdrant
    from hybridlab.search.filters import Filters

    generation = read_generation(index_dir)
    out: dict[str, Any] = {}
    try:
        everything = local.snapshot().store.allowed(Filters())
        for name, modifier in (("folded", False), ("modifier", True)):
            collection = qdrant.export_generation(generation, client, f"idf-{name}", idf_modifier=modifier)
            retriever = qdrant.QdrantSparseRetriever(client, collection, generation)
            run, same_top, worst = {}, 0, 0.0
            for qid, text in queries.items():
                rows, scores = generation.sparse.top(generation.sparse.query_ids(text), 100)
                q_rows, q_scores = retriever.search(text, 100, everything)
                same_top += q_rows[:10].tolist() == rows[:10].tolist()
                common = min(len(rows), len(q_rows))
                if common and q_rows[:common].tolist() == rows[:common].tolist():
                    worst = max(worst, float(np.max(np.abs(q_scores[:common] - scores[:common]))))
                best: dict[str, float] = {}
                for row, value in zip(q_rows.tolist(), q_scores.tolist()):
                    best.setdefault(generation.doc_ids[row], value)
                run[qid] = best
            out[name] = {"ndcg@10": score(qrels, run, ["ndcg@10"])["ndcg@10"], "same_top10": same_top,
                         "max_abs_score_diff": worst}
            client.delete_collection(collection)
    finally:
        generation.store.close()
    return out


def main(argv: list[str] | None = None) -> int:
    from hybridlab.eval.evalsets import ensure_index, get_evalset
    from hybridlab.index.reader import read_generation
    from hybridlab.search import qdrant
    from hybridlab.search.engine import Index, open_index

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="scifact")
    parser.add_argument("--split", default="test")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    evalset = get_evalset(args.dataset)
    dataset = evalset.dataset(args.split)
    index_dir = ensure_index(evalset, progress=False)
    queries = {qid: dataset.queries[qid] for qid in dataset.qrels if qid in dataset.queries}
    client = qdrant.connect()
    generation = read_generation(index_dir)
    started = datetime.now(UTC)
    try:
        qdrant.export_generation(generation, client, "parity")
    finally:
        generation.store.close()
    export_s = (datetime.now(UTC) - started).total_seconds()
    local = open_index(index_dir)
    remote = Index(index_dir, backend=qdrant.qdrant_backend(client, "parity"))
    model = local.choose_model(None, None)
    local.encode_queries(model, list(queries.values()))
    remote.encode_queries(model, list(queries.values()))
    rows = []
    for name, options in CONDITIONS.items():
        ours, theirs = measure(local, queries, dataset.qrels, options), measure(remote, queries, dataset.qrels, options)
        delta = theirs["ndcg@10"] - ours["ndcg@10"]
        rows.append({"condition": name, "options": options, "local": ours, "qdrant": theirs, "delta": delta,
                     "within_tolerance": abs(delta) <= TOLERANCE})
    idf = idf_comparison(local, client, index_dir, queries, dataset.qrels)
    local.close()
    remote.close()
    client.close()
    results = {"dataset": args.dataset, "split": args.split, "queries": len(queries), "chunks": local.n_chunks,
               "model": model, "index": index_dir.name, "export_seconds": export_s, "tolerance": TOLERANCE,
               "machine": platform.machine(), "python": platform.python_version(),
               "date": started.date().isoformat(), "rows": rows, "idf": idf}
    out = Path(args.out) if args.out else REPO_ROOT / "reports" / "bench" / f"{started.date().isoformat()}-qdrant"
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (out / "report.md").write_text(report(results))
    print(report(results))
    return 0


def report(results: dict[str, Any]) -> str:
    lines = [
        (f"# Qdrant backend parity — {results['dataset']} {results['split']} ({results['queries']} queries, "
        f"{results['chunks']} chunks, {results['model']})"), "",
        ("Command: `python -m hybridlab.bench.qdrant`. Qdrant = qdrant-client's local mode (in memory, pure "
        "Python, brute force): a correctness path, not a speed claim. Latency = search ms per query "
        "(query vectors encoded up front), P50/P95 (numpy linear)."), "",
        f"Export of the local generation into the collection: {results['export_seconds']:.1f} s.", "",
        "| condition | nDCG@10 local | nDCG@10 Qdrant | Δ | within ±0.002 | local P50/P95 ms | Qdrant P50/P95 ms |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in results["rows"]:
        ours, theirs = row["local"], row["qdrant"]
        lines.append(f"| {row['condition']} | {ours['ndcg@10']:.4f} | {theirs['ndcg@10']:.4f} | {row['delta']:+.4f} | "
                     f"{'yes' if row['within_tolerance'] else 'NO'} | {ours['p50_ms']:.1f} / {ours['p95_ms']:.1f} | "
                     f"{theirs['p50_ms']:.1f} / {theirs['p95_ms']:.1f} |")
    idf = results.get("idf") or {}
    if idf:
        lines += ["", "BM25 weights on Qdrant (chunk-level BM25 run, best chunk per document):", "",
                  "| sparse vectors | nDCG@10 | queries with bm25s's top 10 | max |score − bm25s| (same ranking) |",
                  "|---|---|---|---|"]
        labels = {"folded": "bm25s weights, IDF folded in (used)", "modifier": "IDF-free weights + Qdrant IDF modifier"}
        for name, row in idf.items():
            lines.append(f"| {labels[name]} | {row['ndcg@10']:.4f} | {row['same_top10']} / {results['queries']} | "
                         f"{row['max_abs_score_diff']:.2e} |")
    lines += ["", ("Both backends run every step of the same pipeline (fusion, tag signal, recency, staged search); "
                   "only the retrievers differ: Qdrant answers the BM25 (sparse vector) and dense (named vector) "
                   "queries with the filters pushed into them, and staged search walks the index's corpus graph "
                   "scoring with vectors fetched from Qdrant. Latency here is mostly the local mode's Python "
                   "brute force and per-call overhead."), ""]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
