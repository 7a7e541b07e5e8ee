"""`grid`: one setting over a list of values, for each fusion method on each evaluation set
(:mod:`hybridlab.tune.grid` runs the sets; docs/internals/tune-eval.md#parameter-grids).

`hybridlab grid ...` is handed to :func:`run_grid` before the main parser runs: the grid's options
name the evaluation sets and the metrics, which are known only once the evaluation stack is imported,
and importing it for every command would cost each one's start-up."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from hybridlab.errors import InvalidValueError, MissingExtraError

DESCRIPTION = "Sweep one parameter over a list of values for each fusion method on each evaluation set."


def add_grid(sub: argparse._SubParsersAction) -> None:
    """The `grid` command, listed for `--help`: `main` hands `hybridlab grid ...` to :func:`run_grid`."""
    p = sub.add_parser(
        "grid",
        add_help=False,
        help="one setting over a list of values on the evaluation sets; "
        "--cv K chooses its value for the default hybrid by K-fold cross-validation "
        "(hybridlab grid --help)",
    )
    p.add_argument("grid_args", nargs=argparse.REMAINDER)
    p.set_defaults(func=lambda args: run_grid(args.grid_args))


def run_grid(argv: Sequence[str], prog: str = "hybridlab grid") -> int:
    """`hybridlab grid ARGS`: parse the grid's own options (:func:`add_grid_arguments`) and run it; a
    bad value is a usage error (exit 2)."""
    parser = argparse.ArgumentParser(prog=prog, description=DESCRIPTION)
    add_grid_arguments(parser)
    args = parser.parse_args(list(argv))
    try:
        return cmd_grid(args, list(argv))
    except (ValueError, MissingExtraError) as error:
        parser.error(str(error))


def add_grid_arguments(parser: argparse.ArgumentParser) -> None:
    """The grid's options (`hybridlab grid`)."""
    from hybridlab.eval.evaluate import METRICS
    from hybridlab.eval.systems import DATASETS

    parser.add_argument(
        "--dataset", default="all", help=f"evaluation sets, comma-separated, or 'all' ({', '.join(DATASETS)})"
    )
    parser.add_argument("--param", default="alpha", help="a SearchConfig, ChunkConfig or Bm25Config field")
    parser.add_argument("--values", help="comma-separated values (alpha default: 0,0.3,0.5,0.6,0.7,0.8,1)")
    parser.add_argument("--metric", default="ndcg@10", choices=list(METRICS))
    parser.add_argument("--out", help="output folder (default reports/sweeps/<param>-<date>)")
    parser.add_argument(
        "--cv",
        type=int,
        default=0,
        help="also choose the default hybrid's value by K-fold cross-validation (0 = no)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="with --cv: print the first set's cross-validated choice as {queries, metrics} JSON "
        "(what a reproduction-record condition reads)",
    )
    parser.add_argument("--progress", action="store_true")
    parser.add_argument(
        "--evalsets",
        metavar="PATH",
        help="a TOML file declaring evaluation sets, besides the packaged ones (env HYBRIDLAB_EVALSETS)",
    )
    parser.add_argument(
        "--model",
        action="append",
        dest="models",
        metavar="NAME",
        help="embedding model of the indexes (repeatable; default all-MiniLM-L6-v2)",
    )


def cmd_grid(args: argparse.Namespace, argv: list[str] | None = None) -> int:
    """Run the grid for parsed options; writes sweep.md, sweep.json, sweep.png."""
    from hybridlab.eval.datasets import REPO_ROOT
    from hybridlab.eval.evalsets import use_evalsets
    from hybridlab.eval.systems import DATASETS
    from hybridlab.extras import require
    from hybridlab.tune import grid

    require("matplotlib")  # before the work, not at the figure
    if args.json and not args.cv:
        raise InvalidValueError("--json needs --cv")
    if args.values:
        values = grid.parse_values(args.param, args.values)
    elif args.param in grid.DEFAULT_VALUES:
        values = grid.DEFAULT_VALUES[args.param]
    else:
        raise InvalidValueError(f"--values is required for --param {args.param}")
    use_evalsets(args.evalsets)
    names = (
        list(DATASETS) if args.dataset == "all" else [n.strip() for n in args.dataset.split(",") if n.strip()]
    )
    date = datetime.now(UTC).strftime("%Y-%m-%d")
    out = Path(args.out) if args.out else REPO_ROOT / "reports" / "sweeps" / f"{args.param}-{date}"
    results = [
        grid.sweep_dataset(
            name, args.param, values, args.progress, args.cv, args.metric, tuple(args.models or ())
        )
        for name in names
    ]
    out.mkdir(parents=True, exist_ok=True)
    command = "hybridlab grid " + " ".join(sys.argv[1:] if argv is None else argv)
    (out / "sweep.md").write_text(
        grid.render_markdown(results, args.param, values, args.metric, command.strip()), encoding="utf-8"
    )
    (out / "sweep.json").write_text(
        json.dumps(
            {
                "param": args.param,
                "values": values,
                "date": date,
                "command": command.strip(),
                "results": results,
            },
            indent=1,
        ),
        encoding="utf-8",
    )
    grid.plot(results, args.param, values, args.metric, out / "sweep.png")
    if args.json:
        print(json.dumps(grid.cross_validated_metrics(results[0]), indent=2))
    else:
        print((out / "sweep.md").read_text(encoding="utf-8"))
    print(f"wrote {out}/sweep.md, sweep.json, sweep.png", file=sys.stderr)
    return 0
