"""Staged against parallel hybrid search over the same queries: :func:`compare_staged`.

Parallel hybrid runs BM25 and the dense retriever over the whole index (`depth` each) and fuses
them; staged takes the BM25 top `candidates`, grows that pool `expand_hops` times along the corpus
graph and scores only the pool with stored vectors (falling back to parallel when BM25 finds fewer
than `fallback_threshold` hits). :func:`compare_staged` runs parallel hybrid and any number of staged
conditions (each through :func:`run_condition`) and gives, per condition: the top-k overlap with
parallel hybrid (:func:`bench.common.top_overlap`), metrics where judgements exist, the
search latency (`RunResponse.timings["search_ms"]`: retrieval, fusion, recency; query vectors are
encoded once up front, so encoding is excluded; each percentile per pass, then the median over
passes: :func:`bench.percentiles.median_summary`) and how many queries ran staged or fell back.

Used by the engine acceptance report (:mod:`bench.engine_report`), `notebooks/staged.ipynb`
(:func:`staged_tradeoff`) and the staged benchmark of a checkout (`python -m bench.staged`).
"""
from __future__ import annotations

import os
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import top_overlap
from bench.percentiles import median_summary
from hybridlab.eval.evaluate import Run, score
from hybridlab.extras import require
from hybridlab.tune.runs import metrics_table

TOP = 10
PARALLEL = "parallel"


@dataclass(frozen=True)
class ConditionRun:
    """One condition's searches: the run of the last pass, the search milliseconds of every pass
    (one list per pass, one value per query) and how many queries of the last pass ran in each mode."""

    run: Run
    search_ms: list[list[float]]
    modes: dict[str, int]


def run_condition(index, queries: Mapping[str, str], *, repeats: int = 1, **options: Any) -> ConditionRun:
    """Search every query `repeats` times with `index.run_response(text, **options)` (document level,
    `limit` 100 unless given); the query vectors are encoded once first, so no pass times encoding."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    if options.get("mode", "hybrid") != "bm25" and options.get("alpha", 1) != 0 and index.dense:
        index.encode_queries(index.choose_model(options.get("embedding_model"), options.get("language")),
                             list(queries.values()))
    run: Run = {}
    passes: list[list[float]] = []
    modes: dict[str, int] = {}
    for _ in range(repeats):
        samples: list[float] = []
        modes = {}
        for qid, text in queries.items():
            response = index.run_response(text, **options)
            run[qid] = response.run
            samples.append(response.timings["search_ms"])
            modes[response.mode] = modes.get(response.mode, 0) + 1
        passes.append(samples)
    return ConditionRun(run, passes, modes)


def compare_staged(index, queries: Mapping[str, str], conditions: Mapping[str, Mapping[str, Any]], *,
                   qrels: Mapping[str, Mapping[str, int]] | None = None, metrics: Sequence[str] = ("ndcg@10",),
                   repeats: int = 1, top: int = TOP, **options: Any) -> dict[str, dict[str, Any]]:
    """Parallel hybrid and each staged condition over the same `queries`.

    `conditions` maps a name to its staged search options (e.g. `{"candidates": 100}`); `options`
    apply to every condition, parallel included (`limit`, `now`, `fusion`, ...). Returns, under
    :data:`PARALLEL` first and then each condition's name: `run` (last pass), `overlaps` (per query,
    :func:`top_overlap` of the condition's top `top` with parallel's), `overlap@{top}` (their mean),
    `min_overlap@{top}`, `search_ms` (p50/p95/p99: per pass, median over passes), `modes`, and
    each of `metrics` when `qrels` are given.
    """
    if not queries:
        raise ValueError("no queries to compare")
    if PARALLEL in conditions:
        raise ValueError(f"{PARALLEL!r} names the reference; choose another condition name")
    outcomes = {PARALLEL: run_condition(index, queries, repeats=repeats, **{**options, "staged": False})}
    for name, extra in conditions.items():
        outcomes[name] = run_condition(index, queries, repeats=repeats, **{**options, "staged": True, **extra})
    reference = outcomes[PARALLEL].run
    results: dict[str, dict[str, Any]] = {}
    for name, outcome in outcomes.items():
        overlaps = [top_overlap(reference[qid], outcome.run[qid], top) for qid in queries]
        results[name] = {
            "run": outcome.run, "overlaps": overlaps,
            f"overlap@{top}": statistics.fmean(overlaps), f"min_overlap@{top}": min(overlaps),
            "search_ms": median_summary(outcome.search_ms), "modes": outcome.modes,
            **(score(dict(qrels), outcome.run, list(metrics)) if qrels is not None else {}),
        }
    return results


def staged_tradeoff(index, queries: Mapping[str, str], qrels: Mapping[str, Mapping[str, int]],
                    candidates: Sequence[int], *, now: str | None = None, k: int = 10,
                    expand_hops: int | None = None) -> list[dict[str, Any]]:
    """Rows of `notebooks/staged.ipynb`: parallel hybrid, then staged search per candidate count
    (never falling back; `expand_hops` None = the engine's default), at `limit` = `k` (the engine
    scores at least `limit` candidates): `median_ms` (search time), nDCG@k, recall@k, overlap@k."""
    hops = {} if expand_hops is None else {"expand_hops": expand_hops}
    conditions = {f"staged-{count}": {"candidates": count, "fallback_threshold": 0, **hops} for count in candidates}
    metrics = (f"ndcg@{k}", f"recall@{k}")
    results = compare_staged(index, queries, conditions, qrels=qrels, metrics=metrics, top=k, now=now, limit=k)
    return [{"candidates": None if name == PARALLEL else conditions[name]["candidates"], "staged": name != PARALLEL,
             "median_ms": outcome["search_ms"]["p50"], **{m: outcome[m] for m in metrics},
             f"overlap@{k}": outcome[f"overlap@{k}"]}
            for name, outcome in results.items()]


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
    left.set(xscale="log", xlabel="BM25 candidates", ylabel="median latency per query (ms)")
    left.legend()
    for key in ("ndcg@10", "recall@10", "overlap@10"):
        line, = right.plot(xs, [r[key] for r in staged], marker="o", label=key)
        right.axhline(full[key], linestyle="--", color=line.get_color(), alpha=0.5)
    right.set(xscale="log", xlabel="BM25 candidates", ylabel="value (dashed: parallel hybrid)")
    right.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return Path(path)


def write_staged_summary(run_dir: str | os.PathLike, dataset: str, rows: Sequence[Mapping[str, Any]]) -> Path:
    """`summary.md` of a staged trade-off run (notebooks/staged.ipynb)."""
    run_dir = Path(run_dir)
    full = next(r for r in rows if not r["staged"])
    named = {("parallel hybrid" if not r["staged"] else f"staged, {r['candidates']} candidates"): r for r in rows}
    close = [r["candidates"] for r in rows if r["staged"] and r["overlap@10"] >= 0.95]
    verdict = (f"staged search keeps ≥95% of the parallel top-10 from {min(close)} candidates on"
               if close else "staged search never keeps 95% of the parallel top-10 on")
    lines = [f"# Staged trade-off {dataset} — {run_dir.name}", "",
             f"**Verdict:** {verdict} {dataset} (parallel: {full['median_ms']:.1f} ms median per query).", "",
             metrics_table(named, ("median_ms", "ndcg@10", "recall@10", "overlap@10")), "",
             "![trade-off](staged.png)", ""]
    path = run_dir / "summary.md"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
