"""The staged-search trade-off of `notebooks/staged.ipynb`: parallel hybrid search against staged
search (BM25 narrows the corpus to `candidates` chunks, the corpus graph grows that pool, vectors
score only the pool) per candidate count, on the same queries.

Per condition: the median search time per query (`RunResponse.timings["search_ms"]`: retrieval,
fusion, recency; every query vector is encoded once up front, so encoding is excluded), nDCG@k and
recall@k where judgements exist, and the top-k overlap with the parallel search. The benchmarks of a
checkout (`bench/staged_runs.py`: repeats, P95/P99, fallbacks) measure the same thing at more depth.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hybridlab.errors import InvalidValueError
from hybridlab.eval.evaluate import score
from hybridlab.extras import require
from hybridlab.tune.summary import metrics_table


def top_overlap(reference: Mapping[str, float], other: Mapping[str, float], top: int = 10) -> float:
    """|top-k(other) ∩ top-k(reference)| / |top-k(reference)| of two `{doc: score}` results (ties by
    doc id); 1.0 when the reference is empty."""

    def best(results: Mapping[str, float]) -> set[str]:
        return set(sorted(results, key=lambda doc: (-results[doc], doc))[:top])

    ref = best(reference)
    return len(ref & best(other)) / len(ref) if ref else 1.0


def _condition(index, queries: Mapping[str, str], options: Mapping[str, Any]) -> tuple[dict, float]:
    """The run (`{qid: {doc: score}}`) of one condition and its median search milliseconds."""
    run, samples = {}, []
    for qid, text in queries.items():
        response = index.run_response(text, **options)
        run[qid] = response.run
        samples.append(response.timings["search_ms"])
    return run, statistics.median(samples)


def staged_tradeoff(
    index,
    queries: Mapping[str, str],
    qrels: Mapping[str, Mapping[str, int]] | None,
    candidates: Sequence[int],
    *,
    now: str | None = None,
    k: int = 10,
    expand_hops: int | None = None,
) -> list[dict[str, Any]]:
    """Rows of the trade-off: parallel hybrid first, then staged search per candidate count (never
    falling back to parallel; `expand_hops` None = the engine's default), at `limit` = `k`:
    `candidates` (None for parallel), `staged`, `median_ms`, nDCG@k and recall@k (when `qrels`),
    `overlap@k` with the parallel search."""
    if not queries:
        raise InvalidValueError("no queries to compare")
    if index.dense:  # encode once, so no condition times the query encoder
        index.query_models.encode_queries(
            index.snapshot(), index.choose_model(None, None), list(queries.values())
        )
    hops = {} if expand_hops is None else {"expand_hops": expand_hops}
    conditions: list[tuple[int | None, dict[str, Any]]] = [(None, {"staged": False})]
    conditions += [
        (count, {"staged": True, "candidates": count, "fallback_threshold": 0, **hops})
        for count in candidates
    ]
    metrics = (f"ndcg@{k}", f"recall@{k}")
    rows, reference = [], None
    for count, options in conditions:
        run, median_ms = _condition(index, queries, {"now": now, "limit": k, **options})
        reference = reference if reference is not None else run
        overlap = statistics.fmean(top_overlap(reference[q], run[q], k) for q in queries)
        rows.append(
            {
                "candidates": count,
                "staged": count is not None,
                "median_ms": median_ms,
                **(score(dict(qrels), run, list(metrics)) if qrels is not None else {}),
                f"overlap@{k}": overlap,
            }
        )
    return rows


def plot_tradeoff(rows: Sequence[Mapping[str, Any]], path: str | os.PathLike) -> Path:
    """Staged search: latency and quality (nDCG@10, recall@10, overlap with parallel hybrid) per
    candidate count; the parallel search is the dashed reference."""
    require("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    staged = [r for r in rows if r["staged"]]
    full = next(r for r in rows if not r["staged"])
    xs = [r["candidates"] for r in staged]
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    left.plot(xs, [r["median_ms"] for r in staged], marker="o", label="staged")
    left.axhline(full["median_ms"], linestyle="--", color="grey", label="parallel hybrid")
    left.set(xscale="log", xlabel="BM25 candidates", ylabel="median search time per query (ms)")
    left.legend()
    for key in ("ndcg@10", "recall@10", "overlap@10"):
        if key not in full:
            continue
        (line,) = right.plot(xs, [r[key] for r in staged], marker="o", label=key)
        right.axhline(full[key], linestyle="--", color=line.get_color(), alpha=0.5)
    right.set(xscale="log", xlabel="BM25 candidates", ylabel="value (dashed: parallel hybrid)")
    right.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return Path(path)


def tradeoff_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """Markdown: one row per condition (parallel hybrid, then staged per candidate count)."""
    named = {
        ("parallel hybrid" if not r["staged"] else f"staged, {r['candidates']} candidates"): r for r in rows
    }
    columns = [c for c in ("median_ms", "ndcg@10", "recall@10", "overlap@10") if c in rows[0]]
    return metrics_table(named, columns)


def write_staged_summary(run_dir: str | os.PathLike, dataset: str, rows: Sequence[Mapping[str, Any]]) -> Path:
    """`summary.md` of a staged trade-off run: the verdict (from how many candidates staged search
    keeps 95% of the parallel top 10), the table and the figure."""
    run_dir = Path(run_dir)
    full = next(r for r in rows if not r["staged"])
    close = [r["candidates"] for r in rows if r["staged"] and r["overlap@10"] >= 0.95]
    verdict = (
        f"staged search keeps ≥95% of the parallel top-10 from {min(close)} candidates on"
        if close
        else "staged search never keeps 95% of the parallel top-10 on"
    )
    lines = [
        f"# Staged trade-off {dataset} — {run_dir.name}",
        "",
        f"**Verdict:** {verdict} {dataset} (parallel: {full['median_ms']:.1f} ms median per query).",
        "",
        tradeoff_table(rows),
        "",
        "![trade-off](staged.png)",
        "",
    ]
    path = run_dir / "summary.md"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
