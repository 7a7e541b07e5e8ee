"""The report of several runs on one set of qrels: metric means with confidence intervals, paired
tests of each run against the first (the baseline) with Holm's correction, and means per query kind.

Runs come from anywhere (``hybridlab eval --save-run``, Pyserini, PyTerrier, ranx): plain
``{qid: {doc_id: score}}``. Every run is scored on the queries of the qrels; a query a run lacks
scores 0 for it (as in :func:`hybridlab.eval.evaluate.score`), and the report says how many.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hybridlab.errors import InvalidValueError
from hybridlab.eval.evaluate import METRICS, Qrels, Run, score_per_query
from hybridlab.eval.significance import TESTS, Interval, holm, mean_ci, paired_test

__all__ = ["RunReport", "score_runs"]

#: The metrics of the per-kind table.
KIND_METRICS = ("hit_rate@10", "mrr", "ndcg@10")


@dataclass(frozen=True)
class RunReport:
    """Scores of several runs on the same queries; ``systems[0]`` is the baseline of every test."""

    systems: list[str]
    metrics: list[str]
    queries: int
    intervals: dict[str, dict[str, Interval]]
    tests: dict[str, dict[str, dict[str, float]]]  # system (not the baseline) -> metric -> figures
    test: str
    max_p: float
    missing: dict[str, int]  # system -> queries of the qrels it has no results for
    per_kind: dict[str, dict[str, Any]] = field(default_factory=dict)  # kind -> {"n", system: {metric: mean}}
    per_query: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict, repr=False)

    @property
    def baseline(self) -> str:
        return self.systems[0]

    def significant(self, system: str, metric: str) -> bool:
        """Whether ``system`` differs from the baseline on ``metric`` (Holm-corrected p < max_p)."""
        return system in self.tests and self.tests[system][metric]["p_holm"] < self.max_p

    def to_dict(self) -> dict[str, Any]:
        return {
            "baseline": self.baseline,
            "systems": self.systems,
            "metrics": self.metrics,
            "queries": self.queries,
            "scores": {
                s: {m: i.to_dict() for m, i in by_metric.items()} for s, by_metric in self.intervals.items()
            },
            "tests": self.tests,
            "test": self.test,
            "correction": "holm",
            "max_p": self.max_p,
            "missing_queries": self.missing,
            "per_kind": self.per_kind,
        }

    def to_markdown(self) -> str:
        """Means [CI] per run; the paired tests against the baseline; the per-kind means."""
        confidence = next(iter(next(iter(self.intervals.values())).values())).confidence
        lines = [
            (
                f"{self.queries} queries; baseline: {self.baseline}. Mean [{confidence:.0%} t interval]; "
                "bold = best in the column."
            ),
            "",
            "| run | " + " | ".join(self.metrics) + " |",
            "|---|" + "---|" * len(self.metrics),
        ]
        best = {m: max(self.intervals[s][m].mean for s in self.systems) for m in self.metrics}
        for system in self.systems:
            cells = []
            for metric in self.metrics:
                interval = self.intervals[system][metric]
                cell = f"{interval.mean:.4f} [{interval.low:.3f}, {interval.high:.3f}]"
                cells.append(f"**{cell}**" if interval.mean == best[metric] else cell)
            label = f"{system} (baseline)" if system == self.baseline else system
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        if len(self.systems) > 1:
            lines += [
                "",
                (
                    f"Paired tests against {self.baseline} ({self.test}; p Holm-corrected over the "
                    f"{len(self.systems) - 1} other run(s) of each metric): difference, p, corrected p; "
                    f"† = not significant at p < {self.max_p}."
                ),
                "",
                "| run | " + " | ".join(self.metrics) + " |",
                "|---|" + "---|" * len(self.metrics),
            ]
            for system in self.systems[1:]:
                cells = []
                for metric in self.metrics:
                    t = self.tests[system][metric]
                    mark = "" if self.significant(system, metric) else " †"
                    cells.append(f"{t['difference']:+.4f} (p {t['p_value']:.4g}, {t['p_holm']:.4g}){mark}")
                lines.append(f"| {system} | " + " | ".join(cells) + " |")
        if self.per_kind:
            shown = [m for m in KIND_METRICS if m in self.metrics] or self.metrics
            lines += [
                "",
                "Per query kind (" + " / ".join(shown) + "):",
                "",
                "| kind | n | " + " | ".join(self.systems) + " |",
                "|---|---:|" + "---|" * len(self.systems),
            ]
            for kind, row in self.per_kind.items():
                cells = [" / ".join(f"{row[s][m]:.3f}" for m in shown) for s in self.systems]
                lines.append(f"| {kind} | {row['n']} | " + " | ".join(cells) + " |")
        notes = [
            f"{s} has no results for {n} of the {self.queries} queries (scored 0)"
            for s, n in self.missing.items()
            if n
        ]
        if notes:
            lines += ["", "Note: " + "; ".join(notes) + "."]
        return "\n".join(lines)


def score_runs(
    qrels: Qrels,
    runs: Mapping[str, Run],
    metrics: Sequence[str] = METRICS,
    *,
    kinds: Mapping[str, str] | None = None,
    test: str = "randomization",
    max_p: float = 0.05,
    confidence: float = 0.95,
) -> RunReport:
    """Score every run on the queries of ``qrels`` and test each against the first.

    ``kinds`` (``{qid: kind}``, e.g. the queries' ``metadata.kind``) adds the per-kind means;
    ``test`` is a test of :data:`hybridlab.eval.significance.TESTS`; for each metric the p-values of
    the runs against the baseline are Holm-corrected together."""
    if not runs:
        raise InvalidValueError("score_runs needs at least one run")
    if test not in TESTS:
        raise InvalidValueError(f"unknown test {test!r}; choose from {sorted(TESTS)}")
    if not qrels:
        raise InvalidValueError("the qrels judge no query")
    metrics = list(metrics)
    systems = list(runs)
    per_query = {name: score_per_query(qrels, run, metrics) for name, run in runs.items()}
    intervals = {
        s: {m: mean_ci(list(per_query[s][m].values()), confidence) for m in metrics} for s in systems
    }
    baseline = systems[0]
    tests: dict[str, dict[str, dict[str, float]]] = {s: {} for s in systems[1:]}
    for metric in metrics:
        outcomes = [paired_test(per_query[s][metric], per_query[baseline][metric], test) for s in systems[1:]]
        for system, outcome, adjusted in zip(systems[1:], outcomes, holm([o.p_value for o in outcomes])):
            tests[system][metric] = {
                "difference": outcome.difference,
                "p_value": outcome.p_value,
                "p_holm": adjusted,
            }
    queries = next(iter(per_query[baseline].values()))
    missing = {s: sum(1 for q in queries if not runs[s].get(q)) for s in systems}
    return RunReport(
        systems,
        metrics,
        len(queries),
        intervals,
        tests,
        test,
        max_p,
        missing,
        _per_kind(per_query, kinds or {}),
        per_query,
    )


def _per_kind(
    per_query: Mapping[str, Mapping[str, Mapping[str, float]]], kinds: Mapping[str, str]
) -> dict[str, dict[str, Any]]:
    """``{kind: {"n": queries, system: {metric: mean}}}`` over the queries that carry a kind."""
    if not kinds:
        return {}
    some = next(iter(per_query.values()))
    groups: dict[str, list[str]] = {}
    for qid in next(iter(some.values())):
        if qid in kinds:
            groups.setdefault(kinds[qid], []).append(qid)
    table: dict[str, dict[str, Any]] = {}
    for kind, qids in sorted(groups.items()):
        row: dict[str, Any] = {"n": len(qids)}
        for system, by_metric in per_query.items():
            row[system] = {m: sum(values[q] for q in qids) / len(qids) for m, values in by_metric.items()}
        table[kind] = row
    return table
