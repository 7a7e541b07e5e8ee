"""Evaluation: searches -> runs (`{qid: {doc_id: score}}`) -> ranx metrics, comparisons, TREC files.

Runs and qrels are plain dicts at the boundary; they become ranx objects only inside this module.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hybridlab.errors import InvalidValueError
from hybridlab.eval.runs import trec_text

Run = dict[str, dict[str, float]]
Qrels = dict[str, dict[str, int]]

METRICS = ("hit_rate@10", "mrr", "ndcg@10", "recall@100")


def make_run(index, queries: Mapping[str, str], *, progress: bool = False, **options: Any) -> Run:
    """Search every query (document level, `limit` 100 by default) and collect a run."""
    from tqdm.auto import tqdm

    options = {"limit": 100, **options}
    mode = options.get("mode", "hybrid")
    if mode != "bm25" and options.get("alpha", 1) != 0 and index.dense:
        try:
            model = index.choose_model(options.get("embedding_model"), options.get("language"))
            index.query_models.encode_queries(index.snapshot(), model, list(queries.values()))
        except ValueError:
            pass
    run: Run = {}
    for qid, text in tqdm(queries.items(), desc="queries", disable=not progress, leave=False):
        run[qid] = index.run(text, **options)
    return run


#: Width of the document keys ranx sees (hex digits of the id's SHA-1; 80 bits).
DOC_KEY_WIDTH = 20


def doc_key(doc_id: str) -> str:
    """The fixed-width key a document id is scored under.

    ranx compiles its numba functions (cached on disk) once per width of the id strings it is given,
    and hashes the ids inside them. A process that loaded some of those functions from the cache and
    compiled others fresh (a width it had not seen) hashed qrels and run differently: on a fresh
    install, `repro --all` measured holoviz-api-hybrid-defaults at nDCG@10 0.180 instead of 0.909 on
    the first attempt and right on the second, with identical runs. One width means one compiled
    version of each function, whatever the ids.
    """
    return hashlib.sha1(doc_id.encode("utf-8")).hexdigest()[:DOC_KEY_WIDTH]


def _ranx(
    qrels: Mapping[str, Mapping[str, int]], run: Mapping[str, Mapping[str, float]], name: str | None = None
):
    from ranx import Qrels as RanxQrels
    from ranx import Run as RanxRun

    padded = {qid: (run.get(qid) or {"__none__": 0.0}) for qid in qrels}
    keyed_qrels = {q: {doc_key(d): rel for d, rel in docs.items()} for q, docs in qrels.items()}
    keyed_run = {q: {doc_key(d): score for d, score in docs.items()} for q, docs in padded.items()}
    return RanxQrels(keyed_qrels), RanxRun(keyed_run, name=name)


def score(
    qrels: Mapping[str, Mapping[str, int]],
    run: Mapping[str, Mapping[str, float]],
    metrics: Sequence[str] = METRICS,
) -> dict[str, float]:
    """Mean of each metric over the queries of `qrels` (a query missing from the run scores 0)."""
    from ranx import evaluate

    ranx_qrels, ranx_run = _ranx(qrels, run)
    result = evaluate(ranx_qrels, ranx_run, list(metrics), make_comparable=True)
    if isinstance(result, float):
        result = {metrics[0]: result}
    return {metric: float(value) for metric, value in result.items()}


def score_per_query(
    qrels: Mapping[str, Mapping[str, int]],
    run: Mapping[str, Mapping[str, float]],
    metrics: Sequence[str] = METRICS,
) -> dict[str, dict[str, float]]:
    """`{metric: {qid: value}}`, so reports can show wins and losses per query."""
    from ranx import evaluate

    ranx_qrels, ranx_run = _ranx(qrels, run)
    evaluate(ranx_qrels, ranx_run, list(metrics), make_comparable=True)
    return {metric: {qid: float(v) for qid, v in ranx_run.scores[metric].items()} for metric in metrics}


@dataclass
class Comparison:
    """Metric means per system and paired-test p-values against the baseline (the first system)."""

    systems: list[str]
    metrics: list[str]
    scores: dict[str, dict[str, float]]
    p_values: dict[str, dict[str, float]]
    max_p: float
    stat_test: str
    per_query: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)

    def significant(self, system: str, metric: str) -> bool:
        return self.p_values.get(system, {}).get(metric, 1.0) < self.max_p

    def to_markdown(self) -> str:
        """Systems × metrics; best value per metric in bold; `†` = not significantly different
        from the baseline (first row) at p < max_p."""
        lines = ["| system | " + " | ".join(self.metrics) + " |", "|" + "---|" * (len(self.metrics) + 1)]
        best = {m: max(self.scores[s][m] for s in self.systems) for m in self.metrics}
        for i, system in enumerate(self.systems):
            cells = []
            for metric in self.metrics:
                value = self.scores[system][metric]
                cell = f"{value:.4f}"
                if math.isclose(value, best[metric]):
                    cell = f"**{cell}**"
                if i > 0 and not self.significant(system, metric):
                    cell += " †"
                cells.append(cell)
            lines.append(f"| {system}{' (baseline)' if i == 0 else ''} | " + " | ".join(cells) + " |")
        lines += [
            "",
            f"† not significantly different from the baseline ({self.stat_test} paired test, p ≥ {self.max_p}).",
        ]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "systems": self.systems,
            "metrics": self.metrics,
            "scores": self.scores,
            "p_values": self.p_values,
            "max_p": self.max_p,
            "stat_test": self.stat_test,
        }


def compare(
    qrels: Qrels,
    runs: Mapping[str, Run],
    metrics: Sequence[str] = METRICS,
    *,
    max_p: float = 0.05,
    stat_test: str = "student",
) -> Comparison:
    """Evaluate several runs with ranx `compare` (paired significance tests vs the first run).

    `stat_test`: "student" (paired t-test), "fisher" (randomisation) or "tukey" (ranx's names)."""
    from ranx import compare as ranx_compare

    if len(runs) < 2:
        raise InvalidValueError(f"compare needs at least two runs, got {len(runs)}")

    pairs = [_ranx(qrels, run, name=name) for name, run in runs.items()]
    ranx_qrels, ranx_runs = pairs[-1][0], [ranx_run for _, ranx_run in pairs]
    report = ranx_compare(
        ranx_qrels, ranx_runs, list(metrics), stat_test=stat_test, max_p=max_p, make_comparable=True
    )
    data = report.to_dict()
    systems = list(runs)
    baseline = systems[0]
    scores = {s: {m: float(data[s]["scores"][m]) for m in metrics} for s in systems}
    # ranx gives NaN when two systems score identically on every query: no difference, p = 1.
    p_values = {s: {m: _p_value(data[s]["comparisons"][baseline][m]) for m in metrics} for s in systems[1:]}
    per_query = {
        s: {m: {q: float(v) for q, v in r.scores.get(m, {}).items()} for m in metrics}
        for s, r in zip(systems, ranx_runs)
    }
    return Comparison(systems, list(metrics), scores, p_values, max_p, stat_test, per_query)


def _p_value(value: float) -> float:
    value = float(value)
    return 1.0 if math.isnan(value) else value


def write_trec_run(run: Run, path: str | Path, name: str = "hybridlab") -> None:
    """A TREC run file: `qid Q0 doc_id rank score name` (scores to 6 decimals)."""
    Path(path).write_text(trec_text(run, name, "{:.6f}"), encoding="utf-8")


def wins_losses(
    per_query_a: Mapping[str, float], per_query_b: Mapping[str, float], eps: float = 1e-9
) -> dict[str, list[str]]:
    """Queries where system A beats, ties or loses to system B on one metric."""
    result: dict[str, list[str]] = {"wins": [], "ties": [], "losses": []}
    for qid in sorted(per_query_a):
        a, b = per_query_a[qid], per_query_b.get(qid, 0.0)
        key = "wins" if a > b + eps else "losses" if b > a + eps else "ties"
        result[key].append(qid)
    return result
