"""Parity of the Qdrant backend (client's local mode) with the local backend on SciFact.

`python -m bench.qdrant [--dataset scifact] [--split test]` exports the evaluation set's
cached index (same MiniLM vectors: nothing is re-embedded) into an in-memory Qdrant collection,
runs bm25, vector, the default hybrid and parallel hybrid (`staged=False`) on both backends, and
writes `reports/bench/<date>-qdrant/results.json` and `report.md`: nDCG@10 of each, the difference,
and the search latency of both (P50/P95 of `RunResponse.timings["search_ms"]`, query vectors
encoded once up front). The local mode is brute force in pure Python: a correctness path, not a
speed claim. A benchmark, not a test: nothing here asserts.

`python -m bench.qdrant --upserts` measures BM25 under incremental writes instead
(:func:`upsert_drift`): generation A = the corpus less a batch, exported; generation B = the whole
corpus with some documents changed and some removed, mirrored by an incremental sync (changed and new
documents upserted, removed ones deleted); BM25 on Qdrant is compared with bm25s over each generation
(same top 10, top-10 overlap, nDCG@10) for folded IDF and Qdrant's IDF modifier, without and with the
re-weighting of the unchanged points, on the client's local mode and on Qdrant Edge (its Rust engine)
when `qdrant-edge-py` is installed. Writes `reports/bench/<date>-qdrant-upserts/`.
"""

from __future__ import annotations

import argparse
import json
import platform
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.common import percentile
from hybridlab.config import REPO_ROOT
from hybridlab.eval.evaluate import score

TOLERANCE = 0.002
ENGINE_SLUGS = {"local mode": "local", "Qdrant Edge": "edge"}
CONDITIONS = {
    "bm25": {"mode": "bm25"},
    "vector": {"mode": "vector"},
    "hybrid (default)": {},
    "hybrid parallel (staged=False)": {"staged": False},
}


def measure(index, queries: dict[str, str], qrels, options: dict[str, Any]) -> dict[str, Any]:
    """nDCG@10 and search-latency percentiles of one condition on one backend."""
    run, samples = {}, []
    for qid, text in queries.items():
        response = index.run_response(text, limit=100, **options)
        run[qid] = response.run
        samples.append(response.timings["search_ms"])
    return {
        "ndcg@10": score(qrels, run, ["ndcg@10"])["ndcg@10"],
        "p50_ms": percentile(samples, 50),
        "p95_ms": percentile(samples, 95),
    }


def idf_comparison(local, client, index_dir: Path, queries: dict[str, str], qrels) -> dict[str, Any]:
    """BM25 on Qdrant with bm25s's IDF folded into the weights against Qdrant's IDF modifier over
    IDF-free weights: nDCG@10, queries whose top 10 equals bm25s's, largest score difference."""
    import numpy as np

    from hybridlab.index.admin import qdrant as qdrant_mirror
    from hybridlab.index.reader import read_generation
    from hybridlab.search import qdrant
    from hybridlab.search.filters import Filters

    generation = read_generation(index_dir)
    out: dict[str, Any] = {}
    try:
        everything = local.snapshot().store.allowed(Filters())
        for name, modifier in (("folded", False), ("modifier", True)):
            collection = qdrant_mirror.export_generation(
                generation, client, f"idf-{name}", idf_modifier=modifier
            )
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
            out[name] = {
                "ndcg@10": score(qrels, run, ["ndcg@10"])["ndcg@10"],
                "same_top10": same_top,
                "max_abs_score_diff": worst,
            }
            client.delete_collection(collection)
    finally:
        generation.store.close()
    return out


def bm25_agreement(generation, client, collection: str, queries: dict[str, str], qrels) -> dict[str, Any]:
    """BM25 served by the collection against bm25s over `generation`: queries with the same top 10
    (chunk rows, in order), mean top-10 overlap of the document runs, nDCG@10 of both, and the largest
    score difference of a chunk both top-100 lists hold."""
    from bench.common import top_overlap
    from hybridlab.search import qdrant
    from hybridlab.search.filters import Filters
    from hybridlab.search.retrievers import RowFilter

    retriever = qdrant.QdrantSparseRetriever(client, collection, generation)
    everything = RowFilter(Filters(), None, generation.n_chunks)
    ours, theirs, same_top, overlaps, worst = {}, {}, 0, [], 0.0
    for qid, text in queries.items():
        rows, scores = generation.sparse.top(generation.sparse.query_ids(text), 100)
        q_rows, q_scores = retriever.search(text, 100, everything)
        same_top += q_rows[:10].tolist() == rows[:10].tolist()
        theirs_of = dict(zip(q_rows.tolist(), q_scores.tolist()))
        diffs = [
            abs(theirs_of[row] - value)
            for row, value in zip(rows.tolist(), scores.tolist())
            if row in theirs_of
        ]
        worst = max([worst, *diffs])
        for run, (r, v) in ((ours, (rows, scores)), (theirs, (q_rows, q_scores))):
            best: dict[str, float] = {}
            for row, value in zip(r.tolist(), v.tolist()):
                best.setdefault(generation.doc_ids[row], value)
            run[qid] = best
        overlaps.append(top_overlap(ours[qid], theirs[qid], 10))
    return {
        "same_top10": same_top,
        "queries": len(queries),
        "overlap@10": sum(overlaps) / len(overlaps),
        "ndcg@10_bm25s": score(qrels, ours, ["ndcg@10"])["ndcg@10"],
        "ndcg@10_qdrant": score(qrels, theirs, ["ndcg@10"])["ndcg@10"],
        "max_abs_score_diff": worst,
    }


def _write_corpus(folder: Path, documents: list[dict[str, Any]]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "corpus.jsonl").write_text(
        "".join(json.dumps(doc) + "\n" for doc in documents), encoding="utf-8"
    )


def upsert_drift(
    dataset_name: str = "scifact",
    split: str = "test",
    *,
    batch: float = 0.1,
    removed: float = 0.01,
    changed: float = 0.005,
    seed: int = 0,
) -> dict[str, Any]:
    """The experiment of `--upserts` (see the module docstring); its results."""
    import gzip
    import random
    import shutil
    import tempfile
    import time

    from hybridlab.eval.evalsets import cache_root, ensure_index, get_evalset
    from hybridlab.index.admin import qdrant as qdrant_mirror
    from hybridlab.index.format.layout import read_manifest
    from hybridlab.index.reader import read_generation
    from hybridlab.index.write.build import index_paths

    evalset = get_evalset(dataset_name)
    dataset = evalset.dataset(split)
    queries = {qid: dataset.queries[qid] for qid in dataset.qrels if qid in dataset.queries}
    base = ensure_index(evalset, progress=False)  # its manifest's config and its cached vectors
    config = read_manifest(base).index_config
    corpus_path = next(
        p
        for p in (evalset.sources[0] / "corpus.jsonl.gz", evalset.sources[0] / "corpus.jsonl")
        if p.is_file()
    )
    opener = gzip.open if corpus_path.suffix == ".gz" else open
    with opener(corpus_path, "rt", encoding="utf-8") as handle:
        corpus = [json.loads(line) for line in handle if line.strip()]
    rng = random.Random(seed)
    order = list(range(len(corpus)))
    rng.shuffle(order)
    n_batch, n_removed, n_changed = (round(len(corpus) * f) for f in (batch, removed, changed))
    held_out = set(order[:n_batch])
    gone = set(order[n_batch : n_batch + n_removed])
    edited = set(order[n_batch + n_removed : n_batch + n_removed + n_changed])
    work = Path(tempfile.mkdtemp(prefix="qdrant-upserts-"))
    try:
        cache = work / "embeddings.duckdb"
        shutil.copy(cache_root() / "embeddings.duckdb", cache)  # nothing re-embedded but the edited texts
        source = work / "corpus" / dataset_name
        index_dir = work / "index"
        _write_corpus(source, [doc for i, doc in enumerate(corpus) if i not in held_out])
        index_paths([source], index_dir, config, progress=False, cache_path=cache)
        generation_a = read_generation(index_dir)
        clients: dict[str, Any] = {"local mode": qdrant_mirror.connect()}
        try:
            from bench.qdrant_edge import EdgeClient

            clients["Qdrant Edge"] = EdgeClient(work / "edge")
        except ImportError:
            pass
        rows: list[dict[str, Any]] = []
        timings: dict[str, dict[str, float]] = {}
        for engine, client in clients.items():
            for mode in ("folded", "idf"):
                name = f"{mode}-{ENGINE_SLUGS[engine]}"
                started = time.perf_counter()
                qdrant_mirror.export_generation(generation_a, client, name, idf_modifier=mode == "idf")
                timings[name] = {"export_a_s": time.perf_counter() - started}
                rows.append(
                    {
                        "engine": engine,
                        "sparse": mode,
                        "state": "A exported",
                        **bm25_agreement(generation_a, client, name, queries, dataset.qrels),
                    }
                )
        generation_a.store.close()
        _write_corpus(
            source,
            [
                (
                    {**doc, "text": doc.get("text", "")[: len(doc.get("text", "")) // 2]}
                    if i in edited
                    else doc
                )
                for i, doc in enumerate(corpus)
                if i not in gone
            ],
        )
        update = index_paths([source], index_dir, config, progress=False, cache_path=cache)
        generation_b = read_generation(index_dir)
        try:
            touched = {str(corpus[i]["_id"]) for i in held_out | edited}
            kept_rows = [row for row, doc_id in enumerate(generation_b.doc_ids) if doc_id not in touched]
            for engine, client in clients.items():
                for mode in ("folded", "idf"):
                    name = f"{mode}-{ENGINE_SLUGS[engine]}"
                    started = time.perf_counter()
                    report = qdrant_mirror.sync_generation(generation_b, client, name, reweight=False)
                    timings[name].update(
                        sync_s=time.perf_counter() - started,
                        upserted=report.points_upserted,
                        deleted_documents=report.deleted_documents,
                        action=report.action,
                    )
                    rows.append(
                        {
                            "engine": engine,
                            "sparse": mode,
                            "state": "B synced, not re-weighted",
                            **bm25_agreement(generation_b, client, name, queries, dataset.qrels),
                        }
                    )
                    started = time.perf_counter()
                    written = qdrant_mirror.reweight_rows(generation_b, client, name, kept_rows, mode)
                    timings[name].update(reweight_s=time.perf_counter() - started, reweighted=written)
                    rows.append(
                        {
                            "engine": engine,
                            "sparse": mode,
                            "state": "B synced + re-weighted",
                            **bm25_agreement(generation_b, client, name, queries, dataset.qrels),
                        }
                    )
                    if hasattr(
                        client, "optimize"
                    ):  # Qdrant Edge: vacuum the deleted points, as a server's optimizer would
                        client.optimize(name)
                        rows.append(
                            {
                                "engine": engine,
                                "sparse": mode,
                                "state": "B synced + re-weighted + optimize()",
                                **bm25_agreement(generation_b, client, name, queries, dataset.qrels),
                            }
                        )
                    started = time.perf_counter()
                    qdrant_mirror.export_generation(generation_b, client, name, idf_modifier=mode == "idf")
                    timings[name]["export_b_s"] = time.perf_counter() - started
                    client.delete_collection(name)
            chunks = (generation_b.n_chunks, read_manifest(index_dir).counts.chunks)
        finally:
            generation_b.store.close()
            for client in clients.values():
                client.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {
        "dataset": dataset_name,
        "split": split,
        "queries": len(queries),
        "corpus": len(corpus),
        "batch": {"added": n_batch, "removed": n_removed, "changed": n_changed, "seed": seed},
        "chunks_b": chunks[0],
        "update_seconds": update.seconds,
        "rows": rows,
        "timings": timings,
        "date": datetime.now(UTC).date().isoformat(),
        "machine": platform.machine(),
    }


def upserts_report(results: dict[str, Any]) -> str:
    batch = results["batch"]
    lines = [
        f"# BM25 on Qdrant under upserts — {results['dataset']} {results['split']} ({results['queries']} queries)",
        "",
        (
            "Command: `python -m bench.qdrant --upserts`. Generation A = the corpus less "
            f"{batch['added']} documents (seed {batch['seed']}), exported; generation B = all "
            f"{results['corpus']} documents less {batch['removed']} removed, {batch['changed']} changed (text "
            f"halved); B is mirrored by `sync_generation` (changed and new documents upserted, removed ones "
            "deleted by doc id), then the unchanged points' sparse vectors are re-weighted. Each state is "
            "compared with bm25s over the same generation (chunk-level BM25 top 100; documents = best chunk)."
        ),
        "",
        "| engine | sparse vectors | state | same top 10 | top-10 overlap | nDCG@10 bm25s | nDCG@10 Qdrant | max abs score diff |",
        "|---|---|---|---|---|---|---|---|",
    ]
    labels = {"folded": "IDF folded in", "idf": "IDF modifier"}
    for row in results["rows"]:
        lines.append(
            f"| {row['engine']} | {labels[row['sparse']]} | {row['state']} | {row['same_top10']} / "
            f"{row['queries']} | {row['overlap@10']:.4f} | {row['ndcg@10_bm25s']:.4f} | "
            f"{row['ndcg@10_qdrant']:.4f} | {row['max_abs_score_diff']:.2e} |"
        )
    lines += [
        "",
        "Costs (seconds; B = " + f"{results['chunks_b']} chunks):",
        "",
        "| collection | export A | sync to B (points upserted) | re-weight (points) | full export of B |",
        "|---|---|---|---|---|",
    ]
    for name, t in results["timings"].items():
        lines.append(
            f"| {name} | {t['export_a_s']:.1f} | {t['sync_s']:.1f} ({t['upserted']}) | "
            f"{t['reweight_s']:.1f} ({t['reweighted']}) | {t['export_b_s']:.1f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    from hybridlab.eval.evalsets import ensure_index, get_evalset
    from hybridlab.index.admin import qdrant as qdrant_mirror
    from hybridlab.index.reader import read_generation
    from hybridlab.search import qdrant
    from hybridlab.search.engine import Index, open_index

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="scifact")
    parser.add_argument("--split", default="test")
    parser.add_argument("--out", default=None)
    parser.add_argument(
        "--upserts",
        action="store_true",
        help="measure BM25 drift under incremental upserts instead of the parity run",
    )
    args = parser.parse_args(argv)
    if args.upserts:
        results = upsert_drift(args.dataset, args.split)
        out = (
            Path(args.out)
            if args.out
            else REPO_ROOT / "reports" / "bench" / f"{results['date']}-qdrant-upserts"
        )
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
        (out / "report.md").write_text(upserts_report(results))
        print(upserts_report(results))
        return 0
    evalset = get_evalset(args.dataset)
    dataset = evalset.dataset(args.split)
    index_dir = ensure_index(evalset, progress=False)
    queries = {qid: dataset.queries[qid] for qid in dataset.qrels if qid in dataset.queries}
    client = qdrant_mirror.connect()
    generation = read_generation(index_dir)
    started = datetime.now(UTC)
    try:
        qdrant_mirror.export_generation(generation, client, "parity")
    finally:
        generation.store.close()
    export_s = (datetime.now(UTC) - started).total_seconds()
    local = open_index(index_dir)
    remote = Index(index_dir, backend=qdrant.qdrant_backend(client, "parity"))
    model = local.choose_model(None, None)
    local.query_models.encode_queries(local.snapshot(), model, list(queries.values()))
    remote.query_models.encode_queries(remote.snapshot(), model, list(queries.values()))
    rows = []
    for name, options in CONDITIONS.items():
        ours, theirs = (
            measure(local, queries, dataset.qrels, options),
            measure(remote, queries, dataset.qrels, options),
        )
        delta = theirs["ndcg@10"] - ours["ndcg@10"]
        rows.append(
            {
                "condition": name,
                "options": options,
                "local": ours,
                "qdrant": theirs,
                "delta": delta,
                "within_tolerance": abs(delta) <= TOLERANCE,
            }
        )
    idf = idf_comparison(local, client, index_dir, queries, dataset.qrels)
    local.close()
    remote.close()
    client.close()
    results = {
        "dataset": args.dataset,
        "split": args.split,
        "queries": len(queries),
        "chunks": local.n_chunks,
        "model": model,
        "index": index_dir.name,
        "export_seconds": export_s,
        "tolerance": TOLERANCE,
        "machine": platform.machine(),
        "python": platform.python_version(),
        "date": started.date().isoformat(),
        "rows": rows,
        "idf": idf,
    }
    out = (
        Path(args.out)
        if args.out
        else REPO_ROOT / "reports" / "bench" / f"{started.date().isoformat()}-qdrant"
    )
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (out / "report.md").write_text(report(results))
    print(report(results))
    return 0


def report(results: dict[str, Any]) -> str:
    lines = [
        (
            f"# Qdrant backend parity — {results['dataset']} {results['split']} ({results['queries']} queries, "
            f"{results['chunks']} chunks, {results['model']})"
        ),
        "",
        (
            "Command: `python -m bench.qdrant`. Qdrant = qdrant-client's local mode (in memory, pure "
            "Python, brute force): a correctness path, not a speed claim. Latency = search ms per query "
            "(query vectors encoded up front), P50/P95 (numpy linear)."
        ),
        "",
        f"Export of the local generation into the collection: {results['export_seconds']:.1f} s.",
        "",
        "| condition | nDCG@10 local | nDCG@10 Qdrant | Δ | within ±0.002 | local P50/P95 ms | Qdrant P50/P95 ms |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in results["rows"]:
        ours, theirs = row["local"], row["qdrant"]
        lines.append(
            f"| {row['condition']} | {ours['ndcg@10']:.4f} | {theirs['ndcg@10']:.4f} | {row['delta']:+.4f} | "
            f"{'yes' if row['within_tolerance'] else 'NO'} | {ours['p50_ms']:.1f} / {ours['p95_ms']:.1f} | "
            f"{theirs['p50_ms']:.1f} / {theirs['p95_ms']:.1f} |"
        )
    idf = results.get("idf") or {}
    if idf:
        lines += [
            "",
            "BM25 weights on Qdrant (chunk-level BM25 run, best chunk per document):",
            "",
            "| sparse vectors | nDCG@10 | queries with bm25s's top 10 | max |score − bm25s| (same ranking) |",
            "|---|---|---|---|",
        ]
        labels = {
            "folded": "bm25s weights, IDF folded in (used)",
            "modifier": "IDF-free weights + Qdrant IDF modifier",
        }
        for name, row in idf.items():
            lines.append(
                f"| {labels[name]} | {row['ndcg@10']:.4f} | {row['same_top10']} / {results['queries']} | "
                f"{row['max_abs_score_diff']:.2e} |"
            )
    lines += [
        "",
        (
            "Both backends run every step of the same pipeline (fusion, tag signal, recency, staged search); "
            "only the retrievers differ: Qdrant answers the BM25 (sparse vector) and dense (named vector) "
            "queries with the filters pushed into them, and staged search walks the index's corpus graph "
            "scoring with vectors fetched from Qdrant. Latency here is mostly the local mode's Python "
            "brute force and per-call overhead."
        ),
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
