"""Staged against parallel hybrid search: the one staged benchmark.

Parallel hybrid against staged conditions over the same queries, measured with
:func:`bench.staged_runs.compare_staged` (the product's engine report uses it too; its docstring
says what is compared and how latency is summarised).

Its callers:

- `python -m bench` (part `staged`): :func:`run` -> the worker :func:`measure_staged`,
  one results row per candidates value;
- `python -m bench.staged [--dataset scifact] [--split test] [--candidates 50,100,200,500]
  [--hops 0,1,2,3]`: the candidates x hops grid over an evaluation set (:func:`main`), written to
  `reports/staged/<date>/report.md`, `results.json` and `overlap_latency.png`;
- `notebooks/staged.ipynb`: :func:`hybridlab.reports.staged.staged_tradeoff`.

Benchmarks, not tests: nothing here asserts. Timings depend on the machine's load (2 shared cores).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import PERCENTILE_LABEL, make_row, peak_rss_mb, worker_main
from bench.staged_runs import PARALLEL, TOP, compare_staged, run_condition
from hybridlab.config import REPO_ROOT, resolve_auto, resolve_search_config

CANDIDATES = (50, 100, 200, 500)
OVERLAP_TARGET = 0.95
NDCG_TOLERANCE = 0.01  # relative


# ------------------------------------------------------------------------------------------ bench part
def measure_staged(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """Worker of `python -m bench`: one row per candidates value plus the parallel-hybrid
    reference row. Latency and overlap over `queries` at `limit` 10; nDCG@10 over `judged_queries`
    (document runs of 100) where `qrels` are given."""
    from hybridlab.search.engine import open_index

    index = open_index(arguments["index_dir"])
    queries = {str(i): text for i, text in enumerate(arguments["queries"])}
    repeats = int(arguments["repeats"])
    names = {f"staged-{count}": count for count in arguments.get("candidates", CANDIDATES)}
    conditions = {name: {"candidates": count} for name, count in names.items()}
    timed = compare_staged(index, queries, conditions, repeats=repeats, limit=TOP)
    qrels = arguments.get("qrels")
    judged = compare_staged(index, arguments["judged_queries"], conditions, qrels=qrels) if qrels else None
    rows = []
    for name, outcome in timed.items():
        candidates = names.get(name)
        stats = outcome["search_ms"]
        extra = {"ndcg@10": judged[name]["ndcg@10"]} if judged else {}
        rows.append(
            make_row(
                "hybridlab",
                index.n_chunks,
                "hybrid" if candidates is None else "staged",
                False,
                search_p50_ms=stats["p50"],
                search_p95_ms=stats["p95"],
                search_p99_ms=stats["p99"],
                candidates=candidates,
                **{"overlap@10": outcome[f"overlap@{TOP}"]},
                dataset=arguments.get("dataset"),
                variant="staged-sweep",
                queries=len(queries),
                repeats=repeats,
                **extra,
            )
        )
        print(
            f"  staged {arguments.get('dataset')} candidates={candidates}: search p95 {stats['p95']:.2f} ms, "
            f"overlap {outcome[f'overlap@{TOP}']:.3f} {extra}",
            file=sys.stderr,
            flush=True,
        )
    rss = peak_rss_mb()
    for row in rows:
        row["peak_rss_mb"] = round(rss, 1)
    return {"rows": rows}


def run(
    index_dir,
    queries: Sequence[str],
    *,
    dataset: str,
    repeats: int,
    qrels: dict | None = None,
    judged_queries: dict | None = None,
    candidates: Sequence[int] = CANDIDATES,
) -> dict[str, Any]:
    """The `staged` part of `python -m bench`, in a fresh worker process."""
    from bench.common import run_worker

    return run_worker(
        "bench.staged",
        {
            "index_dir": str(index_dir),
            "queries": list(queries),
            "dataset": dataset,
            "repeats": repeats,
            "qrels": qrels,
            "judged_queries": judged_queries,
            "candidates": list(candidates),
        },
    )


# ------------------------------------------------------------------------------------------ the grid
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.staged",
        description="Staged vs parallel hybrid search over an evaluation set: "
        "agreement, quality and search latency per (candidates, hops).",
    )
    parser.add_argument(
        "--dataset", default="scifact", help="evaluation set with a cached index (default scifact)"
    )
    parser.add_argument("--split", default="test", choices=["test", "dev", "all"])
    parser.add_argument(
        "--candidates", default="50,100,200,500", help="comma-separated staged candidate counts"
    )
    parser.add_argument(
        "--hops", default="0,1,2,3", help="comma-separated corpus-graph hops (0 = BM25 pool only)"
    )
    parser.add_argument(
        "--seeds", type=int, default=None, help="candidates expanded per hop (default: the engine's)"
    )
    parser.add_argument(
        "--fill-dense",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="both conditions with fill_dense on / off (default: the engine's auto)",
    )
    parser.add_argument("--repeats", type=int, default=3, help="timed passes per condition")
    parser.add_argument(
        "--fusion",
        default=None,
        choices=["rrf", "convex", "dbsf"],
        help="fusion for both conditions (default: the engine's default)",
    )
    parser.add_argument(
        "--out",
        default=None,
        help="report folder (default reports/staged/<date>, plus /<fusion> with --fusion)",
    )
    return parser.parse_args(argv)


def staged_pool(index, query: str, candidates: int, hops: int, seeds: int) -> set[str]:
    """Documents staged search scores for `query`: the BM25 top `candidates`, grown `hops` times
    along the corpus graph from the `seeds` best by dense score (unfiltered, no tags)."""
    from hybridlab.index.format.graph import expand_by_graph

    snapshot = index.snapshot()
    generation = snapshot.generation
    rows, _ = generation.sparse.top(generation.sparse.query_ids(query), candidates)
    model = index.choose_model(None, None)
    graph = generation.graphs.get(model)
    if hops and graph is not None and len(rows):
        dense = generation.dense[model]
        vector = index.query_models.query_vector(snapshot, model, query)
        ids, scores = dense.score_ids(vector, generation.chunk_ids[rows])
        grown, _ = expand_by_graph(
            dense.vectors, graph, vector, np.searchsorted(dense.ids, ids), scores, hops=hops, seeds=seeds
        )
        rows = np.union1d(rows, generation.dense_rows_to_index[model][grown])
    return {generation.doc_ids[row] for row in rows.tolist()}


def pool_bound(
    index,
    reference: dict[str, float],
    query: str,
    candidates: int,
    hops: int = 0,
    seeds: int = 10,
    top: int = TOP,
) -> float:
    """Share of the reference's top-k documents inside the staged pool: the best overlap any
    staged ranking can reach for this query."""
    pool = staged_pool(index, query, candidates, hops, seeds)
    ref = sorted(reference, key=lambda d: (-reference[d], d))[:top]
    return sum(doc in pool for doc in ref) / len(ref) if ref else 1.0


def condition_name(candidates: int, hops: int) -> str:
    return f"staged-{candidates}" + (f"-graph{hops}" if hops else "")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """The candidates x hops grid: measure, write `results.json`, `report.md` and the figure."""
    import time

    from hybridlab.eval.evalsets import ensure_index, get_evalset
    from hybridlab.search.engine import open_index

    args = parse_args(argv)
    evalset = get_evalset(args.dataset)
    dataset = evalset.dataset(args.split)
    index = open_index(ensure_index(evalset, progress=False))
    queries = {qid: dataset.queries[qid] for qid in dataset.qrels if qid in dataset.queries}
    model = index.choose_model(None, None)
    started = time.perf_counter()
    index.query_models.encode_queries(index.snapshot(), model, list(queries.values()))
    encode_s = time.perf_counter() - started
    fusion = {"fusion": args.fusion} if args.fusion else {}
    if args.seeds is not None:
        fusion["expand_seeds"] = args.seeds
    if args.fill_dense is not None:
        fusion["fill_dense"] = args.fill_dense
    run_condition(index, queries, staged=False, limit=TOP, **fusion)  # warm-up: vector cache, detail caches

    settings = resolve_auto(
        resolve_search_config(dict(fusion), config_file=index.config_file, n_chunks=index.n_chunks)[0],
        index.n_chunks,
    )
    grid = {
        condition_name(int(c), int(h)): (int(c), int(h))
        for h in args.hops.split(",")
        for c in args.candidates.split(",")
    }
    conditions = {name: {"candidates": count, "expand_hops": hops} for name, (count, hops) in grid.items()}
    compared = compare_staged(
        index, queries, conditions, qrels=dataset.qrels, repeats=args.repeats, limit=TOP, **fusion
    )
    parallel = compared[PARALLEL]["run"]
    results: dict[str, Any] = {
        "dataset": args.dataset,
        "split": args.split,
        "queries": len(queries),
        "chunks": index.n_chunks,
        "model": model,
        "top": TOP,
        "repeats": args.repeats,
        "query_encoding_s": round(encode_s, 2),
        "percentile": PERCENTILE_LABEL,
        "settings": asdict(settings),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": platform.platform(),
        "conditions": {},
    }
    base_ndcg = compared[PARALLEL]["ndcg@10"]
    for name, outcome in compared.items():
        count, hops = grid.get(name, (None, None))
        bound = (
            None
            if count is None
            else statistics.fmean(
                pool_bound(index, parallel[q], queries[q], count, hops, settings.expand_seeds)
                for q in queries
            )
        )
        results["conditions"][name] = {
            "candidates": count,
            "hops": hops,
            "overlap@10": outcome[f"overlap@{TOP}"],
            "pool_bound@10": bound,
            "min_overlap@10": outcome[f"min_overlap@{TOP}"],
            "ndcg@10": outcome["ndcg@10"],
            "ndcg_delta_rel": (outcome["ndcg@10"] - base_ndcg) / base_ndcg if base_ndcg else 0.0,
            "p50_ms": outcome["search_ms"]["p50"],
            "p95_ms": outcome["search_ms"]["p95"],
            "modes": outcome["modes"],
        }
    out = (
        Path(args.out)
        if args.out
        else REPO_ROOT / "reports" / "staged" / datetime.now(UTC).strftime("%Y-%m-%d")
    )
    if args.fusion and not args.out:
        out = out / args.fusion
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    (out / "report.md").write_text(to_markdown(results, argv))
    plot(results, out / "overlap_latency.png")
    print(to_markdown(results, argv))
    return results


def to_markdown(results: dict[str, Any], argv: list[str] | None) -> str:
    command = "python -m bench.staged" + (" " + " ".join(argv) if argv else "")
    percentiles = results.get("percentile", PERCENTILE_LABEL)
    lines = [
        (
            f"# Staged vs parallel hybrid — {results['dataset']} ({results['split']}, {results['queries']} queries, "
            f"{results['chunks']} chunks)"
        ),
        "",
        f"Command: `{command}`  ",
        (
            f"Date: {results['date']}; model {results['model']}; machine {results['machine']}; "
            f"{results['repeats']} timed passes per condition (each percentile per pass, then the median over "
            f"passes; {percentiles})."
        ),
        "",
        f"Targets: overlap@10 ≥ {OVERLAP_TARGET:.0%}, nDCG@10 within {NDCG_TOLERANCE:.0%} of parallel.",
        "",
        "| condition | overlap@10 | pool bound | min overlap | nDCG@10 | Δ vs parallel | p50 ms | p95 ms | modes |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, row in results["conditions"].items():
        ok = (
            ""
            if name == PARALLEL
            else (
                " ✓"
                if row["overlap@10"] >= OVERLAP_TARGET and row["ndcg_delta_rel"] >= -NDCG_TOLERANCE
                else " ✗"
            )
        )
        lines.append(
            f"| {name}{ok} | {row['overlap@10']:.3f} | "
            f"{'—' if row['pool_bound@10'] is None else format(row['pool_bound@10'], '.3f')} | "
            f"{row['min_overlap@10']:.2f} | {row['ndcg@10']:.4f} | "
            f"{row['ndcg_delta_rel']:+.2%} | {row['p50_ms']:.2f} | {row['p95_ms']:.2f} | "
            f"{', '.join(f'{k} {v}' for k, v in sorted(row['modes'].items()))} |"
        )
    settings = results["settings"]
    lines += [
        "",
        (
            f"Fusion {settings['fusion']} ({settings['normalization']}), alpha {settings['alpha']} "
            f"(adaptive), depth {settings['depth']}, fallback_threshold {settings['fallback_threshold']}, "
            f"expand_seeds {settings['expand_seeds']}, fill_dense {settings['fill_dense']} "
            "(`-graphN` = N corpus-graph hops; none = the BM25 pool alone). "
            "Search time excludes query encoding (queries are encoded once in a batch first)."
        ),
        "",
    ]
    lines += ["## Reading it", "", *diagnosis(results), ""]
    return "\n".join(lines)


def diagnosis(results: dict[str, Any]) -> list[str]:
    """Plain-language findings computed from the numbers (no hand-written claims)."""
    out = []
    for name, row in results["conditions"].items():
        if name == PARALLEL:
            continue
        gap = row["pool_bound@10"] - row["overlap@10"]
        verdict = "meets" if row["overlap@10"] >= OVERLAP_TARGET else "misses"
        graph = f" + {row['hops']} graph hops" if row["hops"] else ""
        out.append(
            f"- {name}: {verdict} the overlap target; {row['pool_bound@10']:.1%} of parallel's top-10 lies in the "
            f"pool (BM25 top-{row['candidates']}{graph}) "
            f"at all (the ceiling for any staged ranking), {gap:.1%} more is lost to "
            f"re-ranking inside the pool; nDCG@10 {row['ndcg_delta_rel']:+.2%} vs parallel."
        )
    out.append(
        "- Without the graph, overlap is capped by the staged design itself: documents that parallel hybrid ranks "
        "in its top 10 from the dense side but BM25 does not rank in its top candidates can never be scored. "
        "The corpus graph brings them in from their neighbours among the best candidates."
    )
    return out


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    staged = {n: r for n, r in results["conditions"].items() if n != PARALLEL}
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    for hops in sorted({r["hops"] for r in staged.values()}):
        rows = [r for r in staged.values() if r["hops"] == hops]
        xs = [r["candidates"] for r in rows]
        label = f"{hops} graph hops" if hops else "BM25 pool only"
        left.plot(xs, [r["overlap@10"] for r in rows], "o-", label=f"overlap@10, {label}")
        left.plot(xs, [r["ndcg@10"] for r in rows], "s--", label=f"nDCG@10, {label}")
    left.axhline(results["conditions"][PARALLEL]["ndcg@10"], color="grey", ls="--", label="nDCG@10 parallel")
    left.axhline(OVERLAP_TARGET, color="red", ls=":", label="overlap target")
    left.set_xscale("log")
    left.set_xlabel("staged candidates")
    left.legend(fontsize=8)
    names = list(results["conditions"])
    right.bar(names, [results["conditions"][n]["p50_ms"] for n in names], label="p50")
    right.scatter(
        names, [results["conditions"][n]["p95_ms"] for n in names], color="black", label="p95", zorder=3
    )
    right.set_ylabel(f"search ms (no encoding; {results.get('percentile', PERCENTILE_LABEL)})")
    right.tick_params(axis="x", rotation=30)
    right.legend(fontsize=8)
    fig.suptitle(f"staged vs parallel hybrid — {results['dataset']} {results['split']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    if not worker_main(sys.argv[1:], measure_staged):
        main()
