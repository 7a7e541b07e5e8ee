"""The `hybridlab` command line. `--help` is instant: heavy libraries load inside the commands."""
from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hybridlab.config import SEARCH_FIELDS, apply_offline_environment
from hybridlab.errors import HybridlabError
from hybridlab.server.stderr import StderrHandler

DEFAULT_INDEX = ".hybridlab"
logger = logging.getLogger("hybridlab")


class UsageError(ValueError):
    """A command-line mistake with a one-line message."""


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (`error: ... (see `hybridlab search --help`)`), exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"error: {message} (see `{self.prog} --help`)\n")


def _number(cast: type, low: float, high: float | None = None) -> Callable[[str], Any]:
    """An argparse type: `cast` of the text within [low, high] (no upper bound when `high` is None)."""
    def parse(text: str):
        try:
            value = cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not {'an integer' if cast is int else 'a number'}: {text!r}") from None
        if high is None and value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {value}")
        if high is not None and not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be within [{low}, {high}], got {value}")
        return value
    return parse


_positive_int = _number(int, 1)
_unit_float = _number(float, 0, 1)


def add_search_options(parser: argparse.ArgumentParser) -> None:
    """The search knobs shared by `search`, `eval` and `mcp` (None = not set: env/config/default)."""
    g = parser.add_argument_group("search options (unset ones come from env HYBRIDLAB_*, --config, defaults)")
    g.add_argument("--config", help="exported config JSON (e.g. configs/best.json)")
    g.add_argument("--mode", choices=["hybrid", "vector", "bm25", "tags"])
    g.add_argument("--alpha", type=_unit_float, help="dense weight: 1.0 = pure vector, 0.0 = pure lexical/tag")
    g.add_argument("--fusion", choices=["rrf", "convex", "dbsf", "learned"])
    g.add_argument("--learned-model", help="--fusion learned: the model folder (default configs/fusion-learned)")
    g.add_argument("--normalization", choices=["min-max", "z-score", "theoretical-min-max", "none"])
    g.add_argument("--rrf-k", type=_positive_int, help="the RRF constant (default 60)")
    g.add_argument("--depth", type=_positive_int, help="candidates per retriever (default 100)")
    g.add_argument("--tag", action="append", dest="tags", metavar="TAG",
                   help="use (and filter by) this tag; repeatable; all must match unless --tags-any")
    g.add_argument("--no-tags", action="store_true", help="turn automatic tag extraction off")
    g.add_argument("--tags-any", action="store_true", help="with --tag: any of the tags may match")
    g.add_argument("--tag-weight", type=float)
    g.add_argument("--chunk-type", action="append", dest="chunk_types", metavar="TYPE")
    g.add_argument("--collection", action="append", metavar="NAME")
    g.add_argument("--since", help="only documents updated at/after this ISO date")
    g.add_argument("--until", help="only documents updated at/before this ISO date")
    g.add_argument("--min-score", type=float, help="drop results whose final fused score is lower")
    staged = g.add_mutually_exclusive_group()
    staged.add_argument("--staged", dest="staged", action="store_true", default=None,
                        help="BM25 narrows to --candidates, vectors re-score them")
    staged.add_argument("--no-staged", dest="staged", action="store_false")
    g.add_argument("--candidates", type=_positive_int)
    g.add_argument("--expand-hops", type=int, help="staged: corpus-graph hops from the best candidates (default 3; 0 = BM25 pool only)")
    g.add_argument("--expand-seeds", type=int, help="staged: candidates expanded per hop (default 20)")
    fill = g.add_mutually_exclusive_group()
    fill.add_argument("--fill-dense", action="store_true", default=None,
                      help="give BM25 candidates the dense run lacks their exact cosine, not none "
                           "(default: on above the staged threshold)")
    fill.add_argument("--no-fill-dense", dest="fill_dense", action="store_false")
    g.add_argument("--fallback-threshold", type=int)
    g.add_argument("--decay", type=float, help="recency decay per day (0 disables)")
    g.add_argument("--recency-weight", type=_unit_float)
    g.add_argument("--now", help="reference time for recency (ISO-8601); env HYBRIDLAB_NOW")
    adaptive = g.add_mutually_exclusive_group()
    adaptive.add_argument("--adaptive-fusion", dest="adaptive_fusion", action="store_true", default=None,
                          help="scale BM25's weight by the query's lexical evidence, recency by its intent (default)")
    adaptive.add_argument("--no-adaptive-fusion", dest="adaptive_fusion", action="store_false",
                          help="fixed fusion weights for every query")
    g.add_argument("--lexical-floor", type=_unit_float, help="lexical evidence at or below which BM25 gets no weight")
    g.add_argument("--lexical-ceiling", type=_unit_float, help="lexical evidence from which BM25 gets its full weight")
    g.add_argument("--rare-term-max-df", type=int,
                   help="a query term held by at most this many chunks lifts them above dense-only hits "
                        "(default 3; 0 = off)")
    g.add_argument("--rerank-depth", type=int, help="re-score the top N fused chunks with the cross-encoder (0 = off)")
    g.add_argument("--rerank-weight", type=_unit_float,
                   help="cross-encoder share of the reranked order (1.0 = its order alone; default 1.0)")
    g.add_argument("--rerank-model", help="the cross-encoder (default ms-marco-MiniLM-L-12-v2)")
    g.add_argument("--recency-intent-weight", type=_unit_float,
                   help="recency weight for queries asking for the latest state (current, still, ...)")
    g.add_argument("--feedback-weight", type=float,
                   help="dense feedback: move the query vector this far toward the fused list's best "
                        "documents, then search and fuse again (0 = off, the default)")
    g.add_argument("--feedback-docs", type=_positive_int, help="dense feedback: documents it reads (default 1)")
    g.add_argument("--chunk-decay", type=float,
                   help="score a document by all its chunks, s1 + d*s2 + d^2*s3 + ... (0 = its best chunk alone, the default)")
    g.add_argument("--embedding-model", help="which model's vectors to search")
    g.add_argument("--language", help="pick the model through the language table")
    g.add_argument("--chunks", action="store_true", help="return chunks instead of grouping to documents")


def search_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """Keyword arguments for `Index.search` from parsed options (unset ones left out)."""
    names = (*SEARCH_FIELDS, "chunk_types", "collection", "since", "until", "now", "embedding_model", "language")
    kwargs: dict[str, Any] = {f: getattr(args, f) for f in names if getattr(args, f, None) is not None}
    if getattr(args, "chunks", False):
        kwargs["group_by_document"] = False
    if args.no_tags:
        kwargs["tags"] = []
    elif args.tags:
        kwargs["tags"] = args.tags
        kwargs["tags_any"] = args.tags_any
    return kwargs


def index_config_from_args(args: argparse.Namespace):
    """An IndexConfig when any build option was given, else None (keep the index's own)."""
    from dataclasses import replace

    from hybridlab.config import Bm25Config, IndexConfig

    given = any(getattr(args, n, None) is not None for n in ("chunk_size", "chunk_overlap", "header_levels", "models",
                                                             "model_for_collection", "model_for_language", "dense_index",
                                                             "hnsw_ef_search", "graph_k", "index_tags"))
    if not given:
        return None
    base = IndexConfig()
    if args.index_dir and (Path(args.index_dir) / "manifest.json").exists():
        from hybridlab.index.layout import read_manifest

        base = read_manifest(Path(args.index_dir)).index_config
    chunk = base.chunk
    chunk = replace(
        chunk,
        chunk_size=args.chunk_size or chunk.chunk_size,
        chunk_overlap=chunk.chunk_overlap if args.chunk_overlap is None else args.chunk_overlap,
        header_levels=tuple(args.header_levels) if args.header_levels else chunk.header_levels,
        index_tags=chunk.index_tags if getattr(args, "index_tags", None) is None else args.index_tags,
    )
    def pairs(values):
        for value in values or ():
            if "=" not in value:
                raise UsageError(f"expected KEY=MODEL, got {value!r}")
        return tuple(tuple(value.split("=", 1)) for value in values or ())
    return replace(
        base, chunk=chunk, bm25=Bm25Config(**vars(base.bm25)),
        models=tuple(args.models) if args.models else base.models,
        model_by_collection=pairs(args.model_for_collection) or base.model_by_collection,
        model_by_language=pairs(args.model_for_language) or base.model_by_language,
        dense_index=args.dense_index or base.dense_index,
        hnsw_ef_search=getattr(args, "hnsw_ef_search", None) or base.hnsw_ef_search,
        graph_k=args.graph_k if getattr(args, "graph_k", None) is not None else base.graph_k,
    )


# ------------------------------------------------------------------ commands
def _qdrant_client(args: argparse.Namespace):
    """The Qdrant client of `--backend qdrant` (a server by --qdrant-url, else the local mode at --qdrant-path)."""
    from hybridlab.index import qdrant as qdrant_mirror

    if not (args.qdrant_url or args.qdrant_path):
        raise UsageError("--backend qdrant needs --qdrant-url URL or --qdrant-path DIR")
    return qdrant_mirror.connect(url=args.qdrant_url, path=args.qdrant_path)


def _open_search_index(args: argparse.Namespace):
    """The index to search: the local backend, or Qdrant's with `--backend qdrant`."""
    from hybridlab.search.engine import Index, open_index

    if getattr(args, "backend", "local") != "qdrant":
        return open_index(args.index_dir, args.config)
    from hybridlab.search import qdrant

    return Index(args.index_dir, args.config,
                 backend=qdrant.qdrant_backend(_qdrant_client(args), args.qdrant_collection))


def _vectors_hook(args: argparse.Namespace):
    """The build step of `index --vectors FILE`: the file's vectors under the last --model (a name that
    does not load here: an external spec with --query-prompt, --document-prompt, --max-seq-length)."""
    from hybridlab.index.vectors_import import import_step

    if not args.models:
        raise UsageError("--vectors needs --model NAME: the model the vectors are of (the last --model)")
    return import_step(args.vectors, args.models[-1], args.index_dir, args.vectors_by, query_prefix=args.query_prompt,
                       document_prefix=args.document_prompt, max_seq_length=args.max_seq_length)


def encoder_options(parser: argparse.ArgumentParser, documents: bool = True) -> None:
    """Encoder settings (None = not set: env HYBRIDLAB_<NAME>, then --config's "encoder", then the
    model's own or the index's recorded value; `hybridlab.config.resolve_encoder_settings`)."""
    g = parser.add_argument_group("encoder settings (unset ones come from env HYBRIDLAB_*, the model or the index)")
    g.add_argument("--device", help="cpu, cuda, cuda:1, mps or auto; several comma-separated share the work "
                   "(default: env HYBRIDLAB_DEVICE, else auto)")
    g.add_argument("--dtype", choices=["fp32", "fp16", "bf16"], help="weights' dtype; fp16/bf16 on a GPU only "
                   "(fp16 vectors meet fp32 queries, bf16 ones only bf16 queries)")
    g.add_argument("--encoder-backend", choices=["auto", "torch", "onnx"], help="MiniLM's runtime: onnx = its ONNX fp32 twin "
                   "(the same vectors, faster on a CPU); auto = onnx on a CPU when installed (env "
                   "HYBRIDLAB_DOCUMENT_BACKEND / HYBRIDLAB_QUERY_BACKEND)")
    g.add_argument("--model-path", action="append", dest="model_paths", metavar="NAME=PATH",
                   help="where model folder NAME is on this machine (repeatable; default: env "
                   "HYBRIDLAB_MODEL_PATHS=NAME=PATH[:NAME=PATH...], else the folder given by path, else where the "
                   "index recorded it). An index records a folder model by its name (`--model /models/tiny-bert` "
                   "is 'tiny-bert'; `--model-path NAME=PATH --model NAME` names it) and the sha256 of its files, "
                   "never by its path: after the folder moves or the index is copied, point NAME at the folder; "
                   "a folder with other files (another revision) is refused (docs/models.md)")
    if documents:
        g.add_argument("--batch-size", type=_positive_int, help="texts per encoder batch (default 32)")
        g.add_argument("--max-seq-length", type=_positive_int, help="tokens read per text (recorded in the spec)")
        g.add_argument("--query-prompt", help="text put before each query (default: the model's query prompt)")
        g.add_argument("--document-prompt", help="text put before each document (default: the model's prompt)")


def _configure_encoders(args: argparse.Namespace) -> None:
    """Set this process's encoder settings from the command's options, env and --config."""
    from hybridlab.config import load_config_file, resolve_encoder_settings
    from hybridlab.encoders.registry import configure

    if getattr(args, "encoder_backend", None):  # the argument over the env: the registry reads these
        os.environ["HYBRIDLAB_DOCUMENT_BACKEND"] = os.environ["HYBRIDLAB_QUERY_BACKEND"] = args.encoder_backend
    names = ("device", "batch_size", "dtype", "max_seq_length", "query_prompt", "document_prompt", "model_paths")
    config = load_config_file(args.config).get("encoder") if getattr(args, "config", None) else None
    configure(resolve_encoder_settings({name: getattr(args, name, None) for name in names}, config))


def cmd_index(args: argparse.Namespace) -> int:
    from hybridlab.index.build import index_paths, optimize

    if not args.paths and not args.optimize and not args.vectors:
        print("hybridlab index: give PATHS to index, or --optimize to merge the index's segments, or --vectors "
              "FILE to import", file=sys.stderr)
        return 2
    imported = _vectors_hook(args) if args.vectors else None
    if args.paths:
        report = index_paths(args.paths, args.index_dir, index_config_from_args(args), progress=not args.quiet,
                             force=args.force, check_content=args.check_content, imported=imported)
    elif imported is not None:
        from hybridlab.index.build import apply_changes

        report = apply_changes(args.index_dir, [], index_config_from_args(args), progress=not args.quiet,
                               imported=imported)
    if args.optimize:
        merged = optimize(args.index_dir, progress=not args.quiet)
        if not args.paths:
            report = merged
        print(f"optimize: {'merged every segment into one' if merged.committed else 'already one segment'} "
              f"(generation {merged.generation}, {merged.chunks} chunks, {merged.seconds:.2f} s)", file=sys.stderr)
    for path, reason in report.skipped:
        print(f"warning: skipped {path}: {reason}", file=sys.stderr)
    if args.backend == "qdrant":
        from hybridlab.index import qdrant as qdrant_mirror

        client = _qdrant_client(args)
        try:  # only what changed since the generation the collection mirrors; a full export when new
            synced = qdrant_mirror.sync_index(args.index_dir, client, args.qdrant_collection)
        finally:
            client.close()
        print(synced.summary(), file=sys.stderr)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2, default=str))
    else:
        print(report.summary())
    return 0


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
            print(f"     dense {e['dense_score']} (#{e['dense_rank']})  bm25 {e['bm25_score']} (#{e['bm25_rank']})  "
                  f"tags {e['matched_tags']} x{e['tag_boost']}  recency {e['recency_factor']:.3f}  "
                  f"fused {e['fused_score']:.5f}  {e['fusion']} alpha={e['alpha']} ({e['alpha_source']})  {e['mode']}")
            if e.get("lexical_evidence") is not None:
                agreement = e["retriever_agreement"]
                print(f"     evidence: lexical {e['lexical_evidence']:.2f} -> bm25 weight x{e['lexical_factor']:.2f}  "
                      f"agreement {'-' if agreement is None else f'{agreement:.1f}'}  "
                      f"recency intent {'yes' if e['recency_intent'] else 'no'} (weight {e['recency_weight_used']})")


def cmd_search(args: argparse.Namespace) -> int:
    if not args.query.strip():
        raise UsageError("empty query: give some words to search for")
    index = _open_search_index(args)
    kwargs = search_kwargs(args)  # with --limit, a SearchConfig field
    results = index.search(args.query, explain=args.explain, **kwargs)
    _print_results(results, args.json)
    return 0


def _memory_pages(index, args: argparse.Namespace, limit: int | None = None):
    """The memories under `args`' tag and date filters, newest first, a page of up to 500 at a time."""
    cursor, left = None, limit
    while True:
        page, cursor = index.list_documents(tags=args.tags or (), match=args.match, since=args.since,
                                            until=args.until, chunk_types=("memory",),
                                            limit=500 if left is None else min(500, left), cursor=cursor)
        yield from page
        if left is not None:
            left -= len(page)
        if cursor is None or not page or (left is not None and left <= 0):
            return


def cmd_memories(args: argparse.Namespace) -> int:
    """`hybridlab memories list|update|delete`: the MCP server's memory lifecycle on the command line."""
    from hybridlab.index.memory import MemoryWriter
    from hybridlab.search.engine import open_index

    index = open_index(args.index_dir)
    if args.action == "list":
        found = list(_memory_pages(index, args, args.limit))
        if args.json:
            print(json.dumps(found, indent=2, default=str))
            return 0
        for doc in found:
            when = doc.get("updated_at") or doc.get("created_at") or ""
            print(f"{doc['doc_id']}  {when}  [{', '.join(doc['tags'])}]  {doc['title']}")
        print(f"{len(found)} memories", file=sys.stderr)
        return 0
    writer = MemoryWriter(args.index_dir)
    if args.action == "update":
        tags = None if args.tags is None else [t.strip() for t in args.tags.split(",") if t.strip()]
        stored = writer.update(index.get_document(args.id), content=args.content, tags=tags, memory_type=args.type)
        print(json.dumps(stored.to_dict()) if args.json else
              f"updated {stored.id} (generation {stored.generation}, updated_at {stored.updated_at})")
        return 0
    if bool(args.ids) == bool(args.tags or args.since or args.until):
        raise UsageError("give ids, or --tag and/or --since/--until: one of the two")
    if args.ids:
        from hybridlab.search.listing import memories_by_id

        try:
            ids, missing = memories_by_id(index, args.ids)
        except ValueError as error:
            raise UsageError(str(error)) from None
    else:
        ids, missing = [doc["doc_id"] for doc in _memory_pages(index, args)], []
    for doc_id in missing:
        print(f"not found: {doc_id}", file=sys.stderr)
    if args.dry_run or not ids:
        print("\n".join(ids) if ids else "no memory matches", file=sys.stdout if ids else sys.stderr)
        print(f"{len(ids)} memories would be deleted (dry run)" if args.dry_run else "nothing deleted", file=sys.stderr)
        return 0
    deleted = writer.delete(ids)
    print(json.dumps({"ids": ids, "removed": deleted.removed, "generation": deleted.generation,
                      "not_found": missing}) if args.json else
          f"deleted {deleted.removed} memories (generation {deleted.generation})")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    """Every memory of the index as memories JSONL (oldest first), what `hybridlab index FILE` reads back."""
    from hybridlab.index.memory import memory_record
    from hybridlab.search.engine import open_index

    index = open_index(args.index_dir)
    args.tags, args.match, args.since, args.until = (), "all", None, None
    records = [memory_record(doc) for doc in _memory_pages(index, args)][::-1]
    with open(args.output, "w", encoding="utf-8") if args.output else contextlib.nullcontext(sys.stdout) as out:
        out.writelines(json.dumps(record, ensure_ascii=False) + "\n" for record in records)
    others = index.stats()["documents"] - len(records)
    print(f"exported {len(records)} memories" + (f" ({others} other documents are not memories: not exported)"
                                                  if others else ""), file=sys.stderr)
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    from hybridlab.search.engine import open_index

    stats = open_index(args.index_dir).stats()
    if args.json:
        print(json.dumps(stats, indent=2, default=str))
        return 0
    print(f"index {stats['index']} — generation {stats['generation']}, built {stats['built_at']}")
    print(f"documents {stats['documents']}, chunks {stats['chunks']}, distinct tags {stats['tags']}")
    print("chunks per collection:")
    for name, count in stats["by_collection"].items():
        print(f"  {name:<30} {count:>8}  ({stats['documents_by_collection'].get(name, 0)} documents)")
    print("chunks per type:")
    for name, count in stats["by_chunk_type"].items():
        print(f"  {name:<30} {count:>8}")
    print("embedding models:")
    for name, info in stats["models"].items():
        print(f"  {name:<30} dim {info['dim']:>4}  vectors {info['vectors']:>8}  index {info['index']}")
        spec = info.get("encoder") or {}
        if spec:  # the encoder spec that built the vectors (issue 30)
            print("    encoder " + ", ".join(f"{key} {spec[key]!r}" for key in (
                "source", "revision", "backend", "dtype", "pooling", "normalize", "max_seq_length", "query_prefix",
                "document_prefix", "settings") if spec.get(key) not in (None, "", {})))
    merge = stats.get("last_merge")
    print(f"segments {len(stats['segments'])}, tombstoned documents {stats['tombstones']}, last merge "
          + (f"{merge['at']} ({merge['segments']} segments, {merge['chunks']} chunks, {merge['reason']})" if merge
             else "none"))
    log = stats.get("write_ahead_log") or {}
    print(f"write-ahead log {log.get('file')}: {log.get('memories', 0)} memories not yet in a segment")
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from hybridlab.encoders.registry import MODELS, encoder_settings, is_installed

    settings = {key: value for key, value in asdict(encoder_settings()).items() if value is not None}
    rows = [{"name": s.name, "package": s.package, "installed": is_installed(s.name), "dim": s.dim,
             "max_seq_length": s.max_seq_length, "backend": s.backend} for s in MODELS.values()]
    if args.json:
        print(json.dumps({"models": rows, "encoder_settings": settings}, indent=2) if args.settings else
              json.dumps(rows, indent=2))
        return 0
    print(f"{'name':<34} {'package':<28} {'installed':<10} {'dim':>4}  backend")
    for r in rows:
        print(f"{r['name']:<34} {r['package']:<28} {'yes' if r['installed'] else 'no':<10} {r['dim']:>4}  {r['backend']}")
    print("any sentence-transformers folder or hub id works too (docs/models.md); encoder settings: "
          + (", ".join(f"{key} {value!r}" for key, value in settings.items()) or "none set (device auto, fp32, "
             "the model's prompts and max length)"), file=sys.stderr)
    return 0


def cmd_reindex(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from hybridlab.index.build import apply_changes, canonical_models
    from hybridlab.index.layout import read_manifest

    config = read_manifest(Path(args.index_dir)).index_config
    models = list(dict.fromkeys([*config.models, *canonical_models(args.models or ())]))
    for name in canonical_models(args.drop_models or ()):
        if name not in models:
            raise UsageError(f"the index has no model {name!r}; it has {models}")
        models.remove(name)
    if not models:
        raise UsageError("refusing to drop the last embedding model")
    config = replace(config, models=tuple(models))
    report = apply_changes(args.index_dir, [], config, progress=not args.quiet, force=True)
    print(report.summary())
    return 0


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
        raise UsageError(f"no query of {args.dataset or args.queries} has judgements in {args.dataset or args.qrels}")
    if args.index_dir is None:  # --dataset: the set's cached evaluation index unless --index is given
        from hybridlab.eval.evalsets import ensure_index

        args.index_dir = str(ensure_index(evalset, progress=not args.quiet)) if evalset \
            else os.environ.get("HYBRIDLAB_INDEX", DEFAULT_INDEX)
    index = _open_search_index(args)
    kwargs = search_kwargs(args)
    kwargs.pop("chunk_types", None)
    kwargs.pop("group_by_document", None)  # evaluation is at document level (qrels judge documents)
    if evalset is not None and evalset.now:
        kwargs.setdefault("now", evalset.now)
    if args.query_vectors:
        _use_query_vectors(index, args, queries)
    run = make_run(index, queries, progress=not args.quiet, **kwargs)
    metrics = score({q: qrels[q] for q in queries}, run, METRICS)
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
    from hybridlab.eval.datasets import load_qrels, load_queries, load_query_metadata, split_query_ids

    if args.dataset is None:
        if not args.runs and not (args.queries and args.qrels):
            raise UsageError("eval needs --dataset NAME, or --queries and --qrels (to search the index), "
                             "or --run FILE with --qrels (to score run files)")
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
    kinds = {q: str(m[evalset.kinds]) for q, m in load_query_metadata(evalset.queries_path).items() if evalset.kinds in m}
    return evalset, dataset.queries, dataset.qrels, kinds


def _use_query_vectors(index, args: argparse.Namespace, queries: dict[str, str]) -> None:
    """`eval --query-vectors FILE`: every query's vector read from a file (query id -> vector), for
    the model searched (a model that cannot encode here, or vectors made elsewhere)."""
    from hybridlab.encoders.registry import register_recorded
    from hybridlab.index.vectors_import import vectors_by_id

    register_recorded(index.manifest.encoders)
    model = index.choose_model(args.embedding_model, args.language)
    vectors = vectors_by_id(args.query_vectors, list(queries))
    dim = len(next(iter(vectors.values())))
    if dim != index.dense[model].dim:
        raise UsageError(f"{args.query_vectors} holds {dim}-d vectors but the index's {model!r} vectors are "
                         f"{index.dense[model].dim}-d")
    index.put_query_vectors(model, {queries[qid]: vector for qid, vector in vectors.items()})


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
    report = score_runs(qrels, runs, kinds=kinds, test=args.test)
    print(json.dumps(report.to_dict(), indent=2) if args.json else report.to_markdown())
    return 0


def cmd_fuse(args: argparse.Namespace) -> int:
    """`fuse RUN RUN ...`: fuse run files with the engine's fusion; --tune-on chooses the setting on a
    tuning split, --report-on reports it on another (paired tests against each input run)."""
    from hybridlab.eval.datasets import load_qrels
    from hybridlab.eval.fuse_runs import (
        FusionSetting,
        candidate_settings,
        fuse_runs,
        tune_fusion,
        tune_fusion_optuna,
    )
    from hybridlab.eval.run_report import score_runs
    from hybridlab.eval.runs import read_run, run_name, write_run

    runs = {}
    for spec in args.runs:
        name, path = spec.split("=", 1) if "=" in spec and not Path(spec).exists() else (run_name(spec), spec)
        if name in runs:
            raise UsageError(f"two runs are named {name!r}; name them apart as NAME=FILE")
        runs[name] = read_run(path)
    if len(runs) < 2:
        raise UsageError("fuse needs at least two runs")
    if args.weights is not None and len(args.weights) != len(runs):
        raise UsageError(f"--weights needs one weight per run ({len(runs)}), got {len(args.weights)}")
    weights = dict(zip(runs, args.weights)) if args.weights else None
    record: dict[str, Any] = {"runs": dict(zip(runs, args.runs))}
    if args.tune_on:
        tune_qrels = load_qrels(Path(args.tune_on))
        if args.report_on:
            shared = sorted(set(tune_qrels) & set(load_qrels(Path(args.report_on))))
            if shared:
                raise UsageError(f"the tuning and report splits share {len(shared)} queries (e.g. {shared[:3]}); "
                                 "tune on queries the report does not score")
        grid = candidate_settings(list(runs), methods=[args.method] if args.method else None,
                                  normalizations=[args.normalization] if args.normalization else None,
                                  weights=[weights] if weights else None, rrf_k=args.rrf_k, step=args.grid_step)
        if args.search == "optuna":
            setting, table = tune_fusion_optuna(runs, tune_qrels, grid, trials=args.trials, seed=args.seed,
                                                metric=args.metric, limit=args.limit)
        else:
            setting, table = tune_fusion(runs, tune_qrels, grid, metric=args.metric, limit=args.limit)
        best = max(row[args.metric] for row in table)
        record["tuning"] = {"qrels": args.tune_on, "queries": len(tune_qrels), "metric": args.metric, "search": args.search,
                            "value": best, "settings": len(table), "grid": table}
    else:
        setting = FusionSetting(args.method or "rrf", tuple((weights or dict.fromkeys(runs, 1.0)).items()),
                                args.normalization or "min-max", args.rrf_k)
    fused = fuse_runs(runs, setting, args.limit)
    write_run(fused, args.out, name=f"hybridlab-fuse-{setting.method}")
    record.update(setting=setting.to_dict(), out=args.out, queries=len(fused))
    lines = [f"fused {len(runs)} runs ({setting.describe()}) over {len(fused)} queries into {args.out}"]
    if args.tune_on:
        t = record["tuning"]
        lines.append(f"chosen on {t['qrels']} ({t['queries']} queries, {t['settings']} settings, {args.search}): "
                     f"{args.metric} {t['value']:.4f}")
    if args.report_on:
        report = score_runs(load_qrels(Path(args.report_on)), {"fused": fused, **runs}, test=args.test)
        record["report"] = {"qrels": args.report_on, **report.to_dict()}
        lines += ["", f"Report on {args.report_on}:", "", report.to_markdown()]
    print(json.dumps(record, indent=2) if args.json else "\n".join(lines))
    return 0


def _delegate(module: str, function: str) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        import importlib

        return importlib.import_module(module).__getattribute__(function)(args)
    return run


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="hybridlab", description=(
        "Hybrid retrieval research kit: dense vectors + BM25 + tags + recency, fused; evaluated with ranx; "
        "served over MCP."))
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging on stderr")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def index_arg(p: argparse.ArgumentParser) -> None:
        p.add_argument("--index", dest="index_dir", default=os.environ.get("HYBRIDLAB_INDEX", DEFAULT_INDEX),
                       help=f"index folder (default $HYBRIDLAB_INDEX or {DEFAULT_INDEX})")

    def evalsets_arg(p: argparse.ArgumentParser) -> None:
        p.add_argument("--evalsets", metavar="PATH", help="a TOML file declaring evaluation sets, besides the "
                       "packaged ones (env HYBRIDLAB_EVALSETS; docs/evaluation.md)")

    def backend_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--backend", choices=("local", "qdrant"), default="local",
                       help="where BM25 and vectors are served from (qdrant: the index exported to a collection)")
        p.add_argument("--qdrant-url", help="Qdrant server URL (with --backend qdrant)")
        p.add_argument("--qdrant-path", help="Qdrant local-mode folder (with --backend qdrant; no server)")
        p.add_argument("--qdrant-collection", help="collection name (default: the index folder's name)")

    p = sub.add_parser("index", help="index folders, BEIR datasets or memories .jsonl (incremental)")
    p.add_argument("paths", nargs="*", help="folder of .md/.rst/.txt/.ipynb, BEIR dataset folder or corpus.jsonl, "
                   "memories .jsonl, or irds:<ir_datasets id> (extra irds)")
    index_arg(p)
    p.add_argument("--optimize", action="store_true",
                   help="merge every segment into one (after indexing PATHS, if given), dropping deleted rows")
    p.add_argument("--model", action="append", dest="models", metavar="NAME", help="embedding model (repeatable)")
    p.add_argument("--model-for-collection", action="append", metavar="COLLECTION=MODEL")
    p.add_argument("--model-for-language", action="append", metavar="LANGUAGE=MODEL")
    p.add_argument("--chunk-size", type=_positive_int)
    p.add_argument("--chunk-overlap", type=int)
    p.add_argument("--header-levels", type=int, nargs="+")
    p.add_argument("--index-tags", action=argparse.BooleanOptionalAction, default=None,
                   help="a tagged document's tags as a line of its indexed text (default on)")
    p.add_argument("--dense-index", help="FAISS factory string (default Flat; e.g. HNSW32)")
    p.add_argument("--graph-k", type=int, help="corpus-graph neighbours per chunk for staged --expand-hops "
                   "(default 16 up to 100k chunks, none above; 0 = none)")
    p.add_argument("--hnsw-ef-search", type=_positive_int, help="HNSW efSearch of unfiltered queries (default 128)")
    p.add_argument("--force", action="store_true", help="write a new generation even if nothing changed "
                   "(every file read, the whole index rewritten as one segment)")
    encoder_options(p)
    p.add_argument("--vectors", metavar="FILE", help="import vectors computed elsewhere for the last --model: "
                   "Parquet (id, vector) or .npy with NAME.ids.txt/.ids.json beside it (docs/models.md)")
    p.add_argument("--vectors-by", choices=("document", "chunk"), default="document",
                   help="the ids of --vectors: document ids (each document one chunk; default) or chunk ids")
    p.add_argument("--check-content", action="store_true",
                   help="read every file of a folder and compare its content, not only those whose size, inode, "
                   "mtime or ctime differ from what the index recorded (writes only what changed)")
    p.add_argument("--json", action="store_true")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    backend_args(p)
    p.set_defaults(func=cmd_index)

    p = sub.add_parser("search", help="search an index")
    p.add_argument("query")
    index_arg(p)
    p.add_argument("--limit", "-k", type=_positive_int, help="results to return (default 10)")
    p.add_argument("--explain", action="store_true", help="show the score breakdown of each result")
    encoder_options(p, documents=False)
    p.add_argument("--json", action="store_true", help="print a JSON list of results")
    add_search_options(p)
    backend_args(p)
    p.set_defaults(func=cmd_search)

    p = sub.add_parser("stats", help="counts per collection, chunk type and model")
    index_arg(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_stats)

    p = sub.add_parser("memories", help="list, update or delete the memories of an index (what the MCP tools do)")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")

    def memory_filters(q: argparse.ArgumentParser) -> None:
        index_arg(q)
        q.add_argument("--tag", action="append", dest="tags", metavar="TAG", help="only memories with the tag (repeatable)")
        q.add_argument("--match", choices=("all", "any"), default="all", help="with several --tag: all (default) or any")
        q.add_argument("--since", help="only memories updated at or after this ISO-8601 time")
        q.add_argument("--until", help="only memories updated at or before this ISO-8601 time")
        q.add_argument("--json", action="store_true")
        q.set_defaults(func=cmd_memories)

    q = actions.add_parser("list", help="memories newest first (id, time, tags, title)")
    memory_filters(q)
    q.add_argument("--limit", type=_positive_int, help="at most this many (default all)")
    q = actions.add_parser("delete", help="delete memories by id, or by --tag/--since/--until (durable on return)")
    q.add_argument("ids", nargs="*", metavar="ID")
    memory_filters(q)
    q.add_argument("--dry-run", action="store_true", help="list what would be deleted; delete nothing")
    q = actions.add_parser("update", help="replace a memory's content, tags and/or type (same id, re-embedded)")
    q.add_argument("id", metavar="ID")
    index_arg(q)
    q.add_argument("--content")
    q.add_argument("--tags", help="comma-separated; replaces the memory's tags ('' = none)")
    q.add_argument("--type", help="memory type, e.g. note, fact, preference, decision")
    q.add_argument("--json", action="store_true")
    q.set_defaults(func=cmd_memories)

    p = sub.add_parser("export", help="write an index's memories as JSONL (what `hybridlab index FILE` reads back)")
    index_arg(p)
    p.add_argument("-o", "--output", help="file to write (default stdout)")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("models", help="the embedding model registry")
    p.add_argument("--json", action="store_true")
    p.add_argument("--settings", action="store_true", help="with --json: also the encoder settings in effect")
    encoder_options(p)
    p.set_defaults(func=cmd_models)

    p = sub.add_parser("reindex", help="add (--model) or drop (--drop-model) a model's vectors")
    index_arg(p)
    p.add_argument("--model", action="append", dest="models", metavar="NAME")
    p.add_argument("--drop-model", action="append", dest="drop_models", metavar="NAME")
    encoder_options(p)
    p.add_argument("-q", "--quiet", action="store_true")
    p.set_defaults(func=cmd_reindex)

    p = sub.add_parser("eval", help="score an index against queries + qrels with ranx")
    index_arg(p)
    p.set_defaults(index_dir=None)  # default: with --dataset the set's evaluation index, else HYBRIDLAB_INDEX/.hybridlab
    p.add_argument("--dataset", help="an evaluation set (declared, e.g. scifact; a BEIR folder; or irds:<ir_datasets "
                   "id>, e.g. irds:beir/scifact/test): its queries and qrels, and its cached index unless --index")
    evalsets_arg(p)
    p.add_argument("--queries", help="queries.jsonl[.gz] (BEIR) or a dataset folder (with --run: optional, "
                   "for the per-kind table)")
    p.add_argument("--qrels", help="qrels file (BEIR .tsv or TREC) or a dataset folder")
    p.add_argument("--save-run", help="write the run as a TREC run file")
    encoder_options(p, documents=False)
    p.add_argument("--query-vectors", metavar="FILE", help="the queries' vectors from a file (Parquet id, vector; "
                   "or .npy + ids), for a model that cannot encode here (docs/models.md)")
    p.add_argument("--run", action="append", dest="runs", metavar="FILE",
                   help="score this run file (TREC or ranx JSON, gzipped or not) instead of searching the "
                   "index; repeatable, the first is the baseline of the paired tests")
    p.add_argument("--test", choices=["randomization", "t-test"], default="randomization",
                   help="with --run: the paired test against the baseline (Holm-corrected; default randomization)")
    p.add_argument("--kind", action="append", dest="kinds", metavar="KIND",
                   help="only queries of this kind (their metadata.kind); repeatable")
    p.add_argument("--split", choices=["all", "dev", "test", "train", "cv"], default=None,
                   help="score the deterministic dev or test half of the queries (sha1 of the query id); with "
                   "--dataset, a split of the set (default: its report split)")
    p.add_argument("--json", action="store_true")
    p.add_argument("-q", "--quiet", action="store_true")
    add_search_options(p)
    backend_args(p)
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("fuse", help="fuse run files (TREC or ranx JSON, any tool's) with the engine's fusion; "
                       "--tune-on chooses method and weights on one split, --report-on reports on another")
    p.add_argument("runs", nargs="+", metavar="RUN", help="a run file, or NAME=FILE to name it (the names "
                   "dense / bm25 / tags give theoretical-min-max its floors)")
    p.add_argument("--method", choices=["rrf", "convex", "dbsf"],
                   help="default rrf; with --tune-on unset = choose among all")
    p.add_argument("--normalization", choices=["min-max", "z-score", "theoretical-min-max", "none"],
                   help="convex's normalisation (default min-max; with --tune-on unset = choose)")
    p.add_argument("--weights", type=float, nargs="+", metavar="W",
                   help="one weight per run, in order (default equal; with --tune-on unset = a grid)")
    p.add_argument("--rrf-k", type=_positive_int, default=60, help="the RRF constant (default 60)")
    p.add_argument("--limit", "-k", type=_positive_int, default=100, help="results per query kept (default 100)")
    p.add_argument("--out", required=True, help="the fused run (.json: ranx JSON; .gz: gzipped; else TREC)")
    p.add_argument("--tune-on", metavar="QRELS", help="choose the setting on these qrels' queries only")
    p.add_argument("--report-on", metavar="QRELS", help="report the fused run and each input on these "
                   "(queries disjoint from --tune-on)")
    p.add_argument("--metric", default="ndcg@10", help="what --tune-on maximises (default ndcg@10)")
    p.add_argument("--grid-step", type=float, default=0.1, help="weight grid step of --tune-on (default 0.1)")
    p.add_argument("--search", choices=["grid", "optuna"], default="grid",
                   help="how --tune-on searches: every grid setting, or --trials settings proposed by Optuna's TPE "
                   "sampler (weights continuous; needs the tune extra)")
    p.add_argument("--trials", type=_positive_int, default=50, help="--search optuna: settings tried (default 50)")
    p.add_argument("--seed", type=int, default=0, help="--search optuna: the sampler's seed (default 0)")
    p.add_argument("--test", choices=["randomization", "t-test"], default="randomization")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_fuse)

    p = sub.add_parser("verify", help="check an index's consistency; --repair rebuilds what is inconsistent")
    index_arg(p)
    p.add_argument("--repair", action="store_true")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_delegate("hybridlab.index.verify", "cli_verify"))

    p = sub.add_parser("sweep", help="run the sweep notebook (Optuna) through papermill into reports/")
    p.add_argument("--dataset", required=True)
    evalsets_arg(p)
    p.add_argument("--trials", type=_positive_int, default=None)
    p.add_argument("--storage", help="Optuna storage: postgresql://user@host/db, sqlite:///PATH or journal:PATH "
                                     "(a file on shared storage); default SQLite in the run folder")
    p.add_argument("--study", help="study name (default <dataset>-<metric>); the same name joins the study")
    p.add_argument("--workers", type=_positive_int, default=1,
                   help="worker processes on this machine (default 1); run the same command on other "
                        "machines with a shared --storage to add theirs (docs/scale-out.md)")
    p.add_argument("--metric", default="ndcg@10")
    p.add_argument("--reports", default="reports", help="reports folder")
    p.add_argument("--export", default="configs/best.json", help="where the winning config is exported")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the TPE sampler (default 0); workers joining a study derive theirs from it")
    p.add_argument("--max-index-configs", type=_positive_int, default=4,
                   help="distinct index builds (BM25 k1/b, chunking) a study may use (default 4)")
    p.add_argument("--model", action="append", dest="models", metavar="NAME",
                   help="embedding model of the swept indexes (repeatable; default all-MiniLM-L6-v2)")
    p.add_argument("--json", action="store_true",
                   help="last, print the out-of-sample figures as JSON (for the reproduction record)")
    p.set_defaults(func=_delegate("hybridlab.tune.sweep", "cli_sweep"))

    # listed here; `main` hands `hybridlab grid ...` to hybridlab.tune.grid, whose options it has
    # (importing it here would load the engine for every command)
    p = sub.add_parser("grid", add_help=False, help="one setting over a list of values on the evaluation sets; "
                       "--cv K chooses its value for the default hybrid by K-fold cross-validation "
                       "(hybridlab grid --help)")
    p.add_argument("grid_args", nargs=argparse.REMAINDER)
    p.set_defaults(func=lambda args: _grid(args.grid_args))

    p = sub.add_parser("report", help="run the report notebook over the latest sweeps")
    p.add_argument("--reports", default="reports")
    p.add_argument("--run", help="a sweep run folder (default: the latest of each dataset)")
    p.set_defaults(func=_delegate("hybridlab.reports.runs", "cli_report"))

    p = sub.add_parser("export-config", help="export a sweep's winner if it beats the defaults out of sample "
                       "(paired test, Holm-corrected), else the defaults with the verdict; every knob pinned")
    p.add_argument("run_dir")
    p.add_argument("-o", "--output", default="configs/best.json")
    p.add_argument("--test", choices=["randomization", "t-test"], default="randomization",
                   help="paired significance test against the defaults (default randomization)")
    p.set_defaults(func=_delegate("hybridlab.tune.export", "cli_export_config"))

    p = sub.add_parser("learn-fusion", help="train the learned fusion on the evaluation sets (or its "
                       "leave-one-collection-out table, --loco)")
    p.add_argument("--sets", nargs="+", help="evaluation sets to use (default: all six)")
    p.add_argument("--leave-out", help="a set left out of training")
    p.add_argument("--model", choices=["lightgbm", "linear"], help="default lightgbm (--loco: both)")
    p.add_argument("--loco", action="store_true", help="train and score every leave-one-out fold into --out")
    p.add_argument("--recipe", help="LightGBM recipe: transferable (the default) or full (every feature)")
    p.add_argument("--out", required=True, help="the model folder (--loco: the report folder)")
    p.set_defaults(func=_delegate("hybridlab.tune.learn", "cli_learn_fusion"))

    p = sub.add_parser("repro", help="re-run the evaluation a config records, or every condition of the "
                       "reproduction record (--all); OK/FAIL per metric")
    p.add_argument("config", nargs="?", help="an exported config (configs/*.json)")
    p.add_argument("--all", action="store_true", help="every condition of the reproduction record")
    p.add_argument("--cheap", action="store_true", help="only the cheap conditions (seconds; what `make test` runs)")
    p.add_argument("--conditions", default=None, help="the conditions file (default repro/conditions.yaml)")
    evalsets_arg(p)
    p.add_argument("--record", action="store_true",
                   help="write the measured values of the selected conditions that moved into the conditions "
                        "file (a deliberate re-record after an engine change; commit it with that change)")
    p.add_argument("--condition", action="append", dest="names", metavar="NAME", help="only this condition (repeatable)")
    p.add_argument("--tolerance", type=float, default=0.0005)
    p.set_defaults(func=_delegate("hybridlab.tune.export", "cli_repro"))

    p = sub.add_parser("mcp", help="serve the index to AI assistants over MCP (stdio by default)")
    index_arg(p)
    p.add_argument("--config", help="exported config JSON (env HYBRIDLAB_* still override it)")
    p.add_argument("--transport", choices=["stdio", "streamable-http"], default="stdio")
    p.add_argument("--host", default="127.0.0.1", help="HTTP bind address (loopback unless given)")
    p.add_argument("--port", type=int, default=8765)
    p.add_argument("--log-file", help="write logs here instead of stderr")
    encoder_options(p, documents=False)  # the queries' (and stored memories') device and dtype
    p.add_argument("--lock-wait", type=float, default=10.0, metavar="SECONDS",
                   help="how long store_memory waits for another process's writer lock (default 10)")
    p.add_argument("--commit-delay", type=float, default=0.0, metavar="SECONDS",
                   help="defer memory commits up to this long and batch them (default 0: each store_memory "
                        "returns once committed); reads commit the queue first")
    p.add_argument("--wal-records", type=int, default=None, metavar="N",
                   help="records (stores, updates, deletes) the write-ahead log holds before it is folded into "
                        "a segment (default HYBRIDLAB_WAL_RECORDS or 64; 0: each one commits a generation)")
    http = p.add_argument_group("streamable-http security (docs/mcp.md#the-http-transport-as-a-shared-service)")
    http.add_argument("--auth-token-file", metavar="PATH",
                      help="a file holding the bearer token every request must carry (or env HYBRIDLAB_MCP_TOKEN); "
                           "required when --host is not loopback")
    http.add_argument("--allowed-host", action="append", dest="allowed_hosts", metavar="HOST[:PORT]",
                      help="also accept this Host header (repeatable; 'name:*' = any port); default: the bound "
                           "host and localhost/127.0.0.1/[::1], with the port")
    http.add_argument("--allowed-origin", action="append", dest="allowed_origins", metavar="ORIGIN",
                      help="also accept requests whose Origin is this, e.g. https://mcp.example.org (repeatable); "
                           "requests without Origin (non-browser clients) are always accepted")
    http.add_argument("--max-request-bytes", type=int, default=None, metavar="BYTES",
                      help="largest request body accepted (default 1048576); larger → 413")
    backend_args(p)
    p.set_defaults(func=_delegate("hybridlab.server.mcp", "cli_mcp"))

    from hybridlab.eval.conversations.cli import add_parser as add_membench

    add_membench(sub)

    p = sub.add_parser("demo", help="the main job on the bundled memories ground truth")
    p.add_argument("--index", dest="index_dir", default=".hybridlab/demo")
    p.add_argument("--quick", action="store_true", help="skip the evaluation table")
    p.set_defaults(func=_delegate("hybridlab.demo", "run_demo"))
    return parser


def _grid(argv: Sequence[str]) -> int:
    from hybridlab.tune.grid import main as grid_main

    return grid_main(list(argv), prog="hybridlab grid")


def main(argv: Sequence[str] | None = None) -> int:
    apply_offline_environment()
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["grid"]:
        return _grid(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    level = logging.WARNING if args.verbose == 0 else logging.INFO if args.verbose == 1 else logging.DEBUG
    handler = StderrHandler()
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=level, handlers=[handler])
    try:
        if getattr(args, "evalsets", None):  # seen by every reader of the sets, subprocesses included
            from hybridlab.eval.evalsets import use_evalsets

            use_evalsets(args.evalsets)
        if hasattr(args, "device"):  # a command that encodes: its encoder settings, for this command only
            _configure_encoders(args)
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted: the index is unchanged unless a new generation was committed", file=sys.stderr)
        return 130
    except (HybridlabError, ValueError, FileNotFoundError, KeyError, ImportError, argparse.ArgumentTypeError) as error:
        message = error.args[0] if isinstance(error, KeyError) and error.args else str(error)
        print(f"error: {message}", file=sys.stderr)
        return 2
    finally:
        if hasattr(args, "device"):
            from hybridlab.encoders.registry import configure

            configure(None)


if __name__ == "__main__":
    sys.exit(main())
