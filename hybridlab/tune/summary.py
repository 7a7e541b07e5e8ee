"""A sweep run's `summary.md`, and the Markdown tables it, the sweep notebook and the report show: metrics
per system, per query kind, a nested cross-validation, parameters and importances, a search space."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hybridlab.config import IndexConfig
from hybridlab.errors import InvalidValueError
from hybridlab.eval.evaluate import METRICS
from hybridlab.tune.record import CrossValidationRecord, PerKind, SweepRecord


def params_table(params: Mapping[str, Any], importance: Mapping[str, float] | None = None) -> str:
    """Markdown parameter × value (and its importance, when given; most important first)."""
    importance = importance or {}
    names = sorted(params, key=lambda n: (-importance.get(n, -1.0), n))

    def value(v: Any) -> str:
        number = isinstance(v, int | float) and not isinstance(v, bool)
        return f"{v:.4g}" if number else f"`{v}`"

    if importance:
        lines = ["| parameter | value | importance |", "|---|---:|---:|"]
        lines += [
            f"| {n} | {value(params[n])} | {importance[n]:.3f} |"
            if n in importance
            else f"| {n} | {value(params[n])} | — |"
            for n in names
        ]
    else:
        lines = ["| parameter | value |", "|---|---:|"] + [f"| {n} | {value(params[n])} |" for n in names]
    return "\n".join(lines)


def importances_table(importance: Mapping[str, float], top: int | None = None) -> str:
    """Markdown parameter × importance, most important first (`top` rows at most; the rest summed)."""
    if not importance:
        return "No parameter importances (fewer than two completed trials with different values)."
    ranked = sorted(importance.items(), key=lambda item: -item[1])
    shown, rest = ranked[:top] if top else ranked, ranked[top:] if top else []
    lines = ["| parameter | importance |", "|---|---:|"] + [f"| {n} | {v:.3f} |" for n, v in shown]
    if rest:
        lines.append(f"| {len(rest)} others | {sum(v for _, v in rest):.3f} |")
    return "\n".join(lines)


def space_table(space: Sequence[Any]) -> str:
    """Markdown of a search space (:class:`hybridlab.tune.sweep.space.Param`s): each parameter's kind, its
    range (log scale, step) or choices, and the condition under which it is sampled."""
    lines = ["| parameter | kind | values | sampled when |", "|---|---|---|---|"]
    for param in space:
        if param.kind == "categorical":
            values = ", ".join(f"`{choice}`" for choice in param.choices)
        else:
            values = (
                f"{param.low:g} – {param.high:g}"
                + (" (log)" if param.log else "")
                + (f", step {param.step:g}" if param.step else "")
            )
        when = (
            f"`{param.when[0]}` in {', '.join(f'`{v}`' for v in param.when[1])}" if param.when else "always"
        )
        lines.append(f"| {param.name} | {param.kind} | {values} | {when} |")
    return "\n".join(lines)


def metrics_table(systems: Mapping[str, Mapping[str, float]], metrics: Sequence[str] = METRICS) -> str:
    """Markdown systems × metrics."""
    lines = ["| system | " + " | ".join(metrics) + " |", "|" + "---|" * (len(metrics) + 1)]
    lines += [
        f"| {name} | " + " | ".join(f"{values[m]:.4f}" for m in metrics) + " |"
        for name, values in systems.items()
    ]
    return "\n".join(lines)


def kinds_table(per_kind: PerKind, metric: str) -> str:
    """Markdown kinds × systems of one metric: `{system: {kind: figure}}` (the first system's kinds
    give the rows and counts)."""
    systems = list(per_kind)
    first = per_kind[systems[0]]
    lines = ["| kind | n | " + " | ".join(systems) + " |", "|---|---:|" + "---:|" * len(systems)]
    for kind, info in first.items():
        cells = [f"{per_kind[s][kind].mean:.4f}" if kind in per_kind[s] else "—" for s in systems]
        lines.append(f"| {kind} | {info.n} | " + " | ".join(cells) + " |")
    lines.append(f"\n{metric} per query kind (`metadata.kind` of the judged queries).")
    return "\n".join(lines)


def cross_validation_table(cv: CrossValidationRecord) -> str:
    """Markdown of a nested cross-validation: per fold the chosen trial, its value on the folds it
    was tuned on, and the held-out fold's mean for the tuned config and the defaults; then the
    out-of-fold mean with its interval."""
    tuned, defaults, comparison = cv.tuned.interval, cv.defaults.interval, cv.comparison
    lines = [
        "| fold | queries | chosen trial | tuned on the other folds | held-out fold, tuned | held-out fold, defaults |",
        "|---:|---:|---|---:|---:|---:|",
    ]
    for i, (fold, config) in enumerate(zip(cv.folds, cv.configs)):
        chosen = f"#{config.trial}" + (" (the defaults)" if config.defaults else "")
        lines.append(
            f"| {i + 1} | {len(fold)} | {chosen} | {config.tuning_value:.4f} | "
            f"{cv.tuned.fold_means[i]:.4f} | {cv.defaults.fold_means[i]:.4f} |"
        )
    level = round(100 * tuned.confidence)
    lines += [
        "",
        (
            f"Out of fold, {cv.metric}: tuned {tuned.mean:.4f} ({level}% CI {tuned.low:.4f}–"
            f"{tuned.high:.4f}) vs defaults {defaults.mean:.4f} ({defaults.low:.4f}–"
            f"{defaults.high:.4f}); paired {comparison.test} p = "
            f"{comparison.p_value:.4g} over {comparison.n} queries."
        ),
    ]
    return "\n".join(lines)


def describe_splits(record: SweepRecord) -> str:
    """One sentence: what the sweep tuned on and what it reports on."""
    queries = record.queries or {}
    tuned_on, split = record.tuned_on, record.split
    cv = record.cross_validation
    if cv:
        return (
            f"Nested {cv.k}-fold cross-validation over all {queries.get(split)} judged queries: each fold "
            f"scored by the config a {cv.trials_per_fold}-trial study chose on the other folds; the main "
            f"study tuned on all queries (in sample) gives the config that is served only when the "
            f"cross-validation is significant."
        )
    return (
        f"Tuned on the `{tuned_on}` split ({queries.get(tuned_on, queries.get('dev'))} queries), reported on the "
        f"`{split}` split ({queries.get(split, queries.get('test'))} queries)."
    )


def write_summary(run_dir: str | os.PathLike, record: SweepRecord) -> Path:
    """`summary.md` of a sweep run: verdict, splits, the report-split metrics vs the references, the
    nested cross-validation (cross-validated sets), per-kind figures, best settings, engine state."""
    run_dir = Path(run_dir)
    best = record.best
    cv = record.cross_validation
    tuned = "tuned (out of fold)" if cv else "tuned (best trial)"
    systems = {tuned: best.test_metrics, **record.baselines}
    index = IndexConfig.from_manifest(best.index)
    metric = record.metric
    engine, trials, defaults = record.engine, record.trials, record.defaults
    if trials is None or defaults is None:
        raise InvalidValueError(f"the sweep record of {record.dataset} holds no trial counts or defaults")
    defaults_dev = defaults.dev_metrics[metric]
    lines = [
        f"# Sweep {record.dataset} — {run_dir.name}",
        "",
        f"**Verdict:** {record.verdict}.",
        "",
        describe_splits(record),
        (
            f"{trials.complete} trials completed, {trials.pruned} pruned (index-config cap, "
            f"repeated parameters); best trial #{best.trial} ({'all queries, in sample' if cv else record.tuned_on} "
            f"{metric} {best.dev_value:.4f}; defaults there {defaults_dev:.4f})."
        ),
    ]
    if record.elapsed_s is not None:
        lines.append(f"Wall time of the sweep notebook: {record.elapsed_s:.0f} s.")
    if (run_dir / "config.json").is_file():
        exported = json.loads((run_dir / "config.json").read_text(encoding="utf-8"))["provenance"]
        lines += [
            "",
            f"**Export gate** ([config.json](config.json), what may be served): {exported['verdict']}.",
        ]
    if engine and engine.source_sha256:
        lines.append(
            f"Engine: sources {engine.source_sha256[:12]}, last engine commit "
            f"{(engine.commit or '?')[:10]}{' + uncommitted changes' if engine.dirty else ''}."
        )
    lines += ["", f"## {'Out-of-fold' if cv else 'Report-split'} metrics", "", metrics_table(systems)]
    if cv:
        lines += ["", "## Nested cross-validation", "", cross_validation_table(cv)]
    if record.per_kind:
        lines += ["", "## Per query kind", "", kinds_table(record.per_kind, metric)]
    lines += [
        "",
        "## Best settings",
        "",
        "```json",
        json.dumps(
            {
                "params": best.params,
                "bm25": {"k1": index.bm25.k1, "b": index.bm25.b},
                "chunk": {
                    "chunk_size": index.chunk.chunk_size,
                    "chunk_overlap": index.chunk.chunk_overlap,
                    "strategy": index.chunk.strategy,
                },
            },
            indent=2,
        ),
        "```",
        "",
        "## Files",
        "",
    ]
    lines += [
        f"- [{p.name}]({p.name})"
        for p in sorted(run_dir.iterdir())
        if p.suffix in {".ipynb", ".html", ".png", ".json"} or p.name == "study.db"
    ]
    path = run_dir / "summary.md"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
