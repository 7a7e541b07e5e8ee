"""Sweep one parameter over a list of values for each fusion method on each evaluation set.

See docs/internals/tune-eval.md#parameter-grids (commands, outputs, `--cv`).
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

from hybridlab.config import SEARCH_FIELDS, Bm25Config, ChunkConfig, IndexConfig, _coerce
from hybridlab.errors import InvalidValueError
from hybridlab.eval.crossval import nested_cv
from hybridlab.eval.datasets import split_query_ids
from hybridlab.eval.evaluate import score, score_per_query
from hybridlab.eval.significance import paired_test
from hybridlab.eval.systems import DEFAULT_SYSTEM, FUSION_SYSTEMS, open_evalset, system_runs
from hybridlab.extras import require

DEFAULT_VALUES = {"alpha": [0.0, 0.3, 0.5, 0.6, 0.7, 0.8, 1.0]}
CHUNK_FIELDS = {f.name: f for f in dataclasses.fields(ChunkConfig)}
BM25_FIELDS = {f.name: f for f in dataclasses.fields(Bm25Config)}
SPLITS = ("all", "dev", "test")


def parse_values(param: str, text: str) -> list[Any]:
    """Comma-separated values typed like the parameter's field; ValueError names the choices."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise InvalidValueError(f"no values given for {param!r}")
    if param in SEARCH_FIELDS:
        return [_coerce(param, item) for item in items]
    field = CHUNK_FIELDS.get(param) or BM25_FIELDS.get(param)
    if field is None:
        choices = sorted(set(SEARCH_FIELDS) | set(CHUNK_FIELDS) | set(BM25_FIELDS))
        raise InvalidValueError(f"unknown parameter {param!r}; choose from {choices}")
    parsers: dict[type, Any] = {
        bool: lambda item: item.lower() in {"1", "true", "yes", "on"},
        int: int,
        float: float,
        tuple: lambda item: tuple(int(level) for level in item.split("+")),
    }  # header_levels: 1+2+3
    parse = parsers.get(type(field.default), lambda item: None if item.lower() == "none" else item)
    return [parse(item) for item in items]


def index_config_for(param: str, value: Any, models: tuple[str, ...] = ()) -> IndexConfig:
    """The default IndexConfig (with `models` when given) with one chunking or BM25 field changed
    (search params: the default)."""
    base = IndexConfig(models=models) if models else IndexConfig()
    if param in CHUNK_FIELDS:
        return dataclasses.replace(base, chunk=dataclasses.replace(base.chunk, **{param: value}))
    if param in BM25_FIELDS:
        return dataclasses.replace(base, bm25=dataclasses.replace(base.bm25, **{param: value}))
    return base


def cross_validated_choice(per_query: dict[str, dict[str, float]], k: int) -> dict[str, Any]:
    """`per_query[value][qid]`: each of `k` folds scored at the value best on the other folds (ties:
    the earlier value); the out-of-fold mean with its interval, the value per fold, and the paired
    test against the first value on the same queries."""
    values = list(per_query)
    baseline = per_query[values[0]]

    def tune(train: list[str]) -> str:
        return max(values, key=lambda v: (sum(per_query[v][q] for q in train), -values.index(v)))

    result = nested_cv(list(baseline), tune, lambda v, fold: {q: per_query[v][q] for q in fold}, k=k)
    test = paired_test(result.per_query, baseline)
    return {
        "k": k,
        "chosen": result.configs,
        "mean": result.mean,
        "low": result.interval.low,
        "high": result.interval.high,
        "baseline_value": values[0],
        "baseline_mean": sum(baseline.values()) / len(baseline),
        "p_value": test.p_value,
    }


def sweep_dataset(
    name: str,
    param: str,
    values: list[Any],
    progress: bool = False,
    cv: int = 0,
    metric: str = "ndcg@10",
    models: tuple[str, ...] = (),
) -> dict[str, Any]:
    """`{fusion: {value: {split: {metric: mean}}}}` for one dataset, plus timings; with `cv` the
    default hybrid too and the cross-validated choice of its value (:func:`cross_validated_choice`)."""
    fusions = {DEFAULT_SYSTEM: {}, **FUSION_SYSTEMS} if cv else FUSION_SYSTEMS
    grid: dict[str, dict[str, dict[str, dict[str, float]]]] = {fusion: {} for fusion in fusions}
    default_per_query: dict[str, dict[str, float]] = {}
    started = time.perf_counter()
    opened = None
    for value in values:
        config = index_config_for(param, value, models)
        if opened is None or param not in SEARCH_FIELDS:
            opened = open_evalset(name, config, progress=progress)
        dataset = opened.evalset.dataset("all")
        split_ids = {split: set(split_query_ids(dataset.qrels, split)) for split in ("dev", "test")}
        extra = {param: value} if param in SEARCH_FIELDS else {}
        systems = {fusion: {**options, **extra} for fusion, options in fusions.items()}
        for fusion, run in system_runs(opened, dataset.queries, systems).items():
            if fusion == DEFAULT_SYSTEM:
                default_per_query[json.dumps(value)] = score_per_query(dataset.qrels, run, [metric])[metric]
            cell = {}
            for split in SPLITS:
                qrels = (
                    dataset.qrels
                    if split == "all"
                    else {q: r for q, r in dataset.qrels.items() if q in split_ids[split]}
                )
                cell[split] = score(qrels, run) if qrels else {}
            grid[fusion][json.dumps(value)] = cell
        print(f"{name} {param}={value}: {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    result = {
        "dataset": name,
        "queries": len(dataset.queries),
        "grid": grid,
        "seconds": round(time.perf_counter() - started, 1),
    }
    if cv:
        result["cross_validated"] = {"metric": metric, **cross_validated_choice(default_per_query, cv)}
    return result


def best_cells(result: dict[str, Any], metric: str, split: str) -> tuple[str, str, float]:
    """(fusion, value, score) of the best cell."""
    cells = [
        (fusion, value, metrics[split].get(metric, float("nan")))
        for fusion, by_value in result["grid"].items()
        for value, metrics in by_value.items()
    ]
    return max(cells, key=lambda cell: cell[2])


def render_markdown(
    results: list[dict[str, Any]], param: str, values: list[Any], metric: str, command: str
) -> str:
    lines = [
        f"# Sweep of `{param}` — {metric}",
        "",
        (
            f"Command: `{command}`. Cells: {metric} on all judged queries (dev / test split in brackets; "
            "the split is by sha1 of the query id). Other settings are the defaults; "
            "`sweep.json` has every metric."
        ),
        "",
    ]
    for result in results:
        fusion_names = list(result["grid"])
        lines += [
            f"## {result['dataset']} ({result['queries']} queries, {result['seconds']:.0f} s)",
            "",
            f"| {param} | " + " | ".join(fusion_names) + " |",
            "|---|" + "---|" * len(fusion_names),
        ]
        for value in values:
            key = json.dumps(value)
            cells = []
            for fusion in fusion_names:
                cell = result["grid"][fusion][key]
                dev, test = cell["dev"].get(metric), cell["test"].get(metric)
                split_text = f" ({dev:.3f} / {test:.3f})" if dev is not None and test is not None else ""
                cells.append(f"{cell['all'][metric]:.4f}{split_text}")
            lines.append(f"| {value} | " + " | ".join(cells) + " |")
        fusion, value, best = best_cells(result, metric, "dev")
        lines += [
            "",
            (
                f"Best on dev: {fusion} at {param} = {value} ({metric} {best:.4f} on dev, "
                f"{result['grid'][fusion][value]['test'].get(metric, float('nan')):.4f} on test)."
            ),
            "",
        ]
        chosen = result.get("cross_validated")
        if chosen:
            lines += [
                (
                    f"Cross-validated choice for the default hybrid ({chosen['k']} folds, {chosen['metric']}): "
                    f"the folds chose {param} = {', '.join(chosen['chosen'])}; out of fold **{chosen['mean']:.4f}** "
                    f"[{chosen['low']:.4f}, {chosen['high']:.4f}] against {chosen['baseline_mean']:.4f} at "
                    f"{param} = {chosen['baseline_value']} on the same queries (paired randomisation p "
                    f"{chosen['p_value']:.2f})."
                ),
                "",
            ]
    return "\n".join(lines)


def plot(results: list[dict[str, Any]], param: str, values: list[Any], metric: str, path: Path) -> None:
    """One panel per dataset: the metric (all queries) against the value, one line per fusion method."""
    require("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(results), figsize=(5 * len(results), 4), squeeze=False)
    numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
    xs = values if numeric else list(range(len(values)))
    for axis, result in zip(axes[0], results, strict=True):
        for fusion, by_value in result["grid"].items():
            axis.plot(xs, [by_value[json.dumps(v)]["all"][metric] for v in values], marker="o", label=fusion)
        axis.set_title(result["dataset"])
        axis.set_xlabel(param)
        axis.set_ylabel(metric)
        if not numeric:
            axis.set_xticks(xs, [str(v) for v in values])
        axis.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def cross_validated_metrics(result: dict[str, Any]) -> dict[str, Any]:
    """A set's cross-validated choice as `{"queries", "metrics"}`: the out-of-fold mean of the metric
    with its interval, the first value's mean on the same queries and the paired test's p."""
    chosen, metric = result["cross_validated"], result["cross_validated"]["metric"]
    return {
        "queries": result["queries"],
        "metrics": {
            metric: round(chosen["mean"], 4),
            f"{metric}_low": round(chosen["low"], 4),
            f"{metric}_high": round(chosen["high"], 4),
            f"baseline_{metric}": round(chosen["baseline_mean"], 4),
            "p_value": round(chosen["p_value"], 4),
        },
    }
