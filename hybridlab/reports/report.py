"""The report over the latest sweep of each set (`hybridlab report`, `notebooks/report.ipynb`): per
set the study's figures, the report-split comparison of the defaults, the tuned config, BM25 and
vector search, wins and losses, per query kind and staleness; then the report run's `summary.md`,
comparison figure and `metrics.json`. The run folder it writes into is :mod:`hybridlab.tune.runs`'s.

See docs/internals/tune-eval.md#report-runs.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hybridlab.config import IndexConfig
from hybridlab.errors import InvalidValueError
from hybridlab.eval.evaluate import Comparison
from hybridlab.extras import require
from hybridlab.tune.engine import engine_state, stale_reason
from hybridlab.tune.record import PerKind, SweepRecord, per_kind_to_json
from hybridlab.tune.summary import describe_splits, kinds_table, params_table
from hybridlab.tune.sweep.figures import importances, plot_study
from hybridlab.tune.sweep.storage import load_study

#: a report run's own record, beside its summary (not a sweep's record: :class:`ReportSection`)
REPORT_FILE = "metrics.json"


@dataclass(frozen=True)
class ReportSection:
    """What the report shows for one sweep run (:func:`report_dataset`): the sweep's `record` and
    run folder name (`run`), its study's parameter `importances` and `figures` (file names in the
    report's folder), the report-split `comparison` of the systems, the tuned config's `wins_losses`
    against the defaults (Markdown), the metric per query kind (None without kinds), and why the
    sweep is stale (None when it is not). :meth:`to_json` is its entry in the report run's
    `metrics.json`, keyed by dataset; nothing reads that file back."""

    record: SweepRecord
    run: str
    importances: Mapping[str, float]
    figures: list[str]
    comparison: Comparison
    wins_losses: str
    per_kind: PerKind | None
    stale: str | None

    @property
    def dataset(self) -> str:
        return self.record.dataset

    def to_json(self) -> dict[str, Any]:
        """Its sweep run, split, comparison, parameter importances, best trial, verdict, per-kind
        table and staleness."""
        return {
            "sweep": self.run,
            "split": self.record.split,
            "comparison": self.comparison.to_dict(),
            "importances": self.importances,
            "best": self.record.best.to_json(),
            "verdict": self.record.verdict,
            "per_kind": None if self.per_kind is None else per_kind_to_json(self.per_kind),
            "stale": self.stale,
        }


def system_runs(record: SweepRecord, evaluator=None) -> tuple[dict[str, dict], dict[str, dict]]:
    """Report-split runs (the record's `split`) of the defaults, the tuned config, BM25 and vector
    search for one sweep record, and that split's qrels. For a cross-validated sweep `tuned` is the
    out-of-fold run (each fold ranked by the config tuned without it). The defaults come first: the
    baseline of the significance tests."""
    from hybridlab.eval.evaluator import BASELINES, Evaluator, resolve_evalset
    from hybridlab.tune.export import out_of_fold_run

    evaluator = evaluator or Evaluator(resolve_evalset(record.dataset_path or record.dataset))
    split = record.split
    if record.defaults is None:
        raise InvalidValueError(f"the sweep record of {record.dataset} names no defaults to compare with")
    base = IndexConfig.from_manifest(record.defaults.index)
    cv = record.cross_validation
    if cv:
        settings = [(c.search, IndexConfig.from_dict(c.index)) for c in cv.configs]
        tuned_run = out_of_fold_run(evaluator, cv.folds, settings, split)
    else:
        tuned_run = evaluator.run(record.best.search, IndexConfig.from_manifest(record.best.index), split)
    runs = {
        "defaults": evaluator.run(BASELINES["defaults"], base, split),
        "tuned": tuned_run,
        "bm25": evaluator.run(BASELINES["bm25"], base, split),
        "vector": evaluator.run(BASELINES["vector"], base, split),
    }
    return runs, evaluator.dataset(split).qrels


def wins_losses_table(
    comparison,
    metric: str,
    a: str = "tuned",
    b: str = "defaults",
    queries: Mapping[str, str] | None = None,
    show: int = 5,
) -> str:
    """Markdown: how many queries `a` wins/ties/loses against `b` on `metric`, and the largest
    differences either way, each with its query text (`queries`)."""
    from hybridlab.eval.evaluate import wins_losses

    per_a, per_b = comparison.per_query[a][metric], comparison.per_query[b][metric]
    outcome = wins_losses(per_a, per_b)
    counts = (
        f"{a} vs {b} on {metric}: {len(outcome['wins'])} wins, {len(outcome['ties'])} ties, "
        f"{len(outcome['losses'])} losses"
    )
    if not outcome["wins"] and not outcome["losses"]:
        return (
            f"{counts} — all ties: {a} ranks every query as well as {b}, so there is no difference to list."
        )
    lines = [counts, "", "| query | text | " + a + " | " + b + " | Δ |", "|---|---|---|---|---|"]
    ranked = sorted(per_a, key=lambda q: per_a[q] - per_b.get(q, 0.0))
    picks = ranked[-show:][::-1] + [q for q in ranked[:show] if q not in ranked[-show:]]
    for qid in picks:
        delta = per_a[qid] - per_b.get(qid, 0.0)
        if abs(delta) < 1e-9:
            continue
        text = (queries or {}).get(qid, "—")[:90].replace("|", "/").replace("\n", " ")
        lines.append(f"| {qid} | {text} | {per_a[qid]:.3f} | {per_b.get(qid, 0.0):.3f} | {delta:+.3f} |")
    return "\n".join(lines)


def split_label(record: SweepRecord) -> str:
    """How a sweep's report figures were obtained, in a few words: `out of fold, 79 queries` for a
    cross-validated set, else `test split, 300 queries`."""
    split = record.split
    n = (record.queries or {}).get(split)
    scope = "out of fold" if record.cross_validation else f"{split} split"
    return f"{scope}, {n} queries" if n else scope


def plot_comparison(
    per_query: Mapping[str, Mapping[str, Mapping[str, float]]],
    metric: str,
    path: str | os.PathLike,
    labels: Mapping[str, str] | None = None,
) -> Path:
    """One panel per dataset: each system's mean `metric` with its 95% t interval over the queries
    (`per_query[dataset][system]` = `{qid: value}`), on an axis zoomed to the intervals so close
    systems can be told apart; `labels[dataset]` names the split (:func:`split_label`)."""
    require("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from hybridlab.eval.significance import mean_ci

    datasets = list(per_query)
    figure, axes = plt.subplots(
        1, max(1, len(datasets)), figsize=(3.6 * max(1, len(datasets)), 3.4), squeeze=False
    )
    for axis, dataset in zip(axes[0], datasets):
        systems = list(per_query[dataset])
        intervals = [mean_ci(list(per_query[dataset][s].values())) for s in systems]
        for x, ci in enumerate(intervals):
            axis.errorbar(
                [x],
                [ci.mean],
                yerr=[[ci.mean - ci.low], [ci.high - ci.mean]],
                fmt="o",
                capsize=4,
                color="#2563eb" if x else "#111827",
            )
            axis.annotate(
                f"{ci.mean:.3f}", (x, ci.mean), textcoords="offset points", xytext=(6, -3), fontsize=8
            )
        low, high = min(ci.low for ci in intervals), max(ci.high for ci in intervals)
        margin = max(0.01, 0.08 * (high - low))
        axis.set_ylim(max(0.0, low - margin), high + margin)
        axis.set_xticks(range(len(systems)), systems, rotation=20, ha="right", fontsize=9)
        axis.set_xlim(-0.5, len(systems) - 0.5)
        axis.set_title(f"{dataset}\n{(labels or {}).get(dataset, '')}".strip(), fontsize=10)
        axis.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel(f"{metric} (mean, 95% CI)")
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return Path(path)


def stale_sweeps(runs: Sequence[str | os.PathLike]) -> dict[str, str]:
    """{run folder name: why its figures may not hold for today's engine} of the sweeps that are stale."""
    current = engine_state()
    reasons = {Path(run).name: stale_reason(SweepRecord.read(run), current) for run in runs}
    return {name: reason for name, reason in reasons.items() if reason}


def report_dataset(
    run: str | os.PathLike, out_dir: str | os.PathLike, progress: bool = False
) -> ReportSection:
    """Everything the report shows for one sweep run: its study's figures and importances, the
    report-split comparison (defaults = baseline, tuned, BM25, vector) with significance marks,
    the per-query wins and losses of the tuned config against the defaults with the query text,
    the metric per query kind (where the queries have kinds), and whether the sweep is stale.
    `progress`: progress bars while an index builds."""
    from hybridlab.eval.evaluate import compare
    from hybridlab.eval.evaluator import Evaluator, resolve_evalset
    from hybridlab.reports.hits import query_kinds as kind_of_query
    from hybridlab.tune.sweep.finalize import query_kinds

    run, out_dir = Path(run), Path(out_dir)
    record = SweepRecord.read(run)
    name = record.dataset
    study = load_study(run)
    figures = plot_study(study, out_dir, prefix=f"{name}-")
    evaluator = Evaluator(resolve_evalset(record.dataset_path or name), progress=progress)
    runs, qrels = system_runs(record, evaluator)
    comparison = compare(qrels, runs)
    queries = evaluator.dataset(record.split).queries
    metric = record.metric
    per_query = {system: comparison.per_query[system][metric] for system in runs}
    kinds = query_kinds(evaluator.evalset, per_query)
    if kinds:
        plot_kinds(
            per_query, kind_of_query(evaluator.evalset), metric, out_dir / f"{name}-kinds.png", title=name
        )
        figures.append(out_dir / f"{name}-kinds.png")
    return ReportSection(
        record=record,
        run=run.name,
        importances=importances(study),
        figures=[str(Path(f).name) for f in figures],
        comparison=comparison,
        wins_losses=wins_losses_table(comparison, metric, queries=queries),
        per_kind=kinds,
        stale=stale_reason(record),
    )


def plot_kinds(
    per_query: Mapping[str, Mapping[str, float]],
    kinds: Mapping[str, str],
    metric: str,
    path: str | os.PathLike,
    title: str = "",
) -> Path:
    """`metric` per query kind (groups) and system (one point each, side by side): the mean over the
    kind's queries with its 95% t interval, on an axis zoomed to the intervals. `per_query[system]`
    = `{qid: value}`, `kinds` = `{qid: kind}` (queries without a kind are left out)."""
    require("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from hybridlab.eval.significance import mean_ci

    systems = list(per_query)
    names = sorted({kinds[q] for q in per_query[systems[0]] if q in kinds})
    members = {kind: [q for q in per_query[systems[0]] if kinds.get(q) == kind] for kind in names}
    width = 0.8 / max(1, len(systems))
    figure, axes = plt.subplots(figsize=(max(6.0, 1.5 * len(names)), 3.8))
    lows, highs = [], []
    for i, system in enumerate(systems):
        intervals = [mean_ci([per_query[system].get(q, 0.0) for q in members[kind]]) for kind in names]
        xs = [x - 0.4 + width * (i + 0.5) for x in range(len(names))]
        axes.errorbar(
            xs,
            [ci.mean for ci in intervals],
            yerr=[[ci.mean - ci.low for ci in intervals], [ci.high - ci.mean for ci in intervals]],
            fmt="o",
            capsize=3,
            markersize=4,
            label=system,
        )
        lows += [ci.low for ci in intervals]
        highs += [ci.high for ci in intervals]
    margin = max(0.01, 0.05 * (max(highs) - min(lows)))
    axes.set_ylim(max(0.0, min(lows) - margin), min(1.05, max(highs) + margin))
    axes.set_xticks(range(len(names)), [f"{kind}\n(n={len(members[kind])})" for kind in names], fontsize=9)
    axes.set_ylabel(f"{metric} (mean, 95% CI)")
    axes.set_title(f"{title} — {metric} per query kind".strip(" —"), fontsize=10)
    axes.grid(axis="y", alpha=0.3)
    axes.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=len(systems), fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return Path(path)


def _stale_banner(stale: Mapping[str, str], sweeps: int) -> str:
    """The verdict's warning when some sweeps (`stale`: run -> why) ran on another engine ("" if none)."""
    return (
        (
            f"**STALE:** {len(stale)} of {sweeps} sweeps ran on another engine than today's — "
            + "; ".join(f"{run}: {reason}" for run, reason in stale.items())
            + ". Their figures may not hold; re-run them (`make sweep`). "
        )
        if stale
        else ""
    )


def _section_lines(s: ReportSection, metric: str) -> list[str]:
    """One dataset's section of `summary.md`: its splits, comparison table, best parameters by
    importance, wins and losses, per-kind table and figures."""
    lines = [f"## {s.dataset} (sweep {s.run})", ""]
    if s.stale:
        lines += [f"> **STALE:** {s.stale}.", ""]
    lines += [
        describe_splits(s.record),
        "",
        s.comparison.to_markdown(),
        "",
        "Best trial's parameters, most important first:",
        "",
        params_table(s.record.best.params, s.importances),
        "",
        s.wins_losses,
        "",
    ]
    if s.per_kind:
        lines += [kinds_table(s.per_kind, metric), ""]
    else:
        lines += ["No query kinds in this set (its queries carry no `metadata.kind`).", ""]
    return lines + [f"![{f}]({f})" for f in s.figures] + [""]


def write_report(run_dir: str | os.PathLike, sections: Sequence[ReportSection]) -> Path:
    """`metrics.json` (each section's :meth:`ReportSection.to_json`, by dataset), the comparison
    figure and `summary.md` of a report run."""
    run_dir = Path(run_dir).resolve()  # the notebook runs in its run folder and passes "."
    metric = sections[0].record.metric if sections else "ndcg@10"
    if sections:
        plot_comparison(
            {
                s.dataset: {system: values[metric] for system, values in s.comparison.per_query.items()}
                for s in sections
            },
            metric,
            run_dir / "comparison.png",
            {s.dataset: split_label(s.record) for s in sections},
        )
    verdicts = "; ".join(f"{s.dataset}: {s.record.verdict}" for s in sections)
    stale = {s.run: s.stale for s in sections if s.stale}
    (run_dir / REPORT_FILE).write_text(
        json.dumps({s.dataset: s.to_json() for s in sections}, indent=2, default=str), encoding="utf-8"
    )
    banner = _stale_banner(stale, len(sections))
    lines = [
        f"# Report — {run_dir.name}",
        "",
        f"**Verdict:** {banner}{verdicts or 'no sweeps'}.",
        "",
        (
            "Each sweep's report split (SciFact: all 300 test queries, tuned on train; memories and HoloViz: "
            "nested cross-validation, the tuned row = out-of-fold scores). `defaults` (first row) is the "
            "baseline of the paired tests. The figure: each system's mean with its 95% interval over the "
            "queries, on an axis zoomed to the intervals."
        ),
        "",
        "![comparison](comparison.png)",
        "",
    ]
    for s in sections:
        lines += _section_lines(s, metric)
    path = run_dir / "summary.md"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
