"""`eval`, `fuse` and `demo`: scoring an index or run files against judgements."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hybridlab.cli.options import (
    DEFAULT_INDEX,
    UsageError,
    add_search_options,
    backend_args,
    encoder_options,
    evalsets_arg,
    index_arg,
    open_search_index,
    positive_int,
    search_kwargs,
)

if TYPE_CHECKING:
    from hybridlab.eval.fuse_runs import FusionSetting


def add_eval(sub: argparse._SubParsersAction) -> None:
    """The `eval` command."""
    p = sub.add_parser("eval", help="score an index against queries + qrels with ranx")
    index_arg(p)
    p.set_defaults(
        index_dir=None
    )  # default: with --dataset the set's evaluation index, else HYBRIDLAB_INDEX/.hybridlab
    p.add_argument(
        "--dataset",
        help="an evaluation set (declared, e.g. scifact; a BEIR folder; or irds:<ir_datasets "
        "id>, e.g. irds:beir/scifact/test): its queries and qrels, and its cached index unless --index",
    )
    evalsets_arg(p)
    p.add_argument(
        "--queries",
        help="queries.jsonl[.gz] (BEIR) or a dataset folder (with --run: optional, for the per-kind table)",
    )
    p.add_argument("--qrels", help="qrels file (BEIR .tsv or TREC) or a dataset folder")
    p.add_argument("--save-run", help="write the run as a TREC run file")
    encoder_options(p, documents=False)
    p.add_argument(
        "--query-vectors",
        metavar="FILE",
        help="the queries' vectors from a file (Parquet id, vector; "
        "or .npy + ids), for a model that cannot encode here (docs/models.md)",
    )
    p.add_argument(
        "--run",
        action="append",
        dest="runs",
        metavar="FILE",
        help="score this run file (TREC or ranx JSON, gzipped or not) instead of searching the "
        "index; repeatable, the first is the baseline of the paired tests",
    )
    p.add_argument(
        "--metrics",
        type=_metric_list,
        default=None,
        metavar="M1,M2",
        help="ranx metrics, comma-separated (default hit_rate@10,mrr,ndcg@10,recall@100); e.g. "
        "recall@5,hit_rate@5 = the memory benchmarks' recall and recall_any at 5",
    )
    p.add_argument(
        "--test",
        choices=["randomization", "t-test"],
        default="randomization",
        help="with --run: the paired test against the baseline (Holm-corrected; default randomization)",
    )
    p.add_argument(
        "--kind",
        action="append",
        dest="kinds",
        metavar="KIND",
        help="only queries of this kind (their metadata.kind); repeatable",
    )
    p.add_argument(
        "--split",
        choices=["all", "dev", "test", "train", "cv"],
        default=None,
        help="score the deterministic dev or test half of the queries (sha1 of the query id); with "
        "--dataset, a split of the set (default: its report split)",
    )
    p.add_argument("--json", action="store_true")
    p.add_argument("-q", "--quiet", action="store_true")
    add_search_options(p)
    backend_args(p)
    p.set_defaults(func=cmd_eval)


def _metric_list(text: str) -> tuple[str, ...]:
    """`--metrics`: comma-separated ranx metric names (the families ranx scores, cut at @k or not)."""
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    known = (
        "hits",
        "hit_rate",
        "precision",
        "recall",
        "f1",
        "r-precision",
        "mrr",
        "map",
        "ndcg",
        "ndcg_burges",
        "bpref",
        "dcg",
        "dcg_burges",
    )
    bad = [name for name in names if name.split("@")[0] not in known]
    if not names or bad:
        raise argparse.ArgumentTypeError(
            f"unknown metric(s) {bad or text!r}; e.g. recall@5,hit_rate@5,ndcg@10"
        )
    return names


def cmd_eval(args: argparse.Namespace) -> int:
    from hybridlab.eval.evaluate import METRICS, make_run, score, write_trec_run

    if args.runs:
        return _eval_runs(args)
    evalset, queries, qrels, kinds = _eval_topics(args)
    if args.kinds:
        unknown = set(args.kinds) - set(kinds.values())
        if unknown:
            raise UsageError(f"no query has kind {sorted(unknown)}; kinds: {sorted(set(kinds.values()))}")
        queries = {q: t for q, t in queries.items() if kinds.get(q) in args.kinds}
    if not queries:
        raise UsageError(
            f"no query of {args.dataset or args.queries} has judgements in {args.dataset or args.qrels}"
        )
    if args.index_dir is None:  # --dataset: the set's cached evaluation index unless --index is given
        from hybridlab.eval.evalsets import ensure_index

        args.index_dir = (
            str(ensure_index(evalset, progress=not args.quiet))
            if evalset
            else os.environ.get("HYBRIDLAB_INDEX", DEFAULT_INDEX)
        )
    index = open_search_index(args)
    kwargs = search_kwargs(args)
    kwargs.pop("chunk_types", None)
    kwargs.pop("group_by_document", None)  # evaluation is at document level (qrels judge documents)
    if evalset is not None and evalset.now:
        kwargs.setdefault("now", evalset.now)
    if args.query_vectors:
        _use_query_vectors(index, args, queries)
    run = make_run(index, queries, progress=not args.quiet, **kwargs)
    metrics = score({q: qrels[q] for q in queries}, run, args.metrics or METRICS)
    if args.save_run:
        write_trec_run(run, args.save_run)
    if args.json:
        print(json.dumps({"queries": len(queries), "metrics": metrics}, indent=2))
    else:
        print(f"{len(queries)} queries")
        print("| metric | value |\n|---|---|")
        for name, value in metrics.items():
            print(f"| {name} | {value:.4f} |")
    return 0


def _eval_topics(args: argparse.Namespace):
    """The evaluation set (None without `--dataset`: a declared set, a folder or irds:ID), and the
    queries, qrels and query kinds of its split (`--split`, else its report split), or of the
    `--queries` and `--qrels` files (`--split`: their sha1 half)."""
    from hybridlab.eval.datasets import (
        load_qrels,
        load_queries,
        load_query_metadata,
        split_query_ids,
    )

    if args.dataset is None:
        if not args.runs and not (args.queries and args.qrels):
            raise UsageError(
                "eval needs --dataset NAME, or --queries and --qrels (to search the index), "
                "or --run FILE with --qrels (to score run files)"
            )
        if not args.qrels:
            raise UsageError("eval --run needs --qrels FILE or --dataset NAME")
        qrels = load_qrels(Path(args.qrels))
        if args.split not in (None, "all"):
            qrels = {q: qrels[q] for q in split_query_ids(qrels, args.split)}
        if not args.queries:
            return None, {}, qrels, {}
        queries = {q: t for q, t in load_queries(Path(args.queries)).items() if q in qrels}
        metadata = load_query_metadata(Path(args.queries))
        return None, queries, qrels, {q: str(m["kind"]) for q, m in metadata.items() if "kind" in m}
    from hybridlab.eval.evaluator import resolve_evalset

    evalset = resolve_evalset(args.dataset)
    dataset = evalset.dataset(args.split or evalset.report_split)
    kinds = {
        q: str(m[evalset.kinds])
        for q, m in load_query_metadata(evalset.queries_path).items()
        if evalset.kinds in m
    }
    return evalset, dataset.queries, dataset.qrels, kinds


def _use_query_vectors(index, args: argparse.Namespace, queries: dict[str, str]) -> None:
    """`eval --query-vectors FILE`: every query's vector read from a file (query id -> vector), for
    the model searched (a model that cannot encode here, or vectors made elsewhere)."""
    from hybridlab.encoders.registry import register_recorded
    from hybridlab.index.write.vectors_import import vectors_by_id

    register_recorded(index.manifest.encoders)
    model = index.choose_model(args.embedding_model, args.language)
    vectors = vectors_by_id(args.query_vectors, list(queries))
    dim = len(next(iter(vectors.values())))
    if dim != index.dense[model].dim:
        raise UsageError(
            f"{args.query_vectors} holds {dim}-d vectors but the index's {model!r} vectors are "
            f"{index.dense[model].dim}-d"
        )
    index.query_models.put_query_vectors(model, {queries[qid]: vector for qid, vector in vectors.items()})


def _eval_runs(args: argparse.Namespace) -> int:
    """`eval --run FILE ...`: score run files (TREC or ranx JSON, any tool's) in one report."""
    from hybridlab.eval.run_report import score_runs
    from hybridlab.eval.runs import read_run, run_name

    if args.save_run:
        raise UsageError("--save-run writes the index's run; with --run the runs are files already")
    _, _, qrels, kinds = _eval_topics(args)
    if args.kinds:
        if not kinds:
            raise UsageError("--kind needs --queries (the kinds are the queries' metadata.kind)")
        qrels = {q: docs for q, docs in qrels.items() if kinds.get(q) in args.kinds}
    if not qrels:
        raise UsageError(f"no query of {args.dataset or args.qrels} is left to score")
    runs = {}
    for path in args.runs:
        name = run_name(path)
        runs[path if name in runs else name] = read_run(path)
    report = score_runs(qrels, runs, *([args.metrics] if args.metrics else []), kinds=kinds, test=args.test)
    print(json.dumps(report.to_dict(), indent=2) if args.json else report.to_markdown())
    return 0


def add_fuse(sub: argparse._SubParsersAction) -> None:
    """The `fuse` command."""
    p = sub.add_parser(
        "fuse",
        help="fuse run files (TREC or ranx JSON, any tool's) with the engine's fusion; "
        "--tune-on chooses method and weights on one split, --report-on reports on another",
    )
    p.add_argument(
        "runs",
        nargs="+",
        metavar="RUN",
        help="a run file, or NAME=FILE to name it (the names "
        "dense / bm25 / tags give theoretical-min-max its floors)",
    )
    p.add_argument(
        "--method",
        choices=["rrf", "convex", "dbsf"],
        help="default rrf; with --tune-on unset = choose among all",
    )
    p.add_argument(
        "--normalization",
        choices=["min-max", "z-score", "theoretical-min-max", "none"],
        help="convex's normalisation (default min-max; with --tune-on unset = choose)",
    )
    p.add_argument(
        "--weights",
        type=float,
        nargs="+",
        metavar="W",
        help="one weight per run, in order (default equal; with --tune-on unset = a grid)",
    )
    p.add_argument("--rrf-k", type=positive_int, default=60, help="the RRF constant (default 60)")
    p.add_argument(
        "--limit", "-k", type=positive_int, default=100, help="results per query kept (default 100)"
    )
    p.add_argument("--out", required=True, help="the fused run (.json: ranx JSON; .gz: gzipped; else TREC)")
    p.add_argument("--tune-on", metavar="QRELS", help="choose the setting on these qrels' queries only")
    p.add_argument(
        "--report-on",
        metavar="QRELS",
        help="report the fused run and each input on these (queries disjoint from --tune-on)",
    )
    p.add_argument("--metric", default="ndcg@10", help="what --tune-on maximises (default ndcg@10)")
    p.add_argument("--grid-step", type=float, default=0.1, help="weight grid step of --tune-on (default 0.1)")
    p.add_argument(
        "--search",
        choices=["grid", "optuna"],
        default="grid",
        help="how --tune-on searches: every grid setting, or --trials settings proposed by Optuna's TPE "
        "sampler (weights continuous; needs the tune extra)",
    )
    p.add_argument(
        "--trials", type=positive_int, default=50, help="--search optuna: settings tried (default 50)"
    )
    p.add_argument("--seed", type=int, default=0, help="--search optuna: the sampler's seed (default 0)")
    p.add_argument("--test", choices=["randomization", "t-test"], default="randomization")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_fuse)


def _input_runs(specs: list[str]) -> dict[str, Any]:
    """The runs to fuse, by name (`NAME=FILE`, else the file's run name), in the order given;
    UsageError for two runs of one name, or fewer than two runs."""
    from hybridlab.eval.runs import read_run, run_name

    runs = {}
    for spec in specs:
        name, path = spec.split("=", 1) if "=" in spec and not Path(spec).exists() else (run_name(spec), spec)
        if name in runs:
            raise UsageError(f"two runs are named {name!r}; name them apart as NAME=FILE")
        runs[name] = read_run(path)
    if len(runs) < 2:
        raise UsageError("fuse needs at least two runs")
    return runs


def _tuned_setting(
    args: argparse.Namespace, runs: dict[str, Any], weights: dict[str, float] | None
) -> tuple[FusionSetting, dict[str, Any]]:
    """--tune-on: (the fusion setting that maximises --metric on the tuning qrels' queries, among
    the grid's or Optuna's proposals, the record of that choice); UsageError when the report scores
    queries it was tuned on."""
    from hybridlab.eval.datasets import load_qrels
    from hybridlab.eval.fuse_runs import candidate_settings, tune_fusion, tune_fusion_optuna

    tune_qrels = load_qrels(Path(args.tune_on))
    if args.report_on:
        shared = sorted(set(tune_qrels) & set(load_qrels(Path(args.report_on))))
        if shared:
            raise UsageError(
                f"the tuning and report splits share {len(shared)} queries (e.g. {shared[:3]}); "
                "tune on queries the report does not score"
            )
    grid = candidate_settings(
        list(runs),
        methods=[args.method] if args.method else None,
        normalizations=[args.normalization] if args.normalization else None,
        weights=[weights] if weights else None,
        rrf_k=args.rrf_k,
        step=args.grid_step,
    )
    if args.search == "optuna":
        setting, table = tune_fusion_optuna(
            runs,
            tune_qrels,
            grid,
            trials=args.trials,
            seed=args.seed,
            metric=args.metric,
            limit=args.limit,
        )
    else:
        setting, table = tune_fusion(runs, tune_qrels, grid, metric=args.metric, limit=args.limit)
    best = max(row[args.metric] for row in table)
    return setting, {
        "qrels": args.tune_on,
        "queries": len(tune_qrels),
        "metric": args.metric,
        "search": args.search,
        "value": best,
        "settings": len(table),
        "grid": table,
    }


def cmd_fuse(args: argparse.Namespace) -> int:
    """`fuse RUN RUN ...`: fuse run files with the engine's fusion; --tune-on chooses the setting on a
    tuning split, --report-on reports it on another (paired tests against each input run)."""
    from hybridlab.eval.datasets import load_qrels
    from hybridlab.eval.fuse_runs import FusionSetting, fuse_runs
    from hybridlab.eval.run_report import score_runs
    from hybridlab.eval.runs import write_run

    runs = _input_runs(args.runs)
    if args.weights is not None and len(args.weights) != len(runs):
        raise UsageError(f"--weights needs one weight per run ({len(runs)}), got {len(args.weights)}")
    weights = dict(zip(runs, args.weights)) if args.weights else None
    record: dict[str, Any] = {"runs": dict(zip(runs, args.runs))}
    if args.tune_on:
        setting, record["tuning"] = _tuned_setting(args, runs, weights)
    else:
        setting = FusionSetting(
            args.method or "rrf",
            tuple((weights or dict.fromkeys(runs, 1.0)).items()),
            args.normalization or "min-max",
            args.rrf_k,
        )
    fused = fuse_runs(runs, setting, args.limit)
    write_run(fused, args.out, name=f"hybridlab-fuse-{setting.method}")
    record.update(setting=setting.to_dict(), out=args.out, queries=len(fused))
    lines = [f"fused {len(runs)} runs ({setting.describe()}) over {len(fused)} queries into {args.out}"]
    if args.tune_on:
        t = record["tuning"]
        lines.append(
            f"chosen on {t['qrels']} ({t['queries']} queries, {t['settings']} settings, {args.search}): "
            f"{args.metric} {t['value']:.4f}"
        )
    if args.report_on:
        report = score_runs(load_qrels(Path(args.report_on)), {"fused": fused, **runs}, test=args.test)
        record["report"] = {"qrels": args.report_on, **report.to_dict()}
        lines += ["", f"Report on {args.report_on}:", "", report.to_markdown()]
    print(json.dumps(record, indent=2) if args.json else "\n".join(lines))
    return 0


def add_demo(sub: argparse._SubParsersAction) -> None:
    """The `demo` command (:func:`cmd_demo`)."""
    p = sub.add_parser("demo", help="the main job on the bundled memories ground truth")
    p.add_argument("--index", dest="index_dir", default=".hybridlab/demo")
    p.add_argument("--quick", action="store_true", help="skip the evaluation table")
    p.set_defaults(func=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    """`hybridlab demo`: :func:`hybridlab.demo.run_demo` into `--index`."""
    from hybridlab.demo import run_demo

    run_demo(args.index_dir, quick=args.quick)
    return 0
