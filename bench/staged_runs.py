"""Staged against parallel hybrid search over the same queries: :func:`compare_staged`.

Parallel hybrid runs BM25 and the dense retriever over the whole index (`depth` each) and fuses
them; staged takes the BM25 top `candidates`, grows that pool `expand_hops` times along the corpus
graph and scores only the pool with stored vectors (falling back to parallel when BM25 finds fewer
than `fallback_threshold` hits). :func:`compare_staged` runs parallel hybrid and any number of staged
conditions (each through :func:`run_condition`) and gives, per condition: the top-k overlap with
parallel hybrid (:func:`hybridlab.reports.staged.top_overlap`), metrics where judgements exist, the
search latency (`RunResponse.timings["search_ms"]`: retrieval, fusion, recency; query vectors are
encoded once up front, so encoding is excluded; each percentile per pass, then the median over
passes: :func:`bench.percentiles.median_summary`) and how many queries ran staged or fell back.

Used by the engine acceptance report (:mod:`bench.engine_report`) and the staged benchmark of a
checkout (`python -m bench.staged`); `notebooks/staged.ipynb` draws its trade-off with the package's
:mod:`hybridlab.reports.staged` (it runs from an installed package, without this checkout's bench/).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bench.common import top_overlap
from bench.percentiles import median_summary
from hybridlab.eval.evaluate import Run, score

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
        index.query_models.encode_queries(
            index.snapshot(),
            index.choose_model(options.get("embedding_model"), options.get("language")),
            list(queries.values()),
        )
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


def compare_staged(
    index,
    queries: Mapping[str, str],
    conditions: Mapping[str, Mapping[str, Any]],
    *,
    qrels: Mapping[str, Mapping[str, int]] | None = None,
    metrics: Sequence[str] = ("ndcg@10",),
    repeats: int = 1,
    top: int = TOP,
    **options: Any,
) -> dict[str, dict[str, Any]]:
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
        outcomes[name] = run_condition(
            index, queries, repeats=repeats, **{**options, "staged": True, **extra}
        )
    reference = outcomes[PARALLEL].run
    results: dict[str, dict[str, Any]] = {}
    for name, outcome in outcomes.items():
        overlaps = [top_overlap(reference[qid], outcome.run[qid], top) for qid in queries]
        results[name] = {
            "run": outcome.run,
            "overlaps": overlaps,
            f"overlap@{top}": statistics.fmean(overlaps),
            f"min_overlap@{top}": min(overlaps),
            "search_ms": median_summary(outcome.search_ms),
            "modes": outcome.modes,
            **(score(dict(qrels), outcome.run, list(metrics)) if qrels is not None else {}),
        }
    return results
