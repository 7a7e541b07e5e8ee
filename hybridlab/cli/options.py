"""The pieces several commands share: the parser class, argument types, common options and
the helpers that turn them into library arguments."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hybridlab.config import SEARCH_FIELDS

DEFAULT_INDEX = ".hybridlab"


class UsageError(ValueError):
    """A command-line mistake with a one-line message."""


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors (`error: ... (see `hybridlab search --help`)`), exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"error: {message} (see `{self.prog} --help`)\n")


def number(cast: type, low: float, high: float | None = None) -> Callable[[str], Any]:
    """An argparse type: `cast` of the text within [low, high] (no upper bound when `high` is None)."""

    def parse(text: str):
        try:
            value = cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"not {'an integer' if cast is int else 'a number'}: {text!r}"
            ) from None
        if high is None and value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {value}")
        if high is not None and not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be within [{low}, {high}], got {value}")
        return value

    return parse


positive_int = number(int, 1)
unit_float = number(float, 0, 1)


def index_arg(p: argparse.ArgumentParser) -> None:
    """`--index DIR` (default $HYBRIDLAB_INDEX or .hybridlab)."""
    p.add_argument(
        "--index",
        dest="index_dir",
        default=os.environ.get("HYBRIDLAB_INDEX", DEFAULT_INDEX),
        help=f"index folder (default $HYBRIDLAB_INDEX or {DEFAULT_INDEX})",
    )


def evalsets_arg(p: argparse.ArgumentParser) -> None:
    """`--evalsets PATH`: evaluation sets declared besides the packaged ones."""
    p.add_argument(
        "--evalsets",
        metavar="PATH",
        help="a TOML file declaring evaluation sets, besides the "
        "packaged ones (env HYBRIDLAB_EVALSETS; docs/evaluation.md)",
    )


def backend_args(p: argparse.ArgumentParser) -> None:
    """`--backend local|qdrant` and where Qdrant is."""
    p.add_argument(
        "--backend",
        choices=("local", "qdrant"),
        default="local",
        help="where BM25 and vectors are served from (qdrant: the index exported to a collection)",
    )
    p.add_argument("--qdrant-url", help="Qdrant server URL (with --backend qdrant)")
    p.add_argument("--qdrant-path", help="Qdrant local-mode folder (with --backend qdrant; no server)")
    p.add_argument("--qdrant-collection", help="collection name (default: the index folder's name)")


def add_search_options(parser: argparse.ArgumentParser) -> None:
    """The search knobs shared by `search`, `eval` and `mcp` (None = not set: env/config/default)."""
    g = parser.add_argument_group("search options (unset ones come from env HYBRIDLAB_*, --config, defaults)")
    for add in (
        _fusion_options,
        _filter_options,
        _staged_options,
        _recency_options,
        _adaptive_options,
        _rerank_and_feedback_options,
    ):
        add(g)
    g.add_argument("--embedding-model", help="which model's vectors to search")
    g.add_argument("--language", help="pick the model through the language table")
    g.add_argument("--chunks", action="store_true", help="return chunks instead of grouping to documents")


def _fusion_options(g: argparse._ArgumentGroup) -> None:
    """Mode, fusion formula and weights."""
    g.add_argument("--config", help="exported config JSON (e.g. configs/best.json)")
    g.add_argument("--mode", choices=["hybrid", "vector", "bm25", "tags"])
    g.add_argument("--alpha", type=unit_float, help="dense weight: 1.0 = pure vector, 0.0 = pure lexical/tag")
    g.add_argument("--fusion", choices=["rrf", "convex", "dbsf", "learned"])
    g.add_argument(
        "--learned-model", help="--fusion learned: the model folder (default configs/fusion-learned)"
    )
    g.add_argument("--normalization", choices=["min-max", "z-score", "theoretical-min-max", "none"])
    g.add_argument("--rrf-k", type=positive_int, help="the RRF constant (default 60)")
    g.add_argument("--depth", type=positive_int, help="candidates per retriever (default 100)")


def _filter_options(g: argparse._ArgumentGroup) -> None:
    """Tags, chunk types, collections, dates and scores a result must have."""
    g.add_argument(
        "--tag",
        action="append",
        dest="tags",
        metavar="TAG",
        help="use (and filter by) this tag; repeatable; all must match unless --tags-any",
    )
    g.add_argument("--no-tags", action="store_true", help="turn automatic tag extraction off")
    g.add_argument("--tags-any", action="store_true", help="with --tag: any of the tags may match")
    g.add_argument("--tag-weight", type=float)
    g.add_argument("--chunk-type", action="append", dest="chunk_types", metavar="TYPE")
    g.add_argument("--collection", action="append", metavar="NAME")
    g.add_argument("--since", help="only documents updated at/after this ISO date")
    g.add_argument("--until", help="only documents updated at/before this ISO date")
    g.add_argument("--min-score", type=float, help="drop results whose final fused score is lower")


def _staged_options(g: argparse._ArgumentGroup) -> None:
    """Staged search: BM25 narrows, vectors re-score, the corpus graph widens."""
    staged = g.add_mutually_exclusive_group()
    staged.add_argument(
        "--staged",
        dest="staged",
        action="store_true",
        default=None,
        help="BM25 narrows to --candidates, vectors re-score them",
    )
    staged.add_argument("--no-staged", dest="staged", action="store_false")
    g.add_argument("--candidates", type=positive_int)
    g.add_argument(
        "--expand-hops",
        type=int,
        help="staged: corpus-graph hops from the best candidates (default 3; 0 = BM25 pool only)",
    )
    g.add_argument("--expand-seeds", type=int, help="staged: candidates expanded per hop (default 20)")
    fill = g.add_mutually_exclusive_group()
    fill.add_argument(
        "--fill-dense",
        action="store_true",
        default=None,
        help="give BM25 candidates the dense run lacks their exact cosine, not none "
        "(default: on above the staged threshold)",
    )
    fill.add_argument("--no-fill-dense", dest="fill_dense", action="store_false")
    g.add_argument("--fallback-threshold", type=int)


def _recency_options(g: argparse._ArgumentGroup) -> None:
    """Recency, the reference time, and the time a query names."""
    g.add_argument("--decay", type=float, help="recency decay per day (0 disables)")
    g.add_argument("--recency-weight", type=unit_float)
    g.add_argument("--now", help="reference time for recency (ISO-8601); env HYBRIDLAB_NOW")
    g.add_argument(
        "--date-weight",
        type=unit_float,
        help='a query naming a time ("in April 2022", "last week"): what rows created outside it lose '
        "(default 0.5; 0 = off)",
    )
    g.add_argument(
        "--date-grace-days",
        type=float,
        help="days after the named time a memory still counts as of it (default 14)",
    )


def _adaptive_options(g: argparse._ArgumentGroup) -> None:
    """Query-adaptive fusion: lexical evidence, rare terms."""
    adaptive = g.add_mutually_exclusive_group()
    adaptive.add_argument(
        "--adaptive-fusion",
        dest="adaptive_fusion",
        action="store_true",
        default=None,
        help="scale BM25's weight by the query's lexical evidence, recency by its intent (default)",
    )
    adaptive.add_argument(
        "--no-adaptive-fusion",
        dest="adaptive_fusion",
        action="store_false",
        help="fixed fusion weights for every query",
    )
    g.add_argument(
        "--lexical-floor", type=unit_float, help="lexical evidence at or below which BM25 gets no weight"
    )
    g.add_argument(
        "--lexical-ceiling", type=unit_float, help="lexical evidence from which BM25 gets its full weight"
    )
    g.add_argument(
        "--rare-term-max-df",
        type=int,
        help="a query term held by at most this many chunks lifts them above dense-only hits "
        "(default 3; 0 = off)",
    )


def _rerank_and_feedback_options(g: argparse._ArgumentGroup) -> None:
    """Cross-encoder rerank, recency intent, dense feedback, document scores."""
    g.add_argument(
        "--rerank-depth", type=int, help="re-score the top N fused chunks with the cross-encoder (0 = off)"
    )
    g.add_argument(
        "--rerank-weight",
        type=unit_float,
        help="cross-encoder share of the reranked order (1.0 = its order alone; default 1.0)",
    )
    g.add_argument("--rerank-model", help="the cross-encoder (default ms-marco-MiniLM-L-12-v2)")
    g.add_argument(
        "--late-depth",
        type=int,
        help="second stage: re-score the top N fused chunks by late interaction (MaxSim over stored "
        "token vectors; 0 = off)",
    )
    g.add_argument(
        "--late-weight", type=unit_float, help="MaxSim's share of the second stage's order (1.0 = alone)"
    )
    g.add_argument("--late-combination", choices=["convex", "rrf"], help="how MaxSim joins the first stage")
    g.add_argument("--late-model", help="the late-interaction model (default answerai-colbert-small)")
    g.add_argument(
        "--recency-intent-weight",
        type=unit_float,
        help="recency weight for queries asking for the latest state (current, still, ...)",
    )
    g.add_argument(
        "--feedback-weight",
        type=float,
        help="dense feedback: move the query vector this far toward the fused list's best "
        "documents, then search and fuse again (0 = off, the default)",
    )
    g.add_argument(
        "--feedback-docs", type=positive_int, help="dense feedback: documents it reads (default 1)"
    )
    g.add_argument(
        "--chunk-decay",
        type=float,
        help="score a document by all its chunks, s1 + d*s2 + d^2*s3 + ... (0 = its best chunk alone, the default)",
    )


def search_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """Keyword arguments for `Index.search` from parsed options (unset ones left out)."""
    names = (
        *SEARCH_FIELDS,
        "chunk_types",
        "collection",
        "since",
        "until",
        "now",
        "embedding_model",
        "language",
    )
    kwargs: dict[str, Any] = {f: getattr(args, f) for f in names if getattr(args, f, None) is not None}
    if getattr(args, "chunks", False):
        kwargs["group_by_document"] = False
    if args.no_tags:
        kwargs["tags"] = []
    elif args.tags:
        kwargs["tags"] = args.tags
        kwargs["tags_any"] = args.tags_any
    return kwargs


def encoder_options(parser: argparse.ArgumentParser, documents: bool = True) -> None:
    """Encoder settings (None = not set: env HYBRIDLAB_<NAME>, then --config's "encoder", then the
    model's own or the index's recorded value; `hybridlab.config.resolve_encoder_settings`)."""
    g = parser.add_argument_group(
        "encoder settings (unset ones come from env HYBRIDLAB_*, the model or the index)"
    )
    g.add_argument(
        "--device",
        help="cpu, cuda, cuda:1, mps or auto; several comma-separated share the work "
        "(default: env HYBRIDLAB_DEVICE, else auto)",
    )
    g.add_argument(
        "--dtype",
        choices=["fp32", "fp16", "bf16"],
        help="weights' dtype; fp16/bf16 on a GPU only "
        "(fp16 vectors meet fp32 queries, bf16 ones only bf16 queries)",
    )
    g.add_argument(
        "--encoder-backend",
        choices=["auto", "torch", "onnx"],
        help="MiniLM's runtime: onnx = its ONNX fp32 twin "
        "(the same vectors, faster on a CPU); auto = onnx on a CPU when installed (env "
        "HYBRIDLAB_DOCUMENT_BACKEND / HYBRIDLAB_QUERY_BACKEND)",
    )
    g.add_argument(
        "--model-path",
        action="append",
        dest="model_paths",
        metavar="NAME=PATH",
        help="where model folder NAME is on this machine (repeatable; default: env "
        "HYBRIDLAB_MODEL_PATHS=NAME=PATH[:NAME=PATH...], else the folder given by path, else where the "
        "index recorded it). An index records a folder model by its name (`--model /models/tiny-bert` "
        "is 'tiny-bert'; `--model-path NAME=PATH --model NAME` names it) and the sha256 of its files, "
        "never by its path: after the folder moves or the index is copied, point NAME at the folder; "
        "a folder with other files (another revision) is refused (docs/models.md)",
    )
    if documents:
        g.add_argument("--batch-size", type=positive_int, help="texts per encoder batch (default 32)")
        g.add_argument(
            "--max-seq-length", type=positive_int, help="tokens read per text (recorded in the spec)"
        )
        g.add_argument(
            "--query-prompt", help="text put before each query (default: the model's query prompt)"
        )
        g.add_argument(
            "--document-prompt", help="text put before each document (default: the model's prompt)"
        )


def index_config_from_args(args: argparse.Namespace):
    """An IndexConfig when any build option was given, else None (keep the index's own)."""
    from dataclasses import replace

    from hybridlab.config import Bm25Config, IndexConfig

    given = any(
        getattr(args, n, None) is not None
        for n in (
            "chunk_size",
            "chunk_overlap",
            "header_levels",
            "models",
            "model_for_collection",
            "model_for_language",
            "dense_index",
            "hnsw_ef_search",
            "graph_k",
            "index_tags",
            "late_models",
        )
    )
    if not given:
        return None
    base = IndexConfig()
    if args.index_dir and (Path(args.index_dir) / "manifest.json").exists():
        from hybridlab.index.format.layout import read_manifest

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
        base,
        chunk=chunk,
        bm25=Bm25Config(**vars(base.bm25)),
        models=tuple(args.models) if args.models else base.models,
        model_by_collection=pairs(args.model_for_collection) or base.model_by_collection,
        model_by_language=pairs(args.model_for_language) or base.model_by_language,
        dense_index=args.dense_index or base.dense_index,
        hnsw_ef_search=getattr(args, "hnsw_ef_search", None) or base.hnsw_ef_search,
        graph_k=args.graph_k if getattr(args, "graph_k", None) is not None else base.graph_k,
        late_models=_late_models(getattr(args, "late_models", None), base.late_models),
    )


def _late_models(given: list[str] | None, base: tuple[str, ...]) -> tuple[str, ...]:
    """`--late-model NAME` (repeatable) adds models; `--late-model none` stores none."""
    if not given:
        return base
    return () if given == ["none"] else tuple(dict.fromkeys(given))


def qdrant_client(args: argparse.Namespace):
    """The Qdrant client of `--backend qdrant` (a server by --qdrant-url, else the local mode at --qdrant-path)."""
    from hybridlab.index.admin import qdrant as qdrant_mirror

    if not (args.qdrant_url or args.qdrant_path):
        raise UsageError("--backend qdrant needs --qdrant-url URL or --qdrant-path DIR")
    return qdrant_mirror.connect(url=args.qdrant_url, path=args.qdrant_path)


def open_search_index(args: argparse.Namespace):
    """The index to search: the local backend, or Qdrant's with `--backend qdrant`."""
    from hybridlab.search.engine import Index, open_index

    if getattr(args, "backend", "local") != "qdrant":
        return open_index(args.index_dir, args.config)
    from hybridlab.search import qdrant

    return Index(
        args.index_dir,
        args.config,
        backend=qdrant.qdrant_backend(qdrant_client(args), args.qdrant_collection),
    )
