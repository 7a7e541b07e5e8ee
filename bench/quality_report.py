"""The dated quality report: each evaluation set × each retrieval system, with significance marks.

`python -m bench.quality_report [--datasets scifact,memories,holoviz] [--split all]` writes
`reports/quality/<YYYY-MM-DD>.md` and `.json`: Hit Rate@10, MRR, nDCG@10 and Recall@100 at document
level for BM25, dense, the default hybrid and every fusion method at the default alpha; `†` marks a
difference from the default hybrid that a paired t-test does not find significant (p ≥ 0.05).
Indexes come from :func:`hybridlab.eval.evalsets.ensure_index` (built once, then cached).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hybridlab.config import ChunkConfig, IndexConfig, resolve_auto, resolve_search_config
from hybridlab.eval.datasets import REPO_ROOT, load_query_metadata
from hybridlab.eval.evaluate import METRICS, Comparison, compare, wins_losses
from hybridlab.eval.systems import (
    DATASETS,
    DEFAULT_SYSTEM,
    SYSTEMS,
    OpenedSet,
    open_evalset,
    per_kind,
    system_runs,
)

WHOLE_DOCUMENTS = IndexConfig(chunk=ChunkConfig(strategy="whole"))
# Systems that need another index of the same corpus: name -> (index config, search options).
EXTRA_SYSTEMS: dict[str, dict[str, tuple[IndexConfig, dict[str, Any]]]] = {
    "holoviz": {
        "dense, whole documents": (WHOLE_DOCUMENTS, {"mode": "vector"}),
        "hybrid (default), whole documents": (WHOLE_DOCUMENTS, {}),
    },
}
OPTIONAL_DATASETS = ("cisi", "cranfield", "med")


def default_settings(opened: OpenedSet) -> dict[str, Any]:
    """The search settings the default hybrid resolves to on this index (adaptive alpha etc.)."""
    config, sources = resolve_search_config(
        {}, config_file=opened.index.config_file, n_chunks=opened.index.n_chunks
    )
    config = resolve_auto(config, opened.index.n_chunks)
    return {
        "fusion": config.fusion,
        "alpha": config.alpha,
        "alpha_source": sources["alpha"],
        "rrf_k": config.rrf_k,
        "normalization": config.normalization,
        "depth": config.depth,
        "staged": config.staged,
        "expand_hops": config.expand_hops,
        "fill_dense": config.fill_dense,
        "decay": config.decay,
        "recency_weight": config.recency_weight,
        "tag_weight": config.tag_weight,
    }


def dataset_report(name: str, split: str = "all", *, progress: bool = False) -> dict[str, Any]:
    """Every system of the report on one evaluation set: scores, p-values, wins/losses, per kind."""
    opened = open_evalset(name, progress=progress)
    dataset = opened.evalset.dataset(split)
    started = time.perf_counter()
    runs = system_runs(opened, dataset.queries, SYSTEMS)
    build_seconds = {"default": round(opened.seconds, 1)}
    for system, (config, options) in EXTRA_SYSTEMS.get(name, {}).items():
        other = open_evalset(name, config, progress=progress)
        build_seconds[system] = round(other.seconds, 1)
        runs.update(system_runs(other, dataset.queries, {system: options}))
    comparison = compare(dataset.qrels, runs)
    per_query = comparison.per_query
    record = {
        "dataset": name,
        "split": split,
        "queries": len(dataset.queries),
        "now": opened.evalset.now,
        "index": relative_to_repo(opened.index_dir),
        "chunks": opened.index.n_chunks,
        "documents": len(set(opened.index.snapshot().generation.doc_ids)),
        "default_settings": default_settings(opened),
        "index_seconds": build_seconds,
        "search_seconds": round(time.perf_counter() - started, 1),
        "comparison": comparison.to_dict(),
        "wins_losses_ndcg@10": {
            other: {
                k: len(v)
                for k, v in wins_losses(
                    per_query[DEFAULT_SYSTEM]["ndcg@10"], per_query[other]["ndcg@10"]
                ).items()
            }
            for other in ("bm25", "dense")
        },
        "per_query": {
            system: {
                metric: {qid: round(value, 4) for qid, value in values.items()}
                for metric, values in by_metric.items()
            }
            for system, by_metric in per_query.items()
        },
        "same_as_default": [
            system for system, run in runs.items() if system != DEFAULT_SYSTEM and run == runs[DEFAULT_SYSTEM]
        ],
    }
    kinds = load_query_metadata(opened.evalset.judgements)
    if any(meta.get("kind") for meta in kinds.values()):
        record["per_kind"] = {
            system: {
                metric: per_kind(opened.evalset.judgements, per_query[system][metric])
                for metric in ("hit_rate@10", "mrr", "ndcg@10")
            }
            for system in (DEFAULT_SYSTEM, "bm25", "dense")
        }
    return record


def relative_to_repo(path: str | Path) -> str:
    """`path` relative to the checkout when inside it, else its folder name: reports name no machine paths."""
    path = Path(path).resolve()
    return path.relative_to(REPO_ROOT).as_posix() if path.is_relative_to(REPO_ROOT) else path.name


def comparison_of(record: Mapping[str, Any]) -> Comparison:
    data = record["comparison"]
    return Comparison(
        data["systems"], data["metrics"], data["scores"], data["p_values"], data["max_p"], data["stat_test"]
    )


def render_markdown(records: Sequence[Mapping[str, Any]], date: str, command: str) -> str:
    """The report as markdown: one table per dataset, then the wins/losses and per-kind tables."""
    lines = [
        f"# hybridlab quality report, {date}",
        "",
        (
            f"Command: `{command}`. Document-level metrics (chunks grouped to their document by best "
            "chunk). Baseline of every significance test: the default hybrid configuration; † = not "
            "significantly different from it (paired t-test, p ≥ 0.05); bold = best in the column."
        ),
        "",
    ]
    lines += [
        "## Headline (nDCG@10)",
        "",
        "| dataset | queries | " + " | ".join(SYSTEMS) + " |",
        "|---|---:|" + "---:|" * len(SYSTEMS),
    ]
    for record in records:
        comparison = comparison_of(record)
        cells = []
        for system in SYSTEMS:
            cell = f"{comparison.scores[system]['ndcg@10']:.3f}"
            if system != DEFAULT_SYSTEM and not comparison.significant(system, "ndcg@10"):
                cell += " †"
            cells.append(cell)
        lines.append(f"| {record['dataset']} | {record['queries']} | " + " | ".join(cells) + " |")
    for record in records:
        settings = record["default_settings"]
        hops = f" ({settings.get('expand_hops')} corpus-graph hops)" if settings["staged"] else ""
        lines += [
            "",
            f"## {record['dataset']}",
            "",
            (
                f"{record['queries']} queries (split `{record['split']}`), {record['documents']} documents, "
                f"{record['chunks']} chunks; now = {record['now'] or 'the clock (no recency in this set)'}. "
                f"Default hybrid resolves to fusion `{settings['fusion']}`, alpha {settings['alpha']} "
                f"({settings['alpha_source']}), staged {settings['staged']}"
                f"{hops}, "
                f"fill_dense {settings.get('fill_dense')}, rrf_k {settings['rrf_k']}, "
                f"normalization `{settings['normalization']}`, decay {settings['decay']}."
            ),
            "",
            comparison_of(record).to_markdown(),
            "",
        ]
        if record.get("same_as_default"):
            lines.append(
                f"Identical runs to the default hybrid (its settings): {', '.join(record['same_as_default'])}."
            )
        wl = record["wins_losses_ndcg@10"]
        lines.append(
            "Per query, default hybrid vs "
            + "; vs ".join(
                f"{other}: {v['wins']} wins, {v['ties']} ties, {v['losses']} losses (nDCG@10)"
                for other, v in wl.items()
            )
            + "."
        )
        if "per_kind" in record:
            kinds = record["per_kind"][DEFAULT_SYSTEM]["ndcg@10"]
            lines += [
                "",
                "Per query kind (hit_rate@10 / MRR / nDCG@10):",
                "",
                "| kind | n | " + " | ".join(record["per_kind"]) + " |",
                "|---|---:|" + "---|" * len(record["per_kind"]),
            ]
            for kind, info in kinds.items():
                cells = []
                for system, metrics in record["per_kind"].items():
                    cells.append(
                        " / ".join(
                            f"{metrics[m][kind]['mean']:.3f}" for m in ("hit_rate@10", "mrr", "ndcg@10")
                        )
                    )
                lines.append(f"| {kind} | {info['n']} | " + " | ".join(cells) + " |")
    lines.append("")
    return "\n".join(lines)


def write_report(
    records: Sequence[Mapping[str, Any]], folder: Path, date: str, command: str
) -> tuple[Path, Path]:
    """`<folder>/<date>.md` and `<date>.json` (the JSON keeps per-query scores)."""
    folder.mkdir(parents=True, exist_ok=True)
    markdown, data = folder / f"{date}.md", folder / f"{date}.json"
    markdown.write_text(render_markdown(records, date, command), encoding="utf-8")
    payload = {"date": date, "command": command, "metrics": list(METRICS), "datasets": list(records)}
    data.write_text(json.dumps(payload, allow_nan=False, separators=(",", ":")) + "\n", encoding="utf-8")
    return markdown, data


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.quality_report", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--datasets",
        default=",".join(DATASETS),
        help=f"comma-separated evaluation sets (default {','.join(DATASETS)}; "
        f"also {','.join(OPTIONAL_DATASETS)}; 'all' = every one)",
    )
    parser.add_argument("--split", default="all", choices=["all", "dev", "test"])
    parser.add_argument("--out", default=str(REPO_ROOT / "reports" / "quality"), help="report folder")
    parser.add_argument("--date", help="report date (default today, UTC)")
    parser.add_argument("--progress", action="store_true", help="show index-building progress")
    args = parser.parse_args(argv)
    names = (
        list(DATASETS + OPTIONAL_DATASETS)
        if args.datasets == "all"
        else [n.strip() for n in args.datasets.split(",") if n.strip()]
    )
    date = args.date or datetime.now(UTC).strftime("%Y-%m-%d")
    records = []
    for name in names:
        started = time.perf_counter()
        records.append(dataset_report(name, args.split, progress=args.progress))
        print(f"{name}: {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    command = "python -m bench.quality_report " + " ".join(argv if argv is not None else sys.argv[1:])
    markdown, data = write_report(records, Path(args.out), date, command.strip())
    print(markdown.read_text(encoding="utf-8"))
    print(f"wrote {markdown} and {data}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
