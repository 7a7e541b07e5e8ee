"""`search` and `stats`: reading an index."""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from typing import Any

from hybridlab.cli.options import (
    UsageError,
    add_search_options,
    backend_args,
    encoder_options,
    index_arg,
    open_search_index,
    positive_int,
    search_kwargs,
)


def add_search(sub: argparse._SubParsersAction) -> None:
    """The `search` command."""
    p = sub.add_parser("search", help="search an index")
    p.add_argument("query")
    index_arg(p)
    p.add_argument("--limit", "-k", type=positive_int, help="results to return (default 10)")
    p.add_argument("--explain", action="store_true", help="show the score breakdown of each result")
    encoder_options(p, documents=False)
    p.add_argument("--json", action="store_true", help="print a JSON list of results")
    add_search_options(p)
    backend_args(p)
    p.set_defaults(func=cmd_search)


def _print_results(results, as_json: bool) -> None:
    if as_json:
        print(json.dumps([r.to_dict() for r in results], indent=2, ensure_ascii=False, default=str))
        return
    if not results:
        print("no results")
    for r in results:
        print(f"{r.rank:>3}. {r.doc_id}  [{r.section or r.title}]  score={r.score:.4f}  chunk={r.chunk_id}")
        print(f"     {r.snippet}")
        if r.explain:
            e = r.explain
            print(
                f"     dense {e['dense_score']} (#{e['dense_rank']})  bm25 {e['bm25_score']} (#{e['bm25_rank']})  "
                f"tags {e['matched_tags']} x{e['tag_boost']}  recency {e['recency_factor']:.3f}  "
                f"fused {e['fused_score']:.5f}  {e['fusion']} alpha={e['alpha']} ({e['alpha_source']})  {e['mode']}"
            )
            if e.get("lexical_evidence") is not None:
                agreement = e["retriever_agreement"]
                print(
                    f"     evidence: lexical {e['lexical_evidence']:.2f} -> bm25 weight x{e['lexical_factor']:.2f}  "
                    f"agreement {'-' if agreement is None else f'{agreement:.1f}'}  "
                    f"recency intent {'yes' if e['recency_intent'] else 'no'} (weight {e['recency_weight_used']})"
                )
            if e.get("late_score") is not None:
                print(
                    f"     second stage: maxsim {e['late_score']:.4f} (#{e['late_rank']} of the top {e['late_depth']})  "
                    f"{e['late_combination']} weight {e['late_weight']}  {e['late_model']}"
                )
            if e.get("rerank_score") is not None:
                print(
                    f"     cross-encoder: {e['rerank_score']:.4f} (#{e['rerank_rank']})  {e['rerank_model']}"
                )


def cmd_search(args: argparse.Namespace) -> int:
    if not args.query.strip():
        raise UsageError("empty query: give some words to search for")
    index = open_search_index(args)
    kwargs = search_kwargs(args)  # with --limit, a SearchConfig field
    results = index.search(args.query, explain=args.explain, **kwargs)
    _print_results(results, args.json)
    return 0


def add_stats(sub: argparse._SubParsersAction) -> None:
    """The `stats` command."""
    p = sub.add_parser("stats", help="counts per collection, chunk type and model")
    index_arg(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_stats)


def cmd_stats(args: argparse.Namespace) -> int:
    from hybridlab.search.engine import open_index

    stats = open_index(args.index_dir).stats()
    if args.json:
        print(json.dumps(stats.to_dict(), indent=2, default=str))
        return 0
    print(f"index {stats.index} — generation {stats.generation}, built {stats.built_at}")
    print(f"documents {stats.documents}, chunks {stats.chunks}, distinct tags {stats.tags}")
    print("chunks per collection:")
    for name, count in stats.by_collection.items():
        print(f"  {name:<30} {count:>8}  ({stats.documents_by_collection.get(name, 0)} documents)")
    print("chunks per type:")
    for name, count in stats.by_chunk_type.items():
        print(f"  {name:<30} {count:>8}")
    print("embedding models:")
    for name, info in stats.models.items():
        print(f"  {name:<30} dim {info.dim:>4}  vectors {info.vectors:>8}  index {info.index}")
        spec = info.encoder or {}
        if spec:  # the encoder spec that built the vectors: what a query must be encoded like
            print("    encoder " + _encoder_spec(spec))
    merge = stats.last_merge
    print(
        f"segments {len(stats.segments)}, tombstoned documents {stats.tombstones}, last merge "
        + (
            f"{merge.at} ({merge.segments} segments, {merge.chunks} chunks, {merge.reason})"
            if merge
            else "none"
        )
    )
    log = stats.write_ahead_log
    print(f"write-ahead log {log.file}: {log.memories} memories not yet in a segment")
    return 0


#: the keys of a model's encoder spec that `hybridlab stats` prints, in this order (those set)
ENCODER_KEYS = (
    "source",
    "revision",
    "backend",
    "dtype",
    "pooling",
    "normalize",
    "max_seq_length",
    "query_prefix",
    "document_prefix",
    "settings",
)


def _encoder_spec(spec: Mapping[str, Any]) -> str:
    return ", ".join(f"{key} {spec[key]!r}" for key in ENCODER_KEYS if spec.get(key) not in (None, "", {}))
