"""`index`, `models`, `reindex` and `verify`: building an index, its models, its consistency."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from hybridlab.cli.options import (
    UsageError,
    backend_args,
    encoder_options,
    index_arg,
    index_config_from_args,
    positive_int,
    qdrant_client,
)


def add_index(sub: argparse._SubParsersAction) -> None:
    """The `index` command: index folders, BEIR datasets or memories (incremental), import vectors, optimize."""
    p = sub.add_parser("index", help="index folders, BEIR datasets or memories .jsonl (incremental)")
    p.add_argument(
        "paths",
        nargs="*",
        help="folder of .md/.rst/.txt/.ipynb, BEIR dataset folder or corpus.jsonl, "
        "memories .jsonl, or irds:<ir_datasets id> (extra irds)",
    )
    index_arg(p)
    p.add_argument(
        "--optimize",
        action="store_true",
        help="merge every segment into one (after indexing PATHS, if given), dropping deleted rows",
    )
    p.add_argument(
        "--model", action="append", dest="models", metavar="NAME", help="embedding model (repeatable)"
    )
    p.add_argument("--model-for-collection", action="append", metavar="COLLECTION=MODEL")
    p.add_argument("--model-for-language", action="append", metavar="LANGUAGE=MODEL")
    p.add_argument("--chunk-size", type=positive_int)
    p.add_argument("--chunk-overlap", type=int)
    p.add_argument("--header-levels", type=int, nargs="+")
    p.add_argument(
        "--index-tags",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="a tagged document's tags as a line of its indexed text (default on)",
    )
    p.add_argument("--dense-index", help="FAISS factory string (default Flat; e.g. HNSW32)")
    p.add_argument(
        "--graph-k",
        type=int,
        help="corpus-graph neighbours per chunk for staged --expand-hops "
        "(default 16 up to 100k chunks, none above; 0 = none)",
    )
    p.add_argument(
        "--hnsw-ef-search", type=positive_int, help="HNSW efSearch of unfiltered queries (default 128)"
    )
    p.add_argument(
        "--late-model",
        action="append",
        dest="late_models",
        metavar="NAME",
        help="store token vectors of this late-interaction model for the second stage (repeatable; "
        "answerai-colbert-small is bundled; a PyLate/ColBERT folder or hub id; 'none' = store none)",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="write a new generation even if nothing changed "
        "(every file read, the whole index rewritten as one segment)",
    )
    encoder_options(p)
    p.add_argument(
        "--vectors",
        metavar="FILE",
        help="import vectors computed elsewhere for the last --model: "
        "Parquet (id, vector) or .npy with NAME.ids.txt/.ids.json beside it (docs/models.md)",
    )
    p.add_argument(
        "--vectors-by",
        choices=("document", "chunk"),
        default="document",
        help="the ids of --vectors: document ids (each document one chunk; default) or chunk ids",
    )
    p.add_argument(
        "--check-content",
        action="store_true",
        help="read every file of a folder and compare its content, not only those whose size, inode, "
        "mtime or ctime differ from what the index recorded (writes only what changed)",
    )
    p.add_argument("--json", action="store_true")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    backend_args(p)
    p.set_defaults(func=cmd_index)


def _vectors_hook(args: argparse.Namespace):
    """The build step of `index --vectors FILE`: the file's vectors under the last --model (a name that
    does not load here: an external spec with --query-prompt, --document-prompt, --max-seq-length)."""
    from hybridlab.index.write.vectors_import import import_step

    if not args.models:
        raise UsageError("--vectors needs --model NAME: the model the vectors are of (the last --model)")
    return import_step(
        args.vectors,
        args.models[-1],
        args.index_dir,
        args.vectors_by,
        query_prefix=args.query_prompt,
        document_prefix=args.document_prompt,
        max_seq_length=args.max_seq_length,
    )


def cmd_index(args: argparse.Namespace) -> int:
    from hybridlab.index.write.build import index_paths, optimize

    if not args.paths and not args.optimize and not args.vectors:
        print(
            "hybridlab index: give PATHS to index, or --optimize to merge the index's segments, or --vectors "
            "FILE to import",
            file=sys.stderr,
        )
        return 2
    imported = _vectors_hook(args) if args.vectors else None
    if args.paths:
        report = index_paths(
            args.paths,
            args.index_dir,
            index_config_from_args(args),
            progress=not args.quiet,
            force=args.force,
            check_content=args.check_content,
            imported=imported,
        )
    elif imported is not None:
        from hybridlab.index.write.build import apply_changes

        report = apply_changes(
            args.index_dir, [], index_config_from_args(args), progress=not args.quiet, imported=imported
        )
    if args.optimize:
        merged = optimize(args.index_dir, progress=not args.quiet)
        if not args.paths:
            report = merged
        print(
            f"optimize: {'merged every segment into one' if merged.committed else 'already one segment'} "
            f"(generation {merged.generation}, {merged.chunks} chunks, {merged.seconds:.2f} s)",
            file=sys.stderr,
        )
    for path, reason in report.skipped:
        print(f"warning: skipped {path}: {reason}", file=sys.stderr)
    if args.backend == "qdrant":
        from hybridlab.index.admin import qdrant as qdrant_mirror

        client = qdrant_client(args)
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


def add_models(sub: argparse._SubParsersAction) -> None:
    """The `models` command."""
    p = sub.add_parser("models", help="the embedding model registry")
    p.add_argument("--json", action="store_true")
    p.add_argument("--settings", action="store_true", help="with --json: also the encoder settings in effect")
    encoder_options(p)
    p.set_defaults(func=cmd_models)


def cmd_models(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from hybridlab.encoders.registry import MODELS, encoder_settings, is_installed

    settings = {key: value for key, value in asdict(encoder_settings()).items() if value is not None}
    rows = [
        {
            "name": s.name,
            "package": s.package,
            "installed": is_installed(s.name),
            "dim": s.dim,
            "max_seq_length": s.max_seq_length,
            "backend": s.backend,
        }
        for s in MODELS.values()
    ]
    if args.json:
        print(
            json.dumps({"models": rows, "encoder_settings": settings}, indent=2)
            if args.settings
            else json.dumps(rows, indent=2)
        )
        return 0
    print(f"{'name':<34} {'package':<28} {'installed':<10} {'dim':>4}  backend")
    for r in rows:
        print(
            f"{r['name']:<34} {r['package']:<28} {'yes' if r['installed'] else 'no':<10} {r['dim']:>4}  {r['backend']}"
        )
    print(
        "any sentence-transformers folder or hub id works too (docs/models.md); encoder settings: "
        + (
            ", ".join(f"{key} {value!r}" for key, value in settings.items())
            or "none set (device auto, fp32, the model's prompts and max length)"
        ),
        file=sys.stderr,
    )
    return 0


def add_reindex(sub: argparse._SubParsersAction) -> None:
    """The `reindex` command."""
    p = sub.add_parser("reindex", help="add (--model) or drop (--drop-model) a model's vectors")
    index_arg(p)
    p.add_argument("--model", action="append", dest="models", metavar="NAME")
    p.add_argument("--drop-model", action="append", dest="drop_models", metavar="NAME")
    encoder_options(p)
    p.add_argument("-q", "--quiet", action="store_true")
    p.set_defaults(func=cmd_reindex)


def cmd_reindex(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from hybridlab.index.format.layout import read_manifest
    from hybridlab.index.write.build import apply_changes, canonical_models

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


def add_verify(sub: argparse._SubParsersAction) -> None:
    """The `verify` command (:func:`cmd_verify`)."""
    p = sub.add_parser("verify", help="check an index's consistency; --repair rebuilds what is inconsistent")
    index_arg(p)
    p.add_argument("--repair", action="store_true")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_verify)


def cmd_verify(args: argparse.Namespace) -> int:
    """`hybridlab verify --index DIR [--repair] [--json]`: 0 when consistent (after repair), 1 otherwise."""
    from hybridlab.index.admin.verify import repair, verify
    from hybridlab.index.format import layout

    index_dir = Path(args.index_dir)
    actions: list[str] = []
    if getattr(args, "repair", False):
        try:
            actions = repair(index_dir, progress=False)
        except layout.CorruptIndexError as error:
            problems = [str(error)]
        else:
            problems = verify(index_dir)
    else:
        problems = verify(index_dir)
    if getattr(args, "json", False):
        print(
            json.dumps(
                {"index": str(index_dir), "ok": not problems, "problems": problems, "repaired": actions},
                indent=2,
            )
        )
    else:
        for action in actions:
            print(f"repaired: {action}")
        if problems:
            for problem in problems:
                print(f"PROBLEM: {problem}")
            if not getattr(args, "repair", False):
                print(
                    f"run `hybridlab verify --repair --index {index_dir}` to rebuild what is inconsistent",
                    file=sys.stderr,
                )
        else:
            print(f"OK: {index_dir} is consistent")
    return 1 if problems else 0
