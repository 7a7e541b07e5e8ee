"""Acceptance figures of the hybrid engine, in one dated report.

`python -m bench.engine_report` writes `reports/engine/<YYYY-MM-DD>/report.md`, `results.json`
and `project_queries.png`:

- project-name queries of the `memories` ground truth (kind `project-generic`, e.g. "rathole project
  codebase architecture", the motivating failure): share of the top 5 that belongs to the project
  the query names, for the default hybrid, the same without the tag signal (`tags=[]`) and pure
  vector search;
- `memories`: the default hybrid against pure vector search (Hit@10, MRR, nDCG@10; paired t-test);
- SciFact: staged against parallel hybrid (mean top-10 overlap, nDCG@10), both at the defaults.

Every figure comes from the evaluation indexes of :func:`hybridlab.eval.evalsets.ensure_index`.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.staged_runs import PARALLEL, compare_staged
from hybridlab.eval.datasets import REPO_ROOT, load_query_metadata
from hybridlab.eval.evaluate import Run, compare, make_run

PROJECT_KIND = "project-generic"
PROJECT_TOP = 5
STAGED_TOP = 10
#: search options of the systems compared on the project-name queries
PROJECT_SYSTEMS: dict[str, dict[str, Any]] = {
    "hybrid (default)": {},
    "hybrid, no tag signal": {"tags": []},
    "vector": {"mode": "vector"},
}


def named_collections(query: str, collections: Iterable[str]) -> list[str]:
    """The collections whose name occurs in `query` as a whole word (case-insensitive)."""
    words = set(re.findall(r"[\w-]+", query.lower()))
    return sorted(name for name in collections if name.lower() in words)


def share_from(collections: Sequence[str], wanted: Sequence[str]) -> float:
    """Share of `collections` (one per result) that is among `wanted`; 0.0 for no results."""
    return sum(name in wanted for name in collections) / len(collections) if collections else 0.0


def project_queries(opened, top: int = PROJECT_TOP) -> dict[str, dict[str, Any]]:
    """Per project-name query of an opened `memories` set: the named project and, per system of
    :data:`PROJECT_SYSTEMS`, the share of its top `top` results from that project."""
    index, now = opened.index, opened.evalset.now
    kinds = load_query_metadata(opened.evalset.judgements)
    queries = opened.evalset.dataset("all").queries
    results: dict[str, dict[str, Any]] = {}
    for qid, text in queries.items():
        if kinds.get(qid, {}).get("kind") != PROJECT_KIND:
            continue
        named = named_collections(text, index.known_collections)
        shares = {
            name: share_from(
                [hit.collection for hit in index.search(text, now=now, limit=top, **options)], named
            )
            for name, options in PROJECT_SYSTEMS.items()
        }
        results[qid] = {"query": text, "project": named, "shares": shares}
    return results


def hybrid_vs_vector(opened) -> dict[str, Any]:
    """The default hybrid against pure vector search on every judged query of an opened set."""
    dataset = opened.evalset.dataset("all")
    runs: dict[str, Run] = {
        name: make_run(opened.index, dataset.queries, now=opened.evalset.now, **options)
        for name, options in {"hybrid (default)": {}, "vector": {"mode": "vector"}}.items()
    }
    comparison = compare(dataset.qrels, runs, ("hit_rate@10", "mrr", "ndcg@10"))
    return {"queries": len(dataset.queries), **comparison.to_dict(), "markdown": comparison.to_markdown()}


def staged_agreement(opened) -> dict[str, Any]:
    """Staged vs parallel hybrid at the defaults: mean/min top-10 overlap and nDCG@10 of both."""
    dataset = opened.evalset.dataset("all")
    compared = compare_staged(
        opened.index,
        dataset.queries,
        {"staged": {}},
        qrels=dataset.qrels,
        top=STAGED_TOP,
        now=opened.evalset.now,
    )
    overlaps = compared["staged"]["overlaps"]
    staged_ndcg, parallel_ndcg = compared["staged"]["ndcg@10"], compared[PARALLEL]["ndcg@10"]
    return {
        "queries": len(overlaps),
        "chunks": opened.index.n_chunks,
        "mean_overlap": sum(overlaps) / len(overlaps),
        "min_overlap": min(overlaps),
        "queries_below_0.8": sum(value < 0.8 for value in overlaps),
        "ndcg_staged": staged_ndcg,
        "ndcg_parallel": parallel_ndcg,
        "ndcg_relative_difference": (staged_ndcg - parallel_ndcg) / parallel_ndcg,
    }


def mean_shares(projects: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
    """Mean share per system over the project-name queries."""
    systems = list(PROJECT_SYSTEMS)
    return {
        name: sum(row["shares"][name] for row in projects.values()) / max(1, len(projects))
        for name in systems
    }


def render_markdown(results: Mapping[str, Any]) -> str:
    """The report: project-name queries, hybrid vs vector on memories, staged vs parallel on SciFact."""
    projects = results["project_queries"]
    systems = list(PROJECT_SYSTEMS)
    lines = [
        f"# Hybrid engine acceptance — {results['date']}",
        "",
        (
            f"Command: `python -m bench.engine_report`. Model {results['model']}; memories evaluated at "
            f"now = {results['memories_now']}."
        ),
        "",
        f"## Project-name queries (memories, kind `{PROJECT_KIND}`, {len(projects)} queries)",
        "",
        (
            f"Share of the top {PROJECT_TOP} results that belong to the project the query names. The motivating "
            'failure was q001 "rathole project codebase architecture", which returned other projects\' memories '
            "about codebases and architecture."
        ),
        "",
        "| query | project | " + " | ".join(systems) + " |",
        "|---|---|" + "---:|" * len(systems),
    ]
    for qid, row in projects.items():
        cells = " | ".join(f"{row['shares'][name]:.1f}" for name in systems)
        lines.append(f"| {qid} {row['query']} | {', '.join(row['project'])} | {cells} |")
    means = mean_shares(projects)
    lines.append("| **mean** | | " + " | ".join(f"**{means[name]:.3f}**" for name in systems) + " |")
    perfect = sum(row["shares"][systems[0]] == 1.0 for row in projects.values())
    lines += [
        "",
        f"Default hybrid: all top {PROJECT_TOP} from the named project in {perfect} of {len(projects)} queries.",
        "",
        f"## memories: default hybrid vs pure vector ({results['memories']['queries']} queries)",
        "",
        results["memories"]["markdown"],
        "",
    ]
    staged = results["scifact_staged"]
    lines += [
        f"## SciFact: staged vs parallel hybrid ({staged['queries']} queries, {staged['chunks']} chunks)",
        "",
        "Targets: mean top-10 overlap ≥ 0.95, nDCG@10 within 1% of parallel.",
        "",
        "| mean overlap@10 | min overlap@10 | queries < 0.8 | nDCG@10 staged | nDCG@10 parallel | Δ |",
        "|---:|---:|---:|---:|---:|---:|",
        (
            f"| {staged['mean_overlap']:.3f} | {staged['min_overlap']:.2f} | {staged['queries_below_0.8']} | "
            f"{staged['ndcg_staged']:.4f} | {staged['ndcg_parallel']:.4f} | {staged['ndcg_relative_difference']:+.2%} |"
        ),
        "",
    ]
    return "\n".join(lines)


def plot_project_queries(projects: Mapping[str, Mapping[str, Any]], path: Path) -> Path:
    """Grouped bars: per project-name query, the share of the top 5 from the named project."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    systems = list(PROJECT_SYSTEMS)
    qids = list(projects)
    positions = np.arange(len(qids))
    width = 0.8 / len(systems)
    figure, axes = plt.subplots(figsize=(max(6.0, 0.7 * len(qids)), 4.2))
    for i, name in enumerate(systems):
        axes.bar(positions + i * width, [projects[q]["shares"][name] for q in qids], width, label=name)
    axes.set_xticks(
        positions + width * (len(systems) - 1) / 2,
        [f"{q}\n{', '.join(projects[q]['project'])}" for q in qids],
        fontsize=7,
    )
    axes.set_ylabel(f"share of top {PROJECT_TOP} from the named project")
    axes.set_ylim(0, 1.05)
    axes.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=len(systems), frameon=False)
    axes.set_title("memories: project-name queries")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    from hybridlab.config import DEFAULT_MODEL
    from hybridlab.eval.systems import open_evalset

    parser = argparse.ArgumentParser(
        prog="python -m bench.engine_report", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--out", default=str(REPO_ROOT / "reports" / "engine"), help="parent folder of the dated report"
    )
    parser.add_argument("--date", default=datetime.now(UTC).strftime("%Y-%m-%d"))
    args = parser.parse_args(argv)
    memories = open_evalset("memories", progress=True)
    scifact = open_evalset("scifact", progress=True)
    results = {
        "date": args.date,
        "model": DEFAULT_MODEL,
        "memories_now": memories.evalset.now,
        "project_queries": project_queries(memories),
        "memories": hybrid_vs_vector(memories),
        "scifact_staged": staged_agreement(scifact),
    }
    folder = Path(args.out) / args.date
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "results.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    (folder / "report.md").write_text(render_markdown(results), encoding="utf-8")
    plot_project_queries(results["project_queries"], folder / "project_queries.png")
    print(f"wrote {folder / 'report.md'}, results.json, project_queries.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
