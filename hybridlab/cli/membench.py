"""`hybridlab membench`: LoCoMo or LongMemEval from its published file, end to end."""

from __future__ import annotations

import argparse
import json
import shutil
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import date
from pathlib import Path
from typing import Any

from hybridlab.config import REPO_ROOT, IndexConfig, load_config_file

READERS = {
    "locomo": "hybridlab.eval.conversations.locomo:read_locomo",
    "longmemeval": "hybridlab.eval.conversations.longmemeval:read_longmemeval",
}


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "membench",
        help="memory benchmarks: LoCoMo or LongMemEval from their published files, "
        "each question ranked against its own conversation/haystack; the papers' metrics, TREC runs",
    )
    p.add_argument("benchmark", choices=sorted(READERS))
    p.add_argument(
        "path", help="locomo10.json, or longmemeval_{s,m,oracle}*.json (never downloaded by hybridlab)"
    )
    p.add_argument(
        "--granularity",
        choices=["turn", "session", "both"],
        default="both",
        help="what a document is: a turn, or a session (default both; turn runs are also scored "
        "at session level)",
    )
    p.add_argument("--systems", default="hybrid,bm25,vector", help="comma-separated: hybrid, bm25, vector")
    p.add_argument("--depth", type=int, default=50, help="results per question (default 50)")
    p.add_argument("--config", help="exported config JSON whose search settings every system gets")
    p.add_argument("--model", help="embedding model (default: the index default, MiniLM)")
    p.add_argument("--no-context", action="store_true", help="index turns without the turn before them")
    p.add_argument("--haystacks", type=int, help="only the first N haystacks (a quick look)")
    p.add_argument("--out", help="where the report goes (default reports/membench/<date>-<benchmark>)")
    p.add_argument("--work", help="haystack indexes and embeddings cache (default .cache/membench)")
    p.add_argument("--fresh", action="store_true", help="empty the work folder first (a cold run)")
    p.add_argument(
        "--via-mcp",
        action="store_true",
        help="also run the hybrid through the MCP server (store_memory, search) and compare",
    )
    p.add_argument(
        "--cv",
        action="append",
        metavar="NAME=V1,V2",
        help="leave-one-haystack-out cross-validation of search or chunking settings (e.g. alpha, "
        "memory_chunk_size; repeatable: a grid; the first value of each is the default's), reported "
        "out of fold; at --granularity (both: turn)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help='print {"queries", "metrics"} of the first system at the first granularity (what repro reads)',
    )
    p.add_argument("-q", "--quiet", action="store_true")
    p.set_defaults(func=cli_membench)


def _reader(benchmark: str):
    import importlib

    module, name = READERS[benchmark].split(":")
    return getattr(importlib.import_module(module), name)


def _mcp_server(config: str | None) -> Callable[[Path], AbstractContextManager[Any]]:
    """Index folder -> the MCP server over it under `config` (a context that lets go of the folder)."""
    from hybridlab.server.mcp import serving

    return lambda folder: serving(folder, config)


def cli_membench(args: argparse.Namespace) -> int:
    from hybridlab.eval.conversations import runner, served

    haystacks = _reader(args.benchmark)(args.path)[: args.haystacks]
    work = Path(args.work or REPO_ROOT / ".cache" / "membench")
    if args.fresh and work.exists():
        shutil.rmtree(work)
    out = Path(
        args.out or REPO_ROOT / "reports" / "membench" / f"{date.today().isoformat()}-{args.benchmark}"
    )
    config_file = load_config_file(args.config) if args.config else {}
    options = dict(config_file.get("search") or {})
    index_config = IndexConfig(models=(args.model,)) if args.model else IndexConfig()
    granularities = ["turn", "session"] if args.granularity == "both" else [args.granularity]
    summary: dict = {}
    if args.cv:
        return _cross_validate(args, haystacks, work, out, options, index_config)
    for granularity in granularities:
        settings = runner.BenchSettings(
            granularity,
            tuple(args.systems.split(",")),
            args.depth,
            options,
            index_config,
            not args.no_context,
            args.benchmark,
        )
        started = time.perf_counter()
        result = runner.run_haystacks(haystacks, settings, work, progress=not args.quiet)
        levels = [granularity] + (["session"] if granularity == "turn" else [])
        summary[granularity] = runner.write_outputs(result, out / granularity, levels)
        summary[granularity]["wall_seconds"] = round(time.perf_counter() - started, 1)
        if args.via_mcp:
            started = time.perf_counter()
            mcp = served.run_served(
                haystacks, settings, work / "mcp", _mcp_server(args.config), progress=not args.quiet
            )
            table = runner.write_outputs(mcp, out / f"{granularity}-mcp", [granularity])
            summary[f"{granularity}-mcp"] = {**table, "wall_seconds": round(time.perf_counter() - started, 1)}
            lab = summary[granularity]["levels"][granularity]["hybrid"]
            got = table["levels"][granularity]["hybrid"]
            key = "recall@5" if args.benchmark == "locomo" else "recall_any@5"
            difference = got[key]["all"]["mean"] - lab[key]["all"]["mean"]
            summary[f"{granularity}-mcp"]["difference_" + key] = round(difference, 4)
            print(
                f"{granularity}: {key} via MCP {got[key]['all']['mean']:.4f}, lab {lab[key]['all']['mean']:.4f} "
                f"(difference {difference:+.4f})"
            )
        if not args.quiet:
            print((out / granularity / "summary.md").read_text(encoding="utf-8"))
    (out / "summary.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    if args.json:
        first = granularities[0]
        table = summary[first]["levels"][first][args.systems.split(",")[0]]
        print(
            json.dumps(
                {
                    "queries": next(iter(table.values()))["all"]["n"],
                    "metrics": {name: round(value["all"]["mean"], 4) for name, value in table.items()},
                }
            )
        )
    else:
        print(f"report: {out}")
    return 0


def _cross_validate(
    args: argparse.Namespace, haystacks, work: Path, out: Path, options: dict, index_config: IndexConfig
) -> int:
    from hybridlab.eval.conversations import runner, tuning

    axes = dict(tuning.parse_axis(text) for text in args.cv)
    granularity = "turn" if args.granularity == "both" else args.granularity
    settings = runner.BenchSettings(
        granularity, ("hybrid",), args.depth, options, index_config, not args.no_context, args.benchmark
    )
    result = tuning.cross_validate(haystacks, settings, tuning.grid(axes), work, progress=not args.quiet)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"cv-{granularity}.json").write_text(json.dumps(result, indent=2), encoding="utf-8")
    print(
        f"leave-one-haystack-out over {len(result['grid'])} settings ({granularity} level, n={result['n']}): "
        f"out of fold recall@5 {100 * result['out_of_fold_recall@5']:.1f}, recall@10 "
        f"{100 * result['out_of_fold_recall@10']:.1f}, recall_any@5 {100 * result['out_of_fold_recall_any@5']:.1f}; "
        f"the defaults (first setting) in sample "
        f"{100 * result['defaults_recall']:.1f}"
    )
    for fold in result["folds"]:
        print(f"  {fold['held_out']}: chose {fold['chosen']}")
    print(f"report: {out / f'cv-{granularity}.json'}")
    return 0
