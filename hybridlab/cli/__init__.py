"""The `hybridlab` command line. `--help` is instant: heavy libraries load inside the commands.

One module per command group, each defining its commands' parsers (`add_<command>(sub)`) and
handlers: :mod:`~hybridlab.cli.indexing` (index, models, reindex, verify),
:mod:`~hybridlab.cli.searching` (search, stats), :mod:`~hybridlab.cli.memories` (memories, export),
:mod:`~hybridlab.cli.evaluating` (eval, fuse, demo), :mod:`~hybridlab.cli.tuning` (sweep, report,
export-config, learn-fusion, repro), :mod:`~hybridlab.cli.grid` (grid), :mod:`~hybridlab.cli.serving`
(mcp) and :mod:`hybridlab.cli.membench` (membench); the options several share are in
:mod:`~hybridlab.cli.options`. :func:`build_parser` assembles them in the order `--help` lists them.
A handler imports the library modules it calls when it runs (they bring numpy, DuckDB, the
evaluation stack or the MCP SDK). :mod:`~hybridlab.cli.sweep_worker` is the process a sweep starts
per worker (`python -m hybridlab.cli.sweep_worker`)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from hybridlab.cli import evaluating, grid, indexing, memories, searching, serving, tuning
from hybridlab.cli.membench import add_parser as add_membench
from hybridlab.cli.options import (
    DEFAULT_INDEX,
    Parser,
    UsageError,
    add_search_options,
    encoder_options,
    index_config_from_args,
    search_kwargs,
)
from hybridlab.config import apply_offline_environment
from hybridlab.errors import HybridlabError
from hybridlab.server.stderr import StderrHandler

__all__ = [
    "DEFAULT_INDEX",
    "UsageError",
    "add_search_options",
    "build_parser",
    "encoder_options",
    "index_config_from_args",
    "main",
    "search_kwargs",
]

logger = logging.getLogger("hybridlab")

#: the commands in the order `hybridlab --help` lists them
COMMANDS = (
    indexing.add_index,
    searching.add_search,
    searching.add_stats,
    memories.add_memories,
    memories.add_export,
    indexing.add_models,
    indexing.add_reindex,
    evaluating.add_eval,
    evaluating.add_fuse,
    indexing.add_verify,
    tuning.add_sweep,
    grid.add_grid,
    tuning.add_report,
    tuning.add_export_config,
    tuning.add_learn_fusion,
    tuning.add_repro,
    serving.add_mcp,
    add_membench,
    evaluating.add_demo,
)


def build_parser() -> argparse.ArgumentParser:
    """The `hybridlab` parser: the global options, then each command of :data:`COMMANDS`."""
    parser = Parser(
        prog="hybridlab",
        description=(
            "Hybrid retrieval research kit: dense vectors + BM25 + tags + recency, fused; evaluated with ranx; "
            "served over MCP."
        ),
    )
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging on stderr")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add_command in COMMANDS:
        add_command(sub)
    return parser


def _configure_encoders(args: argparse.Namespace) -> None:
    """Set this process's encoder settings from the command's options, env and --config."""
    from hybridlab.config import load_config_file, resolve_encoder_settings
    from hybridlab.encoders.registry import configure

    if getattr(args, "encoder_backend", None):  # the argument over the env: the registry reads these
        os.environ["HYBRIDLAB_DOCUMENT_BACKEND"] = os.environ["HYBRIDLAB_QUERY_BACKEND"] = (
            args.encoder_backend
        )
    names = (
        "device",
        "batch_size",
        "dtype",
        "max_seq_length",
        "query_prompt",
        "document_prompt",
        "model_paths",
    )
    config = load_config_file(args.config).get("encoder") if getattr(args, "config", None) else None
    configure(resolve_encoder_settings({name: getattr(args, name, None) for name in names}, config))


def main(argv: Sequence[str] | None = None) -> int:
    apply_offline_environment()
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["grid"]:
        return grid.run_grid(argv[1:])
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
    except (
        HybridlabError,
        ValueError,
        FileNotFoundError,
        KeyError,
        ImportError,
        argparse.ArgumentTypeError,
    ) as error:
        message = error.args[0] if isinstance(error, KeyError) and error.args else str(error)
        print(f"error: {message}", file=sys.stderr)
        return 2
    finally:
        if hasattr(args, "device"):
            from hybridlab.encoders.registry import configure

            configure(None)
